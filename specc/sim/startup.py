"""Startup: the scheduler's phases before uvicorn binds the port, with the
emulated version's log lines in its order (versions.py), faults at each phase.

0.5.23 (srt/managers/scheduler.py ``init_model_worker``): target weights ->
draft weights (the draft's ModelConfig gets the target's context length: the
context check fires here) -> KV cache -> the target's graph (``target verify``
with speculation, ``target decode`` without) -> draft decode graph (num_steps >
1) -> draft extend graph; uvicorn and warm-up follow on the event loop
(server.py).
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from specc.engines import sglang as sg

from . import truth, versions
from .args import GPU_MEM_GB, Sim
from .log import log, ts

TRACE_FRAMES = [
    ("/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", 6361,
     "run_scheduler_process", "scheduler = Scheduler(server_args, port_args)"),
    ("/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", 1131, "init_model_worker",
     "self.init_tp_model_worker()"),
]
DRAFT_FRAMES = [
    ("/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", 1133, "init_model_worker",
     "self.maybe_init_draft_worker()"),
    ("/sgl-workspace/sglang/python/sglang/srt/configs/model_config.py", 1314,
     "_derive_context_length", "raise ValueError("),
]


def print_traceback(sim: Sim, exc_line: str, extra_frames: list[tuple] | None = None) -> None:
    lines = ["Traceback (most recent call last):"]
    for path, line, fn, code in TRACE_FRAMES + (extra_frames or []):
        lines.append(f'  File "{path}", line {line}, in {fn}')
        lines.append(f"    {code}")
    lines.append(exc_line)
    prefix = " TP0" if sim.tp > 1 else ""
    msg = versions.render(sim.version, "scheduler_exception", traceback="\n".join(lines))
    sys.stdout.write(f"[{ts()}{prefix}] {msg}\n\n")
    sys.stdout.flush()
    log(versions.render(sim.version, "sigquit"))


def hang_forever() -> None:
    while True:
        time.sleep(0.2)


class Startup:
    def __init__(self, sim: Sim):
        self.sim = sim
        self.avail = GPU_MEM_GB
        self.graph_bs = self._graph_bs()

    # -- helpers ------------------------------------------------------------------
    def say(self, key: str, all_ranks: bool = True, **fields) -> None:
        """One version string, on every TP rank (prefix only when tp > 1) or rank 0."""
        text = versions.render(self.sim.version, key, **fields)
        ranks = range(self.sim.tp) if all_ranks else range(1)
        for r in ranks:
            log(text, r if self.sim.tp > 1 else None)

    def _graph_bs(self) -> list[int]:
        return graph_batch_sizes(self.sim)

    def _fault_at(self, phase: str) -> None:
        f = self.sim.fault
        if f is None or versions.canonical_phase(f.phase or "") != phase:
            return
        if f.name == "hang":
            hang_forever()
        if f.name == "crash":
            time.sleep(min(self.sim.phase_s.get(phase, 1.0), 30.0) * 0.5)
            print_traceback(
                self.sim,
                f"RuntimeError: simulated failure in phase {f.phase} (specc.sim fault "
                f"crash@{f.phase})",
                [("/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", 1274,
                  "load_model", f"self.{f.phase}()")])
            truth.hard_exit(1)

    def _sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)

    # -- the run --------------------------------------------------------------------
    def run(self) -> None:
        s, a = self.sim, self.sim.args
        # engine.py logs _server_args_for_logging(server_args): resolved_dict() with only the
        # watermark secrets redacted -- api_key is printed as given
        log(versions.render(s.version, "server_args", server_args=repr({
            "model_path": a.model_path, "tp_size": a.tp_size,
            "speculative_algorithm": s.algorithm,
            "speculative_num_steps": a.speculative_num_steps,
            "speculative_eagle_topk": a.speculative_eagle_topk,
            "speculative_num_draft_tokens": a.speculative_num_draft_tokens,
            "max_running_requests": a.max_running_requests, "host": a.host, "port": a.port,
            "api_key": getattr(a, "api_key", None)})))
        for w in s.warnings:
            log(w)
        for name in s.phases:
            if name == "warmup":
                return  # on the event loop, after the port opens
            truth.TRUTH.add({"event": "phase", "phase": name, "t": time.time()})
            truth.TRUTH.flush()
            getattr(self, name)(s.phase_s[name])

    def _load(self, phase: str, d: float, weight_gb: float, cls: str) -> None:
        self.say("load_begin", avail=self.avail)
        self._fault_at(phase)
        self._sleep(d)
        self.avail = max(0.5, self.avail - weight_gb)
        quant = f"quant={self.sim.args.quantization}, " if self.sim.args.quantization else ""
        self.say("load_end", elapsed=d, cls=cls, quant=quant, dtype="torch.bfloat16",
                 avail=self.avail, usage=weight_gb)

    def load_weights(self, d: float) -> None:
        self._load("load_weights", d, self.sim.weight_gb_per_gpu, self.sim.arch)

    def load_draft_weights(self, d: float) -> None:
        s = self.sim
        draft_len = sg.derived_context_length(s.draft)
        if s.context_length > draft_len:
            msg = versions.render(s.version, "context_too_long", reason="Target model's",
                                  context_length=s.context_length, derived=draft_len)
            if os.environ.get(sg.ALLOW_LONGER_CONTEXT_ENV) == "1":
                self.say("context_too_long", all_ranks=False, reason="Target model's",
                         context_length=s.context_length, derived=draft_len)
                self.say("draft_override", all_ranks=False, context_length=s.context_length)
            else:
                # The draft worker builds its ModelConfig with the target's context
                # length before it loads anything.
                self._sleep(min(2.0 * s.args.sim_time_scale, d))
                tail = versions.render(s.version, "context_error_tail")
                print_traceback(s, "ValueError: " + msg + tail, DRAFT_FRAMES)
                truth.hard_exit(1)
        self._load("load_draft_weights", d, s.draft_weight_gb_per_gpu,
                   (s.draft.get("architectures") or ["?"])[0])

    def kv_cache(self, d: float) -> None:
        s = self.sim
        dtype = ("torch.float8_e4m3fn" if "fp8" in str(s.args.kv_cache_dtype)
                 else "torch.bfloat16")
        name: dict[str, Any] = dict(cache_name=s.strings["kv_cache_name"][0], state=s.strings["kv_is_allocated"][0])
        if s.mla:
            self.say("kv_allocated_mla", dtype=dtype, tokens=s.max_total_tokens, kv=s.kv_gb, **name)
        else:
            self.say("kv_allocated_mha", dtype=dtype, tokens=s.max_total_tokens,
                     k=s.kv_gb / 2, v=s.kv_gb / 2, kv=s.kv_gb, **name)
        self._fault_at("kv_cache")
        self._sleep(d)
        self.avail = max(1.0, self.avail - s.kv_gb)
        self.say("memory_pool_end", avail=self.avail)

    def _graph(self, prefix: str, phase: str, d: float, usage: float, all_ranks: bool,
               **fields) -> None:
        self.say(prefix + "_begin", all_ranks=all_ranks, avail=self.avail, backend="full",
                 bs=self.graph_bs, **fields)
        if getattr(self.sim, "tree_error", None) and prefix.startswith("draft_"):
            print_traceback(self.sim, self.sim.tree_error, [  # type: ignore[arg-type]  # set (above)
                ("/sgl-workspace/sglang/python/sglang/srt/speculative/eagle_utils.py", 109,
                 "organize_draft_results",
                 "top_scores = torch.topk(score_list, num_draft_token - 1, dim=-1)")])
            truth.hard_exit(1)
        if "target_graph_bs" in self.sim.strings and prefix == "target_graph":
            self.say("target_graph_bs", all_ranks=False, bs=self.graph_bs)
        self._fault_at(phase)
        self._sleep(d)
        self.avail = max(0.5, self.avail - usage)
        self.say(prefix + "_end", all_ranks=all_ranks, elapsed=d, usage=usage, avail=self.avail,
                 bs=self.graph_bs, **fields)

    def _prefill_graph(self, role: str, d: float, all_ranks: bool) -> None:
        """0.5.23 captures a breakable prefill graph per model before its other graphs."""
        if "prefill_graph_begin" not in self.sim.strings:
            return
        name = {"capture_name": f"{role} prefill", "backend": "breakable"}
        self.say("prefill_graph_begin", all_ranks=all_ranks, avail=self.avail,
                 num_tokens=[512, 1024, 2048, 4096, 8192], **name)
        self._sleep(d)
        self.avail = max(0.5, self.avail - 0.05)
        self.say("prefill_graph_end", all_ranks=all_ranks, elapsed=d, usage=0.05,
                 avail=self.avail, **name)

    def target_graph(self, d: float) -> None:
        spec = self.sim.spec
        self._prefill_graph("target", d / 4, True)
        d -= d / 4
        self._graph("target_graph", "target_graph", d, 0.83, True,
                    capture_name=self.sim.target_graph, graph=self.sim.strings["graph_name"][0],
                    tokens_per_req=spec.num_draft_tokens if spec else 1)

    def capture_draft_decode_cuda_graph(self, d: float) -> None:
        assert self.sim.spec is not None   # a draft graph: speculation
        self._prefill_graph("draft", d / 4, True)   # logger.info: every rank
        d -= d / 4
        self._graph("draft_decode", "capture_draft_decode_cuda_graph", d, 0.41,
                    not self.sim.behaviour["rank0_draft_graphs"], topk=self.sim.spec.topk)

    def capture_draft_extend_cuda_graph(self, d: float) -> None:
        assert self.sim.spec is not None   # a draft graph: speculation
        if (self.sim.spec.num_steps or 0) <= 1:   # no draft decode graph: the prefill's first
            self._prefill_graph("draft", d / 4, True)
            d -= d / 4
        self._graph("draft_extend", "capture_draft_extend_cuda_graph", d, 0.49,
                    not self.sim.behaviour["rank0_draft_graphs"],
                    draft_tokens=self.sim.spec.num_draft_tokens)


def graph_batch_sizes(sim) -> list[int]:
    """The decode CUDA-graph batch sizes SGLang captures (1, 2, 4, 8, then every 8)."""
    a = sim.args
    top = a.cuda_graph_max_bs_decode or min(sim.max_running, 256 if sim.tp < 4 else 512)
    bs = [b for b in (1, 2, 4, 8) if b <= top] + list(range(16, top + 1, 8))
    return bs or [1]
