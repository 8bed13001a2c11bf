"""The simulated SGLang server process (``python -m specc.sim``).

Startup runs synchronously in the main thread (SGLang's scheduler loads
weights, allocates the KV cache and captures CUDA graphs before uvicorn binds
the port, so connections are refused until then); serving runs on one asyncio
loop: a uvicorn server (as SGLang: FastAPI/Starlette on uvicorn) plus one
scheduler task that advances simulated steps against absolute wall-clock
deadlines (see ``Scheduler.run``).

Tokens.  There is no tokenizer: a prompt's token count is its number of
whitespace-separated words (chat: all message contents joined; ``input_ids``:
their count); an emitted token is one short word `` tokN``, drawn from a
random generator seeded by (``--sim-seed``, prompt), so the same prompt gives
the same text and the same acceptance sequence, whatever else is running
(greedy decoding is deterministic in the same way).  Without ``ignore_eos`` a
request may stop early at a seeded EOS (geometric, mean 256 tokens).
"""

from __future__ import annotations

import asyncio
import collections
import gc
import hashlib
import json
import logging
import os
import random
import signal
import socket
import sys
import time
from datetime import datetime

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from specc.engines import sglang as sg
from specc.sim import cli
from specc.perf import model as perf

VERSION = "0.5.x-sim"
WARMUP_PROMPT = "The capital city of France is"
DECODE_LOG_INTERVAL = 40          # SGLang's --decode-log-interval default
EOS_MEAN_TOKENS = 256.0
#: The scheduler sleeps on the event loop until this long before a step's
#: deadline, then spins: epoll rounds timeouts up to whole milliseconds.
SPIN_LEAD_S = 0.0015
GPU_MEM_GB = 139.8                # H200 usable HBM as torch reports it ("avail mem")

_MONO0 = time.monotonic()
_EPOCH0 = time.time()


def epoch(mono: float) -> float:
    return _EPOCH0 + (mono - _MONO0)


def _ts() -> str:
    return datetime.now().strftime("%Y-%m-%d %H:%M:%S")


def log(msg: str, rank: int | None = None) -> None:
    tag = f" TP{rank}" if rank is not None else ""
    sys.stdout.write(f"[{_ts()}{tag}] {msg}\n")
    sys.stdout.flush()


# --- ground truth -------------------------------------------------------------
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

    @staticmethod
    def _fmt(e) -> str:
        if isinstance(e, tuple):
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


TRUTH = Truth(None)


def hard_exit(code: int) -> None:
    TRUTH.flush()
    try:
        sys.stdout.flush()
    except Exception:
        pass
    os._exit(code)


def _on_signal(signum, frame) -> None:  # noqa: ARG001
    hard_exit(0)


# --- configuration resolved like SGLang's ServerArgs ---------------------------
class Sim:
    def __init__(self, args, fault: cli.Fault | None):
        self.args = args
        self.fault = fault
        self.tp = max(1, args.tp_size)
        self.target, self.target_src = cli.resolve_facts(args.model_path, args.sim_target_facts,
                                                         cli.DEFAULT_TARGET_FACTS)
        algo = args.speculative_algorithm
        if algo == "NEXTN":
            algo = "EAGLE"   # SGLang renames NEXTN to EAGLE
        self.algorithm = algo
        self.speculative = algo is not None
        self.has_draft = algo in ("EAGLE", "EAGLE3", "STANDALONE")
        draft_default = dict(cli.DEFAULT_DRAFT_FACTS)
        for key in sg.CONTEXT_KEYS + ("rope_scaling",):
            if key in self.target:
                draft_default[key] = self.target[key]
        self.draft, self.draft_src = (cli.resolve_facts(
            args.speculative_draft_model_path, args.sim_draft_facts, draft_default)
            if self.has_draft else ({}, "none"))
        arch = (self.target.get("architectures") or ["LlamaForCausalLM"])[0]
        self.arch = arch
        self.target_ctx_derived = sg.derived_context_length(self.target)
        self.context_length = args.context_length or self.target_ctx_derived
        self.warnings: list[str] = []
        self.spec: perf.SpecConfig | None = None
        if self.speculative:
            steps, topk, ndt = (args.speculative_num_steps, args.speculative_eagle_topk,
                                args.speculative_num_draft_tokens)
            if steps is None and topk is None and ndt is None:
                steps, topk, ndt = sg.default_spec_params(arch)
                args.speculative_num_steps, args.speculative_eagle_topk = steps, topk
                args.speculative_num_draft_tokens = ndt
            elif None in (steps, topk, ndt):
                raise SystemExit(_usage_error(
                    "speculative_num_steps, speculative_eagle_topk and "
                    "speculative_num_draft_tokens must be all given or all omitted"))
            if topk == 1 and ndt != steps + 1:
                self.warnings.append(
                    "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 "
                    f"when speculative_eagle_topk == 1 (from {ndt} to {steps + 1})")
                ndt = steps + 1
                args.speculative_num_draft_tokens = ndt
            # SGLang takes the best ndt - 1 of the tree's candidates with torch.topk: more
            # than the tree holds fails in the draft's first graph capture.
            self.tree_error = None
            if self.has_draft and ndt > sg.max_draft_tokens(steps, topk):
                self.tree_error = (
                    "RuntimeError: selected index k out of range (speculative_num_draft_tokens "
                    f"{ndt} > topk + (num_steps - 1) * topk^2 + 1 = {sg.max_draft_tokens(steps, topk)})")
            self.spec = perf.SpecConfig(steps, topk, ndt, args.sim_acceptance)
            if args.max_running_requests is None:
                args.max_running_requests = sg.SPEC_DEFAULT_MAX_RUNNING_REQUESTS
                self.warnings.append(
                    "Max running requests is reset to "
                    f"{sg.SPEC_DEFAULT_MAX_RUNNING_REQUESTS} for speculative decoding.")
        if args.max_running_requests is None:
            args.max_running_requests = 4096 if args.cuda_graph_max_bs is None else max(
                4096, args.cuda_graph_max_bs)
        self.max_running = args.max_running_requests
        self.served_name = args.served_model_name or args.model_path
        self.cost = perf.model_cost(self.target, tp=self.tp, quantization=args.quantization,
                                    dtype=args.dtype)
        self.draft_cost = perf.draft_cost(self.draft, tp=self.tp) if self.has_draft else None
        if self.speculative and not self.has_draft:  # NGRAM: cheap CPU-side drafting
            self.draft_cost = perf.ModelCost(self.tp, 0, 0.0, 0.0, 0, 0, 0.0, 50e-6)
        tw = self.cost.dense_bytes_per_gpu + self.cost.expert_bytes_per_gpu
        self.weight_gb_per_gpu = tw / 1e9
        dw = self.draft_cost.dense_bytes_per_gpu if self.has_draft else 0.0
        self.draft_weight_gb_per_gpu = dw / 1e9
        phases = sg.estimate_phase_seconds(
            weight_gb_per_gpu=self.weight_gb_per_gpu,
            draft_weight_gb_per_gpu=self.draft_weight_gb_per_gpu,
            speculative=self.has_draft, num_steps=self.spec.num_steps if self.spec else None)
        self.phase_s = {k: v * args.sim_time_scale for k, v in phases.items()}
        self.phases = list(phases)
        # KV capacity, for logs and token usage only (it never limits admission).
        layers = int(self.target.get("num_hidden_layers", 32))
        kvh = int(self.target.get("num_key_value_heads", self.target.get("num_attention_heads", 8)))
        hd = int(self.target.get("hidden_size", 4096)) // max(
            1, int(self.target.get("num_attention_heads", 32)))
        kv_bytes_tok = max(1.0, 2 * layers * kvh * hd * 2 / self.tp)
        frac = args.mem_fraction_static or 0.88
        self.kv_gb = max(1.0, GPU_MEM_GB * frac - self.weight_gb_per_gpu
                         - self.draft_weight_gb_per_gpu - (2.0 if self.has_draft else 0.0))
        self.max_total_tokens = int(self.kv_gb * 1e9 / kv_bytes_tok)


