"""What each emulated SGLang version prints and in which order: pure data.

``--sim-version`` picks one (default ``0.5.23``).  Every log string the
simulator prints for a version is a template here, with the file of the
released package it was copied from, so that a drift check can grep the real
wheel for it: ``literal_fragments(template)`` gives the literal pieces between
the ``{placeholders}`` (f-string fields in the source become placeholders
here), each of which must appear verbatim in ``source`` inside the wheel
(``unzip -p sglang-0.5.23-*.whl sglang/<source>``).

``0.5.23`` was copied from ``sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl``
(read 2026-11-30).  ``early-2026`` is what the incident's log printed (SGLang
0.5.x, early 2026; replayed in tests/fixtures/readiness/sglang-early-2026-incident.log):
strings and order only, its source files were not read, so its ``source`` names the log.
"""

from __future__ import annotations

import re

DEFAULT = "0.5.23"

UVICORN = "uvicorn (the package SGLang runs; SGLang's format from srt/utils/common.py)"
INCIDENT = "incident log (SGLang 0.5.x, early 2026; tests/fixtures/readiness/sglang-early-2026-incident.log)"

#: name -> (template, source file inside the wheel, relative to sglang/)
_COMMON: dict[str, tuple[str, str]] = {
    "load_begin": ("Load weight begin. avail mem={avail:.2f} GB",
                   "srt/model_executor/model_runner.py"),
    "memory_pool_end": ("Memory pool end. avail mem={avail:.2f} GB",
                        "srt/mem_cache/kv_cache_configurator.py"),
    "uvicorn_started": ("INFO:     Started server process [{pid}]", UVICORN),
    "uvicorn_waiting": ("INFO:     Waiting for application startup.", UVICORN),
    "uvicorn_complete": ("INFO:     Application startup complete.", UVICORN),
    "uvicorn_running": ("INFO:     Uvicorn running on http://{host}:{port} (Press CTRL+C to quit)",
                        UVICORN),
    "access": ('INFO:     {client}:{cport} - "{method} {path} HTTP/1.1" {status}', UVICORN),
    "bind_error": ("ERROR:    [Errno {errno}] error while attempting to bind on address "
                   "('{host}', {port}): {strerror}", UVICORN),
    "ready": ("The server is fired up and ready to roll!", "srt/entrypoints/http_server.py"),
    "scheduler_exception": ("Scheduler hit an exception: {traceback}",
                            "srt/managers/scheduler.py"),
    "sigquit": ("Received sigquit from a child process. It usually means the child failed.",
                "srt/entrypoints/engine.py"),
    "cache_flushed": ("Cache flushed successfully!", "srt/managers/scheduler.py"),
    "cache_not_flushed": ("Cache not flushed because there are pending requests. #queue-req: "
                          "{queued}, #running-req: {running}", "srt/managers/scheduler.py"),
    "context_too_long": (
        "Warning: {reason} context_length ({context_length}) is greater than the derived "
        "context_length ({derived}). This may lead to incorrect model outputs or CUDA errors. "
        "Note that the derived context_length may differ from max_position_embeddings in the "
        "model's config.", "srt/configs/model_config.py"),
    "context_error_tail": (" To allow overriding this maximum, set the env var "
                           "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1",
                           "srt/configs/model_config.py"),
    "draft_override": ("Overriding the draft model's max_position_embeddings to {context_length}.",
                       "srt/configs/model_config.py"),
    "max_running_reset": ("Max running requests is reset to 48 for speculative decoding. You can "
                          "override this by explicitly setting --max-running-requests.",
                          "srt/arg_groups/speculative_hook.py"),
    "topk1_adjust": ("speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when "
                     "speculative_eagle_topk == 1", "srt/arg_groups/speculative_hook.py"),
    "ngram_draft_tokens": ("speculative_num_draft_tokens is set to 12 by default for ngram "
                           "speculative decoding. You can override this by explicitly setting "
                           "--speculative-num-draft-tokens.", "srt/arg_groups/speculative_hook.py"),
    "ngram_mixed_chunk": ("The mixed chunked prefill are disabled because of using ngram "
                          "speculative decoding.", "srt/arg_groups/speculative_hook.py"),
    "server_args": ("server_args={server_args}", "srt/entrypoints/engine.py"),
    "deprecated_endpoint": ("Endpoint '{old}' is deprecated and will be removed in a future "
                            "version. Please use '{new}' instead.",
                            "srt/entrypoints/http_server.py"),
    "health_failed": ("Health check failed. Server couldn't get a response from detokenizer for "
                      "last {timeout} seconds. tic start time: {tic}. last_heartbeat time: {last}",
                      "srt/entrypoints/http_server.py"),
}

