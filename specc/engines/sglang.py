"""Everything specc knows about SGLang, in one place.

Read from SGLang 0.5.x (early 2026) source: ``python/sglang/srt/server_args.py``,
``srt/entrypoints/http_server.py``, ``srt/speculative/eagle_worker.py``,
``srt/configs/model_config.py``, ``test/test_utils.py``, ``bench_serving.py``.
When SGLang changes, this file (and only this file) changes.
"""

from __future__ import annotations

SGLANG_VERSION_READ = "0.5.x (early 2026)"

# --- readiness semantics ---------------------------------------------------
HEALTH_PATH = "/health_generate"
#: SGLANG_HEALTH_CHECK_TIMEOUT: /health runs a 1-token generation and waits this long.
HEALTH_CHECK_TIMEOUT_S = 20.0
READY_LINE = "The server is fired up and ready to roll!"
#: (phase, begin marker, end marker) in the order SGLang logs them.  The draft's
#: phases only appear with speculation; draft CUDA graphs only with num_steps > 1.
PHASES: tuple[tuple[str, str, str], ...] = (
    ("load_weights", "Load weight begin", "Load weight end"),
    ("kv_cache", "KV Cache is allocated", "Memory pool end"),
    ("capture_cuda_graph", "Capture cuda graph begin", "Capture cuda graph end"),
    ("load_draft_weights", "Load weight begin", "Load weight end"),
    ("capture_draft_cuda_graph", "Capture draft cuda graph begin", "Capture draft cuda graph end"),
    ("capture_draft_extend_cuda_graph", "Capture draft extend cuda graph begin",
     "Capture draft extend cuda graph end"),
    ("warmup", "Uvicorn running on", READY_LINE),
)
FATAL_PATTERNS: tuple[str, ...] = (
    "Scheduler hit an exception",
    "Received sigquit from a child process",
    "Traceback (most recent call last)",
    "torch.OutOfMemoryError",
    "CUDA out of memory",
    "ValueError: ",
    "RuntimeError: ",
)


def startup_phases(*, speculative: bool, num_steps: int | None) -> list[str]:
    """The phases a server goes through, in log order."""
    names = ["load_weights", "kv_cache", "capture_cuda_graph"]
    if speculative:
        names.append("load_draft_weights")
        if (num_steps or 0) > 1:
            names.append("capture_draft_cuda_graph")
        names.append("capture_draft_extend_cuda_graph")
    names.append("warmup")
    return names


def estimate_phase_seconds(*, weight_gb_per_gpu: float, draft_weight_gb_per_gpu: float,
                           speculative: bool, num_steps: int | None) -> dict[str, float]:
    """Typical wall time of each startup phase on H200-class hardware.

    Calibrated on the scenario's Kimi-K2.5 TP8 log: ~69 GB of INT4 weights per
    GPU loaded in 228 s from local NVMe (~0.3 GB/s per rank, ranks share the
    disk); CUDA-graph capture 1-2 s per graph set; warm-up a few seconds.
    Used both for the compiler's readiness budgets and the simulator's timing,
    so the two can never disagree.
    """
    est = {
        "load_weights": 5.0 + weight_gb_per_gpu / 0.3,
        "kv_cache": 2.0,
        "capture_cuda_graph": 1.5,
        "warmup": 3.0,
    }
    if speculative:
        est["load_draft_weights"] = 2.0 + draft_weight_gb_per_gpu / 0.3
        if (num_steps or 0) > 1:
            est["capture_draft_cuda_graph"] = 1.5
        est["capture_draft_extend_cuda_graph"] = 1.2
    return {p: est[p] for p in startup_phases(speculative=speculative, num_steps=num_steps)}


# --- model facts as SGLang derives them (srt/configs/model_config.py) -----
CONTEXT_KEYS = ("max_sequence_length", "seq_length", "max_seq_len", "model_max_length",
                "max_position_embeddings")
FALLBACK_CONTEXT_LEN = 2048
ALLOW_LONGER_CONTEXT_ENV = "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"


#: transformers 5.19 (pinned by sglang 0.5.23) fills in
#: ``original_max_position_embeddings = max_position_embeddings`` for these rope
#: types when a config lacks it (modeling_rope_utils.standardize_rope_params),
#: so SGLang then ignores their factor.
ROPE_TYPES_WITH_ORIGINAL = ("llama3", "yarn", "longrope")


def derived_context_length(hf_config: dict) -> int:
    """SGLang's ``get_context_length`` (0.5.23 srt/utils/hf_transformers/common.py):
    first present key, times the rope factor.

    The factor is ignored when ``original_max_position_embeddings`` is present
    or the rope type is ``llama3``; under the transformers 0.5.23 pins, a yarn,
    llama3 or longrope config always has it (ROPE_TYPES_WITH_ORIGINAL), so a
    yarn config without it derives ``max_position_embeddings`` unscaled.
    """
    rope = hf_config.get("rope_scaling") or hf_config.get("rope_parameters") or {}
    factor = 1.0
    rope_type = rope.get("rope_type", rope.get("type")) if rope else None
    if (rope and "original_max_position_embeddings" not in rope
            and rope_type not in ROPE_TYPES_WITH_ORIGINAL):
        factor = float(rope.get("factor", 1.0) or 1.0)
    for key in CONTEXT_KEYS:
        value = hf_config.get(key)
        if value is not None:
            return int(factor * int(value))
    return FALLBACK_CONTEXT_LEN


