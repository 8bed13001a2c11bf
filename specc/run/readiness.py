"""Readiness: the plan's readiness section run as a state machine.

process alive -> port listening -> 503 warming -> 200 ready, with the log
tailed throughout: the current phase and how long it has run, a fatal line or
a process exit fails at once, no progress within a phase's budget is a stall
(the zombie), and the ready line fires a probe immediately.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from specc.net import base_url

#: How often the log is read and the process checked; probes keep their own interval.
TICK_S = 0.02
#: After a fatal line, how long to keep reading for the exception line that names the cause.
FATAL_GRACE_S = 0.5
#: Fatal patterns that only say "something failed"; the line naming the cause is better.
_GENERIC = ("Traceback (most recent call last)", "Scheduler hit an exception",
            "Received sigquit from a child process")
_EXCEPTION_LINE = re.compile(r"\b[A-Za-z_][\w.]*(Error|Exception): ")


def _cause(lines: list[str], fatal: list[str]) -> str | None:
    """The line that names the failure: the last `XxxError: ...` line (a traceback ends
    with it), else the first line with a specific fatal pattern."""
    exc = [ln for ln in lines if _EXCEPTION_LINE.search(ln)]
    if exc:
        return exc[-1]
    specific = [p for p in fatal if p not in _GENERIC]
    return next((ln for ln in lines if any(p in ln for p in specific)), None)


class LogTail:
    """Reads whole new lines from a growing log file; keeps the last N for error messages."""

    def __init__(self, path: Path, keep: int = 40):
        self.path = Path(path)
        self.offset = 0
        self.partial = b""
        self.last: deque[str] = deque(maxlen=keep)

    def read(self) -> list[str]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except OSError:
            return []
        if not data:
            return []
        self.offset += len(data)
        data = self.partial + data
        *lines, self.partial = data.split(b"\n")
        out = [ln.decode("utf-8", "replace").rstrip("\r") for ln in lines]
        self.last.extend(out)
        return out

    def tail(self, n: int = 20) -> str:
        return "\n".join(list(self.last)[-n:])


@dataclass
class Outcome:
    ok: bool
    phase: str
    reason: str | None = None
    ready_at: float | None = None
    last_lines: str = ""
    timeline: list = field(default_factory=list)   # [(phase, started_at)]


async def _probe(client: httpx.AsyncClient, url: str, timeout: float) -> str:
    """One probe -> "refused" | "200" | "503" | other status | "timeout"."""
    try:
        r = await client.get(url, timeout=timeout)
        return str(r.status_code)
    except httpx.ConnectError:
        return "refused"
    except httpx.TimeoutException:
        return "timeout"
    except httpx.HTTPError:
        return "refused"


def _next_phase(phases: list, cur: int, line: str, skippable: list[bool]) -> int | None:
    """The phase this log line begins: the next one, or a later one whose marker no
    earlier phase shares (so a marker an engine release renamed costs one phase's
    label, never a false stall while later phases are visibly under way)."""
    for j in range(cur + 1, len(phases)):
        begin = phases[j]["begin"]
        if begin and begin in line and (j == cur + 1 or skippable[j]):
            return j
    return None


async def wait_ready(running, readiness: dict, *, on_phase=None, clock=time.time,
                     listener_check=None) -> Outcome:
    """Drive one server from launch to ready or to a diagnosed failure.

    `listener_check()` -> None or why the process answering on the port is not this
    server: asked (in a thread) on every answer that is not "refused", before it counts."""
    server = running.server
    phases = readiness["phases"]
    begins = [p["begin"] for p in phases]
    skippable = [b is not None and b not in begins[:j] for j, b in enumerate(begins)]
    probe = readiness["probe"]
    url = base_url(server.host, server.port) + probe["path"]
    fatal = readiness.get("fatal_patterns", [])
    ready_line = readiness.get("ready_log")
    tail = LogTail(running.log_path)
    start = running.started_at
    cur, phase_start, successes = 0, start, 0
    timeline = [(phases[0]["name"], start)]
    answer_state = "starting"
    next_probe = clock()
    probe_task: asyncio.Task | None = None

    def report(detail=""):
        if on_phase:
            on_phase(phases[cur]["name"], phase_start, detail)

    last_answer: str | None = None
    ready_logged = False
    ready_logged_at: float | None = None
    probe_started = 0.0

    def health_note() -> str:
        if last_answer in (None, "refused"):   # the port is not open yet: nothing to add
            return ""
        note = f"; health answered {last_answer} (last probe)"
        if ready_logged and last_answer != "200":
            note += f" although the log says {ready_line!r}"
        return note

    def fail(reason: str) -> Outcome:
        return Outcome(False, phases[cur]["name"], reason, last_lines=tail.tail(), timeline=timeline)

    report()
    async with httpx.AsyncClient(trust_env=False) as client:
        try:
            while True:
                now = clock()
                lines = tail.read()
                for i, line in enumerate(lines):
                    hit = next((p for p in fatal if p in line), None)
                    if hit:
                        found = await _read_cause(lines[i:], tail, running, fatal, clock)
                        return fail(f"fatal log line in {phases[cur]['name']}: {found.strip()[:600]}")
                    nxt = _next_phase(phases, cur, line, skippable)
                    if nxt is not None:
                        cur, phase_start = nxt, now
                        timeline.append((phases[cur]["name"], now))
                        report()
                    if ready_line and ready_line in line:
                        next_probe = now        # the log knows: ask at once
                        if not ready_logged:
                            timeline.append(("ready_line", now))
                        ready_logged = True
                        ready_logged_at = now
                code = running.exit_code()
                if code is not None:
                    rest = tail.read()   # what it wrote between our last read and its exit
                    hit = next((i for i, ln in enumerate(rest) if any(p in ln for p in fatal)), None)
                    if hit is not None:
                        found = _cause(rest[hit:], fatal) or rest[hit]
                        return fail(f"fatal log line in {phases[cur]['name']}: {found.strip()[:600]} "
                                    f"(process exited with code {code})")
                    last = next((ln.strip() for ln in reversed(tail.last) if ln.strip()), "")
                    return fail(f"process exited with code {code} during {phases[cur]['name']}"
                                + (f"; last log line: {last[:600]}" if last else ""))
                if probe_task is not None and probe_task.done():
                    answer = probe_task.result()
                    probe_task = None
                    if answer != "refused" and listener_check is not None:
                        taken = await asyncio.to_thread(listener_check)
                        if taken:
                            return fail(taken)
                    last_answer = answer
                    done_at = clock()
                    meaning = readiness["answers"].get(answer, "warming" if answer != "refused" else "starting")
                    if answer == "200":
                        successes += 1
                        if successes >= probe.get("success_threshold", 1):
                            timeline.append(("ready", done_at))
                            return Outcome(True, "ready", ready_at=done_at, timeline=timeline)
                        next_probe = done_at
                        continue
                    successes = 0
                    if meaning == "dead":
                        return fail(f"health answered {answer}: the engine reports itself dead")
                    if meaning != answer_state:
                        answer_state = meaning
                        report(f"health: {answer} ({meaning})")
                    next_probe = done_at + probe["interval_s"]
                    if ready_logged_at is not None and probe_started < ready_logged_at:
                        next_probe = done_at    # that answer predates the ready line: ask again now
                budget = phases[cur]["budget_s"]
                if now - phase_start > budget:
                    silence = now - phase_start
                    return fail(f"stalled in {phases[cur]['name']}: no progress for {silence:.0f} s "
                                f"(budget {budget:g} s){health_note()}")
                if now - start > readiness["deadline_s"]:
                    return fail(f"not ready within the deadline of {readiness['deadline_s']:g} s"
                                f"{health_note()}")
                if probe_task is None and now >= next_probe:
                    probe_started = clock()
                    probe_task = asyncio.ensure_future(_probe(client, url, probe["timeout_s"]))
                await asyncio.sleep(TICK_S)
        finally:
            if probe_task is not None:
                probe_task.cancel()


async def _read_cause(lines: list[str], tail: LogTail, running, fatal: list[str], clock) -> str:
    """From the first fatal line on, read on briefly (the traceback's last line names the
    cause) until the cause shows, the process has exited and said all, or the grace ends."""
    lines = list(lines)
    deadline = clock() + FATAL_GRACE_S
    while True:
        cause = _cause(lines, fatal)
        if cause is not None:
            return cause
        exited = running.exit_code() is not None
        more = tail.read()
        lines.extend(more)
        if more:
            continue
        if exited or clock() >= deadline:
            return _cause(lines, fatal) or lines[0]
        await asyncio.sleep(TICK_S)
