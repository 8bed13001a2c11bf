"""The scheduler: continuous batching in real time, acceptance, and SGLang's counters.

One asyncio task advances simulated steps against absolute wall-clock
deadlines (``Schedule``; see ``Scheduler.run``).  Counters follow 0.5.23:

* scheduler side (srt/managers/scheduler_components/metrics_reporter.py): each
  verify adds the batch size to a window's forward count and the accepted
  tokens (incl. the bonus token) to its accept count; every
  ``--decode-log-interval`` (40) decode iterations the window is logged
  (``accept len``), exported as the gauges ``sglang:spec_accept_length`` /
  ``sglang:spec_accept_rate`` and only then folded into the totals behind
  ``internal_states[0].avg_spec_accept_length``
  (srt/managers/scheduler_components/internal_state.py);
* tokenizer side (srt/observability/metrics_collector.py
  ``observe_one_finished_request``): ``sglang:prompt_tokens_total``,
  ``sglang:generation_tokens_total``, ``sglang:num_requests_total`` and
  ``sglang:spec_verify_calls_total`` grow when a request FINISHES (health
  checks are not counted: ``log_metrics=False``).

Tokens.  There is no tokenizer: a prompt's token count is its number of
whitespace-separated words (chat: all message contents joined; ``input_ids``:
their count); an emitted token is one short word `` tokN``, drawn from a
random generator seeded by (``--sim-seed``, prompt), so the same prompt gives
the same text and the same acceptance sequence, whatever else is running.
Without ``ignore_eos`` a request may stop early at a seeded EOS (geometric,
mean 256 tokens).
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import dataclasses
import hashlib
import math
import random
import time

from specc.perf import model as perf

from . import categories, truth, versions
from .args import Sim
from .arrivals import WAIT_MAX_S, WAIT_POLL_S, Arrivals
from .log import log
from .prefix import PrefixCache, chain

EOS_MEAN_TOKENS = 256.0
#: A request's acceptance follows its context (perf.context_acceptance_factor) in steps of
#: this many tokens: recomputed when its context crosses one, not every decode step.
CONTEXT_STEP = 256
#: How long the ``stall_mid_run`` fault stops the process.
STALL_S = 0.3
#: Upper edges (s) of the step-lateness histogram on /metrics (``specc_sim:step_lateness_seconds``).
#: Fine where a point's bound falls (a fraction of its duration: specc/engines/sim.py).
LATENESS_BUCKETS_S = (0.001, 0.002, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05,
                      0.075, 0.1, 0.15, 0.2, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class Schedule:
    """Absolute step deadlines, and how late the steps were delivered.

    While the scheduler is busy, a step is due its modelled duration after the previous
    step's deadline, however late that one was delivered: a step delivered late leaves
    the deadlines after it where they were, so the steps that follow a stall (the CPU
    taken by other processes) are computed against the schedule and delivered at once
    until the schedule is met again, and no time is dropped. A scheduler with nothing to
    run starts a new schedule at its next request. The event loop's timers have
    millisecond granularity (epoll), so a step on time is delivered up to ~1 ms after its
    deadline; none of that accumulates.
    """

    __slots__ = ("due", "steps", "late_sum", "late_max", "counts")

    def __init__(self):
        self.due: float | None = None   # the last step's deadline (None: idle)
        self.steps = 0
        self.late_sum = 0.0
        self.late_max = 0.0
        self.counts = [0] * (len(LATENESS_BUCKETS_S) + 1)   # per bucket, the last is +Inf

    def next(self, now: float, duration: float) -> float:
        """The deadline of a step of ``duration`` s starting now or where the last ended."""
        self.due = (now if self.due is None else self.due) + duration
        return self.due

    def idle(self) -> None:
        self.due = None

    def delivered(self, now: float, floor: float = 0.0) -> float:
        """The step due at ``self.due`` was delivered at ``now``: its lateness (s, >= 0),
        at least ``floor`` (a step that gave up waiting for its arrivals: how long)."""
        late = max(0.0, now - self.due, floor)  # type: ignore[operator]  # a step was due
        self.steps += 1
        self.late_sum += late
        if late > self.late_max:
            self.late_max = late
        self.counts[bisect.bisect_left(LATENESS_BUCKETS_S, late)] += 1
        return late

    def histogram(self) -> list[tuple[str, int]]:
        """Cumulative (le, count) pairs, Prometheus style, +Inf last."""
        out, total = [], 0
        for le, n in zip(LATENESS_BUCKETS_S + (float("inf"),), self.counts):
            total += n
            out.append(("+Inf" if le == float("inf") else repr(le), total))
        return out


class Req:
    __slots__ = ("rid", "prompt_tokens", "max_new", "ignore_eos", "eos_at", "acc_rng", "text_rng",
                 "tokens", "verify_ct", "finished", "finish_reason", "event", "pending", "due",
                 "aborted", "warmup", "health", "stream", "created", "first_sent", "sent", "done",
                 "correct_drafts", "writer", "build", "prebuilt", "cut", "truncated", "a_pos",
                 "a_eff", "a_ctx", "hashes", "cached", "arrival")

    def __init__(self, rid: str, prompt_key: str, prompt_tokens: int, max_new: int,
                 ignore_eos: bool, seed: int, stream: bool, warmup: bool = False,
                 health: bool = False):
        self.rid = rid
        self.prompt_tokens = prompt_tokens
        self.max_new = max(1, int(max_new))
        self.ignore_eos = ignore_eos
        self.acc_rng = random.Random(f"{seed}|acc|{prompt_key}")
        self.text_rng = random.Random(f"{seed}|text|{prompt_key}")
        # EOS position: geometric with mean EOS_MEAN_TOKENS (drawn even with ignore_eos,
        # so the text stream is the same either way).
        u = self.text_rng.random()
        self.eos_at = 1 + int(-EOS_MEAN_TOKENS * math.log(1.0 - u))
        self.tokens: list[str] = []
        self.verify_ct = 0
        self.correct_drafts = 0
        self.finished = False
        self.finish_reason: dict | None = None
        self.event = asyncio.Event()
        self.pending = 0
        self.due = 0.0
        self.aborted = False
        self.warmup = warmup
        self.health = health
        self.stream = stream
        self.created = time.time()
        self.first_sent = False
        self.sent = 0
        self.done = asyncio.get_running_loop().create_future()
        self.writer = None       # fast path: writes a pre-framed chunk to the transport
        self.build = None        # (req, final) -> SSE bytes
        self.prebuilt = b""
        self.cut: int | None = None
        self.truncated = False
        self.a_pos = 0.0         # per-position acceptance: the configured one or its category's
        self.a_eff = 0.0         # ... at its current context, for its tree (effective_depth_and_accept)
        self.a_ctx = -1          # the context step a_eff was computed at (-1: not yet)
        self.hashes: list[int] = []   # its prompt's prefix hashes (prefix cache), if cached
        self.cached = 0          # prompt tokens the prefix cache held when it was admitted
        self.arrival: float | None = None   # the scheduler's clock (None: when it first looks)

    def limit(self) -> int:
        return self.max_new if self.ignore_eos else min(self.max_new, self.eos_at)

    def add_tokens(self, n: int) -> int:
        tokens = self.tokens
        n = min(n, self.limit() - len(tokens))
        bits = self.text_rng.getrandbits   # randrange(32000), inlined: the same sequence
        for _ in range(n):
            k = bits(15)
            while k >= 32000:
                k = bits(15)
            tokens.append(f" tok{k}")
        if len(tokens) >= self.limit():
            self.finished = True
            if len(self.tokens) >= self.max_new:
                self.finish_reason = {"type": "length", "length": self.max_new}
            else:
                self.finish_reason = {"type": "stop", "matched": 2}
        return n


class Scheduler:
    def __init__(self, sim: Sim):
        self.sim = sim
        self.waiting: collections.deque[Req] = collections.deque()
        self.running: list[Req] = []
        self.wake = asyncio.Event()
        self.counter = 0
        self.interval = max(1, sim.args.decode_log_interval)
        # scheduler side: the current window and the folded totals (metrics_reporter)
        self.win_accept = 0       # accepted tokens incl. bonus, summed over requests
        self.win_correct = 0      # accepted drafts (no bonus)
        self.win_forward = 0      # verify calls x batch size
        self.total_accept = 0
        self.total_forward = 0
        self.gauge_accept_length = 0.0
        self.gauge_accept_rate = 0.0
        # tokenizer side: counted when a request finishes, per is_streaming label
        self.finished = {False: [0, 0, 0], True: [0, 0, 0]}  # prompt, generation, requests
        self.verify_calls_total = 0
        self.decode_steps = 0
        self.last_gen_throughput = 0.0
        self.last_output_mono = 0.0   # the detokenizer's last_receive_tstamp (health checks)
        self._tp_window: collections.deque = collections.deque(maxlen=self.interval)
        self._last_prefill_mono = time.monotonic()
        self.first_gen_mono: float | None = None
        self.real_gen_tokens = 0
        self.schedule = Schedule()
        #: Time dilation: every modelled duration runs this many times slower in real time
        #: (the client divides what it measures by it), so the CPU a step needs weighs this
        #: many times less against its schedule. Changed only while idle (set_dilation).
        self.dilation = 1.0
        #: --speculative-adaptive: num_steps by running batch size (specc/sim/adaptive.py)
        self.adaptive = None
        if sim.adaptive_config is not None and sim.spec is not None:
            from .adaptive import Adaptive
            from .startup import graph_batch_sizes

            self.adaptive = Adaptive(
                sim.spec.num_steps,
                None if sim.adaptive_config == "default" else sim.adaptive_config,
                None if sim.args.disable_cuda_graph else graph_batch_sizes(sim))
        self._stalls = 0
        #: Where each request's first bytes are, so that a step admits what arrived before
        #: it began, however long the HTTP side took to queue it (arrivals.py).
        self.arrivals = Arrivals()
        self._owed_wait = 0.0   # waited for arrivals since the last step delivered (s)
        self._owed_late = 0.0   # a wait cut off: the next step's lateness is at least this
        # SGLang's radix cache, bounded by the KV pool (--disable-radix-cache: none)
        self.cache = PrefixCache(sim.max_total_tokens, enabled=not sim.args.disable_radix_cache)

    # -- admission --------------------------------------------------------------
    def new_rid(self) -> str:
        self.counter += 1
        return hashlib.md5(f"{self.sim.args.sim_seed}:{self.counter}".encode()).hexdigest()

    def submit(self, prompt_key: str, prompt_tokens: int, max_new: int, ignore_eos: bool,
               stream: bool, warmup: bool = False, health: bool = False,
               rid: str | None = None, tokens: list | None = None,
               history=None, arrival: float | None = None) -> Req:
        """Queue a request. ``tokens``: its prompt tokens, for the prefix cache (none: not
        cached); ``history``: what it carried (the chat messages or the prompt), for the
        truth log; ``arrival``: when its first bytes reached the server, on the scheduler's
        clock (none: when the scheduler first sees it), which decides the step it joins."""
        r = Req(rid if isinstance(rid, str) and rid else self.new_rid(), prompt_key,
                prompt_tokens, max_new, ignore_eos, self.sim.args.sim_seed, stream, warmup,
                health)
        spec = self.sim.spec
        if spec is not None:
            a = categories.acceptance(spec.acceptance, categories.category_of(rid), prompt_key,
                                      self.sim.args.sim_seed)
            r.a_pos = spec.acceptance if a is None else a
        r.arrival = arrival
        if tokens is not None and self.cache.capacity:
            r.hashes = chain(tokens)
        self.waiting.append(r)
        if not warmup and not health:
            now = time.time()
            event = {"event": "request", "t": now,
                     "arrival": now if arrival is None else truth.epoch(arrival), "rid": r.rid,
                     "prompt_tokens": prompt_tokens, "max_new_tokens": r.max_new}
            if history is not None:
                event["history"] = history
            truth.TRUTH.add(event)
        self.wake.set()
        return r

    def set_dilation(self, factor: float) -> bool:
        """Run every modelled duration ``factor`` times slower from the next step on; only
        while nothing runs or waits (a point's steps all run at one factor): False if busy."""
        if any(not r.health and not r.aborted for r in list(self.waiting) + self.running):
            return False
        if factor != self.dilation:
            self.dilation = factor
            truth.TRUTH.add({"event": "time_dilation", "t": time.time(), "factor": factor})
        return True

    def flush_cache(self) -> bool:
        """/flush_cache: empties the prefix cache only when nothing runs or waits (0.5.23
        Scheduler.flush_cache: else 'Cache not flushed because there are pending requests')."""
        busy = [r for r in list(self.waiting) + self.running if not r.health and not r.aborted]
        if busy:
            log(versions.render(self.sim.version, "cache_not_flushed", queued=len(self.waiting),
                                running=len(self.running)))
            return False
        self.cache.reset()
        log(versions.render(self.sim.version, "cache_flushed"))
        return True

    def _admit_cached(self, admit: list[Req]) -> int:
        """Match each admitted prompt against the prefix cache (at most all but its last
        token), then insert it; the prompt tokens left to prefill."""
        for r in admit:
            if r.hashes:
                r.cached = self.cache.match(r.hashes, r.prompt_tokens - 1)
        for r in admit:
            if r.hashes:
                self.cache.insert(r.hashes)
            if not r.warmup and not r.health:
                truth.TRUTH.add({"event": "admit", "t": time.time(), "rid": r.rid,
                                 "cached_tokens": r.cached})
        return sum(r.prompt_tokens - r.cached for r in admit)

    def _accept(self, r: Req) -> float:
        """r's effective acceptance at its current context (a draft model's falls past 2k
        tokens: perf.CONTEXT_ACCEPTANCE; n-gram drafting has no draft context)."""
        spec = self.sim.spec
        step = (r.prompt_tokens + len(r.tokens)) // CONTEXT_STEP if self.sim.has_draft else 0
        if step != r.a_ctx:
            r.a_ctx = step
            a = r.a_pos * (perf.context_acceptance_factor(step * CONTEXT_STEP)
                           if self.sim.has_draft else 1.0)
            r.a_eff = perf.effective_depth_and_accept(a, spec.num_steps, spec.topk,  # type: ignore[union-attr]  # has_draft: a spec
                                                      spec.num_draft_tokens)[1]  # type: ignore[union-attr]
        return r.a_eff

    # -- stats --------------------------------------------------------------------
    def avg_accept(self) -> float | None:
        """internal_states[0].avg_spec_accept_length: the folded totals only."""
        return self.total_accept / self.total_forward if self.total_forward else None

    def _fold_window(self) -> tuple[float, float]:
        """Every decode-log interval: the window's figures, then into the totals."""
        spec = self.sim.spec
        if spec is None or not self.win_forward:
            return 0.0, 0.0
        length = self.win_accept / self.win_forward
        drafted = self.win_forward * max(0, spec.num_draft_tokens - 1)
        rate = self.win_correct / drafted if drafted else 0.0
        self.total_accept += self.win_accept
        self.total_forward += self.win_forward
        self.win_accept = self.win_correct = self.win_forward = 0
        self.gauge_accept_length, self.gauge_accept_rate = length, rate
        return length, rate

    def _finish(self, r: Req) -> None:
        """observe_one_finished_request: counters move when a request finishes."""
        if r.health:
            return
        row = self.finished[r.stream]
        row[0] += r.prompt_tokens
        row[1] += len(r.tokens)
        row[2] += 1
        self.verify_calls_total += r.verify_ct

    # -- the loop -----------------------------------------------------------------
    async def run(self, clock=None, sleep=asyncio.sleep) -> None:
        """The step loop. ``clock`` (the event loop's, monotonic s) and ``sleep`` are what
        a test replaces with a fake clock."""
        clock = clock or asyncio.get_running_loop().time
        sim, spec, schedule = self.sim, self.sim.spec, self.schedule
        depth = perf.effective_depth_and_accept(
            spec.acceptance, spec.num_steps, spec.topk, spec.num_draft_tokens)[0] if spec else 0
        step_spec = spec
        while True:
            if not self.running and not self.waiting:
                schedule.idle()
                self.wake.clear()
                await self.wake.wait()
            # The step begins at the last one's deadline (idle: at the earliest arrival)
            # and admits what arrived by then, once the HTTP side has queued it.
            now = clock()
            begin = schedule.due if schedule.due is not None else self._idle_begin(now)
            if self.arrivals.overdue(begin):
                await self._await_arrivals(begin, clock, sleep)
            admit = self._admissible(begin, now) if self.waiting else []
            if admit:
                ntok = self._admit_cached(admit)   # a prefix-cache hit is not prefilled
                dur = sim.cost.prefill_s(ntok)
                if sim.draft_cost is not None:
                    dur += sim.draft_cost.prefill_s(ntok)
                self._log_prefill(admit, ntok)
            elif self.running:
                context = self._token_count() / len(self.running)  # mean KV length
                if self.adaptive is not None and spec is not None:   # the running batch
                    steps = self.adaptive.steps_for(len(self.running))   # picks num_steps
                    step_spec = dataclasses.replace(spec, num_steps=steps, topk=1,
                                                    num_draft_tokens=steps + 1) if steps else None
                    depth = steps
                else:
                    step_spec = spec
                dur = perf.decode_step_s(sim.cost, len(self.running), step_spec,
                                         sim.draft_cost if step_spec else None, context)
            else:
                schedule.idle()
                continue
            due = schedule.next(begin, dur * self.dilation)
            outs: list[tuple[Req, int]] = []
            if admit:
                for r in admit:
                    outs.append((r, self._advance(r, 1)))
                    if not r.finished:
                        self.running.append(r)
            else:
                emitted = 0
                correct: list[int] = []
                for r in self.running:
                    if r.aborted:
                        continue
                    n = 1
                    if step_spec is not None:
                        n = perf.sample_accept(r.acc_rng, self._accept(r), depth)
                        self.win_accept += n
                        self.win_correct += n - 1
                        self.win_forward += 1
                        r.verify_ct += 1
                        r.correct_drafts += n - 1
                    correct.append(n - 1)
                    n = self._advance(r, n)
                    emitted += n
                    outs.append((r, n))
                if self.adaptive is not None:
                    self.adaptive.on_verify(correct, len(correct))
                self.decode_steps += 1
                self._tp_window.append((due, emitted))
                if self.decode_steps % self.interval == 0:
                    self._log_decode()
            if self._stall_due():
                time.sleep(STALL_S)   # blocks the loop: a CPU taken by other processes
            # on the event loop (no spinning): on time to its ~1 ms timers; behind
            # schedule, no wait, but still a turn for the HTTP side
            await sleep(max(0.0, due - clock()))
            late = schedule.delivered(clock(), self._owed_late)
            truth.TRUTH.step(due, late, len(outs), bool(admit), self._owed_wait)
            self._owed_late = self._owed_wait = 0.0
            for r, n in outs:
                self._deliver(r, n, due)
            truth.TRUTH.maybe_flush(time.monotonic())
            self.running = [r for r in self.running if not r.finished and not r.aborted]
            if self._mid_run_fault_due("die_mid_run"):   # as SGLang's scheduler dies: its
                from .startup import print_traceback     # traceback, then the sigquit line
                print_traceback(sim, "RuntimeError: simulated scheduler failure mid-run "
                                     "(specc.sim fault die_mid_run)")
                truth.hard_exit(1)
            if self._mid_run_fault_due("hang_mid_run"):
                # The scheduler wedges: no tokens, no log lines, yet /health still answers
                # (users report exactly this with real SGLang).
                truth.TRUTH.maybe_flush(time.monotonic())
                await asyncio.Future()

    def _idle_begin(self, now: float) -> float:
        """Where an idle scheduler's next step begins: the earliest arrival it knows of
        (queued or still being parsed), so the HTTP side's time is not simulated."""
        begin = now
        for r in self.waiting:
            if r.arrival is None:
                r.arrival = now
            elif r.arrival < begin:
                begin = r.arrival
        early = self.arrivals.earliest()
        return begin if early is None else min(begin, early)

    async def _await_arrivals(self, begin: float, clock, sleep) -> None:
        """Wait until every request whose first bytes arrived by ``begin`` is queued, at
        most WAIT_MAX_S. The next step delivered records the wait (``wait_s``) and, when it
        was cut off, at least how long past ``begin`` that was as its lateness."""
        start = clock()
        while self.arrivals.overdue(begin):
            now = clock()
            if now - start >= WAIT_MAX_S:
                self.arrivals.give_up(begin)
                self._owed_late = max(self._owed_late, now - begin)
                break
            await sleep(WAIT_POLL_S)
        self._owed_wait += clock() - start

    def _admissible(self, begin: float, now: float) -> list[Req]:
        """Take the waiting requests that arrived by ``begin``, earliest first, up to
        --max-running-requests; the rest (later arrivals) stay queued in order."""
        room = self.sim.max_running - len(self.running)
        if room <= 0:
            return []
        ready: list[tuple[float, Req]] = []
        later: collections.deque[Req] = collections.deque()
        for r in self.waiting:
            if r.aborted:
                continue
            if r.arrival is None:
                r.arrival = now
            if r.arrival <= begin:
                ready.append((r.arrival, r))
            else:
                later.append(r)
        if not ready:
            self.waiting = later
            return []
        ready.sort(key=lambda ar: ar[0])   # stable: queue order among equal stamps
        later.extendleft(r for _, r in reversed(ready[room:]))
        self.waiting = later
        return [r for _, r in ready[:room]]

    def _advance(self, r: Req, n: int) -> int:
        """Decide the step's outcome for r (before its deadline) and pre-build its chunk."""
        n = r.add_tokens(n)
        if not r.warmup and not r.health:
            self.real_gen_tokens += n
            if self.first_gen_mono is None:
                self.first_gen_mono = time.monotonic()
        if r.writer is not None and not r.aborted:
            if r.cut is not None and len(r.tokens) >= r.cut and not r.finished:
                r.truncated = True
            else:
                data = r.build(r, r.finished)
                if r.finished:
                    data += b"data: [DONE]\n\n"
                r.prebuilt = b"%x\r\n%s\r\n" % (len(data), data)
        return n

    def _deliver(self, r: Req, n: int, due: float) -> None:
        """At the step's deadline: hand the tokens to the client."""
        r.due = due
        if r.writer is not None:
            if r.truncated or r.aborted:
                r.event.set()
            elif n:
                r.writer(r.prebuilt)
                if truth.TRUTH.f is not None:
                    truth.TRUTH.token(time.monotonic(), due, r.rid, n, not r.first_sent)
                r.first_sent = True
                if r.finished:
                    r.event.set()
        elif r.stream:
            r.pending += n
            r.event.set()
        elif not r.warmup and not r.health and n:
            truth.TRUTH.token(time.monotonic(), due, r.rid, n, len(r.tokens) == n)
        if n:
            self.last_output_mono = time.monotonic()
        if r.finished and not r.done.done():
            self._finish(r)
            if r.hashes:   # cache_finished_req: the prompt and its answer
                self.cache.insert(r.hashes + chain((t.strip() for t in r.tokens), r.hashes[-1]))
            r.done.set_result(None)

    def _mid_run_fault_due(self, name: str) -> bool:
        """A mid-run fault fires after N generated tokens, or ~1 s of generation."""
        f = self.sim.fault
        if f is None or f.name != name or self.first_gen_mono is None:
            return False
        if f.arg is not None:
            return self.real_gen_tokens >= f.arg
        return time.monotonic() - self.first_gen_mono >= 1.0

    def _stall_due(self) -> bool:
        """stall_mid_run: once every N generated tokens, or every ~1 s of generation."""
        f = self.sim.fault
        if f is None or f.name != "stall_mid_run" or self.first_gen_mono is None:
            return False
        done = (self.real_gen_tokens // f.arg if f.arg else
                int(time.monotonic() - self.first_gen_mono))
        if done > self._stalls:
            self._stalls = done  # type: ignore[assignment]  # a whole number (floor division)
            return True
        return False

    def _token_count(self) -> int:
        return sum(r.prompt_tokens + len(r.tokens) for r in self.running)

    def _rank0(self) -> int | None:
        return 0 if self.sim.tp > 1 else None

    def _graph(self, bs: int) -> bool:
        a = self.sim.args
        top = a.cuda_graph_max_bs_decode or min(self.sim.max_running, 256 if self.sim.tp < 4
                                                else 512)
        return not a.disable_cuda_graph and bs <= top

    def _log_prefill(self, admit: list[Req], ntok: int) -> None:
        now = time.monotonic()
        gap, self._last_prefill_mono = now - self._last_prefill_mono, now
        usage = self._token_count() / max(1, self.sim.max_total_tokens)
        v = self.sim.version
        log(versions.render(v, "prefill_batch", iter="", seqs=len(admit), tokens=ntok,
                            cached=sum(r.cached for r in admit),
                            usage_parts=versions.render(v, "prefill_usage", usage=usage) + ", ",
                            running=len(self.running), queued=len(self.waiting), pending=0,
                            graph_part=self._graph_part(False),
                            throughput=ntok / gap if gap > 0 else 0.0), self._rank0())

    def _graph_part(self, graph: bool) -> str:
        v = self.sim.version
        return versions.render(v, "graph_part", label=versions.render(v, "graph_label"),
                               graph=graph)

    def _log_decode(self) -> None:
        w = self._tp_window
        span = w[-1][0] - w[0][0] if len(w) > 1 else 0.0
        # the modelled throughput: a dilated schedule's span is that many times longer
        self.last_gen_throughput = (sum(e for _, e in list(w)[1:]) / span * self.dilation
                                    if span > 0 else 0.0)
        tok = self._token_count()
        spec = ""
        if self.sim.spec is not None:
            length, rate = self._fold_window()
            spec = versions.render(self.sim.version, "decode_spec", accept_len=length,
                                   accept_rate=rate)
        v = self.sim.version
        usage = versions.render(v, "decode_usage", tokens=tok,
                                usage=tok / max(1, self.sim.max_total_tokens)) + ", "
        log(versions.render(v, "decode_batch", iter="", running=len(self.running),
                            usage_parts=usage, spec=spec,
                            graph_part=self._graph_part(self._graph(len(self.running))),
                            throughput=self.last_gen_throughput, queued=len(self.waiting)),
            self._rank0())
