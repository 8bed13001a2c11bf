"""The log redactor (`specc.run.redact`): a server's output reaches its log with the secrets
it was launched with blanked, promptly, and the server's exit status comes back."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from specc.run.redact import VALUES_ENV, _split

KEY = "sk-test-0123456789abcdefABCDEF"


def _run(tmp_path, script: str, values=(KEY,)):
    log = tmp_path / "server.log"
    env = {**os.environ, VALUES_ENV: "\n".join(values)}
    proc = subprocess.Popen([sys.executable, "-m", "specc.run.redact", str(log), "--",
                             sys.executable, "-c", script], env=env, start_new_session=True)
    return proc, log


def test_secrets_are_blanked_and_the_exit_status_passes_through(tmp_path):
    script = (f"import sys; print('server_args=' + repr({{'api_key': '{KEY}'}})); "
              f"print('half', end='', flush=True); print('{KEY[:10]}', end=''); "
              f"print('{KEY[10:]} end'); sys.exit(7)")
    proc, log = _run(tmp_path, script)
    assert proc.wait(timeout=30) == 7
    text = log.read_text()
    assert KEY not in text
    assert "'api_key': '<redacted>'" in text and text.endswith("half<redacted> end\n")


def test_a_partial_line_is_passed_on_while_the_server_is_quiet(tmp_path):
    """A progress bar's line without an end reaches the log (readiness counts it as progress)."""
    script = "import sys, time; sys.stdout.write('Capturing 3/10'); sys.stdout.flush(); time.sleep(30)"
    proc, log = _run(tmp_path, script)
    try:
        for _ in range(200):
            if log.exists() and "Capturing 3/10" in log.read_text():
                break
            time.sleep(0.05)
        assert "Capturing 3/10" in log.read_text()
        assert proc.poll() is None
    finally:
        os.killpg(proc.pid, 15)
    assert proc.wait(timeout=30) == 128 + 15   # the server's SIGTERM, as a shell reports it


def test_several_secrets_are_each_blanked(tmp_path):
    other = "hf_abcdefghijklmnopqrstuvwxyz012345"
    proc, log = _run(tmp_path, f"print('{KEY} and {other}')", values=(KEY, other))
    assert proc.wait(timeout=30) == 0
    assert log.read_text() == "<redacted> and <redacted>\n"


def test_split_keeps_the_partial_rest():
    assert _split(b"a\nb\rc") == (b"a\nb\r", b"c")
    assert _split(b"abc") == (b"", b"abc")
