"""`specc down` stops only the process group the run launched, and says so truthfully
(issue 8 item 7): a recorded pgid is checked against the leader's start time before any
signal, and "verified gone" is printed only when the group is in fact gone."""

from __future__ import annotations

import json
import os
import signal
import subprocess

import invoke
import psutil
import pytest

from executor_helpers import PY, REPO


def _sleeper() -> subprocess.Popen:
    """A real process leading its own group (pid == pgid), like a launched server."""
    return subprocess.Popen([PY, "-c", "import time; time.sleep(120)"], start_new_session=True)


def _record(run_dir, proc, **fields):
    run_dir.mkdir(exist_ok=True)
    entry = {"pid": proc.pid, "pgid": proc.pid, "host": "localhost", "port": 1,
             "status": "ready", **fields}
    (run_dir / "state.json").write_text(json.dumps({"servers": {"srv": entry}}))
    (run_dir / "plan.json").write_text("{}")   # `down` refuses a folder that is no run dir


def test_a_recycled_pgid_is_left_alone(tmp_path):
    """state.json names a pgid now held by an unrelated process (the server died, its pid was
    reused): its start time differs from the recorded one, so down must not signal it."""
    other = _sleeper()
    try:
        born = psutil.Process(other.pid).create_time()
        # the launched leader was created 2 s earlier; the executor's own clock said +1 s
        _record(tmp_path, other, create_time=born - 2.0, started_at=born + 1.0)
        res = subprocess.run([PY, "-m", "specc", "down", "--run", str(tmp_path), "--grace", "1"],
                             cwd=REPO, capture_output=True, text=True, timeout=60)
        assert other.poll() is None, "down killed a process it did not launch"
        assert res.returncode == 0, res.stderr
        assert f"left alone process group {other.pid} recorded for srv: pid {other.pid} is now" \
            in res.stdout
        assert "verified gone" not in res.stdout and "nothing running" in res.stdout
        entry = json.loads((tmp_path / "state.json").read_text())["servers"]["srv"]
        assert entry["status"] == "stopped" and "left alone" in entry["stop"]
    finally:
        other.kill()
        other.wait(5)


def test_the_launched_group_is_stopped_and_verified(tmp_path):
    mine = _sleeper()
    _record(tmp_path, mine, create_time=psutil.Process(mine.pid).create_time())
    res = subprocess.run([PY, "-m", "specc", "down", "--run", str(tmp_path), "--grace", "3"],
                         cwd=REPO, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert mine.wait(5) == -signal.SIGTERM
    assert f"stopped srv (process group {mine.pid}): terminated" in res.stdout
    assert "1 server(s) stopped; verified gone" in res.stdout


def test_never_verified_gone_while_alive(tmp_path, monkeypatch):
    """A group that survives SIGTERM and SIGKILL (here: the signals are not delivered, as for
    a process specc may not signal) is reported alive, exit 3, never "verified gone"."""
    from specc.tasks import down

    mine = _sleeper()
    try:
        _record(tmp_path, mine, create_time=psutil.Process(mine.pid).create_time())
        real = os.killpg
        monkeypatch.setattr(os, "killpg", lambda pgid, sig: real(pgid, 0) if sig == 0 else None)
        monkeypatch.setattr("specc.run.lifecycle.time.sleep", lambda s: None)
        with pytest.raises(invoke.Exit) as e:
            down(invoke.Context(), run=str(tmp_path), grace=0.05)
        assert e.value.code == 3
        assert f"srv: process group {mine.pid} still alive" in str(e.value.message)
        assert mine.poll() is None
    finally:
        mine.kill()
        mine.wait(5)