V0_5_23: dict[str, tuple[str, str]] = {
    **_COMMON,
    # quant_str (", quant=...") only for quantized checkpoints; no dtype field any more.
    "load_end": ("Load weight end. elapsed={elapsed:.2f} s, type={cls}, {quant}avail mem="
                 "{avail:.2f} GB, mem usage={usage:.2f} GB.", "srt/model_executor/model_runner.py"),
    # MHA pools log K and V separately, MLA pools (DeepSeek/Kimi) one KV size.
    # "{cache_name} {state}": "KV Cache" + "is allocated" (f-string pieces)
    "kv_cache_name": ("KV Cache", "srt/mem_cache/memory_pool.py"),
    "kv_is_allocated": ("is allocated", "srt/mem_cache/memory_pool.py"),
    "kv_allocated_mha": ("{cache_name} {state}. dtype: {dtype}, #tokens: {tokens}, "
                         "K size: {k:.2f} GB, V size: {v:.2f} GB", "srt/mem_cache/memory_pool.py"),
    "kv_allocated_mla": ("{cache_name} {state}. dtype: {dtype}, #tokens: {tokens}, "
                         "KV size: {kv:.2f} GB", "srt/mem_cache/memory_pool.py"),
    # capture_name = "target verify" with speculation, else "target decode":
    # exactly one of the two prints on a server.
    "graph_name": ("CUDA graph",
                   "srt/model_executor/model_runner_components/cuda_graph_setup.py"),
    "target_graph_begin": ("Capture {capture_name} {graph} begin. backend={backend}, "
                           "num_tokens_per_req={tokens_per_req}, avail mem={avail:.2f} GB",
                           "srt/model_executor/model_runner_components/cuda_graph_setup.py"),
    "target_graph_end": ("Capture {capture_name} {graph} end. bs={bs}, elapsed={elapsed:.2f} s, "
                         "mem usage={usage:.2f} GB, avail mem={avail:.2f} GB.",
                         "srt/model_executor/model_runner_components/cuda_graph_setup.py"),
    # capture_prefill_graph: prefill graphs are captured by default on CUDA
    # (cuda_graph_config.py default_prefill_backend: breakable), the target's before its
    # decode/verify graph, the draft's (init_prefill_cuda_graph) before its own graphs.
    "prefill_graph_begin": ("Capture {capture_name} CUDA graph begin. backend={backend}, "
                            "num_tokens={num_tokens}, avail mem={avail:.2f} GB",
                            "srt/model_executor/model_runner_components/cuda_graph_setup.py"),
    "prefill_graph_end": ("Capture {capture_name} CUDA graph end. elapsed={elapsed:.2f} s, "
                          "mem usage={usage:.2f} GB, avail mem={avail:.2f} GB.",
                          "srt/model_executor/model_runner_components/cuda_graph_setup.py"),
    "draft_decode_begin": ("Capture draft decode CUDA graph begin. backend={backend}, "
                           "num_tokens_per_req={topk}, bs={bs}, avail mem={avail:.2f} GB",
                           "srt/speculative/eagle_worker_v2.py"),
    "draft_decode_end": ("Capture draft decode CUDA graph end. elapsed={elapsed:.2f} s, "
                         "mem usage={usage:.2f} GB, avail mem={avail:.2f} GB.",
                         "srt/speculative/eagle_worker_v2.py"),
    "draft_extend_begin": ("Capture draft extend CUDA graph begin. backend={backend}, "
                           "num_tokens_per_req={draft_tokens}, bs={bs}, avail mem={avail:.2f} GB",
                           "srt/speculative/eagle_worker_v2.py"),
    "draft_extend_end": ("Capture draft extend CUDA graph end. elapsed={elapsed:.2f} s, "
                         "mem usage={usage:.2f} GB, avail mem={avail:.2f} GB.",
                         "srt/speculative/eagle_worker_v2.py"),
    # built from pieces: "{usage_parts}" and "{graph_part}" are the templates below
    "prefill_batch": ("Prefill batch{iter}, #new-seq: {seqs}, #new-token: {tokens}, #cached-token: "
                      "{cached}, {usage_parts}#running-req: {running}, #queue-req: {queued}, "
                      "#pending-token: {pending}, {graph_part}input throughput (token/s): "
                      "{throughput:.2f}", "srt/managers/scheduler_components/metrics_reporter.py"),
    "prefill_usage": ("token usage: {usage:.2f}",
                      "srt/managers/scheduler_components/pool_stats_observer.py"),
    "graph_part": ("{label}: {graph}, ", "srt/managers/scheduler_components/metrics_reporter.py"),
    "graph_label": ("cuda graph", "srt/managers/scheduler_components/metrics_reporter.py"),
    "decode_batch": ("Decode batch{iter}, #running-req: {running}, {usage_parts}{spec}{graph_part}"
                     "gen throughput (token/s): {throughput:.2f}, #queue-req: {queued}",
                     "srt/managers/scheduler_components/metrics_reporter.py"),
    "decode_usage": ("#token: {tokens}, token usage: {usage:.2f}",
                     "srt/managers/scheduler_components/pool_stats_observer.py"),
    "decode_spec": ("accept len: {accept_len:.2f}, accept rate: {accept_rate:.2f}, ",
                    "srt/managers/scheduler_components/metrics_reporter.py"),
}