def context_mismatch_message(target_len: int, draft_len: int) -> str:
    """The exact ValueError SGLang raises at startup (eagle_worker / model_config)."""
    return (
        f"Warning: Target model's context_length ({target_len}) is greater than the derived "
        f"context_length ({draft_len}). This may lead to incorrect model outputs or CUDA errors. "
        "Note that the derived context_length may differ from max_position_embeddings in the "
        "model's config. To allow overriding this maximum, set the env var "
        f"{ALLOW_LONGER_CONTEXT_ENV}=1"
    )


def default_spec_params(target_architecture: str) -> tuple[int, int, int]:
    """(num_steps, topk, num_draft_tokens) SGLang picks when none are given."""
    if target_architecture == "LlamaForCausalLM":
        return (5, 4, 8)
    return (3, 1, 4)


# --- acceptance (srt/metrics/collector.py, srt/entrypoints/http_server.py) --------
GENERATION_TOKENS_COUNTER = "sglang:generation_tokens_total"
VERIFY_CALLS_COUNTER = "sglang:spec_verify_calls_total"
#: `/get_server_info` is deprecated (a warning per call) but older releases have only it.
SERVER_INFO_PATHS = ("/server_info", "/get_server_info")

#: With speculation and no --max-running-requests, SGLang caps running requests here.
SPEC_DEFAULT_MAX_RUNNING_REQUESTS = 48


def max_draft_tokens(num_steps: int, topk: int) -> int:
    """The most tokens an EAGLE tree can hold: topk at the first level, topk**2
    candidates at each later one, plus the root (0.5.23 srt/speculative/spec_utils.py)."""
    return topk + (num_steps - 1) * topk ** 2 + 1


def auto_mem_fraction_static(*, gpu_memory_gb: float, tp: int, pp: int = 1,
                             max_running_requests: int | None = None) -> float:
    """``mem_fraction_static`` as 0.5.23 picks it when not given
    (srt/arg_groups/memory_hook.py ``_handle_gpu_memory_settings``), for the
    common case: no post-capture KV sizing (off by default), no disaggregation,
    no DP attention, no VLM adjustment, prefill CUDA graph not counted.

    reserved MiB = 512 + 1.5 x chunked_prefill_size + tp x pp / 8 x 1024
    + 2 x decode cuda-graph max bs, at least 10 GiB above 60 GiB of memory;
    fraction = (memory - reserved) / memory.  On an H200 (141 GB) at TP 8 with
    speculation (max bs 48) this is ~0.90: neither 0.85 nor 0.88.
    """
    mem = gpu_memory_gb * 1024.0
    tiers = ((20, 2048, 8, 8), (35, 4096, 48, 160), (60, 4096, 32, 160), (90, 8192, 256, 512),
             (160, 8192, 256, 512))
    chunked, bs = 16384, 512
    for limit_gb, chunk, bs_small, bs_large in tiers:
        if mem < limit_gb * 1024:
            chunked, bs = chunk, (bs_small if tp < 4 else bs_large)
            break
    if max_running_requests is not None:
        bs = min(bs, max_running_requests)
    reserved = 512 + max(chunked, 2048) * 1.5 + tp * pp / 8 * 1024 + bs * 2
    if mem > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    return round((mem - reserved) / mem, 3)


# --- the adapter -------------------------------------------------------------
import json as _json  # noqa: E402

from specc.plan import Acceptance, CounterRatio, ServerField  # noqa: E402

from .base import Engine, flag_args  # noqa: E402


