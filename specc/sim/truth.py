"""Ground truth (``$SPECC_SIM_TRUTH``): JSON lines of what the simulator really did.

Events: ``ready`` (port, t), ``request`` (rid, t queued, arrival: its first bytes,
prompt and max tokens, ``history``: the messages or prompt it carried), ``admit`` (rid, t,
``cached_tokens``: the prefix-cache hit when it was scheduled), one ``token`` per
delivered chunk (t, due, rid, n, first), one ``step`` per scheduler step (due: its place
on the absolute schedule, t: when it was delivered, ``late_s``: t - due, ``batch``: the
requests it served, ``prefill``, ``wait_s``: how long it waited for requests that arrived
before it began to be queued: specc/sim/arrivals.py), and ``phase`` (name, t) as each startup phase begins, so
tests can assert order without clocks.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from typing import NoReturn

_MONO0 = time.monotonic()
_EPOCH0 = time.time()


def epoch(mono: float) -> float:
    return _EPOCH0 + (mono - _MONO0)


def started_epoch() -> float:
    return _EPOCH0


class Truth:
    """Buffered JSON-lines writer; flushed every 100 ms by the loop and on exit."""

    def __init__(self, path: str | None):
        self.f = open(path, "a", buffering=1 << 16) if path else None
        self.buf: list = []
        self.last = 0.0

    def add(self, event: dict) -> None:
        if self.f is not None:
            self.buf.append(event)

    def token(self, mono: float, due: float, rid: str, n: int, first: bool) -> None:
        """Hot path: keep a tuple, format at flush time."""
        if self.f is not None:
            self.buf.append((mono, due, rid, n, first))

    def step(self, due: float, late: float, batch: int, prefill: bool, wait: float = 0.0) -> None:
        """Hot path: a step delivered ``late`` s after its deadline ``due`` (monotonic), which
        waited ``wait`` s for requests that arrived before it began to be queued."""
        if self.f is not None:
            self.buf.append((due, late, batch, prefill, wait, None))

    @staticmethod
    def _fmt(e) -> str:
        if isinstance(e, tuple) and len(e) == 6:
            due, late, batch, prefill, wait, _ = e
            e = {"event": "step", "t": epoch(due + late), "due": epoch(due),
                 "late_s": round(late, 6), "batch": batch, "prefill": prefill,
                 "wait_s": round(wait, 6)}
        elif isinstance(e, tuple):
            mono, due, rid, n, first = e
            e = {"event": "token", "t": epoch(mono), "due": epoch(due), "rid": rid, "n": n,
                 "first": first}
        return json.dumps(e, separators=(",", ":")) + "\n"

    def flush(self) -> None:
        if self.f is not None and self.buf:
            data, self.buf = "".join(map(self._fmt, self.buf)), []
            try:
                self.f.write(data)
                self.f.flush()
            except (OSError, ValueError):
                pass

    def maybe_flush(self, mono: float) -> None:
        """Called by the scheduler right after a step's deliveries (its slack time)."""
        if self.f is not None and mono - self.last >= 0.1:
            self.last = mono
            self.flush()

    async def flusher(self) -> None:
        while True:
            await asyncio.sleep(0.1)
            if time.monotonic() - self.last >= 0.1:
                self.last = time.monotonic()
                self.flush()


#: The process's writer; ``server.main`` replaces it when $SPECC_SIM_TRUTH is set.
TRUTH = Truth(None)


def hard_exit(code: int) -> NoReturn:
    TRUTH.flush()
    try:
        sys.stdout.flush()
    except Exception:
        pass
    os._exit(code)