EARLY_2026: dict[str, tuple[str, str]] = {
    **_COMMON,
    "load_end": ("Load weight end. elapsed={elapsed:.2f} s, type={cls}, {quant}dtype={dtype}, "
                 "avail mem={avail:.2f} GB, mem usage={usage:.2f} GB.", INCIDENT),
    "kv_cache_name": ("KV Cache", INCIDENT),
    "kv_is_allocated": ("is allocated", INCIDENT),
    "kv_allocated_mha": ("{cache_name} {state}. #tokens: {tokens}, KV size: {kv:.2f} GB", INCIDENT),
    "kv_allocated_mla": ("{cache_name} {state}. #tokens: {tokens}, KV size: {kv:.2f} GB", INCIDENT),
    "graph_name": ("cuda graph", INCIDENT),
    "target_graph_begin": ("Capture cuda graph begin. This can take up to several minutes. "
                           "avail mem={avail:.2f} GB", INCIDENT),
    "target_graph_bs": ("Capture cuda graph bs {bs}", INCIDENT),
    "target_graph_end": ("Capture cuda graph end. Time elapsed: {elapsed:.2f} s. mem usage="
                         "{usage:.2f} GB. avail mem={avail:.2f} GB.", INCIDENT),
    "draft_decode_begin": ("Capture draft cuda graph begin. This can take up to several minutes. "
                           "avail mem={avail:.2f} GB", INCIDENT),
    "draft_decode_end": ("Capture draft cuda graph end. Time elapsed: {elapsed:.2f} s. mem usage="
                         "{usage:.2f} GB. avail mem={avail:.2f} GB.", INCIDENT),
    "draft_extend_begin": ("Capture draft extend cuda graph begin. This can take up to several "
                           "minutes. avail mem={avail:.2f} GB", INCIDENT),
    "draft_extend_end": ("Capture draft extend cuda graph end. Time elapsed: {elapsed:.2f} s. "
                         "mem usage={usage:.2f} GB. avail mem={avail:.2f} GB.", INCIDENT),
    "prefill_batch": ("Prefill batch{iter}. #new-seq: {seqs}, #new-token: {tokens}, #cached-token: "
                      "{cached}, {usage_parts}#running-req: {running}, #queue-req: {queued}",
                      INCIDENT),
    "prefill_usage": ("token usage: {usage:.2f}", INCIDENT),
    "graph_part": ("{label}: {graph}, ", INCIDENT),
    "graph_label": ("cuda graph", INCIDENT),
    "decode_batch": ("Decode batch{iter}. #running-req: {running}, {usage_parts}{spec}{graph_part}"
                     "gen throughput (token/s): {throughput:.2f}, #queue-req: {queued}", INCIDENT),
    "decode_usage": ("#token: {tokens}, token usage: {usage:.2f}", INCIDENT),
    "decode_spec": ("accept len: {accept_len:.2f}, accept rate: {accept_rate:.2f}, ", INCIDENT),
}

