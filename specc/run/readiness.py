"""Readiness: the plan's readiness section as a pure state machine, and its async runner.

`Startup` is fed events (a monotonic time tick, a log line, a probe answer, the
process's exit) and returns actions (probe now, the phase changed, ready, fail
with a reason). It never reads a clock, a file or a socket, so it is tested
with a fake clock and replayed logs. `wait_ready` only feeds it: it tails the
log, polls the process, runs one probe at a time with httpx, and performs what
the machine says.

The rules, engine-independent (the patterns come from the plan):
- any log line is progress, except an echo of our own probe (an access-log line
  naming the probe path); a stall is a log silent for the current phase's budget;
  the overall deadline still applies. A marker that never came stalls nothing.
- a line matching a later phase's begin pattern moves there; a marker the current
  phase shares with the next (every rank's `Load weight begin`, then the draft's)
  moves on only after the current phase's end pattern was seen.
- the phase shown is the best known and marked as a guess (`kv_cache (?)`) when
  markers were skipped, or when lines that begin nothing known follow the current
  phase's end marker (the engine is in a phase whose marker this plan does not know).
- a fatal line (a message the engine dies of, never a bare traceback: warnings log
  tracebacks and carry on) fails with the line that names the cause (the traceback's
  last `XxxError: ...` line, read on for up to FATAL_GRACE_S; where lines carry their
  process's tag, the fatal line's process's own); a process exit fails,
  naming the last exception line logged before it; a probe answer meaning "dead" fails.
- probes never overlap; the ready line fires one at once; `success_threshold`
  consecutive 200s are ready.
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
from specc.plan import Readiness

#: How often the runner reads the log and checks the process; probes keep their own interval.
TICK_S = 0.02
#: After a fatal line, how long to read on for the line that names the cause.
FATAL_GRACE_S = 0.5
#: A Python exception line (`torch.OutOfMemoryError: ...`): the cause a traceback ends with.
_EXCEPTION_LINE = re.compile(r"\b[A-Za-z_][\w.]*(Error|Exception): ")


#: pydantic's ValidationError names only the model on its own line ("1 validation error for
#: SpeculativeConfig"); the cause is the indented line after it (vLLM's config errors:
#: "  Value error, Invalid repository ID or local directory specified: '<path>'.").
_VALIDATION_ERROR = re.compile(r"\d+ validation errors? for \w+\s*$")


def last_exception(lines) -> str | None:
    """The last line of `lines` naming an exception (`XxxError: ...`), stripped: what a
    server that died logged as its cause (with the line that says why, for a pydantic
    ValidationError)."""
    lines = list(lines)
    for i in range(len(lines) - 1, -1, -1):
        if _EXCEPTION_LINE.search(lines[i]):
            exc = lines[i].strip()
            if _VALIDATION_ERROR.search(exc):
                why = next((ln.strip() for ln in lines[i + 1:i + 3]
                            if ln[:1].isspace() and ln.strip()), None)
                exc = f"{exc}: {why}" if why else exc
            return exc
    return None
#: The process a line is from, where the engine tags its lines (vLLM: `(EngineCore pid=26385)`).
_PROCESS_TAG = re.compile(r"^\s*\([^()]*\bpid=\d+\)")


# -- actions ------------------------------------------------------------------------------
@dataclass(frozen=True)
class ProbeNow:
    """Send one health probe now (the machine never asks while one is in flight)."""


@dataclass(frozen=True)
class PhaseChanged:
    phase: str
    guess: bool
    since: float          # monotonic instant the phase began
    detail: str = ""

    @property
    def label(self) -> str:
        return phase_label(self.phase, self.guess)


@dataclass(frozen=True)
class Ready:
    at: float             # monotonic instant of the deciding answer


@dataclass(frozen=True)
class Failed:
    reason: str
    phase: str            # label, e.g. "capture_draft_cuda_graph" or "kv_cache (?)"


def phase_label(name: str, guess: bool) -> str:
    return f"{name} (?)" if guess else name


def _compile(patterns) -> tuple[re.Pattern, ...]:
    """Each regex on its own (one may carry a global flag such as `(?i)`)."""
    return tuple(re.compile(p) for p in patterns)


def _hit(rxs: tuple[re.Pattern, ...], line: str) -> bool:
    return any(rx.search(line) for rx in rxs)


class Startup:
    """One server's startup, from process start (monotonic `started`) to ready or failed."""

    def __init__(self, plan: Readiness, started: float, *, keep_lines: int = 40):
        self.plan = plan
        self.started = started
        self._begin = [_compile(p.begin) for p in plan.phases]
        self._end = [_compile(p.end) for p in plan.phases]
        self._fatal = _compile(plan.fatal_patterns)
        self._ready_line = _compile(plan.ready_log)
        self.cur = 0
        self.guess = False
        self.phase_since = started
        self.ended = [False] * len(plan.phases)
        self.last_line_at = started
        self.last_lines: deque[str] = deque(maxlen=keep_lines)
        self.timeline: list[tuple[str, float]] = [(plan.phases[0].name, started)]
        self.done = False
        # health
        self.in_flight = False
        self.probe_sent_at = 0.0
        self.next_probe = started
        self.successes = 0
        self.meaning = "starting"
        self.last_answer: str | None = None
        self.ready_logged_at: float | None = None
        # a fatal line seen: the lines since, and until when to read on for the cause
        self.fatal_lines: list[str] | None = None
        self.fatal_until = 0.0

    # -- what the runner asks --------------------------------------------------------
    @property
    def phase(self) -> str:
        return self.plan.phases[self.cur].name

    @property
    def label(self) -> str:
        return phase_label(self.phase, self.guess)

    def start(self) -> list:
        """The first action: the launch phase, shown at once."""
        return [PhaseChanged(self.phase, self.guess, self.phase_since)]

    # -- events ------------------------------------------------------------------------
    def line(self, now: float, text: str) -> list:
        """One log line (without its newline), read at `now`."""
        if self.done:
            return []
        self.last_lines.append(text)
        if self.fatal_lines is not None:
            self.fatal_lines.append(text)
            return []
        if _hit(self._fatal, text):
            self.fatal_lines = [text]
            self.fatal_until = now + FATAL_GRACE_S
            return self._resolve_fatal(now, exited=None, final=False)
        echo = self.plan.probe.path in text      # our own probe's echo is not progress
        if not echo:
            self.last_line_at = now
        out = self._advance(now, text)
        if not out and not echo and self._unknown_after_end(text):
            self.guess = True   # past this phase's end, in one whose marker we do not know
            out.append(PhaseChanged(self.phase, True, self.phase_since))
        if _hit(self._ready_line, text):
            if self.ready_logged_at is None:
                self.timeline.append(("ready_line", now))
            self.ready_logged_at = now
            self.next_probe = now                  # the log knows: ask at once
            if not self.in_flight:
                out += self._send(now)
        return out

    def probe_answer(self, now: float, answer: str) -> list:
        """The answer to the probe in flight: "refused", "timeout" or an HTTP status."""
        if self.done or not self.in_flight:
            return []
        self.in_flight = False
        self.last_answer = answer
        if self.fatal_lines is not None:
            return []
        meaning = self.plan.answers.get(answer, "starting" if answer == "refused" else "warming")
        if meaning == "ready":
            self.successes += 1
            if self.successes >= self.plan.probe.success_threshold:
                self.done = True
                self.timeline.append(("ready", now))
                return [Ready(now)]
            self.next_probe = now
            return []
        self.successes = 0
        if meaning == "dead":
            return self._fail(f"health answered {answer}: the engine reports itself dead")
        out = []
        if meaning != self.meaning:
            self.meaning = meaning
            out.append(PhaseChanged(self.phase, self.guess, self.phase_since,
                                    f"health: {answer} ({meaning})"))
        self.next_probe = now + self.plan.probe.interval_s
        if self.ready_logged_at is not None and self.probe_sent_at < self.ready_logged_at:
            self.next_probe = now    # that answer predates the ready line: ask again now
        return out

    def exited(self, now: float, code: int) -> list:
        """The process is gone (feed the lines it wrote before exiting first)."""
        if self.done:
            return []
        if self.fatal_lines is not None:
            return self._resolve_fatal(now, exited=code, final=True)
        last = next((ln.strip() for ln in reversed(self.last_lines) if ln.strip()), "")
        exc = last_exception(self.last_lines) or last
        return self._fail(f"process exited with code {code} during {self.label}"
                          + (f"; last exception logged: {exc[:600]}" if exc != last else "")
                          + (f"; last log line: {last[:600]}" if last else ""))

    def tick(self, now: float) -> list:
        """Time passed: a stall, the deadline, a fatal line's grace, or time to probe."""
        if self.done:
            return []
        if self.fatal_lines is not None:
            return self._resolve_fatal(now, exited=None, final=now >= self.fatal_until)
        budget = self.plan.phases[self.cur].budget_s
        silent = now - self.last_line_at
        if silent > budget:
            return self._fail(f"stalled in {self.label}: no log output for {silent:.0f} s "
                              f"(budget {budget:g} s){self._health_note()}")
        if now - self.started > self.plan.deadline_s:
            return self._fail(f"not ready within the deadline of {self.plan.deadline_s:g} s "
                              f"(in {self.label}){self._health_note()}")
        out = []
        if not self.in_flight and now >= self.next_probe:
            out += self._send(now)
        return out

    # -- internals ---------------------------------------------------------------------
    def _send(self, now: float) -> list:
        self.in_flight = True
        self.probe_sent_at = now
        return [ProbeNow()]

    def _advance(self, now: float, text: str) -> list:
        """Move to the phase this line begins, if it begins one."""
        if _hit(self._end[self.cur], text):
            self.ended[self.cur] = True
        matches = [j for j, rx in enumerate(self._begin) if _hit(rx, text)]
        later = [j for j in matches if j > self.cur]
        if not later:
            if self.cur in matches and not _hit(self._end[self.cur], text):
                self.ended[self.cur] = False   # began again: another graph of the same phase
            return []
        if any(j <= self.cur for j in matches):
            # a marker an earlier or the current phase shares: only the very next phase,
            # and only once the current phase has ended if it is the current one's marker
            nxt = self.cur + 1
            if nxt not in later or (self.cur in matches and not self.ended[self.cur]):
                return []
            target, skipped = nxt, False
        else:
            target = later[0]
            skipped = target > self.cur + 1
        self.cur, self.phase_since, self.guess = target, now, skipped
        self.timeline.append((self.label, now))
        return [PhaseChanged(self.phase, self.guess, now)]

    def _unknown_after_end(self, text: str) -> bool:
        """A line after the current phase's end marker that begins or ends nothing known."""
        return (not self.guess and self.ended[self.cur] and self.ready_logged_at is None
                and not _hit(self._end[self.cur], text) and not _hit(self._ready_line, text)
                and not any(_hit(rx, text) for rx in self._begin))

    def _resolve_fatal(self, now: float, *, exited: int | None, final: bool) -> list:
        lines = self.fatal_lines or []
        exc = [ln for ln in lines if _EXCEPTION_LINE.search(ln)]
        tag = _PROCESS_TAG.match(lines[0]) if lines else None
        own = [ln for ln in exc if tag and ln.startswith(tag.group(0))]
        if own:   # the dying process's own traceback, not another's echo of its death
            exc = own
        if not exc and not final:
            return []             # read on: the traceback's last line names the cause
        cause = (exc[-1] if exc else lines[0]).strip()[:600]
        tail = f" (process exited with code {exited})" if exited is not None else ""
        return self._fail(f"fatal log line in {self.label}: {cause}{tail}")

    def _fail(self, reason: str) -> list:
        self.done = True
        return [Failed(reason, self.label)]

    def _health_note(self) -> str:
        if self.last_answer in (None, "refused"):   # the port is not open yet: nothing to add
            return ""
        note = f"; health answered {self.last_answer} (last probe)"
        if self.ready_logged_at is not None and self.last_answer != "200":
            note += " although the log says the server is ready"
        return note


