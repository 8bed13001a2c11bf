"""`python -m specc.run.redact LOG -- ARGV...`: run a server with its output copied into
its log, the secrets it was launched with blanked (SGLang prints its whole ServerArgs,
`api_key` included).

This process leads the server's process group (the executor starts it as it would
start the server) and runs the server as its child, so teardown, PDEATHSIG and the
port-ownership check treat both as the server. The values to hide come in the
environment, never in argv (which `ps` shows). Output is passed on at each line end
(`\\n` or a progress bar's `\\r`) and, for a partial line, after a short quiet spell,
so readiness sees progress as soon as the server writes it. It exits with the
server's status once the server has exited and said all.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys

from specc.run import pdeathsig
from specc.secrets import REDACT_VALUES_ENV as VALUES_ENV, remember, scrub

#: A partial line is written after this long without more output.
QUIET_S = 0.2


def _split(buf: bytes) -> tuple[bytes, bytes]:
    """(complete lines, the partial rest)."""
    cut = max(buf.rfind(b"\n"), buf.rfind(b"\r"))
    return (buf[:cut + 1], buf[cut + 1:]) if cut >= 0 else (b"", buf)


def copy(src: int, dst: int, values: list[str]) -> None:
    remember(values)   # with their escaped forms: an engine logs a key's repr

    def clean(data: bytes) -> bytes:
        return scrub(data.decode("utf-8", "surrogateescape")).encode(
            "utf-8", "surrogateescape")

    pending = b""
    while True:
        ready, _, _ = select.select([src], [], [], QUIET_S)
        if not ready:
            if pending:
                os.write(dst, clean(pending))
                pending = b""
            continue
        chunk = os.read(src, 65536)
        if not chunk:
            break
        done, pending = _split(pending + chunk)
        if done:
            os.write(dst, clean(done))
    if pending:
        os.write(dst, clean(pending))


STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    log, command = argv[0], argv[argv.index("--") + 1:]
    values = [v for v in os.environ.pop(VALUES_ENV, "").split("\n") if v]
    # a stop signal reaches the whole group: the server handles it; this process keeps
    # copying until the server's output ends, so its last lines reach the log
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    # the server dies with this process, as with the executor; the wrapper gives it the
    # stop signals at their defaults (this process ignores them, and that survives exec)
    server = subprocess.Popen(pdeathsig.wrap(command), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        assert server.stdout is not None   # a pipe (above)
        copy(server.stdout.fileno(), fd, values)
    finally:
        os.close(fd)
    code = server.wait()
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    raise SystemExit(main())
