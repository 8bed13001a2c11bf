"""One executor per run dir (issue 8 item 2): `run_dir/.lock`, held for the command's life.

Without it a second executor on the same run dir took the first one's live server
for a leftover, killed it, and appended a second row per point.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess

import pytest

from executor_helpers import (PY, REPO, compile_plan, results, state, wait_for)
from specc.run import rundir



def _specc(*args, env=None, timeout=90) -> subprocess.CompletedProcess:
    return subprocess.run([PY, "-m", "specc", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


def test_the_lock_names_its_holder_and_refuses_a_second_taker(tmp_path):
    with rundir.locked(tmp_path, command="specc run --plan X"):
        info = json.loads((tmp_path / ".lock").read_text())
        assert info["pid"] == os.getpid() and info["host"] == socket.gethostname()
        with pytest.raises(rundir.RunDirBusy) as e:
            with rundir.locked(tmp_path):
                pass
        assert f"pid {os.getpid()} on {socket.gethostname()} since " in str(e.value)
        assert "(specc run --plan X)" in str(e.value)
    with rundir.locked(tmp_path):   # released on exit
        pass


def test_two_executors_on_one_run_dir(guard, tmp_path):
    """The second executor and `specc down` are refused while the first runs (exit 4, one line
    naming it, its server untouched); once it is SIGKILLed its lock is gone: `specc down`
    cleans up and a rerun completes with one row per point."""
    run_dir = tmp_path / "run"
    # the hung load may stay silent for 10 min: the server must outlive the test's steps on a
    # busy machine (with the small plan's 3 s budget it was torn down before they ended)
    plan = compile_plan(run_dir, ["baseline=false", "+sweep={benchmark.concurrency:[1,2]}",
                                  "+readiness.phase_budgets_s.load_weights=600"],
                        port=guard.port(1))
    first = guard.spawn([PY, "-m", "specc", "run", "--plan", str(run_dir / "plan.json")],
                        cwd=REPO, env={**os.environ, "SPECC_SIM_FAULT": "hang@load_weights"},
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def server_pid():
        try:
            entries = state(run_dir)["servers"].values()
        except (OSError, ValueError, KeyError):
            return None
        return next((e["pid"] for e in entries if e.get("phase") == "load_weights"), None)

    pid = wait_for(server_pid, timeout=60)
    assert pid, "the first executor never launched its server"

    second = _specc("run", "--plan", str(run_dir / "plan.json"))
    assert second.returncode == 4, second.stderr[-2000:]
    (line,) = [ln for ln in second.stderr.splitlines() if ln.strip()]
    assert line.startswith(f"error RUN_DIR_BUSY: run dir {run_dir} is in use by pid "
                           f"{first.pid} on {socket.gethostname()} since "), line
    down = _specc("down", "--run", str(run_dir))
    assert down.returncode == 4 and f"in use by pid {first.pid}" in down.stderr
    assert first.poll() is None and os.kill(pid, 0) is None   # both still there
    assert server_pid() == pid and results(run_dir) == []

    first.kill()   # SIGKILL: no teardown, the flock dies with it
    first.wait(10)
    down = _specc("down", "--run", str(run_dir), "--grace", "3")
    assert down.returncode == 0, down.stdout + down.stderr
    again = _specc("run", "--plan", str(run_dir / "plan.json"))
    assert again.returncode == 0, again.stderr[-2000:]
    ids = [r["benchmark"] for r in results(run_dir)]
    assert sorted(ids) == sorted(b.id for b in plan.benchmarks)


def test_a_killed_holder_leaves_no_lock(tmp_path):
    """A lock file whose holder died (SIGKILL) is text only: the next taker gets the lock."""
    holder = subprocess.Popen(
        [PY, "-c", "import sys, time; from specc.run import rundir\n"
                   f"with rundir.locked({str(tmp_path)!r}):\n"
                   "    print('held', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(rundir.RunDirBusy):
            with rundir.locked(tmp_path):
                pass
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(5)
    assert json.loads((tmp_path / ".lock").read_text())["pid"] == holder.pid
    with rundir.locked(tmp_path):
        pass


def test_a_compile_into_a_run_dir_in_use_rewrites_nothing(tmp_path):
    """`specc ... hydra.run.dir=D` while an executor holds D: the plan it runs stays as it is."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "plan.json").write_text("the plan being run\n")
    with rundir.locked(run_dir, command="specc run --plan D/plan.json"):
        res = _specc("engine=sim", "model_pair.context_length=2048", f"hydra.run.dir={run_dir}",
                     "execute=true")
        # an invalid compile writes nothing anywhere, and leaves a run dir in use as it is
        invalid = _specc("engine=sim", f"hydra.run.dir={run_dir}", "execute=true")
    assert res.returncode == 4, res.stderr[-2000:]
    assert "error RUN_DIR_BUSY: run dir" in res.stderr and "Traceback" not in res.stderr
    assert invalid.returncode == 2 and "CONTEXT_DRAFT_SHORTER" in invalid.stderr, invalid.stderr
    assert (run_dir / "plan.json").read_text() == "the plan being run\n"
    assert not (run_dir / "review.md").exists()
