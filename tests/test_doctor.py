"""`inv doctor`: the installed engine release and its own parser, before anything launches.

These tests stand a fake interpreter in for the engine's Python (it answers as the
parse script would); tests/drift runs the same checks with the real released engines.
"""

from __future__ import annotations

import json
import stat
import subprocess
import sys

import pytest

from specc.compile.pipeline import compile_config
from specc.run.doctor import check_plan, engine_python

SWEEP = ["+experiment=eagle3_sweep"]
REPO = __import__("pathlib").Path(__file__).resolve().parent.parent


def _plan(compose, overrides):
    result = compile_config(compose(overrides))
    assert result.ok
    return result.plan


def _fake_python(tmp_path, report: dict, code: int = 0):
    py = tmp_path / "python"
    py.write_text(f"#!/bin/sh\ncat >/dev/null\necho '{json.dumps(report)}'\nexit {code}\n")
    py.chmod(py.stat().st_mode | stat.S_IEXEC)
    return str(py)


def test_a_matching_engine_that_accepts_every_command_passes(compose, tmp_path):
    plan = _plan(compose, SWEEP)
    py = _fake_python(tmp_path, {"package": "sglang", "version": "0.5.23", "rejected": []})
    assert check_plan(plan, python=py) == []


def test_another_installed_release_is_refused_in_one_line(compose, tmp_path):
    plan = _plan(compose, SWEEP)
    py = _fake_python(tmp_path, {"package": "sglang", "version": "0.5.21", "rejected": []})
    (d,) = check_plan(plan, python=py)
    assert (d.code, d.path) == ("DOCTOR_VERSION", "engine.version")
    assert "targets sglang 0.5.23" in d.message and "has sglang 0.5.21" in d.message
    assert "engine.version=0.5.21" in d.hint and "\n" not in d.line()


def test_a_build_of_the_targeted_release_passes(compose, tmp_path):
    """vLLM's CPU build reports itself as 0.32.0+cpu: a build of release 0.32.0 (a PEP 440
    local label), which a plan for 0.32.0 runs on; another release is still refused."""
    from test_cpu_hardware import TINY   # the tiny pair's config.json files, no weights

    plan = _plan(compose, TINY)
    assert plan.engine_info.version == "0.32.0"
    py = _fake_python(tmp_path, {"package": "vllm", "version": "0.32.0+cpu", "rejected": []})
    assert check_plan(plan, python=py) == []
    py = _fake_python(tmp_path, {"package": "vllm", "version": "0.33.0+cpu", "rejected": []})
    (d,) = check_plan(plan, python=py)
    assert d.code == "DOCTOR_VERSION" and "has vllm 0.33.0+cpu" in d.message


def test_each_rejected_command_is_one_line_naming_its_server(compose, tmp_path):
    plan = _plan(compose, SWEEP)
    sid = plan.servers[1].id
    py = _fake_python(tmp_path, {"package": "sglang", "version": "0.5.23", "rejected": [
        {"id": sid, "error": "ambiguous option: --cuda-graph-max-bs could match ..."}]}, code=1)
    (d,) = check_plan(plan, python=py)
    assert d.code == "DOCTOR_REJECTED" and d.path == f"servers.{sid}.argv"
    assert "ambiguous option" in d.message


def test_no_engine_installed(compose, tmp_path):
    plan = _plan(compose, SWEEP)
    py = _fake_python(tmp_path, {"package": "sglang", "version": None}, code=2)
    (d,) = check_plan(plan, python=py)
    assert d.code == "DOCTOR_ENGINE_MISSING"
    (d,) = check_plan(plan, python=str(tmp_path / "nope"))
    assert d.code == "DOCTOR_ENGINE_MISSING"
    # this test venv has no sglang: the plan's own interpreter is asked, and says so
    (d,) = check_plan(plan)
    assert d.code == "DOCTOR_ENGINE_MISSING" and sys.executable in d.message


def test_vllm_console_script_runs_under_its_shebang_interpreter(tmp_path, monkeypatch):
    exe = tmp_path / "vllm"
    exe.write_text(f"#!{sys.executable}\nprint('hi')\n")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert engine_python("vllm") == sys.executable
    assert engine_python("python") == sys.executable
    assert engine_python("no-such-program") is None