#: Startup phases in log order.  ``target_graph`` is ``capture_target_verify_cuda_graph``
#: with speculation and ``capture_target_decode_cuda_graph`` without (one of them,
#: never both: srt/model_executor/model_runner_components/cuda_graph_setup.py).
#: 0.5.23: the scheduler builds the target worker (weights), then the draft
#: worker (weights; the draft/target context check fires in its ModelConfig),
#: then the KV pools, then the target's graphs, then the draft's
#: (srt/managers/scheduler.py, ``init_model_worker``).
ORDER = {
    "0.5.23": ("load_weights", "load_draft_weights", "kv_cache", "target_graph",
               "capture_draft_decode_cuda_graph", "capture_draft_extend_cuda_graph", "warmup"),
    "early-2026": ("load_weights", "kv_cache", "target_graph", "load_draft_weights",
                   "capture_draft_decode_cuda_graph", "capture_draft_extend_cuda_graph", "warmup"),
}

#: Version-specific behaviour besides the strings.
BEHAVIOUR = {
    # /health runs a generation (>= 1 s) unless SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION
    # is false (srt/entrypoints/http_server.py, srt/environ.py); the early-2026 sim
    # answered at once.  rank0_draft_graphs: draft capture lines use
    # log_info_on_rank0 (srt/speculative/eagle_worker_v2.py).
    "0.5.23": {"health_generates": True, "rank0_draft_graphs": True},
    "early-2026": {"health_generates": False, "rank0_draft_graphs": False},
}

VERSIONS: dict[str, dict[str, tuple[str, str]]] = {"0.5.23": V0_5_23, "early-2026": EARLY_2026}

#: Phase names accepted by ``hang@``/``crash@``: the contract's names (CONTRACT.md)
#: map onto the 0.5.23 ones.
PHASE_ALIASES = {
    "capture_cuda_graph": "target_graph",
    "capture_target_decode_cuda_graph": "target_graph",
    "capture_target_verify_cuda_graph": "target_graph",
    "capture_draft_cuda_graph": "capture_draft_decode_cuda_graph",
}
FAULT_PHASES = ("join", "load_weights", "load_draft_weights", "kv_cache", "capture_cuda_graph",
                "capture_target_decode_cuda_graph", "capture_target_verify_cuda_graph",
                "capture_draft_cuda_graph", "capture_draft_decode_cuda_graph",
                "capture_draft_extend_cuda_graph", "warmup")


def canonical_phase(name: str) -> str:
    return PHASE_ALIASES.get(name, name)


_FIELD = re.compile(r"\{[^{}]*\}")


def literal_fragments(template: str) -> list[str]:
    """The literal pieces of a template (between ``{fields}``), stripped, non-empty."""
    return [p.strip() for p in _FIELD.split(template) if p.strip()]


def template_regex(template: str) -> re.Pattern:
    """A regex that matches any rendering of the template (fields: anything)."""
    parts = _FIELD.split(template)
    return re.compile("^" + "(.*?)".join(re.escape(p) for p in parts) + "$", re.S)


def render(version: str, key: str, **fields) -> str:
    return VERSIONS[version][key][0].format(**fields)