# -- the runner -----------------------------------------------------------------------------
class LogTail:
    """Reads whole new lines from a growing log file (a `\\r` ends a line too: progress
    bars rewrite one line while work goes on, and that is progress)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.offset = 0
        self.partial = b""

    def read(self, *, final: bool = False) -> list[str]:
        """New complete lines; `final`: also the unterminated rest (the writer is gone)."""
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except OSError:
            data = b""
        self.offset += len(data)
        data = self.partial + data
        parts = re.split(rb"\r\n|\r|\n", data)
        self.partial = parts.pop()
        if final and self.partial:
            parts.append(self.partial)
            self.partial = b""
        return [p.decode("utf-8", "replace") for p in parts]


@dataclass
class Outcome:
    ok: bool
    phase: str
    reason: str | None = None
    ready_at: float | None = None           # epoch seconds
    last_lines: str = ""
    timeline: list = field(default_factory=list)   # [(phase, epoch seconds)]


async def _probe(client: httpx.AsyncClient, method: str, url: str, timeout: float) -> str:
    """One probe -> "refused" | "timeout" | the HTTP status as text."""
    try:
        r = await client.request(method, url, timeout=timeout)
        return str(r.status_code)
    except httpx.TimeoutException:
        return "timeout"
    except httpx.HTTPError:
        return "refused"


async def wait_ready(running, readiness: Readiness, *, on_phase=None, clock=time.monotonic,
                     wall=time.time, listener_check=None) -> Outcome:
    """Drive one server from launch to ready or to a diagnosed failure.

    `running` gives `server`, `log_path`, `started_mono` (monotonic) and `exit_code()`.
    on_phase(label, since_epoch, detail) is called on every phase change.
    listener_check() -> None, or why whatever answers on the port is not this server:
    asked (in a thread) on every answer but "refused", before the machine hears it.
    """
    server = running.server
    url = base_url(server.host, server.port) + readiness.probe.path
    machine = Startup(readiness, running.started_mono)
    tail = LogTail(running.log_path)
    mono0, wall0 = clock(), wall()

    def epoch(t: float) -> float:
        return wall0 + (t - mono0)

    probe_task: asyncio.Task | None = None
    actions = machine.start()
    async with httpx.AsyncClient(trust_env=False) as client:
        try:
            while True:
                for a in actions:
                    if isinstance(a, ProbeNow):
                        probe_task = asyncio.ensure_future(_probe(
                            client, readiness.probe.method, url, readiness.probe.timeout_s))
                    elif isinstance(a, PhaseChanged):
                        if on_phase:
                            on_phase(a.label, epoch(a.since), a.detail)
                    elif isinstance(a, Ready):
                        return Outcome(True, "ready", ready_at=epoch(a.at),
                                       timeline=[(p, epoch(t)) for p, t in machine.timeline])
                    elif isinstance(a, Failed):
                        return Outcome(False, a.phase, a.reason,
                                       last_lines="\n".join(list(machine.last_lines)[-20:]),
                                       timeline=[(p, epoch(t)) for p, t in machine.timeline])
                await asyncio.sleep(TICK_S)
                actions = []
                now = clock()
                for text in tail.read():
                    actions += machine.line(now, text)
                code = running.exit_code()
                if code is not None:
                    for text in tail.read(final=True):   # what it wrote before it exited
                        actions += machine.line(now, text)
                    actions += machine.exited(now, code)
                if probe_task is not None and probe_task.done():
                    answer, probe_task = probe_task.result(), None
                    taken = (await asyncio.to_thread(listener_check)
                             if listener_check is not None and answer != "refused" else None)
                    if taken:
                        actions.append(Failed(taken, machine.label))
                        continue
                    actions += machine.probe_answer(clock(), answer)
                actions += machine.tick(clock())
        finally:
            if probe_task is not None:
                probe_task.cancel()