def _usage_error(msg: str) -> int:
    sys.stderr.write(f"usage: python -m specc.sim ...\npython -m specc.sim: error: {msg}\n")
    return 2


# --- startup -------------------------------------------------------------------
TRACE_FRAMES = [
    ("/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", 2890,
     "run_scheduler_process", "scheduler = Scheduler("),
    ("/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", 312, "__init__",
     "self.tp_worker = TpModelWorker("),
    ("/sgl-workspace/sglang/python/sglang/srt/managers/tp_worker.py", 104, "__init__",
     "self.model_runner = ModelRunner("),
]


def print_traceback(exc_line: str, extra_frames: list[tuple] | None = None) -> None:
    lines = ["Scheduler hit an exception: Traceback (most recent call last):"]
    for path, line, fn, code in TRACE_FRAMES + (extra_frames or []):
        lines.append(f'  File "{path}", line {line}, in {fn}')
        lines.append(f"    {code}")
    lines.append(exc_line)
    sys.stdout.write(f"[{_ts()} TP0] " + "\n".join(lines) + "\n\n")
    sys.stdout.flush()
    log("Received sigquit from a child process. It usually means the child failed.")


def hang_forever() -> None:
    while True:
        time.sleep(0.2)


class Startup:
    def __init__(self, sim: Sim):
        self.sim = sim
        self.avail = GPU_MEM_GB

    def ranks(self):
        return range(self.sim.tp)

    def _fault_at(self, phase: str) -> None:
        f = self.sim.fault
        if f is None or f.phase != phase:
            return
        if f.name == "hang":
            hang_forever()
        if f.name == "crash":
            time.sleep(min(self.sim.phase_s.get(phase, 1.0), 30.0) * 0.5)
            print_traceback(
                f"RuntimeError: simulated failure in phase {phase} (specc.sim fault crash@{phase})",
                [("/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", 421,
                  "initialize", f"self.{phase}()")])
            hard_exit(1)

    def run(self) -> None:
        s, a = self.sim, self.sim.args
        log(f"server_args=ServerArgs(model_path='{a.model_path}', tp_size={a.tp_size}, "
            f"speculative_algorithm={s.algorithm!r}, speculative_num_steps={a.speculative_num_steps}, "
            f"speculative_eagle_topk={a.speculative_eagle_topk}, "
            f"speculative_num_draft_tokens={a.speculative_num_draft_tokens}, "
            f"max_running_requests={a.max_running_requests}, host='{a.host}', port={a.port})")
        for w in s.warnings:
            log(f"WARNING: {w}")
        for name in s.phases:
            if name == "warmup":
                return  # handled on the event loop, after the port opens
            getattr(self, name)(s.phase_s[name])

    def _sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)

    def load_weights(self, d: float) -> None:
        for r in self.ranks():
            log(f"Load weight begin. avail mem={self.avail:.2f} GB", r)
        self._fault_at("load_weights")
        self._sleep(d)
        w = self.sim.weight_gb_per_gpu
        self.avail -= w
        for r in self.ranks():
            log(f"Load weight end. elapsed={d:.2f} s, type={self.sim.arch}, dtype=torch.bfloat16, "
                f"avail mem={self.avail:.2f} GB, mem usage={w:.2f} GB.", r)

    def kv_cache(self, d: float) -> None:
        kv = self.sim.kv_gb
        for r in self.ranks():
            log(f"KV Cache is allocated. #tokens: {self.sim.max_total_tokens}, "
                f"KV size: {kv:.2f} GB", r)
        self._fault_at("kv_cache")
        self._sleep(d)
        self.avail = max(1.0, self.avail - kv)
        for r in self.ranks():
            log(f"Memory pool end. avail mem={self.avail:.2f} GB", r)
        log(f"max_total_num_tokens={self.sim.max_total_tokens}, chunked_prefill_size=8192, "
            f"max_prefill_tokens=16384, max_running_requests={self.sim.max_running}, "
            f"context_len={self.sim.context_length}, available_gpu_mem={self.avail:.2f} GB", 0)

    def _graph(self, label: str, phase: str, d: float, usage: float) -> None:
        # the lines SGLang 0.5.23 prints (sample lines of the adapter's phase markers)
        begin, end = (ln.split(". ")[0] for ln in self._marker(phase).samples)
        if not self.sim.speculative:
            begin, end = begin.replace(" verify ", " decode "), end.replace(" verify ", " decode ")
        bs = [1, 2, 4, 8] + list(range(16, (self.sim.args.cuda_graph_max_bs or 256) + 1, 8))
        for r in self.ranks():
            log(f"{begin}. backend=full, bs={bs}, avail mem={self.avail:.2f} GB", r)
        first_draft_graph = ("capture_draft_cuda_graph" if "capture_draft_cuda_graph" in self.sim.phases
                             else "capture_draft_extend_cuda_graph")
        if getattr(self.sim, "tree_error", None) and phase == first_draft_graph:
            print_traceback(self.sim.tree_error, [
                ("/sgl-workspace/sglang/python/sglang/srt/speculative/eagle_utils.py", 109,
                 "organize_draft_results", "top_scores = torch.topk(score_list, num_draft_token - 1, dim=-1)")])
            hard_exit(1)
        self._fault_at(phase)
        self._sleep(d)
        self.avail = max(0.5, self.avail - usage)
        for r in self.ranks():
            log(f"{end}. elapsed={d:.2f} s, mem usage={usage:.2f} GB, "
                f"avail mem={self.avail:.2f} GB.", r)

    @staticmethod
    def _marker(phase: str):
        return next(m for m in sg.phase_markers() if m.name == phase)

    def capture_cuda_graph(self, d: float) -> None:
        self._graph("", "capture_cuda_graph", d, 0.83)

    def load_draft_weights(self, d: float) -> None:
        s = self.sim
        draft_len = sg.derived_context_length(s.draft)
        if s.context_length > draft_len:
            if os.environ.get(sg.ALLOW_LONGER_CONTEXT_ENV) == "1":
                log(sg.context_mismatch_message(s.context_length, draft_len), 0)
                log(f"Overriding the draft model's max_position_embeddings to {s.context_length}.", 0)
            else:
                # SGLang builds the draft's ModelConfig with the target's context
                # length at the start of the draft worker's init.
                self._sleep(min(2.0 * s.args.sim_time_scale, d))
                print_traceback(
                    "ValueError: " + sg.context_mismatch_message(s.context_length, draft_len),
                    [("/sgl-workspace/sglang/python/sglang/srt/speculative/eagle_worker.py", 96,
                      "__init__", "super().__init__("),
                     ("/sgl-workspace/sglang/python/sglang/srt/configs/model_config.py", 214,
                      "__init__", "raise ValueError(")])
                hard_exit(1)
        for r in self.ranks():
            log(f"Load weight begin. avail mem={self.avail:.2f} GB", r)
        self._fault_at("load_draft_weights")
        self._sleep(d)
        w = s.draft_weight_gb_per_gpu
        for r in self.ranks():
            log(f"Load weight end. elapsed={d:.2f} s, type={(s.draft.get('architectures') or ['?'])[0]}, "
                f"dtype=torch.bfloat16, avail mem={self.avail - w:.2f} GB, mem usage={w:.2f} GB.", r)
        self.avail = max(0.5, self.avail - w)

    def capture_draft_cuda_graph(self, d: float) -> None:
        self._graph("draft ", "capture_draft_cuda_graph", d, 0.41)

    def capture_draft_extend_cuda_graph(self, d: float) -> None:
        self._graph("draft extend ", "capture_draft_extend_cuda_graph", d, 0.49)


