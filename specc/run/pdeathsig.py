"""`python -I -S pdeathsig.py PARENT -- ARGV...`: become ARGV, to be sent SIGTERM when PARENT dies.

A server is started through this wrapper, never with `preexec_fn`: Python code between
fork and exec in a process that has threads (the executor's) can deadlock on a lock
another thread held at the fork. Here prctl(PR_SET_PDEATHSIG) runs in a fresh
single-threaded interpreter and survives the exec. Run as a file with `-I -S` (no
site, no specc import): it adds the least start-up time to a launch. PARENT is the
pid that started it: if that one is already gone, no signal would ever come, so the
wrapper stops instead of starting an orphan server.
"""

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1
#: Signals the server gets at their defaults: Python ignores SIGPIPE and SIGXFSZ, and the
#: log redactor ignores the stop signals; an ignored signal stays ignored across exec.
DEFAULT_SIGNALS = (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def wrap(argv: list[str], parent: int | None = None) -> list[str]:
    """The argv that runs `argv` through this wrapper for the calling process."""
    return [sys.executable, "-I", "-S", os.path.abspath(__file__),
            str(os.getpid() if parent is None else parent), "--", *argv]


def main(argv: list[str]) -> int:
    parent, command = int(argv[0]), argv[argv.index("--") + 1:]
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:
        pass
    if os.getppid() != parent:   # the parent died before prctl: no signal will ever come
        return 128 + signal.SIGTERM
    for sig in DEFAULT_SIGNALS:
        signal.signal(sig, signal.SIG_DFL)
    try:
        os.execvp(command[0], command)
    except OSError as e:
        print(f"specc: cannot start {command[0]!r}: {e.strerror}", file=sys.stderr)
        return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
