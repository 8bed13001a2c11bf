"""`specc status` runs without invoke (specc/run/status.py, called from specc/__main__.py): the
same stdout, stderr and exit code as the invoke task prints, on a run the executor finished,
on one in progress with a server failed, on its error paths and with `--run latest`; and it
imports none of the heavy modules that made it take 0.6 s of CPU."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys

import psutil
import pytest

from executor_helpers import PY, REPO, SimGuard, compile_plan, execute

from specc import __main__ as entry
from specc.run import status as run_status

SWEEP = "+sweep={speculation:[{num_steps:3,topk:1,num_draft_tokens:4}],benchmark.concurrency:[1,2]}"
NOW = 1_900_000_000.25   # the fake clock both paths read ("in phase" is now minus its start)


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A run the executor finished on the simulator: a baseline and an EAGLE-3 server, two
    points each."""
    root = tmp_path_factory.mktemp("status")
    guard = SimGuard(root)
    run_dir = root / "run"
    plan = compile_plan(run_dir, ["hardware.tp=1", "baseline=true", SWEEP], port=guard.port(2))
    try:
        assert execute(plan, run_dir) == 0
    finally:
        assert not guard.check()
    return run_dir


class _Clock:
    @staticmethod
    def time() -> float:
        return NOW


def both(argv: list[str], capsys, monkeypatch) -> tuple[tuple, tuple]:
    """(exit code, stdout, stderr) of `specc <argv>` without invoke, and through invoke's task
    as before (the same `main`, told that the fast path does not take the command line)."""
    monkeypatch.setattr(run_status, "time", _Clock)
    capsys.readouterr()
    fast = (entry.main(argv), *capsys.readouterr())
    with monkeypatch.context() as m:
        m.setattr(run_status, "main", lambda argv: None)
        m.setattr(sys, "dont_write_bytecode", sys.dont_write_bytecode)   # invoke turns it off
        slow = (entry.main(argv), *capsys.readouterr())
    return fast, slow


@pytest.mark.parametrize("form", [["--run", "{d}"], ["-r", "{d}"], ["--run={d}"]])
def test_a_finished_run_prints_what_the_invoke_task_prints(finished, form, capsys, monkeypatch):
    argv = ["status", *(a.format(d=finished) for a in form)]
    fast, slow = both(argv, capsys, monkeypatch)
    assert fast == slow
    code, out, err = fast
    assert code == 0 and err == "", err
    lines = out.splitlines()
    assert lines[0].split() == ["server", "status", "phase", "in", "phase", "pid", "alive",
                                "port", "reason"]
    assert len(lines) == 5 and all("stopped (terminated, exit code 0)" in x for x in lines[2:4])
    assert lines[-1] == "points: 4/4 finished (4 ok, 0 failed)"


@pytest.fixture
def in_progress(finished, tmp_path):
    """The finished run as it was mid-way: one server still running (a real process group of
    its own, its start time recorded), the other failed in CUDA-graph capture by SIGKILL with
    a terminal escape in its reason; one point done, one failed, a line that is no row."""
    run_dir = tmp_path / "outputs" / "exp" / "run"
    shutil.copytree(finished, run_dir)
    proc = subprocess.Popen([PY, "-c", "import time; time.sleep(120)"], start_new_session=True)
    try:
        state = json.loads((run_dir / "state.json").read_text())
        (live, s1), (dead, s2) = state["servers"].items()
        s1.update(status="ready", phase="ready", pid=proc.pid, pgid=proc.pid, stop=None,
                  exit_code=None, create_time=psutil.Process(proc.pid).create_time(),
                  phase_started_at=NOW - 75.6)
        s2.update(status="failed", phase="cuda_graph", exit_code=-9, stop=None,
                  reason="killed\x1b[31m by the OOM killer " + "x" * 100)
        (run_dir / "state.json").write_text(json.dumps(state))
        rows = (run_dir / "results.jsonl").read_text().splitlines()
        failed = {**json.loads(rows[1]), "status": "failed", "reason": "server died"}
        (run_dir / "results.jsonl").write_text(
            "\n".join([rows[0], json.dumps(failed), '{"benchmark": 5}']) + "\n")
        yield run_dir, live, dead
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_a_run_in_progress_with_a_failed_server_prints_the_same(in_progress, capsys, monkeypatch):
    run_dir, live, dead = in_progress
    fast, slow = both(["status", "--run", str(run_dir)], capsys, monkeypatch)
    assert fast == slow
    code, out, err = fast
    assert code == 0
    row = next(x for x in out.splitlines() if x.startswith(live))
    assert " ready " in row and " 76s " in row and " yes " in row
    row = next(x for x in out.splitlines() if x.startswith(dead))
    assert "failed in cuda_graph (signal SIGKILL)" in row and "\\x1b[31m" in row
    assert out.splitlines()[-1] == "points: 2/4 finished (1 ok, 1 failed)"
    assert err.startswith("warning: ") and err.count("\n") == 1


def test_latest_and_the_refusals_are_the_same(in_progress, tmp_path, capsys, monkeypatch):
    run_dir, _, _ = in_progress
    monkeypatch.chdir(tmp_path)
    fast, slow = both(["status", "--run", "latest"], capsys, monkeypatch)
    assert fast == slow and fast[0] == 0
    assert fast[2].startswith("run dir: outputs/exp/run (latest)\n")
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.chdir(empty)
    (run_dir / "state.json").write_text("[]")
    for argv in (["--run", "latest"], ["--run", str(empty / "missing")], ["--run", str(empty)],
                 ["--run", str(run_dir)]):
        fast, slow = both(["status", *argv], capsys, monkeypatch)
        assert fast == slow and fast[0] == 2 and fast[1] == "", argv
        assert fast[2].startswith("error ") and fast[2].count("\n") == 1, fast[2]
    (run_dir / "plan.json").write_text("{")
    fast, slow = both(["status", "--run", str(run_dir)], capsys, monkeypatch)
    assert fast == slow and fast[2].startswith("error PLAN_UNREADABLE at ")


def test_what_the_fast_path_does_not_take_goes_to_invoke(finished, capsys, monkeypatch):
    for argv in (["status"], ["status", "--run"], ["status", "--run", str(finished), "-x"]):
        assert run_status.main(argv[1:]) is None
        code = entry.main(argv)
        assert code != 0 and "Traceback" not in capsys.readouterr().err


HEAVY = ("invoke", "hydra", "omegaconf", "jsonschema", "httpx", "numpy", "asyncio", "psutil",
         "specc.compile", "specc.config", "specc.report", "specc.run.slurm", "specc.run.lifecycle")


def test_status_imports_nothing_heavy(finished):
    code = ("import sys; from specc.__main__ import main; code = main(sys.argv[1:]); "
            f"print(sorted(m for m in sys.modules for h in {HEAVY!r} "
            "if m == h or m.startswith(h + '.')))")
    res = subprocess.run([PY, "-c", code, "status", "--run", str(finished)], cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[-1] == "[]"