# --- requests and the scheduler -------------------------------------------------
class Req:
    __slots__ = ("rid", "prompt_tokens", "max_new", "ignore_eos", "eos_at", "acc_rng", "text_rng",
                 "tokens", "verify_ct", "finished", "finish_reason", "event", "pending", "due",
                 "aborted", "warmup", "stream", "created", "first_sent", "sent", "done",
                 "accepted_sum", "writer", "build", "prebuilt", "cut", "truncated")

    def __init__(self, rid: str, prompt_key: str, prompt_tokens: int, max_new: int,
                 ignore_eos: bool, seed: int, stream: bool, warmup: bool = False):
        self.rid = rid
        self.prompt_tokens = prompt_tokens
        self.max_new = max(1, int(max_new))
        self.ignore_eos = ignore_eos
        self.acc_rng = random.Random(f"{seed}|acc|{prompt_key}")
        self.text_rng = random.Random(f"{seed}|text|{prompt_key}")
        # EOS position: geometric with mean EOS_MEAN_TOKENS (drawn even with ignore_eos,
        # so the text stream is the same either way).
        u = self.text_rng.random()
        self.eos_at = 1 + int(-EOS_MEAN_TOKENS * __import__("math").log(1.0 - u))
        self.tokens: list[str] = []
        self.verify_ct = 0
        self.accepted_sum = 0
        self.finished = False
        self.finish_reason: dict | None = None
        self.event = asyncio.Event()
        self.pending = 0
        self.due = 0.0
        self.aborted = False
        self.warmup = warmup
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

    def limit(self) -> int:
        return self.max_new if self.ignore_eos else min(self.max_new, self.eos_at)

    def add_tokens(self, n: int) -> int:
        n = min(n, self.limit() - len(self.tokens))
        rng = self.text_rng
        self.tokens.extend(f" tok{rng.randrange(32000)}" for _ in range(n))
        if len(self.tokens) >= self.limit():
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
        self.cum_accept = 0       # tokens per verify step, summed (incl. bonus)
        self.cum_verify = 0       # verify steps (per request)
        self.prompt_total = 0
        self.gen_total = 0
        self.req_total = 0
        self.decode_steps = 0
        self.last_gen_throughput = 0.0
        self._tp_window: collections.deque = collections.deque(maxlen=DECODE_LOG_INTERVAL)
        self.first_gen_mono: float | None = None
        self.real_gen_tokens = 0
        self.late_max = 0.0

    # -- admission --------------------------------------------------------------
    def new_rid(self) -> str:
        self.counter += 1
        return hashlib.md5(f"{self.sim.args.sim_seed}:{self.counter}".encode()).hexdigest()

    def submit(self, prompt_key: str, prompt_tokens: int, max_new: int, ignore_eos: bool,
               stream: bool, warmup: bool = False) -> Req:
        r = Req(self.new_rid(), prompt_key, prompt_tokens, max_new, ignore_eos,
                self.sim.args.sim_seed, stream, warmup)
        self.waiting.append(r)
        self.req_total += 1
        self.prompt_total += prompt_tokens
        if not warmup:
            TRUTH.add({"event": "request", "t": time.time(), "rid": r.rid,
                       "prompt_tokens": prompt_tokens, "max_new_tokens": r.max_new})
        self.wake.set()
        return r

    # -- stats --------------------------------------------------------------------
    def avg_accept(self) -> float | None:
        return self.cum_accept / self.cum_verify if self.cum_verify else None

    def accept_rate(self) -> float | None:
        avg, spec = self.avg_accept(), self.sim.spec
        if avg is None or spec is None:
            return None
        drafted = spec.num_steps if spec.topk == 1 else max(1, spec.num_draft_tokens - 1)
        return (avg - 1.0) / max(1, drafted)

    # -- the loop -----------------------------------------------------------------
    async def _sleep_until(self, loop, due: float) -> None:
        # epoll rounds its timeout up to whole milliseconds: sleep to ~1.2 ms
        # before the deadline, then spin (yielding nothing) for the remainder.
        delay = due - loop.time() - SPIN_LEAD_S
        if delay > 0:
            await asyncio.sleep(delay)
        while time.monotonic() < due:
            pass

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        sim, spec = self.sim, self.sim.spec
        depth, a_eff = (perf.effective_depth_and_accept(
            spec.acceptance, spec.num_steps, spec.topk, spec.num_draft_tokens) if spec else (0, 0.0))
        prev_due: float | None = None
        while True:
            if not self.running and not self.waiting:
                self.wake.clear()
                await self.wake.wait()
                prev_due = None
            now = loop.time()
            base = now if prev_due is None or now - prev_due > 0.05 else prev_due
            admit: list[Req] = []
            if self.waiting and len(self.running) < sim.max_running:
                while self.waiting and len(self.running) + len(admit) < sim.max_running:
                    r = self.waiting.popleft()
                    if not r.aborted:
                        admit.append(r)
            if admit:
                ntok = sum(r.prompt_tokens for r in admit)
                dur = sim.cost.prefill_s(ntok)
                if sim.draft_cost is not None:
                    dur += sim.draft_cost.prefill_s(ntok)
                self._log_prefill(admit, ntok)
            elif self.running:
                dur = perf.decode_step_s(sim.cost, len(self.running), spec, sim.draft_cost)
            else:
                prev_due = None
                continue
            due = base + dur
            outs: list[tuple[Req, int]] = []
            if admit:
                for r in admit:
                    outs.append((r, self._advance(r, 1)))
                    if not r.finished:
                        self.running.append(r)
            else:
                emitted = 0
                for r in self.running:
                    if r.aborted:
                        continue
                    n = 1
                    if spec is not None:
                        n = perf.sample_accept(r.acc_rng, a_eff, depth)
                        self.cum_accept += n
                        self.cum_verify += 1
                        r.verify_ct += 1
                        r.accepted_sum += n
                    n = self._advance(r, n)
                    emitted += n
                    outs.append((r, n))
                self.decode_steps += 1
                self._tp_window.append((due, emitted))
                if self.decode_steps % DECODE_LOG_INTERVAL == 0:
                    self._log_decode()
            await self._sleep_until(loop, due)
            prev_due = due
            self.late_max = max(self.late_max, loop.time() - due)
            for r, n in outs:
                self._deliver(r, n, due)
            TRUTH.maybe_flush(time.monotonic())
            self.running = [r for r in self.running if not r.finished and not r.aborted]
            if self._mid_run_fault_due("die_mid_run"):
                log("Received sigquit from a child process. It usually means the child failed.")
                hard_exit(1)
            if self._mid_run_fault_due("hang_mid_run"):
                # The scheduler wedges: no tokens, no log lines, yet /health still answers
                # (users report exactly this with real SGLang).
                TRUTH.maybe_flush(time.monotonic())
                await asyncio.Future()

    def _advance(self, r: Req, n: int) -> int:
        """Decide the step's outcome for r (before its deadline) and pre-build its chunk."""
        n = r.add_tokens(n)
        self.gen_total += n
        if not r.warmup:
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
                TRUTH.token(time.monotonic(), due, r.rid, n, not r.first_sent)
                r.first_sent = True
                if r.finished:
                    r.event.set()
        elif r.stream:
            r.pending += n
            r.event.set()
        elif not r.warmup and n:
            TRUTH.token(time.monotonic(), due, r.rid, n, len(r.tokens) == n)
        if r.finished and not r.done.done():
            r.done.set_result(None)

    def _mid_run_fault_due(self, name: str) -> bool:
        """A mid-run fault fires after N generated tokens, or ~1 s of generation."""
        f = self.sim.fault
        if f is None or f.name != name or self.first_gen_mono is None:
            return False
        if f.arg is not None:
            return self.real_gen_tokens >= f.arg
        return time.monotonic() - self.first_gen_mono >= 1.0

    def _token_count(self) -> int:
        return sum(r.prompt_tokens + len(r.tokens) for r in self.running)

    def _log_prefill(self, admit: list[Req], ntok: int) -> None:
        usage = self._token_count() / max(1, self.sim.max_total_tokens)
        log(f"Prefill batch. #new-seq: {len(admit)}, #new-token: {ntok}, #cached-token: 0, "
            f"token usage: {usage:.2f}, #running-req: {len(self.running)}, "
            f"#queue-req: {len(self.waiting)}", 0)

    def _log_decode(self) -> None:
        w = self._tp_window
        span = w[-1][0] - w[0][0] if len(w) > 1 else 0.0
        self.last_gen_throughput = (sum(e for _, e in list(w)[1:]) / span) if span > 0 else 0.0
        tok = self._token_count()
        msg = (f"Decode batch. #running-req: {len(self.running)}, #token: {tok}, "
               f"token usage: {tok / max(1, self.sim.max_total_tokens):.2f}, ")
        if self.sim.spec is not None:
            msg += f"accept len: {self.avg_accept() or 0:.2f}, accept rate: {self.accept_rate() or 0:.2f}, "
        msg += (f"cuda graph: {not self.sim.args.disable_cuda_graph}, "
                f"gen throughput (token/s): {self.last_gen_throughput:.2f}, "
                f"#queue-req: {len(self.waiting)}")
        log(msg, 0)


