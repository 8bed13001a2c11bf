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


def test_vllm_launches_the_vllm_beside_the_configured_engine_python(compose):
    """engine.python names the engine's environment: the plan runs that environment's
    `vllm` (the README's tiny_cpu command works without the venv on PATH); the default
    `python` keeps `vllm` from PATH."""
    from specc.plan import Plan

    plan = compile_config(compose(["+experiment=eagle3_sweep", "engine=vllm",
                                   "engine.python=/opt/engine-venv/bin/python"])).plan
    assert {tuple(s.argv[:2]) for s in plan.servers} == {("/opt/engine-venv/bin/vllm", "serve")}
    assert Plan.from_json(plan.to_json()).servers[0].argv[0] == "/opt/engine-venv/bin/vllm"
    default = compile_config(compose(["+experiment=eagle3_sweep", "engine=vllm"])).plan
    assert {tuple(s.argv[:2]) for s in default.servers} == {("vllm", "serve")}


@pytest.mark.parametrize("program", ["bin/vllm", "/opt/venv/bin/vllm-wrapper", "/opt/venv/bin/sh"])
def test_a_plan_whose_program_is_not_the_launcher_by_path_is_refused(compose, program):
    """Only an absolute path to a file named as the launcher's program stands for it."""
    from specc.plan import Plan, PlanError

    data = compile_config(compose(["+experiment=eagle3_sweep", "engine=vllm"])).plan.to_json()
    data["servers"][0]["argv"][0] = program
    with pytest.raises(PlanError, match="does not start with vllm's own launcher"):
        Plan.from_json(data)
