"""Stop signals to a real executor process (issue 8 item 8).

SIGHUP (the ssh session went away) is a stop like SIGTERM: teardown, state and
report. A Ctrl-C repeated while the executor stops cannot cut the teardown or the
report short and prints no traceback. A real terminal hang-up (a pty whose master
closes) also moves later output into run_dir/executor.log.
"""

from __future__ import annotations

import fcntl
import os
import pty
import signal
import subprocess
import termios
import threading
import time


from executor_helpers import (PY, REPO, compile_plan, results, state, wait_for,
                              wait_no_sim)

#: 8 points: the signal comes after the first one's row, with 7 still to run however fast this
#: machine runs them (with 3, the run could end before the hang-up reached it)
SWEEP = ["baseline=false", "+sweep={benchmark.concurrency:[1,2,3,4,5,6,7,8]}", "benchmark.num_prompts=24",
         "benchmark.output_len=64"]



def _plan(guard, tmp_path):
    run_dir = tmp_path / "run"
    port = guard.port(1)
    compile_plan(run_dir, SWEEP, port=port)
    return run_dir, port


def _argv(run_dir):
    return [PY, "-m", "specc", "run", "--plan", str(run_dir / "plan.json")]


def _stopped_cleanly(run_dir, port):
    assert wait_no_sim(run_dir, [port], timeout=5.0) == []
    entries = state(run_dir)["servers"].values()
    assert entries and all(e["status"] in ("stopped", "failed") for e in entries), entries
    assert any(e.get("stopped_by") == "interrupt" for e in entries)
    assert (run_dir / "report.md").exists()
    rows = results(run_dir)
    assert rows and all(r["status"] == "ok" for r in rows)   # an interrupted point: no row


def test_sighup_is_a_stop_like_sigterm(guard, tmp_path):
    run_dir, port = _plan(guard, tmp_path)
    out = tmp_path / "executor.out"
    with open(out, "w") as f:
        proc = guard.spawn(_argv(run_dir), cwd=REPO, stdout=f, stderr=subprocess.STDOUT)
        assert wait_for(lambda: results(run_dir), timeout=60), out.read_text()[-2000:]
        proc.send_signal(signal.SIGHUP)
        code = proc.wait(timeout=60)
    text = out.read_text()
    assert code == 130, text[-2000:]
    assert "SIGHUP: stopping servers" in text and "Traceback" not in text
    _stopped_cleanly(run_dir, port)


def test_repeated_ctrl_c_finishes_teardown_and_report_quietly(guard, tmp_path):
    run_dir, port = _plan(guard, tmp_path)
    out = tmp_path / "executor.out"
    with open(out, "w") as f:
        proc = guard.spawn(_argv(run_dir), cwd=REPO, stdout=f, stderr=subprocess.STDOUT)
        assert wait_for(lambda: results(run_dir), timeout=60), out.read_text()[-2000:]
        sent = 0
        while proc.poll() is None and sent < 200:   # a user hammering Ctrl-C
            proc.send_signal(signal.SIGINT)
            sent += 1
            time.sleep(0.05)
        code = proc.wait(timeout=60)
    text = out.read_text()
    assert sent >= 2
    assert code == 130, text[-2000:]
    assert "Traceback" not in text and "KeyboardInterrupt" not in text, text[-3000:]
    assert "SIGINT: already stopping" in text
    assert "report:" in text
    _stopped_cleanly(run_dir, port)


def test_terminal_hangup_moves_output_to_executor_log(guard, tmp_path):
    """The executor on a real terminal (a pty, its controlling tty) whose master closes: the
    kernel sends SIGHUP; teardown, state and report complete; what it prints after the
    hang-up is in run_dir/executor.log, not lost to EIO."""
    run_dir, port = _plan(guard, tmp_path)
    master, slave = pty.openpty()

    def controlling_tty():
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    proc = guard.spawn(_argv(run_dir), cwd=REPO, stdin=slave, stdout=slave, stderr=slave,
                       start_new_session=True, preexec_fn=controlling_tty)
    os.close(slave)
    seen = bytearray()

    def drain():   # a terminal reads what the executor writes
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:
                return
            if not data:
                return
            seen.extend(data)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        assert wait_for(lambda: results(run_dir), timeout=60), seen[-2000:]
    finally:
        os.close(master)   # hang up
    code = proc.wait(timeout=60)
    reader.join(5)
    log = (run_dir / "executor.log").read_text(errors="replace")
    assert code == 130, log[-2000:]
    assert "SIGHUP: stopping servers" in log and "Traceback" not in log, log[-3000:]
    assert "report:" in log
    _stopped_cleanly(run_dir, port)
