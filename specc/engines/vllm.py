"""Everything specc knows about vLLM, in one place.

Read from vLLM 0.1x (early 2026): ``vllm/config/speculative.py``,
``vllm/engine/arg_utils.py``, ``vllm/entrypoints/openai/api_server.py``,
``vllm/benchmarks/sweep/``. Log markers are (unverified) against a live log.
"""

from __future__ import annotations

import json

from specc.plan import Acceptance, CacheFlush, CounterRatio

from .base import Engine, flag_args

VLLM_VERSION_READ = "0.1x (early 2026)"

#: --speculative-config "method" per specc algorithm.
METHODS = {"EAGLE3": "eagle3", "EAGLE": "eagle", "NGRAM": "ngram", "NEXTN": "mtp",
           "STANDALONE": "draft_model"}
#: Target model types vLLM accepted for EAGLE-3 in early-2026 releases.
EAGLE3_TARGETS = ("Llama", "Qwen", "MiniCPM", "GptOss", "HunYuan", "AfMoe")


#: Spec-decode counters (prometheus_client exposes a Counter X as X_total).
ACCEPTED_COUNTER = "vllm:spec_decode_num_accepted_tokens_total"
DRAFTS_COUNTER = "vllm:spec_decode_num_drafts_total"
#: /reset_prefix_cache is served only with this set (vllm/entrypoints/openai/api_server.py).
DEV_MODE_ENV = "VLLM_SERVER_DEV_MODE"


class VLLM(Engine):
    """`vllm serve <model> --speculative-config '<json>'`."""

    name = "vllm"
    version_read = VLLM_VERSION_READ
    default_port = 8000
    health_path = "/health"
    #: vLLM's /health answers at once (200 unless the engine is dead).
    health_timeout_s = 5.0
    ready_line = "Application startup complete."
    fatal_patterns = ("Traceback (most recent call last)", "EngineCore failed",
                      "CUDA out of memory", "torch.OutOfMemoryError", "ValueError: ",
                      "RuntimeError: ")
    draft_context_policy = "cap"
    rewrites_topk1_draft_tokens = False
    max_running_path = "engine.max_num_seqs"
    bench_serving_backend = "vllm"
    spec_default_max_running = None
    launch_budget_s = 300.0
    # The HTTP app starts after the engine: refused while loading, then 200; 503 = dead.
    answers = {"refused": "starting", "503": "dead", "200": "ready"}
    flush_cache_path = "/reset_prefix_cache"
    algorithm_targets = {"EAGLE3": EAGLE3_TARGETS}
    target_unsupported_fix = "use engine=sglang for this pair"

    def speculative_config(self, spec) -> dict | None:
        if not spec.speculative:
            return None
        sp, mp = spec.speculation, spec.model_pair
        cfg = {"method": METHODS[spec.algorithm]}
        if spec.uses_draft_model and mp.get("draft"):
            cfg["model"] = mp["draft"]["path"]
        # vLLM drafts a chain of num_speculative_tokens; SGLang's tree knobs have no equivalent.
        cfg["num_speculative_tokens"] = sp.get("num_steps") or (sp.get("num_draft_tokens") or 2) - 1
        if mp.get("context_length"):
            cfg["max_model_len"] = mp["context_length"]
        return cfg

    def argv(self, spec, *, host, port):
        mp, hw, eng = spec.model_pair, spec.hardware, spec.engine
        sc = self.speculative_config(spec)
        args = ["vllm", "serve", mp["target"]["path"]] + flag_args([
            ("--tensor-parallel-size", hw["tp"]),
            ("--data-parallel-size", hw.get("dp") if hw.get("dp", 1) > 1 else None),
            ("--pipeline-parallel-size", hw.get("pp") if hw.get("pp", 1) > 1 else None),
            ("--host", host),
            ("--port", port),
            ("--trust-remote-code", bool(mp["target"].get("trust_remote_code"))),
            ("--max-model-len", mp.get("context_length")),
            ("--gpu-memory-utilization", eng.get("gpu_memory_utilization")),
            ("--max-num-seqs", eng.get("max_num_seqs")),
            ("--speculative-config",
             json.dumps(sc, sort_keys=True, separators=(",", ":")) if sc else None),
        ])
        return args + [str(a) for a in eng.get("extra_args") or []]

    def derived_context_length(self, model_config):
        # vLLM's own derivation is not modelled yet: SGLang's rule, as before this method.
        from .sglang import derived_context_length
        return derived_context_length(model_config)

    def memory_fraction(self, spec):
        return float(spec.engine.get("gpu_memory_utilization", 0.9)), "engine.gpu_memory_utilization"

    def max_running_requests(self, spec):
        value = spec.engine.get("max_num_seqs")
        if value is not None:
            return int(value), "engine.max_num_seqs"
        return 256, "vLLM default --max-num-seqs (256 on GPUs)"

    def phases(self, spec):
        w = spec.weight_gb_per_gpu("target") + spec.weight_gb_per_gpu("draft")
        return [
            {"name": "load_weights", "begin": "Starting to load model", "end": "Model loading took",
             "estimate_s": 5.0 + w / 0.3},
            {"name": "kv_cache", "begin": "Available KV cache memory", "end": "GPU KV cache size",
             "estimate_s": 10.0},
            {"name": "capture_cuda_graph", "begin": "Capturing CUDA graph",
             "end": "Graph capturing finished", "estimate_s": 30.0},
            {"name": "api_server", "begin": "Starting vLLM API server", "end": self.ready_line,
             "estimate_s": 5.0},
        ]

    def acceptance(self, spec):
        """1 + accepted tokens per draft over the point (counter differences)."""
        if not spec.speculative:
            return None
        return Acceptance(run=CounterRatio(path="/metrics", numerator=ACCEPTED_COUNTER,
                                           denominator=DRAFTS_COUNTER, offset=1.0))

    def cache_flush(self, spec):
        """/reset_prefix_cache exists only in dev mode; otherwise it 404s and the prefix
        cache (on by default) stays warm from one point to the next."""
        env = spec.engine.get("env") or {}
        if str(env.get(DEV_MODE_ENV, "")).lower() in ("1", "true"):
            return CacheFlush(method="POST", path=self.flush_cache_path)
        return CacheFlush(unavailable=f"vLLM serves {self.flush_cache_path} only with "
                                      f"{DEV_MODE_ENV}=1 (set engine.env.{DEV_MODE_ENV}=1 to "
                                      "flush the prefix cache between points)")