def test_sim_plans_are_checked_by_the_simulators_parser(compose):
    plan = _plan(compose, SWEEP + ["engine=sim", "server.cuda_graph_max_bs=64"])
    assert check_plan(plan) == []


TWO_NODES = ["cluster=slurm", "hardware.gpus_per_node=4", "hardware.nodes=2", "hardware.tp=8",
             "cluster.nodes_per_server=2"]


def test_a_slurm_plan_is_checked_as_its_first_node_launches_it(compose, tmp_path):
    """A multi-node server's rank and head are filled in on Slurm's nodes: the parser gets
    them as rank 0's, not the placeholders (which no engine's --node-rank accepts)."""
    assert check_plan(_plan(compose, SWEEP + ["engine=sim", "cluster=slurm"])) == []
    assert check_plan(_plan(compose, SWEEP + ["engine=sim"] + TWO_NODES)) == []
    plan = _plan(compose, SWEEP + TWO_NODES)
    seen = tmp_path / "payload.json"
    py = tmp_path / "python"
    report = json.dumps({"package": "sglang", "version": "0.5.23", "rejected": []})
    py.write_text(f"#!/bin/sh\ncat >{seen}\necho '{report}'\n")
    py.chmod(0o755)
    assert check_plan(plan, python=str(py)) == []
    argv = json.loads(seen.read_text())["servers"][0]["argv"]
    i = argv.index("--node-rank")
    assert argv[i + 1] == "0" and not any("{" in a for a in argv)


def test_inv_doctor_exits_2_with_the_lines(compose, tmp_path):
    from specc.compile.emit import write_outputs

    plan = _plan(compose, SWEEP)
    write_outputs(tmp_path, plan, [], title="t")
    py = _fake_python(tmp_path, {"package": "sglang", "version": "0.5.9", "rejected": []})
    proc = subprocess.run([sys.executable, "-m", "invoke", "doctor", "--plan",
                           str(tmp_path / "plan.json"), "--python", py],
                          capture_output=True, text=True, timeout=60, cwd=REPO)
    assert proc.returncode == 2
    assert "error DOCTOR_VERSION at engine.version" in proc.stderr + proc.stdout
    assert "Traceback" not in proc.stderr


def test_run_refuses_before_launching_when_the_engine_here_cannot_run_the_plan(compose, tmp_path):
    """The executor's preflight is the doctor: an SGLang plan on a machine without SGLang
    (this test venv) stops with one line per problem and exit 2; nothing is launched."""
    from specc.compile.emit import write_outputs

    plan = _plan(compose, SWEEP)
    write_outputs(tmp_path, plan, [], title="t")
    proc = subprocess.run([sys.executable, "-m", "specc", "run", "--plan",
                           str(tmp_path / "plan.json")],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "error DOCTOR_ENGINE_MISSING" in proc.stderr and "nothing was launched" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "state.json").exists() and not (tmp_path / "servers").exists()


def test_the_simulators_parser_named_by_the_plan_rejects_an_unknown_flag(compose):
    """The parser is the script plan.json's engine_info.parser names, run as its own process."""
    from dataclasses import replace

    plan = _plan(compose, SWEEP + ["engine=sim"])
    assert plan.engine_info.parser == "specc.engines.parsers.sim_parse"
    bad = replace(plan.servers[0], argv=(*plan.servers[0].argv, "--no-such-flag"))
    (d,) = check_plan(replace(plan, servers=(bad, *plan.servers[1:])))
    assert d.code == "DOCTOR_REJECTED" and d.path == f"servers.{bad.id}.argv"
    assert "--no-such-flag" in d.message


@pytest.mark.parametrize("parser", ["specc.run/../../../tmp/evil", "os", "specc.run.executor"])
def test_a_plan_naming_another_script_as_its_parser_is_refused_as_read(compose, tmp_path, parser):
    """plan.json is untrusted: the preflight runs only one of specc's own parse scripts."""
    from specc.plan import Plan, PlanError

    data = _plan(compose, SWEEP + ["engine=sim"]).to_json()
    data["engine_info"]["parser"] = parser
    (tmp_path / "plan.json").write_text(json.dumps(data))
    with pytest.raises(PlanError, match="is not a module of specc.engines.parsers"):
        Plan.load(tmp_path / "plan.json")