# --- HTTP ------------------------------------------------------------------------
class App:
    STARTING, READY = "starting", "ready"

    def __init__(self, sim: Sim, sched: Scheduler):
        self.sim = sim
        self.sched = sched
        self.status = self.STARTING
        self.ready_mono: float | None = None
        self.flap = 0
        self.port = sim.args.port
        routes = [
            Route("/health", self.health, methods=["GET", "POST"]),
            Route("/health_generate", self.health, methods=["GET", "POST"]),
            Route("/ping", self.ping, methods=["GET"]),
            Route("/get_model_info", self.model_info, methods=["GET"]),
            Route("/model_info", self.model_info, methods=["GET"]),
            Route("/get_server_info", self.server_info, methods=["GET"]),
            Route("/server_info", self.server_info, methods=["GET"]),
            Route("/v1/models", self.models, methods=["GET"]),
            Route("/flush_cache", self.flush_cache, methods=["GET", "POST"]),
            Route("/metrics", self.metrics, methods=["GET"]),
            Route("/generate", self.generate, methods=["POST", "PUT"]),
            Route("/v1/completions", self.completions, methods=["POST"]),
            Route("/v1/chat/completions", self.chat, methods=["POST"]),
        ]
        self.app = Starlette(routes=routes)

    # -- readiness ------------------------------------------------------------------
    async def health(self, request: Request) -> Response:
        f = self.sim.fault
        if self.status != self.READY:
            return Response(status_code=503)
        if f is not None:
            if f.name == "health_503_forever":
                return Response(status_code=503)
            if f.name == "health_flap":
                self.flap += 1
                if self.flap % 2 == 0:
                    return Response(status_code=503)
            if f.name == "health_after":
                wait = f.arg if f.arg is not None else 30.0
                if time.monotonic() - (self.ready_mono or 0) < wait:
                    return Response(status_code=503)
        return Response(status_code=200)

    async def ping(self, request: Request) -> Response:
        return PlainTextResponse("pong")

    # -- info -----------------------------------------------------------------------
    def _model_info(self) -> dict:
        return {"model_path": self.sim.args.model_path,
                "tokenizer_path": self.sim.args.tokenizer_path or self.sim.args.model_path,
                "is_generation": True, "preferred_sampling_params": None,
                "weight_version": "default", "has_image_understanding": False,
                "has_audio_understanding": False, "model_type": self.sim.target.get("model_type"),
                "architectures": self.sim.target.get("architectures")}

    async def model_info(self, request: Request) -> Response:
        return JSONResponse(self._model_info())

    async def models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{
            "id": self.sim.served_name, "object": "model", "created": int(_EPOCH0),
            "owned_by": "sglang", "root": self.sim.served_name, "parent": None,
            "max_model_len": self.sim.context_length}]})

    def internal_state(self) -> dict:
        s = self.sched
        st = {"last_gen_throughput": s.last_gen_throughput, "memory_usage": {
            "weight": round(self.sim.weight_gb_per_gpu, 2), "kvcache": round(self.sim.kv_gb, 2),
            "token_capacity": self.sim.max_total_tokens, "graph": 1.73},
            "effective_max_running_requests_per_dp": self.sim.max_running}
        if self.sim.spec is not None and s.cum_verify:
            st["avg_spec_accept_length"] = s.avg_accept()
        return st

    async def server_info(self, request: Request) -> Response:
        info = {k: v for k, v in vars(self.sim.args).items() if not k.startswith("sim_")}
        info["port"] = self.port
        info["speculative_algorithm"] = self.sim.algorithm
        info["context_length"] = self.sim.args.context_length
        info["internal_states"] = [self.internal_state()]
        info["version"] = VERSION
        info["status"] = "Up" if self.status == self.READY else "Starting"
        info["sim"] = {"acceptance": self.sim.args.sim_acceptance, "seed": self.sim.args.sim_seed,
                       "fault": str(self.sim.fault) if self.sim.fault else None,
                       "target_facts_source": self.sim.target_src,
                       "draft_facts_source": self.sim.draft_src,
                       "max_total_num_tokens": self.sim.max_total_tokens}
        return JSONResponse(info)

    async def flush_cache(self, request: Request) -> Response:
        return PlainTextResponse("Cache flushed.\nPlease check backend logs for more details. "
                                 "(When there are running or waiting requests, the operation "
                                 "will not be performed.)\n")

    async def metrics(self, request: Request) -> Response:
        if not self.sim.args.enable_metrics:
            return PlainTextResponse("Not Found", status_code=404)
        s, lbl = self.sched, f'{{model_name="{self.sim.served_name}"}}'
        rows = [
            ("sglang:num_running_reqs", "gauge", "running requests", len(s.running)),
            ("sglang:num_queue_reqs", "gauge", "queued requests", len(s.waiting)),
            ("sglang:gen_throughput", "gauge", "generation throughput (token/s)",
             s.last_gen_throughput),
            ("sglang:token_usage", "gauge", "KV token usage",
             s._token_count() / max(1, self.sim.max_total_tokens)),
            ("sglang:spec_accept_length", "gauge", "cumulative average accept length",
             s.avg_accept() or 0.0),
            ("sglang:spec_accept_rate", "gauge", "cumulative average accept rate",
             s.accept_rate() or 0.0),
            ("sglang:prompt_tokens_total", "counter", "prompt tokens", s.prompt_total),
            ("sglang:generation_tokens_total", "counter", "generated tokens", s.gen_total),
            ("sglang:num_requests_total", "counter", "requests", s.req_total),
            # specc-useful (sim-only) counters for run-scoped acceptance:
            # accept_length = d(spec_accepted_tokens_total) / d(spec_verify_steps_total)
            ("sglang:spec_verify_steps_total", "counter", "verify steps (per request)",
             s.cum_verify),
            ("sglang:spec_accepted_tokens_total", "counter",
             "tokens emitted by verify steps (accepted + bonus)", s.cum_accept),
        ]
        out = []
        for name, kind, help_, value in rows:
            out.append(f"# HELP {name} {help_}\n# TYPE {name} {kind}\n{name}{lbl} {float(value)}\n")
        return Response("".join(out), media_type="text/plain; version=0.0.4; charset=utf-8")

    # -- generation -------------------------------------------------------------------
    async def _json(self, request: Request) -> dict | Response:
        try:
            body = await request.json()
        except Exception:
            return _error(400, "Invalid JSON body")
        if not isinstance(body, dict):
            return _error(400, "Request body must be a JSON object")
        return body

    def _check_len(self, prompt_tokens: int) -> Response | None:
        if prompt_tokens >= self.sim.context_length:
            return _error(400, f"The input ({prompt_tokens} tokens) is longer than the model's "
                               f"context length ({self.sim.context_length} tokens).")
        return None

    def _submit(self, key: str, ptoks: int, max_new: int, ignore_eos: bool, stream: bool) -> Req:
        return self.sched.submit(key, ptoks, max_new, ignore_eos, stream)

    def _meta(self, r: Req, final: bool) -> dict:
        m = {"id": r.rid, "finish_reason": r.finish_reason if final else None,
             "prompt_tokens": r.prompt_tokens, "completion_tokens": len(r.tokens),
             "cached_tokens": 0, "e2e_latency": time.time() - r.created}
        if self.sim.spec is not None:
            m["spec_verify_ct"] = r.verify_ct
            if r.verify_ct:
                m["spec_accept_length"] = r.accepted_sum / r.verify_ct
        return m

    async def generate(self, request: Request) -> Response:
        body = await self._json(request)
        if isinstance(body, Response):
            return body
        sp = body.get("sampling_params") or {}
        if "text" in body and body["text"] is not None:
            text = body["text"]
            if isinstance(text, list):
                return _error(400, "batch requests are not supported by the simulator")
            key, ptoks = str(text), len(str(text).split())
        elif "input_ids" in body:
            ids = body["input_ids"]
            if ids and isinstance(ids[0], list):
                return _error(400, "batch requests are not supported by the simulator")
            key, ptoks = json.dumps(ids), len(ids)
        else:
            return _error(400, "Either text or input_ids should be provided.")
        if (e := self._check_len(ptoks)) is not None:
            return e
        max_new = int(sp.get("max_new_tokens") or 128)
        stream = bool(body.get("stream"))
        ignore_eos = bool(sp.get("ignore_eos", False))
        if not stream:
            r = self._submit(key, ptoks, max_new, ignore_eos, False)
            await r.done
            return JSONResponse({"text": "".join(r.tokens), "meta_info": self._meta(r, True)})

        def chunk(r: Req, final: bool) -> bytes:
            return b"data: " + json.dumps({"text": "".join(r.tokens), "output_ids": [],
                                            "meta_info": self._meta(r, final)}).encode() + b"\n\n"
        return SimStream(self, lambda: self._submit(key, ptoks, max_new, ignore_eos, True),
                         lambda r: chunk)

    async def completions(self, request: Request) -> Response:
        body = await self._json(request)
        if isinstance(body, Response):
            return body
        prompt = body.get("prompt")
        if isinstance(prompt, list):
            if prompt and isinstance(prompt[0], int):
                key, ptoks = json.dumps(prompt), len(prompt)
            elif len(prompt) == 1:
                key, ptoks = str(prompt[0]), len(str(prompt[0]).split())
            else:
                return _error(400, "batch prompts are not supported by the simulator")
        elif isinstance(prompt, str):
            key, ptoks = prompt, len(prompt.split())
        else:
            return _error(400, "prompt is required")
        return await self._openai(body, key, ptoks, chat=False)

    async def chat(self, request: Request) -> Response:
        body = await self._json(request)
        if isinstance(body, Response):
            return body
        msgs = body.get("messages")
        if not isinstance(msgs, list) or not msgs:
            return _error(400, "messages is required")
        parts = []
        for m in msgs:
            c = m.get("content") if isinstance(m, dict) else None
            if isinstance(c, list):
                c = " ".join(p.get("text", "") for p in c if isinstance(p, dict))
            parts.append(str(c or ""))
        key = "\n".join(parts)
        return await self._openai(body, key, len(key.split()), chat=True)

    async def _openai(self, body: dict, key: str, ptoks: int, chat: bool) -> Response:
        if (e := self._check_len(ptoks)) is not None:
            return e
        max_new = body.get("max_completion_tokens") or body.get("max_tokens") or (
            128 if chat else 16)
        stream = bool(body.get("stream"))
        ignore_eos = bool(body.get("ignore_eos", False))
        model = body.get("model") or self.sim.served_name
        created = int(time.time())
        obj = "chat.completion" if chat else "text_completion"

        def usage(r: Req) -> dict:
            return {"prompt_tokens": r.prompt_tokens, "total_tokens": r.prompt_tokens + len(r.tokens),
                    "completion_tokens": len(r.tokens), "prompt_tokens_details": None}

        def reason(r: Req) -> str | None:
            return None if r.finish_reason is None else r.finish_reason["type"]

        def cid(r: Req) -> str:
            return ("chatcmpl-" if chat else "cmpl-") + r.rid

        if not stream:
            r = self._submit(key, ptoks, int(max_new), ignore_eos, False)
            await r.done
            text = "".join(r.tokens)
            if chat:
                choice = {"index": 0, "message": {"role": "assistant", "content": text,
                                                  "reasoning_content": None, "tool_calls": None},
                          "logprobs": None, "finish_reason": reason(r), "matched_stop": None}
            else:
                choice = {"index": 0, "text": text, "logprobs": None,
                          "finish_reason": reason(r), "matched_stop": None}
            out = {"id": cid(r), "object": obj, "created": created, "model": model,
                   "choices": [choice], "usage": usage(r)}
            return JSONResponse(out)

        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        obj_chunk = "chat.completion.chunk" if chat else "text_completion"

        def make_chunk(r: Req):
            state = {"sent": 0}
            rid = cid(r)

            def chunk(r: Req, final: bool) -> bytes:
                delta = "".join(r.tokens[state["sent"]:])
                first = state["sent"] == 0
                state["sent"] = len(r.tokens)
                if chat:
                    d = {"role": "assistant", "content": delta} if first else {"content": delta}
                    choice = {"index": 0, "delta": d, "logprobs": None,
                              "finish_reason": reason(r) if final else None, "matched_stop": None}
                else:
                    choice = {"index": 0, "text": delta, "logprobs": None,
                              "finish_reason": reason(r) if final else None, "matched_stop": None}
                data = {"id": rid, "object": obj_chunk, "created": created, "model": model,
                        "choices": [choice], "usage": None}
                out = b"data: " + json.dumps(data).encode() + b"\n\n"
                if final and include_usage:
                    out += b"data: " + json.dumps({"id": rid, "object": obj_chunk,
                                                   "created": created, "model": model,
                                                   "choices": [], "usage": usage(r)}).encode() + b"\n\n"
                return out
            return chunk
        return SimStream(self, lambda: self._submit(key, ptoks, int(max_new), ignore_eos, True),
                         make_chunk)


