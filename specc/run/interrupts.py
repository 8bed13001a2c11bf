"""Stop signals for the executor's whole life: sweep, teardown and report.

SIGINT (Ctrl-C), SIGTERM and SIGHUP (the ssh session or terminal went away) all
mean one thing: stop the sweep, tear every server down, record the state and
write the report. The first one cancels the sweep; any later one is noted and
ignored, so a second Ctrl-C cannot cut the teardown or the report short (a
server still up after its grace gets SIGKILL anyway). After SIGHUP the
terminal is gone and writing to it fails (EIO, or EPIPE through a pipe), so
stdout and stderr, unless they are regular files, are pointed at
`run_dir/executor.log` before anything more is printed.

Handlers are plain `signal.signal` handlers, installed once and kept until the
end: they write with os.write only (a handler may interrupt a print) and hand
the cancel to the event loop thread-safely.
"""

from __future__ import annotations

import os
import signal
import stat
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Stopper:
    """Records stop signals; the first one calls `on_first` (scheduled, not run in the
    handler); each later one only writes one line."""

    def __init__(self, log_path: Path):
        self.log_path = Path(log_path)
        self.signals: list[int] = []
        self.on_first: Any = None          # set by the runner: cancels the sweep
        self.loop: Any = None

    @property
    def stopping(self) -> bool:
        return bool(self.signals)

    def handler(self, signum, frame) -> None:  # noqa: ARG002
        first = not self.signals
        self.signals.append(signum)
        name = signal.Signals(signum).name
        if signum == signal.SIGHUP:
            self._detach()
        if first:
            _say(f"{name}: stopping servers, keeping finished results\n")
            if self.on_first is not None and self.loop is not None and not self.loop.is_closed():
                self.loop.call_soon_threadsafe(self.on_first)
        else:
            _say(f"{name}: already stopping; servers still up after the grace get SIGKILL; "
                 "the state and the report are written before exiting\n")

    def _detach(self) -> None:
        """The terminal hung up: later output goes to the run dir's executor.log."""
        try:
            fd = os.open(self.log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError:
            fd = os.open(os.devnull, os.O_WRONLY)
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        for target in (1, 2):
            try:
                if not stat.S_ISREG(os.fstat(target).st_mode):   # a tty, a pipe to a dead tee
                    os.dup2(fd, target)
            except OSError:
                pass
        os.close(fd)


def _say(text: str) -> None:
    try:
        os.write(2, text.encode())
    except OSError:
        pass


@contextmanager
def handled(stopper: Stopper):
    """Route every stop signal to `stopper` for the duration (sweep, teardown, report).
    Once stopped, the process is on its way out with 130: later stop signals stay ignored
    rather than turn into a KeyboardInterrupt in the caller's exit path."""
    old = {s: signal.signal(s, stopper.handler) for s in STOP_SIGNALS}
    try:
        yield stopper
    finally:
        for s, h in old.items():
            signal.signal(s, signal.SIG_IGN if stopper.stopping else h)
