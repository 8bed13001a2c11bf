"""Sweep progress: a live rich display on a terminal, plain timestamped lines elsewhere.

    with SweepProgress(total_points=len(plan.benchmarks)) as progress:
        progress.server_phase(server_id, "load_weights")
        progress.point_started(bench_id, "EAGLE3 s3 k1 d4 c16")
        progress.point_finished(bench_id, "ok", "1540.0 tok/s, 1.40x")

Plain mode (the stream is not a TTY: CI logs, ``| tee``) writes one line per
change -- a server entering a new phase, a point starting or finishing, a
``log()`` message -- and never rewrites a line.  Repeating the current phase
(the executor polls) prints nothing.  Live mode redraws a bar (points done /
total, ETA), the current point and each active server's phase with the seconds
spent in it, at most 4 times a second from rich's own thread; the same event
lines as plain mode scroll above it.

Every method is cheap (a dict update under a lock) and thread-safe.  Times
passed in (``phase_started``) are epoch seconds, like state.json's.
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, TextIO
from collections.abc import Callable

__all__ = ["SweepProgress", "format_duration", "TERMINAL_PHASES"]

TERMINAL_PHASES = frozenset({"failed", "stopped"})
_REFRESH_HZ = 4
_MAX_SERVER_ROWS = 6


def format_duration(seconds: float | None) -> str:
    """12s, 3m05s, 1h02m03s; '?' for None."""
    if seconds is None:
        return "?"
    seconds = max(0, int(round(seconds)))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    if h:
        return f"{h}h{m:02d}m{s:02d}s"
    if m:
        return f"{m}m{s:02d}s"
    return f"{s}s"


@dataclass
class _Server:
    phase: str
    phase_started: float
    first_seen: float
    detail: str = ""
    updated: float = 0.0


@dataclass
class _Point:
    label: str
    started: float


@dataclass
class _State:
    done: int = 0
    ok: int = 0
    failed: int = 0
    skipped: int = 0                    # points that will not run after all (out of total)
    earlier: int = 0                    # points finished by an earlier run (never in total)
    durations: list[float] = field(default_factory=list)
    startups: list[float] = field(default_factory=list)   # launch -> ready, per server
    running: dict[str, _Point] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    servers: dict[str, _Server] = field(default_factory=dict)
    current_server: str | None = None


class SweepProgress:
    """Progress of a sweep over ``total_points`` benchmark points (a context manager)."""

    def __init__(self, total_points: int, *, stream: TextIO | None = None, live: bool | None = None,
                 clock: Callable[[], float] = time.time):
        self.total = max(0, int(total_points))
        #: total is an upper bound (search=tune: the points of the most servers it may start)
        self.at_most = False
        #: servers still to be started in this run (None: not known), for the ETA
        self.servers_total: int | None = None
        self.stream = sys.stderr if stream is None else stream
        if live is None:
            isatty = getattr(self.stream, "isatty", None)
            try:
                live = bool(isatty()) if isatty else False
            except Exception:
                live = False
        self.live = live
        self._clock = clock
        self._lock = threading.RLock()
        self._write_lock = threading.Lock()
        self._st = _State()
        self._t0 = clock()
        self._closed = False
        self._live: Any = None
        self._console: Any = None
        if self.live:
            self._start_live()

    # ------------------------------------------------------------------ public API

    def __enter__(self) -> SweepProgress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def done(self) -> int:
        return self._st.done

    @property
    def earlier(self) -> int:
        return self._st.earlier

    @property
    def closed(self) -> bool:
        return self._closed

    def plan(self, points: int, *, servers: int | None = None, earlier: int = 0,
             at_most: bool = False, note: str = "") -> None:
        """What this run will run: `points` (not counting the `earlier` ones a previous run
        finished), on `servers` started from here; `at_most`: an upper bound (the search may
        stop before). Said in one line when anything is left out."""
        with self._lock:
            self.total = max(0, int(points)) + self._st.done
            self.at_most, self.servers_total = at_most, servers
            self._st.earlier = earlier
        if note:
            self.log(note)

    def skip(self, bench_ids, why: str, label: str = "") -> None:
        """Points that will not run after all (their server failed, the search stopped before
        their server): out of the total, one line for all of them."""
        ids = list(bench_ids)
        if not ids:
            return
        with self._lock:
            self.total = max(self._st.done, self.total - len(ids))
            self._st.skipped += len(ids)
        self.log(f"skip {len(ids)} point(s){f' of {label}' if label else ''}: {why}")

    def server_phase(self, server_id: str, phase: str, phase_started: float | None = None,
                     detail: str = "") -> None:
        """Server ``server_id`` is in ``phase`` (since ``phase_started``, epoch s; default now)."""
        now = self._clock()
        line = None
        with self._lock:
            if self._closed:
                return
            st = self._st
            srv = st.servers.get(server_id)
            started = now if phase_started is None else float(phase_started)
            if srv is not None and srv.phase == phase:
                srv.detail = detail or srv.detail
                srv.updated = now
                if phase_started is not None:
                    srv.phase_started = started
                return
            prev = None
            if srv is None:
                srv = st.servers[server_id] = _Server(phase, started, first_seen=started, detail=detail,
                                                      updated=now)
            else:
                prev = (srv.phase, started - srv.phase_started)
                srv.phase, srv.phase_started, srv.detail, srv.updated = phase, started, detail, now
            if phase not in TERMINAL_PHASES:
                st.current_server = server_id
            elif st.current_server == server_id:
                st.current_server = None
            parts = [f"server {server_id}: {phase}"]
            if phase == "ready":
                parts.append(f"after {format_duration(started - srv.first_seen)}")
                st.startups.append(max(0.0, started - srv.first_seen))
            if detail:
                parts.append(f"({detail})")
            if prev is not None:
                parts.append(f"[{prev[0]} took {format_duration(prev[1])}]")
            line = " ".join(parts)
        self._emit(line, now)

    def point_started(self, bench_id: str, label: str) -> None:
        now = self._clock()
        with self._lock:
            if self._closed:
                return
            st = self._st
            st.running[bench_id] = _Point(label, now)
            st.labels[bench_id] = label
            line = f"[{st.done + len(st.running)}/{self._total_text()}] start {label}"
        self._emit(line, now)

    def point_finished(self, bench_id: str, status: str, summary: str = "") -> None:
        now = self._clock()
        with self._lock:
            if self._closed:
                return
            st = self._st
            pt = st.running.pop(bench_id, None)
            label = pt.label if pt else st.labels.get(bench_id, bench_id)
            st.done += 1
            if status == "ok":
                st.ok += 1
            else:
                st.failed += 1
            took = None
            if pt is not None:
                took = max(0.0, now - pt.started)
                st.durations.append(took)
            word = "ok" if status == "ok" else status.upper()
            parts = [f"[{st.done}/{self._total_text()}] {word} {label}"]
            if took is not None:
                parts.append(f"in {format_duration(took)}")
            if summary:
                parts.append(f"- {summary}")
            eta = self._eta_locked()
            if st.done < self.total and eta is not None:
                parts.append(f"(ETA {format_duration(eta)})")
            line = " ".join(parts)
        self._emit(line, now)

    def log(self, message: str) -> None:
        """A line of its own (above the live display)."""
        self._emit(str(message), self._clock(), even_closed=True)

    def eta(self) -> float | None:
        """Seconds left: mean duration of finished points x points still to run, plus the mean
        start-up (launch to ready) x servers still to start; None before the first point
        finishes. Only what will run counts: points finished earlier or skipped are out of
        the total; a point finished without a start does not enter the mean. Servers of a
        packed wave start, and their points run, side by side: then it is an upper bound."""
        with self._lock:
            return self._eta_locked()

    def close(self) -> None:
        """Stop the live display and print a final line; safe to call more than once."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            st = self._st
            line = (f"done: {st.done}/{self.total} points ({st.ok} ok, {st.failed} failed) "
                    f"in {format_duration(self._clock() - self._t0)}"
                    + (f"; {st.skipped} skipped" if st.skipped else "")
                    + (f"; {st.earlier} finished in an earlier run" if st.earlier else ""))
            live, self._live = self._live, None
        if live is not None:
            try:
                live.stop()
            except Exception:
                pass
        self._emit(line, self._clock(), even_closed=True)

    # ------------------------------------------------------------------ internals

    def _total_text(self) -> str:
        return f"≤{self.total}" if self.at_most else str(self.total)

    def _eta_locked(self) -> float | None:
        st = self._st
        if not st.durations:
            return None
        remaining = max(0, self.total - st.done)
        eta = sum(st.durations) / len(st.durations) * remaining
        if st.startups and self.servers_total is not None and remaining:
            left = max(0, self.servers_total - len(st.servers))
            eta += sum(st.startups) / len(st.startups) * left
        return eta

    def _emit(self, line: str, now: float, even_closed: bool = False) -> None:
        if self._closed and not even_closed:
            return
        from specc.secrets import scrub

        stamp = time.strftime("%H:%M:%S", time.localtime(now))
        text = scrub(f"{stamp} {line}")   # a server's error text may echo a credential
        live = self._live
        if live is not None:
            from rich.text import Text
            try:
                live.console.print(Text(text), soft_wrap=True)
                return
            except Exception:
                pass
        with self._write_lock:
            try:
                self.stream.write(text + "\n")
                self.stream.flush()
            except (ValueError, OSError):  # closed stream: progress must never break a run
                pass

    def _start_live(self) -> None:
        try:
            from rich.console import Console
            from rich.live import Live
        except Exception:  # pragma: no cover - rich is a dependency
            self.live = False
            return
        self._console = Console(file=self.stream, force_terminal=True, highlight=False)
        self._live = Live(_View(self), console=self._console, refresh_per_second=_REFRESH_HZ,
                          transient=True, redirect_stdout=False, redirect_stderr=False)
        self._live.start()

    def _snapshot(self) -> dict:
        now = self._clock()
        with self._lock:
            st = self._st
            servers = sorted(
                ((sid, s.phase, now - s.phase_started, s.detail, s.updated)
                 for sid, s in st.servers.items() if s.phase not in TERMINAL_PHASES),
                key=lambda x: -x[4])[:_MAX_SERVER_ROWS]
            return {
                "done": st.done, "ok": st.ok, "failed": st.failed, "total": self.total,
                "total_text": self._total_text(),
                "elapsed": now - self._t0, "eta": self._eta_locked(),
                "running": [(p.label, now - p.started) for p in st.running.values()],
                "servers": servers, "current": st.current_server,
            }


