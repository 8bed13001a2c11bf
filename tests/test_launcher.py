"""A server starts with its engine's own launcher (`python -m sglang.launch_server`, `vllm
serve`, `python -m specc.sim`), not with anything whose flags the engine's parser accepts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from specc.compile.pipeline import compile_config
from specc.engines.sglang import SGLang

REPO = Path(__file__).resolve().parent.parent
SWEEP = ["+experiment=eagle3_sweep", "engine=sim"]


@pytest.mark.parametrize("engine,launcher", [
    ("engine=sglang", ["python", "-m", "sglang.launch_server"]),
    ("engine=vllm", ["vllm", "serve"]),
    ("engine=sim", ["python", "-m", "specc.sim"]),
])
def test_the_plan_records_the_engines_launcher_and_every_server_starts_with_it(
        compose, engine, launcher):
    plan = compile_config(compose(["+experiment=eagle3_sweep", *engine.split()])).plan
    assert list(plan.engine_info.launcher) == launcher
    assert all(list(s.argv[:len(launcher)]) == launcher for s in plan.servers)


def test_compile_refuses_a_server_that_would_start_with_another_program(compose, monkeypatch):
    real = SGLang.argv
    monkeypatch.setattr(SGLang, "argv", lambda self, spec, **kw: [
        "sh", "-c", 'exec python -m sglang.launch_server "$@"', "sh",
        *real(self, spec, **kw)[3:]])
    result = compile_config(compose(["+experiment=eagle3_sweep"]))
    assert not result.ok and result.plan is None
    codes = {d.code for d in result.diagnostics if d.severity == "error"}
    assert codes == {"ENGINE_LAUNCHER"}
    d = next(d for d in result.diagnostics if d.code == "ENGINE_LAUNCHER")
    assert "`sh -c exec python" in d.message and "python -m sglang.launch_server" in d.message


@pytest.mark.parametrize("edit", [
    lambda argv: ["sh", "-c", 'python -m specc.sim "$@"', "sh", *argv[3:]],
    lambda argv: ["python", "-c", "import os; os.system('true')", *argv[3:]],
    lambda argv: ["/usr/bin/env", *argv],
])
def test_run_refuses_a_hand_edited_plan_whose_command_is_not_the_launcher(
        compose, tmp_path, edit):
    plan = compile_config(compose(SWEEP)).plan
    data = plan.to_json()
    data["servers"][0]["argv"] = edit(data["servers"][0]["argv"])
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(data))
    res = subprocess.run([sys.executable, "-m", "specc", "run", "--plan", str(path)], cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2, res.stderr
    sid = data["servers"][0]["id"]
    assert res.stderr.strip().splitlines() == [
        f"error PLAN_UNREADABLE at {path}: plan: server {sid}: its command does not start "
        "with sim's own launcher `python -m specc.sim`"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.json"]   # nothing launched