def _error(code: int, msg: str) -> Response:
    return JSONResponse({"object": "error", "message": msg, "type": "BadRequestError",
                         "param": None, "code": code}, status_code=code)


class TruncatedStream(Exception):
    pass


class SimStream(Response):
    """SSE response fed by the scheduler; ends with ``data: [DONE]``.

    Hot path: when uvicorn's raw ``send`` is reachable (the ASGI wrapper puts it
    in the scope), the scheduler pre-builds each step's chunk before the step's
    deadline and writes it, already framed as an HTTP/1.1 chunk, straight to
    the transport at the deadline; h11 still writes the headers and the final
    zero-length chunk, so the framing stays consistent.  Otherwise (HTTP/1.0,
    other servers) the chunks go through ASGI ``send`` from this task.
    """

    media_type = "text/event-stream"

    def __init__(self, app: App, submit, make_chunk):
        self.a, self.submit, self.make_chunk = app, submit, make_chunk
        self.status_code = 200
        self.background = None
        self.raw_headers = [(b"content-type", b"text/event-stream; charset=utf-8"),
                            (b"cache-control", b"no-cache")]

    async def __call__(self, scope, receive, send) -> None:
        f = self.a.sim.fault
        transport = None
        raw = scope.get("specc.sim.raw_send")
        if scope.get("http_version") == "1.1" and raw is not None:
            transport = getattr(getattr(raw, "__self__", None), "transport", None)
        await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
        r = self.submit()
        r.build = self.make_chunk(r)
        if f is not None and f.name == "truncate_stream":
            r.cut = int(f.arg) if f.arg is not None else max(1, r.max_new // 2)
        if transport is not None:
            def write(data: bytes, _t=transport, _r=r) -> None:
                if _t.is_closing():
                    _r.aborted = True
                else:
                    _t.write(data)
            r.writer = write

        async def watch() -> None:
            while True:
                msg = await receive()
                if msg["type"] == "http.disconnect":
                    r.aborted = True
                    r.event.set()
                    return
        watcher = asyncio.ensure_future(watch())
        try:
            while True:
                await r.event.wait()
                r.event.clear()
                if r.aborted:
                    return
                if r.truncated:
                    raise TruncatedStream()
                if r.writer is not None:
                    if r.finished:
                        await send({"type": "http.response.body", "body": b"", "more_body": False})
                        return
                    continue
                n, r.pending = r.pending, 0
                if n == 0 and not r.finished:
                    continue
                if r.cut is not None and len(r.tokens) >= r.cut and not r.finished:
                    r.aborted = True
                    raise TruncatedStream()
                data = r.build(r, r.finished)
                TRUTH.token(time.monotonic(), r.due, r.rid, n, not r.first_sent)
                r.first_sent = True
                if r.finished:
                    await send({"type": "http.response.body", "body": data + b"data: [DONE]\n\n",
                                "more_body": False})
                    return
                await send({"type": "http.response.body", "body": data, "more_body": True})
        finally:
            r.aborted = r.aborted or not r.finished
            watcher.cancel()


def raw_send_wrapper(app):
    """ASGI wrapper: expose uvicorn's own ``send`` to SimStream (see its doc)."""
    async def asgi(scope, receive, send):
        if scope["type"] == "http":
            scope["specc.sim.raw_send"] = send
        await app(scope, receive, send)
    return asgi


# --- process main ---------------------------------------------------------------------
async def serve(sim: Sim, sock: socket.socket) -> None:
    import uvicorn

    loop = asyncio.get_running_loop()
    sched = Scheduler(sim)
    app = App(sim, sched)
    app.port = sock.getsockname()[1]
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        lg = logging.getLogger(name)
        lg.handlers = [logging.NullHandler()]
        lg.propagate = False
    config = uvicorn.Config(raw_send_wrapper(app.app), log_config=None, access_log=False, lifespan="off",
                            timeout_keep_alive=30, loop="asyncio", http="h11",
                            timeout_graceful_shutdown=0.5, proxy_headers=False)
    server = uvicorn.Server(config)
    tasks = [asyncio.ensure_future(sched.run()), asyncio.ensure_future(TRUTH.flusher())]
    log(f"INFO:     Started server process [{os.getpid()}]")
    log("INFO:     Waiting for application startup.")
    log("INFO:     Application startup complete.")
    server_task = asyncio.ensure_future(server._serve(sockets=[sock]))
    await asyncio.sleep(0)
    log(f"INFO:     Uvicorn running on http://{sim.args.host}:{app.port} (Press CTRL+C to quit)")
    # Warm-up (SGLang's _wait_and_warmup): GET /get_model_info, then one
    # POST /generate with max_new_tokens 8; it counts towards cumulative stats.
    t0 = loop.time()
    f = sim.fault
    if f is not None and f.phase == "warmup":
        if f.name == "hang":
            await asyncio.Event().wait()
        await asyncio.sleep(sim.phase_s.get("warmup", 0.0) * 0.5)
        print_traceback("RuntimeError: simulated failure in phase warmup (specc.sim fault crash@warmup)",
                        [("/sgl-workspace/sglang/python/sglang/srt/entrypoints/http_server.py", 1210,
                          "_execute_server_warmup", "res = requests.post(url + request_name, ...)")])
        hard_exit(1)
    app._model_info()
    w = sched.submit(WARMUP_PROMPT, len(WARMUP_PROMPT.split()), 8, False, False, warmup=True)
    await w.done
    rest = sim.phase_s.get("warmup", 0.0) - (loop.time() - t0)
    if rest > 0:
        await asyncio.sleep(rest)
    log(f'INFO:     127.0.0.1:{app.port} - "POST /generate HTTP/1.1" 200 OK')
    app.status = App.READY
    app.ready_mono = time.monotonic()
    TRUTH.add({"event": "ready", "t": time.time(), "port": app.port})
    TRUTH.flush()
    log(sg.READY_LINE)
    await server_task
    for t in tasks:
        t.cancel()


def main(argv: list[str] | None = None) -> int:
    global TRUTH
    parser = cli.build_parser()
    args = parser.parse_args(argv)
    try:
        fault = cli.fault_from(args)
    except cli.FaultError as e:
        parser.error(f"invalid fault: {e}")
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    TRUTH = Truth(os.environ.get(cli.TRUTH_ENV))
    sim = Sim(args, fault)
    if fault is not None:
        log(f"specc.sim: fault injected: {fault}")
    Startup(sim).run()
    # Bind only now: connections were refused during the scheduler's phases.
    # proto=IPPROTO_TCP: asyncio then sets TCP_NODELAY on accepted connections, as
    # uvicorn's own bind does; without it small SSE chunks wait ~40 ms (Nagle).
    sock = socket.socket(socket.AF_INET6 if ":" in args.host else socket.AF_INET,
                         socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((args.host, args.port))
    except OSError as e:
        log(f"ERROR:    [Errno {e.errno}] error while attempting to bind on address "
            f"('{args.host}', {args.port}): {e.strerror}")
        hard_exit(1)
    sock.listen(2048)
    sock.setblocking(False)
    # Startup objects are permanent: keep the cyclic GC from walking them (its
    # pauses would show up as token-timing drift).
    gc.collect()
    gc.freeze()
    gc.set_threshold(50000, 50, 100)
    try:
        asyncio.run(serve(sim, sock))
    finally:
        TRUTH.flush()
    return 0