class SGLang(Engine):
    """`python -m sglang.launch_server`."""

    name = "sglang"
    module = "sglang.launch_server"
    version_read = SGLANG_VERSION_READ
    default_port = 30000
    health_path = HEALTH_PATH
    health_timeout_s = HEALTH_CHECK_TIMEOUT_S
    ready_line = READY_LINE
    fatal_patterns = FATAL_PATTERNS
    draft_context_policy = "error"
    context_override_env = ALLOW_LONGER_CONTEXT_ENV
    rewrites_topk1_draft_tokens = True
    refuses_pp_speculation = True
    spec_default_max_running = SPEC_DEFAULT_MAX_RUNNING_REQUESTS
    launch_budget_s = 300.0
    #: "Decode batch" every 40 decode steps (--decode-log-interval) and a "Prefill
    #: batch" line per prefill: 60 s of silence with requests in flight is a wedge.
    serving_silence_s = 60.0
    flush_cache_path = "/flush_cache"
    #: Without --mem-fraction-static SGLang reserves this much more for EAGLE drafts.
    eagle_reserve_gb = 2.0

    def argv(self, spec, *, host, port):
        mp, hw, eng, sp = spec.model_pair, spec.hardware, spec.engine, spec.speculation
        args = ["python", "-m", self.module] + flag_args([
            ("--model-path", mp["target"]["path"]),
            ("--tp-size", hw["tp"]),
            ("--dp-size", hw.get("dp") if hw.get("dp", 1) > 1 else None),
            ("--pp-size", hw.get("pp") if hw.get("pp", 1) > 1 else None),
            ("--ep-size", hw.get("ep") if hw.get("ep", 1) > 1 else None),
            ("--host", host),
            ("--port", port),
            ("--trust-remote-code", bool(mp["target"].get("trust_remote_code"))),
            ("--context-length", mp.get("context_length")),
            ("--mem-fraction-static", eng.get("mem_fraction_static")),
            ("--max-running-requests", eng.get("max_running_requests")),
            ("--cuda-graph-max-bs", eng.get("cuda_graph_max_bs")),
            ("--attention-backend", eng.get("attention_backend")),
            ("--dtype", eng.get("dtype")),
            ("--kv-cache-dtype", eng.get("kv_cache_dtype")),
            ("--quantization", eng.get("quantization")),
            ("--enable-metrics", bool(eng.get("enable_metrics"))),
        ])
        if spec.speculative:
            args += flag_args([
                ("--speculative-algorithm", sp["algorithm"]),
                ("--speculative-draft-model-path",
                 mp["draft"]["path"] if spec.uses_draft_model and mp.get("draft") else None),
                ("--speculative-num-steps", sp.get("num_steps")),
                ("--speculative-eagle-topk", sp.get("topk")),
                ("--speculative-num-draft-tokens", sp.get("num_draft_tokens")),
            ])
        return args + [str(a) for a in eng.get("extra_args") or []]

    def env(self, spec, gpus):
        env, secrets = super().env(spec, gpus)
        if spec.uses_draft_model and spec.model_pair.get("draft_context_override"):
            env[ALLOW_LONGER_CONTEXT_ENV] = "1"
        return env, secrets

    def derived_context_length(self, model_config):
        return derived_context_length(model_config)

    def startup_context_error(self, target_len, draft_len):
        """The first sentence of SGLang's startup ValueError."""
        return context_mismatch_message(target_len, draft_len).split(". ")[0].removeprefix(
            "Warning: ")

    def reserved_gb_per_gpu(self, spec):
        if spec.uses_draft_model and spec.engine.get("mem_fraction_static") is None:
            return self.eagle_reserve_gb
        return 0.0

    def memory_fraction(self, spec):
        value = spec.engine.get("mem_fraction_static")
        if value is not None:
            return float(value), "engine.mem_fraction_static"
        running, _ = self.max_running_requests(spec)
        hw = spec.hardware
        return auto_mem_fraction_static(
            gpu_memory_gb=hw["gpu_memory_gb"], tp=hw["tp"], pp=hw.get("pp", 1),
            max_running_requests=running), "SGLang auto (0.5.23 formula)"

    def max_running_requests(self, spec):
        value = spec.engine.get("max_running_requests")
        if value is not None:
            return int(value), "engine.max_running_requests"
        if spec.speculative:
            return self.spec_default_max_running, "SGLang's default with speculation"
        return None, "SGLang auto (from KV cache size)"

    def phases(self, spec):
        marks = {name: (begin, end) for name, begin, end in PHASES}
        est = estimate_phase_seconds(
            weight_gb_per_gpu=spec.weight_gb_per_gpu("target"),
            draft_weight_gb_per_gpu=spec.weight_gb_per_gpu("draft"),
            speculative=spec.uses_draft_model, num_steps=spec.speculation.get("num_steps"))
        return [{"name": name, "begin": marks[name][0], "end": marks[name][1], "estimate_s": sec}
                for name, sec in est.items()]

    def acceptance(self, spec):
        """Run-scoped: generated tokens per verify call over the point (both counters are
        exact; the cumulative average is folded in only every 40 decode iterations).
        Fallback: DP rank 0's cumulative average since start, warm-up included."""
        if not spec.speculative:
            return None
        run = None
        if spec.engine.get("enable_metrics"):
            run = CounterRatio(path="/metrics", numerator=GENERATION_TOKENS_COUNTER,
                               denominator=VERIFY_CALLS_COUNTER)
        return Acceptance(run=run, cumulative=ServerField(
            paths=SERVER_INFO_PATHS, field="internal_states.0.avg_spec_accept_length"))

    def sim_facts_json(self, facts) -> str:
        """Facts in config.json's own keys, for the simulator (`architectures` is a list)."""
        values = dict(facts.values)
        arch = values.pop("architecture", None)
        if arch:
            values["architectures"] = [arch]
        return _json.dumps(values, sort_keys=True, separators=(",", ":"))