class _View:
    """The live renderable; rebuilt from a snapshot on each refresh."""

    def __init__(self, progress: SweepProgress):
        self.progress = progress

    def __rich__(self):
        from rich.progress_bar import ProgressBar
        from rich.table import Table
        from rich.text import Text

        s = self.progress._snapshot()
        grid = Table.grid(padding=(0, 1))
        grid.add_column()
        grid.add_column()
        bar = ProgressBar(total=max(1, s["total"]), completed=s["done"], width=30)
        head = Text(f"{s['done']}/{s['total_text']} points  {s['ok']} ok")
        if s["failed"]:
            head.append(f"  {s['failed']} failed", style="bold red")
        head.append(f"  elapsed {format_duration(s['elapsed'])}  ETA "
                    f"{format_duration(s['eta']) if s['eta'] is not None else '?'}")
        grid.add_row(bar, head)
        for label, took in s["running"]:
            grid.add_row(Text("point", style="bold"), Text(f"{label}  {format_duration(took)}"))
        for sid, phase, took, detail, _ in s["servers"]:
            style = "green" if phase == "ready" else ("bold yellow" if sid == s["current"] else "")
            t = Text(f"{phase} {format_duration(took)}", style=style)
            if detail:
                t.append(f"  {detail}", style="dim")
            grid.add_row(Text(f"server {sid}", style="cyan"), t)
        return grid
