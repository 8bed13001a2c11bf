"""plan.sh run for real against the simulator: every launch waits for its server's
process group, and the script's exit status says whether anything failed.

(The quoting of every value through bash is tested with stubs in test_emit.py.)
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from executor_helpers import SimGuard, compile_plan, results
from specc.compile.emit import plan_sh
from specc.plan import Plan

# two TP-1 servers (baseline + EAGLE-3) in one wave, one point each
TWO_SERVERS = ["hardware.tp=1", "baseline=true",
               "+sweep={speculation:[{num_steps:3,topk:1,num_draft_tokens:4}]}",
               "benchmark.concurrency=1"]


@pytest.fixture
def guard(tmp_path):
    g = SimGuard(tmp_path)
    yield g
    leaked = g.check()
    assert not leaked, f"plan.sh left simulator processes: {leaked}"


def _compile(run_dir: Path, port: int, fault: str | None = None) -> Plan:
    """Compile into run_dir; with a fault, the speculative server gets it through its env
    and plan.sh is re-emitted from the edited plan (as a user editing plan.json would)."""
    def edit(plan):
        for s in plan["servers"]:
            if not s["baseline"]:
                s["env"]["SPECC_SIM_FAULT"] = fault

    plan = compile_plan(run_dir, TWO_SERVERS, port=port, edit=edit if fault else None)
    if fault:
        (run_dir / "plan.sh").write_text(plan_sh(plan))
    return plan


def _run(run_dir: Path, *, bash=("bash",), path_prefix: Path | None = None):
    """Run plan.sh from scratch (no finished points kept) with this interpreter on PATH."""
    (run_dir / "results.jsonl").unlink(missing_ok=True)
    path = os.pathsep.join(p for p in (str(path_prefix or ""), str(Path(sys.executable).parent),
                                       os.environ.get("PATH", "")) if p)
    return subprocess.run([*bash, str(run_dir / "plan.sh")], cwd=run_dir, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PATH": path})


def _assert_all_ok(proc, run_dir: Path, plan: Plan) -> None:
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = results(run_dir)
    assert sorted(r["benchmark"] for r in rows) == sorted(b.id for b in plan.benchmarks)
    assert all(r["status"] == "ok" for r in rows), rows


def test_every_run_measures_every_point(tmp_path, guard):
    """The launch race (the group checked before the child had created it) failed about
    one run in three (all of ten runs passing had a 2% chance); ten runs in a row must all
    succeed. test_launch_waits_for_a_slow_setsid makes the race certain."""
    run_dir = tmp_path / "run"
    plan = _compile(run_dir, guard.port(2))
    for i in range(10):
        proc = _run(run_dir)
        assert "exited before ready" not in proc.stderr, f"run {i}: {proc.stderr[-2000:]}"
        _assert_all_ok(proc, run_dir, plan)


def test_launch_waits_for_a_slow_setsid(tmp_path, guard):
    """Deterministic form of the race: setsid that takes its time before the new group
    exists; and under `bash -m`, where the child leads a group and setsid forks."""
    run_dir = tmp_path / "run"
    plan = _compile(run_dir, guard.port(2))
    slow = tmp_path / "bin"
    slow.mkdir()
    (slow / "setsid").write_text(f"#!/bin/sh\nsleep 0.5\nexec {shutil.which('setsid')} \"$@\"\n")
    (slow / "setsid").chmod(0o755)
    _assert_all_ok(_run(run_dir, path_prefix=slow), run_dir, plan)
    _assert_all_ok(_run(run_dir, bash=("bash", "-m")), run_dir, plan)


@pytest.mark.parametrize("fault, message", [
    ("crash@load_weights", "exited before ready"),   # a server that never gets ready
    ("die_mid_run:8", "failed"),                     # a point whose server dies under load
])
def test_a_failure_exits_3(tmp_path, guard, fault, message):
    run_dir = tmp_path / "run"
    plan = _compile(run_dir, guard.port(2), fault)
    proc = _run(run_dir)
    assert proc.returncode == 3, proc.stderr[-2000:]
    assert message in proc.stderr and "1 server(s) or point(s) failed" in proc.stderr
    baseline = next(s.id for s in plan.servers if s.baseline)
    rows = {r["server"]: r for r in results(run_dir)}
    assert rows[baseline]["status"] == "ok"   # the healthy server was still measured


def test_a_server_that_cannot_start_exits_3(tmp_path, guard):
    """A launch that fails before its server leads a group (setsid missing on PATH)."""
    run_dir = tmp_path / "run"
    _compile(run_dir, guard.port(2))
    empty = tmp_path / "bin"
    empty.mkdir()
    (empty / "setsid").write_text("#!/bin/sh\necho 'setsid: no' >&2\nexit 1\n")
    (empty / "setsid").chmod(0o755)
    proc = _run(run_dir, path_prefix=empty)
    assert proc.returncode == 3, proc.stderr[-2000:]
    assert proc.stderr.count("did not start") == 2
    assert results(run_dir) == []


def test_a_secret_in_the_launch_command_is_taken_from_the_environment(tmp_path, guard):
    """`--api-key X` is written `${API_KEY}` (never the value): plan.sh resolves it when
    it runs, the points send it, and without it exported the script stops at once."""
    run_dir = tmp_path / "run"
    key = "sk-plan-sh-0123456789abcdefghij"
    plan = compile_plan(run_dir, TWO_SERVERS + [f"engine.extra_args=[--api-key,{key}]"],
                        port=guard.port(2))
    text = (run_dir / "plan.sh").read_text()
    assert key not in text and '"${API_KEY:?export API_KEY before running this plan}"' in text
    os.environ.pop("API_KEY", None)
    missing = _run(run_dir)
    assert missing.returncode != 0 and "export API_KEY before running this plan" in missing.stderr
    os.environ["API_KEY"] = key
    try:
        _assert_all_ok(_run(run_dir), run_dir, plan)
    finally:
        os.environ.pop("API_KEY", None)
    for f in run_dir.rglob("*"):
        if f.is_file() and f.suffix != ".pid":
            assert key not in f.read_text(errors="replace"), f
