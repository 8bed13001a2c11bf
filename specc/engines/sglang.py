"""Everything specc knows about SGLang, in one place, keyed by SGLang release.

Pinned: SGLang 0.5.23, read from the released wheel's source
(``srt/managers/scheduler.py``, ``srt/model_executor/model_runner_components/
cuda_graph_setup.py``, ``srt/speculative/eagle_worker_v2.py``,
``srt/speculative/eagle_utils.py``, ``srt/observability/metrics_collector.py``,
``srt/entrypoints/http_server.py``, ``srt/configs/model_config.py``,
``srt/utils/hf_transformers/common.py``). Facts that differ in older releases
carry the first release they hold for (``for_version`` tables); the early-2026
range (0.5.0 - 0.5.13) is the incident's. ``tests/drift`` checks every flag
this file emits against 0.5.23's own parser and every marker, metric and
endpoint below against 0.5.23's source. A new SGLang release changes this file.
"""

from __future__ import annotations

import json as _json

from specc.plan import Acceptance, CounterRatio, ServerField

from .base import (ALWAYS, DRAFT, HEAD, MULTI_STEP, NODE_RANK, Engine, FatalMessage, PhaseMarker,
                   drop_flags,
                   flag_args, for_version, parse_version)

PINNED_VERSION = "0.5.23"
OLDEST_VERSION = "0.5.0"
SGLANG_VERSION_READ = f"{PINNED_VERSION} (wheel source); 0.5.0-0.5.13 from early-2026 logs"

# --- readiness semantics ---------------------------------------------------
HEALTH_PATH = "/health_generate"
#: SGLANG_HEALTH_CHECK_TIMEOUT: /health runs a 1-token generation and waits this long.
HEALTH_CHECK_TIMEOUT_S = 20.0
READY_LINE = "The server is fired up and ready to roll!"
_S = "sglang/srt/"   # source paths below are inside the wheel

#: 0.5.14 and later (pinned 0.5.23): the scheduler loads the target's weights,
#: then the draft's (the draft/target context check fires here), allocates both
#: KV pools, captures the target's graphs (decode without speculation, verify
#: with it; a prefill graph first where enabled), then the draft's decode graph
#: (num_steps > 1) and draft-extend graph; then uvicorn, warm-up, the ready line.
#: The draft's "Load weight begin" directly follows the target's, and every TP rank
#: prints its own: a later rank's target line cannot be told from the draft's, so
#: both models' loading is one phase here (load_weights, estimated for both).
PHASES_0_5_14: tuple[PhaseMarker, ...] = (
    PhaseMarker("load_weights", (r"Load weight begin",), (r"Load weight end",), ALWAYS,
                ("Load weight begin. avail mem=283.62 GB",
                 "Load weight end. elapsed=228.09 s, type=DeepseekV3ForCausalLM, "
                 "dtype=torch.bfloat16, avail mem=194.04 GB, mem usage=89.58 GB."),
                ((_S + "model_executor/model_runner.py", "Load weight begin. avail mem="),
                 (_S + "model_executor/model_runner.py", "Load weight end. "),
                 (_S + "managers/scheduler.py", "self.init_tp_model_worker()\n"),
                 (_S + "managers/scheduler.py", "self.maybe_init_draft_worker()\n\n"
                  "        # Prepare KV cache pools for all workers"))),
    PhaseMarker("kv_cache", (r"KV Cache is allocated",), (r"Memory pool end",), ALWAYS,
                ("KV Cache is allocated. dtype: torch.bfloat16, #tokens: 3262823, "
                 "KV size: 186.77 GB",
                 "Memory pool end. avail mem=4.02 GB"),
                ((_S + "mem_cache/memory_pool.py", 'else "KV Cache"'),
                 (_S + "mem_cache/memory_pool.py", "'is allocated'}. dtype: {self.dtype}"),
                 (_S + "mem_cache/kv_cache_configurator.py", 'f"Memory pool end. "'))),
    PhaseMarker("capture_cuda_graph",
                (r"(?i)Capture target (prefill |decode |verify )?CUDA graph begin",),
                (r"(?i)Capture target (decode |verify )?CUDA graph end",), ALWAYS,
                ("Capture target verify CUDA graph begin. backend=full, num_tokens_per_req=4, "
                 "avail mem=3.72 GB",
                 "Capture target verify CUDA graph end. bs=[1, 2, 4, 8], elapsed=1.24 s, "
                 "mem usage=0.09 GB, avail mem=2.89 GB."),
                ((_S + "model_executor/model_runner_components/cuda_graph_setup.py",
                  'f"Capture {capture_name} {graph_backend[model_runner.device]} begin. "'),
                 (_S + "model_executor/model_runner_components/cuda_graph_setup.py",
                  'capture_name = f"{role} verify"'),
                 (_S + "model_executor/model_runner_components/cuda_graph_setup.py",
                  'capture_name = f"{role} decode"'),
                 (_S + "model_executor/model_runner_components/cuda_graph_setup.py",
                  '"cuda": "CUDA graph"'),
                 (_S + "managers/scheduler.py", "self.tp_worker.init_cuda_graphs()\n"
                  "        if self.draft_worker is not None:\n"
                  "            self.draft_worker.init_cuda_graphs()"))),
    PhaseMarker("capture_draft_cuda_graph",
                (r"(?i)Capture draft (prefill |decode )CUDA graph begin",),
                (r"(?i)Capture draft decode CUDA graph end",), MULTI_STEP,
                ("Capture draft decode CUDA graph begin. backend=full, num_tokens_per_req=1, "
                 "bs=[1, 2, 4, 8], avail mem=2.89 GB",
                 "Capture draft decode CUDA graph end. elapsed=1.50 s, mem usage=0.41 GB, "
                 "avail mem=2.48 GB."),
                ((_S + "speculative/eagle_worker_v2.py", 'f"Capture draft decode CUDA graph begin. '),
                 (_S + "speculative/eagle_worker_v2.py", "if self.speculative_num_steps > 1"))),
    PhaseMarker("capture_draft_extend_cuda_graph",
                # the draft's prefill graph comes first; with num_steps 1 there is no
                # draft decode phase for it to begin, so it begins this one
                (r"(?i)Capture draft extend CUDA graph begin",
                 r"(?i)Capture draft prefill CUDA graph begin"),
                (r"(?i)Capture draft extend CUDA graph end",), DRAFT,
                ("Capture draft extend CUDA graph begin. backend=full, num_tokens_per_req=4, "
                 "bs=[1, 2, 4, 8], avail mem=2.48 GB",
                 "Capture draft extend CUDA graph end. elapsed=1.18 s, mem usage=0.49 GB, "
                 "avail mem=1.99 GB."),
                ((_S + "speculative/eagle_worker_v2.py", 'f"Capture draft extend CUDA graph begin. '),
                 (_S + "speculative/eagle_worker_v2.py",
                  "self.draft_runner.init_prefill_cuda_graph(force_for_draft_worker=True)"),
                 (_S + "model_executor/model_runner_components/cuda_graph_setup.py",
                  'capture_name = f"{role} prefill"'),
                 (_S + "model_executor/cuda_graph_config.py",
                  "return Backend.BREAKABLE if is_cuda() else Backend.DISABLED"),
                 (_S + "speculative/eagle_worker_v2.py", '"Capture draft extend CUDA graph end. "'))),
    # from the scheduler's last init line (rank 0, after every capture) or uvicorn's first
    # line, not its "running on": the lines between must not read as an unknown phase
    PhaseMarker("warmup", (r"max_total_num_tokens=\d+, chunked_prefill_size=",
                           r"Started server process \[", r"Uvicorn running on"), (READY_LINE,), ALWAYS,
                ("INFO:     Started server process [4242]",
                 READY_LINE),
                ((_S + "managers/scheduler.py", 'f"max_total_num_tokens={self.max_total_num_tokens}, "'),
                 (_S + "managers/scheduler.py", 'f"chunked_prefill_size={get_schedule().chunked_prefill_size}, "'),
                 ("uvicorn/server.py", 'message = "Started server process [%d]"'),
                 ("uvicorn/server.py", "Uvicorn running on"),
                 (_S + "entrypoints/http_server.py", READY_LINE))),
)

#: 0.5.0 - 0.5.13 (the incident's early-2026 log): the target's weights, KV
#: cache and graphs come first, then the draft's weights and graphs; graph lines
#: are lower-case ("Capture cuda graph begin", "Capture draft cuda graph begin").
PHASES_EARLY_2026: tuple[PhaseMarker, ...] = (
    PHASES_0_5_14[0],
    PhaseMarker("kv_cache", (r"KV Cache is allocated",), (r"Memory pool end",), ALWAYS,
                ("KV Cache is allocated. #tokens: 3262823, KV size: 186.77 GB",
                 "Memory pool end. avail mem=4.02 GB")),
    PhaseMarker("capture_cuda_graph", (r"(?i)Capture cuda graph begin",),
                (r"(?i)Capture cuda graph end",), ALWAYS,
                ("Capture cuda graph begin. This can take up to several minutes. avail mem=3.72 GB",
                 "Capture cuda graph end. Time elapsed: 1.24 s. mem usage=0.09 GB. "
                 "avail mem=2.89 GB.")),
    PhaseMarker("load_draft_weights", (r"Load weight begin",), (r"Load weight end",), DRAFT,
                ("Load weight begin. avail mem=194.04 GB",
                 "Load weight end. elapsed=11.02 s, type=LlamaForCausalLMEagle3, "
                 "dtype=torch.bfloat16, avail mem=193.22 GB, mem usage=0.82 GB.")),
    PhaseMarker("capture_draft_cuda_graph", (r"(?i)Capture draft cuda graph begin",),
                (r"(?i)Capture draft cuda graph end",), MULTI_STEP,
                ("Capture draft cuda graph begin. This can take up to several minutes. "
                 "avail mem=2.89 GB",
                 "Capture draft cuda graph end. Time elapsed: 1.50 s. mem usage=0.41 GB. "
                 "avail mem=2.48 GB.")),
    PhaseMarker("capture_draft_extend_cuda_graph", (r"(?i)Capture draft extend cuda graph begin",),
                (r"(?i)Capture draft extend cuda graph end",), DRAFT,
                ("Capture draft extend cuda graph begin. This can take up to several minutes. "
                 "avail mem=2.48 GB",
                 "Capture draft extend cuda graph end. Time elapsed: 1.18 s. mem usage=0.49 GB. "
                 "avail mem=7.43 GB.")),
    PhaseMarker("warmup", PHASES_0_5_14[-1].begin, (READY_LINE,), ALWAYS,
                PHASES_0_5_14[-1].samples),
)
PHASES_BY_VERSION = [("0.5.14", PHASES_0_5_14), (OLDEST_VERSION, PHASES_EARLY_2026)]

#: The lines SGLang 0.5.23 dies of, each with the source that prints it and ends the process.
#: A subprocess that dies logs "<Part> hit an exception: <traceback>" and sends its parent
#: SIGQUIT, whose handler logs "Received sigquit ..." and kills the process tree. Exception
#: lines and "Traceback" are not among them: 0.5.23 logs tracebacks under warnings and
#: carries on (srt/utils/stale_shm_cleanup.py "cleanup_stale_shm: sweep failed, continuing
#: startup", exc_info=True); a crash ends the process and its exit names the cause.
_SIGQUIT_PARENT = "parent_process.send_signal(signal.SIGQUIT)"
FATAL_MESSAGES: tuple[FatalMessage, ...] = (
    FatalMessage("Scheduler hit an exception", _S + "managers/scheduler.py",
                 'logger.error(f"Scheduler hit an exception: {traceback}")\n        '
                 + _SIGQUIT_PARENT, "SIGQUIT to the launcher, which kills the process tree"),
    FatalMessage("Received sigquit from a child process", _S + "entrypoints/engine.py",
                 '"Received sigquit from a child process. It usually means the child failed."'
                 "\n                )\n                kill_process_tree(os.getpid())",
                 "kills its own process tree"),
    FatalMessage("DetokenizerManager hit an exception", _S + "managers/detokenizer_manager.py",
                 'logger.error(f"DetokenizerManager hit an exception: {traceback}")\n'
                 "        if manager is not None:\n            manager.maybe_clear_socket_mapping()"
                 "\n        " + _SIGQUIT_PARENT,
                 "SIGQUIT to the launcher, which kills the process tree"),
    FatalMessage("TokenizerManager hit an exception", _S + "managers/tokenizer_manager.py",
                 'logger.error(f"TokenizerManager hit an exception: {traceback}")\n'
                 '        if hasattr(func, "__self__") and isinstance(func.__self__, '
                 "TokenizerManager):\n            func.__self__.dump_requests_before_crash()\n"
                 "        kill_process_tree(os.getpid(), include_parent=True)",
                 "kills the process tree, itself included"),
    FatalMessage("DataParallelController hit an exception",
                 _S + "managers/data_parallel_controller.py",
                 'logger.error(f"DataParallelController hit an exception: {traceback}")\n'
                 "        " + _SIGQUIT_PARENT,
                 "SIGQUIT to the launcher, which kills the process tree"),
)
#: A warning that logs its traceback and carries on: no fatal pattern may match its lines.
WARNING_WITH_TRACEBACK = (_S + "utils/stale_shm_cleanup.py",
                          '"cleanup_stale_shm: sweep failed, continuing startup", exc_info=True')

# --- flags -----------------------------------------------------------------
#: server.cuda_graph_max_bs -> this flag. 0.5.14 added --cuda-graph-max-bs-decode and
#: kept --cuda-graph-max-bs as a deprecated alias; 0.5.20+ dropped the alias, so the
#: old name is an ambiguous prefix (-decode / -prefill) that argparse rejects.
CUDA_GRAPH_MAX_BS_FLAG = [("0.5.14", "--cuda-graph-max-bs-decode"),
                          (OLDEST_VERSION, "--cuda-graph-max-bs")]
#: The engine-neutral server knobs (config `server`) -> SGLang's flags (server_args.py).
SERVER_FLAGS = {"max_running_requests": "--max-running-requests",
                "mem_fraction": "--mem-fraction-static",
                "cuda_graph_max_bs": CUDA_GRAPH_MAX_BS_FLAG,
                "dtype": "--dtype", "kv_cache_dtype": "--kv-cache-dtype",
                "quantization": "--quantization"}

# --- pipeline parallelism with speculation ------------------------------------
#: Algorithms (specc's names) each release serves with pp > 1. 0.5.23 checks it at launch,
#: after resolve_once, in check_server_args (arg_groups/validation_hook.py
#: check_pipeline_parallel_compat): the resolved algorithm must be EAGLE (NEXTN resolves to
#: EAGLE), not multi-layer, and outside PD prefill SGLANG_ENABLE_PP_SPEC=1 must be set; the
#: draft then runs on the last stage only (managers/scheduler.py maybe_init_draft_worker,
#: speculative/eagle_worker_v2.py). EAGLE3, STANDALONE and NGRAM fail that assertion.
#: Releases before 0.5.23 asserted pp_size == 1 with any speculation (sglang PR #30775
#: lifted it behind the env variable); the first release with it was not read: 0.5.23 is.
PP_SPEC_ALGORITHMS = [(PINNED_VERSION, ("EAGLE", "NEXTN")), (OLDEST_VERSION, ())]
PP_SPEC_ENV = "SGLANG_ENABLE_PP_SPEC"
PP_SPEC_REFUSAL = ("Pipeline parallelism currently only supports EAGLE (non-multi-layer) "
                   "speculative decoding")

# --- acceptance ------------------------------------------------------------
#: Counters (srt/observability/metrics_collector.py), both counted when a request
#: finishes: run-scoped accept length = delta generation tokens / delta verify calls.
GENERATION_TOKENS_METRIC = "sglang:generation_tokens_total"
SPEC_VERIFY_CALLS_METRIC = "sglang:spec_verify_calls_total"
#: The verify-call counter exists from 0.5.13 on; before, only the cumulative average.
SPEC_VERIFY_COUNTER = [("0.5.13", SPEC_VERIFY_CALLS_METRIC), (OLDEST_VERSION, None)]
#: /server_info (0.5.23; /get_server_info is deprecated there and warns per call).
SERVER_INFO_PATHS = ("/server_info", "/get_server_info")
METRICS_PATH = "/metrics"
FLUSH_CACHE_PATH = "/flush_cache"
#: Endpoints specc's load generator and bench_serving call.
API_PATHS = ("/v1/chat/completions", "/v1/completions", "/generate", "/v1/models")
ENDPOINT_EVIDENCE = tuple(
    (f"endpoint {path}", _S + "entrypoints/http_server.py", text) for path, text in (
        (HEALTH_PATH, '@app.get("/health_generate")'),
        (FLUSH_CACHE_PATH, '@app.api_route("/flush_cache"'),
        ("/server_info", '@app.get("/server_info")'),
        ("/get_server_info", '@app.get("/get_server_info")'),
        ("/v1/chat/completions", '@app.post("/v1/chat/completions"'),
        ("/v1/completions", '@app.post("/v1/completions"'),
        ("/generate", '"/generate"'),
        ("/v1/models", '"/v1/models"'),
    )) + ((f"endpoint {METRICS_PATH}", _S + "utils/common.py", 'Mount("/metrics"'),)
METRIC_EVIDENCE = tuple(
    (f"metric {name}", _S + "observability/metrics_collector.py", f'name="{name}"')
    for name in (GENERATION_TOKENS_METRIC, SPEC_VERIFY_CALLS_METRIC))
#: Other facts this file states, with where 0.5.23 says them.
OTHER_EVIDENCE = (
    ("multi-node flags --nnodes/--node-rank/--dist-init-addr",
     _S + "arg_groups/fields/parallel.py", 'nnodes: A[int, "The number of nodes."] = 1'),
    ("multi-node flags --nnodes/--node-rank/--dist-init-addr",
     _S + "arg_groups/fields/parallel.py", 'node_rank: A[int, "The node rank."] = 0'),
    ("multi-node flags --nnodes/--node-rank/--dist-init-addr",
     _S + "arg_groups/fields/parallel.py", "    dist_init_addr: A[\n        Optional[str],"),
    ("health check timeout 20 s", _S + "entrypoints/http_server.py",
     'os.getenv("SGLANG_HEALTH_CHECK_TIMEOUT", 20)'),
    ("pp > 1 with speculation: EAGLE only, SGLANG_ENABLE_PP_SPEC", _S + "arg_groups/validation_hook.py",
     'cfg.speculative_algorithm.upper() == "EAGLE"\n            and not cfg.enable_multi_layer_eagle\n'
     '        ), (\n            "Pipeline parallelism currently only supports EAGLE "\n'
     '            "(non-multi-layer) speculative decoding"'),
    ("pp > 1 with speculation: EAGLE only, SGLANG_ENABLE_PP_SPEC", _S + "arg_groups/validation_hook.py",
     "        if envs.SGLANG_ENABLE_PP_SPEC.get():"),
    ("pp > 1 with speculation: the draft on the last stage", _S + "speculative/eagle_worker_v2.py",
     "self._hosts_draft = get_parallel().pp_group.is_last_rank"),
    ("NEXTN resolves to EAGLE", _S + "arg_groups/speculative_hook.py",
     'if speculative_algorithm == "NEXTN" or speculative_algorithm == "EAGLE":'),
    ("running requests reset to 48 with speculation", _S + "arg_groups/speculative_hook.py",
     "Max running requests is reset to 48 for speculative decoding."),
    ("topk=1 resets num_draft_tokens to num_steps + 1", _S + "arg_groups/speculative_hook.py",
     "speculative_num_draft_tokens=cfg.speculative_num_steps + 1"),
    ("draft-token bound topk + (num_steps-1)*topk^2 + 1", _S + "speculative/eagle_utils.py",
     "top_scores = torch.topk(score_list, num_draft_token - 1, dim=-1)"),
    ("default (num_steps, topk, num_draft_tokens) for Llama", _S + "arg_groups/speculative_hook.py",
     'if model_arch in ["LlamaForCausalLM"]:\n        return (5, 4, 8)'),
    ("context keys", _S + "utils/hf_transformers/common.py",
     'CONTEXT_LENGTH_KEYS = [\n    "max_sequence_length",\n    "seq_length",\n    "max_seq_len",\n'
     '    "model_max_length",\n    "max_position_embeddings",\n]'),
    ("rope factor ignored with original_max_position_embeddings", _S + "utils/hf_transformers/common.py",
     'if "original_max_position_embeddings" in rope_scaling:\n            rope_scaling_factor = 1'),
    ("draft/target context error", _S + "configs/model_config.py",
     "is greater than the derived context_length ({derived_context_len}). "),
    ("override env " + "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN", _S + "environ.py",
     "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN = EnvBool(False)"),
)


#: A multi-node server's rendezvous (srt/distributed/bootstrap.py init_torch_distributed):
#: rank 0 waits here for every node; a peer that never joins stalls it in this phase.
JOIN_PHASE = PhaseMarker("join", (r"Init parallel begin",), (r"Init parallel ends",), ALWAYS,
                         ("Init parallel begin.", "Init parallel ends. elapsed=0.52 s"),
                         ((_S + "distributed/bootstrap.py", 'logger.info("Init parallel begin.")'),
                          (_S + "distributed/bootstrap.py", 'f"Init parallel ends. elapsed=')))


def phase_markers(version: str = PINNED_VERSION) -> tuple[PhaseMarker, ...]:
    """Every startup phase `version` can log, in its log order."""
    return for_version(version, PHASES_BY_VERSION)


def startup_phases(*, speculative: bool, num_steps: int | None,
                   version: str = PINNED_VERSION) -> list[str]:
    """The phases a server goes through, in `version`'s log order."""
    return [m.name for m in phase_markers(version)
            if m.applies(draft=speculative, num_steps=num_steps)]


def estimate_phase_seconds(*, weight_gb_per_gpu: float, draft_weight_gb_per_gpu: float,
                           speculative: bool, num_steps: int | None) -> dict[str, float]:
    """Typical wall time of each startup step on H200-class hardware, by step name
    (the draft's weight loading on its own, whatever a release's phase markers group).

    Calibrated on the scenario's Kimi-K2.5 TP8 log: ~69 GB of INT4 weights per
    GPU loaded in 228 s from local NVMe (~0.3 GB/s per rank, ranks share the
    disk); CUDA-graph capture 1-2 s per graph set; warm-up a few seconds.
    Used both for the compiler's readiness budgets and the simulator's timing,
    so the two can never disagree.
    """
    est = {"load_weights": 5.0 + weight_gb_per_gpu / 0.3, "kv_cache": 2.0,
           "capture_cuda_graph": 1.5, "warmup": 3.0}
    if speculative:
        est["load_draft_weights"] = 2.0 + draft_weight_gb_per_gpu / 0.3
        if (num_steps or 0) > 1:
            est["capture_draft_cuda_graph"] = 1.5
        est["capture_draft_extend_cuda_graph"] = 1.2
    return est


def max_draft_tokens(num_steps: int, topk: int) -> int:
    """The most draft tokens an EAGLE tree of num_steps levels x topk can verify.

    The draft scores topk candidates at step 1 and topk x topk at each later
    step; ``organize_draft_results`` takes the best num_draft_tokens - 1 of
    them with ``torch.topk`` (srt/speculative/eagle_utils.py), so more fails
    ("selected index k out of range") when the graphs are captured or the
    first request is served.
    """
    return topk + (num_steps - 1) * topk * topk + 1


# --- model facts as SGLang derives them (srt/configs/model_config.py) -----
CONTEXT_KEYS = ("max_sequence_length", "seq_length", "max_seq_len", "model_max_length",
                "max_position_embeddings")
FALLBACK_CONTEXT_LEN = 2048
ALLOW_LONGER_CONTEXT_ENV = "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"


#: Rope types whose factor SGLang's get_context_length ignores: 0.5.10 moved to
#: transformers 5, whose config standardisation (modeling_rope_utils.
#: standardize_rope_params; 5.19 under 0.5.23) fills in rope_type (from "type") and
#: original_max_position_embeddings (= max_position_embeddings) for llama3, yarn and
#: longrope, so a yarn config without that key is no longer multiplied.
FACTOR_IGNORED_ROPE_TYPES = [("0.5.10", ("llama3", "yarn", "longrope")),
                             (OLDEST_VERSION, ("llama3",))]
ROPE_TYPES_WITH_ORIGINAL = FACTOR_IGNORED_ROPE_TYPES[0][1]


def derived_context_length(hf_config: dict, version: str = PINNED_VERSION) -> int:
    """SGLang's ``get_context_length`` (0.5.23 srt/utils/hf_transformers/common.py) as
    `version` sees a config.json: the first present key, times the rope factor unless
    the factor is ignored (an ``original_max_position_embeddings`` key, or a rope type
    in FACTOR_IGNORED_ROPE_TYPES for that release)."""
    rope = hf_config.get("rope_scaling") or hf_config.get("rope_parameters") or {}
    factor = 1.0
    rope_type = rope.get("rope_type", rope.get("type")) if rope else None
    if (rope and "original_max_position_embeddings" not in rope
            and rope_type not in for_version(version, FACTOR_IGNORED_ROPE_TYPES)):
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


#: With speculation and no --max-running-requests, SGLang caps running requests here.
SPEC_DEFAULT_MAX_RUNNING_REQUESTS = 48

#: The adaptive mode (``--speculative-adaptive``, ``--speculative-adaptive-config FILE``):
#: per batch-size band, the num_steps candidates of a topk-1 chain, moved between by an EMA
#: of the accept length with hysteresis (speculative/adaptive_spec_params.py,
#: arg_groups/speculative_hook.py ``_init_adaptive_speculative_params``: topk 1 and
#: num_draft_tokens = num_steps + 1; ``adaptive_unsupported_reason``: EAGLE/EAGLE3 only).
#: Read from 0.5.23; the first release that has it was not checked.
ADAPTIVE_SINCE = "0.5.23"
ADAPTIVE_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN")
#: ``DEFAULT_ADAPTIVE_CONFIG`` (0.5.23): the engine's own mode, keyed by batch size.
DEFAULT_ADAPTIVE_CONFIG = {
    "1": {"candidate_steps": [1, 3, 5, 7], "up_hysteresis": 0.0, "down_hysteresis": -0.25,
          "ceiling_coeff": 0},
    "8": {"candidate_steps": [0, 1, 3], "up_hysteresis": 0.0, "down_hysteresis": 0.0,
          "ceiling_coeff": 0},
    "32": {"candidate_steps": [0, 1], "up_hysteresis": 0.0, "down_hysteresis": 0.0,
           "ceiling_coeff": 0},
    "64": {"candidate_steps": [0], "up_hysteresis": 0.0, "down_hysteresis": 0.0,
           "ceiling_coeff": 0},
}
#: AdaptiveStepSlot's defaults for the keys a config may leave out.
ADAPTIVE_SLOT_DEFAULTS = {"ema_alpha": 0.2, "update_interval": 5, "warmup_batches": 10,
                          "down_hysteresis": -0.25, "up_hysteresis": 0.0, "ceiling_coeff": 0}
_A = _S + "speculative/adaptive_spec_params.py"
#: Where 0.5.23 says what schedule_format relies on (checked by tests/drift).
ADAPTIVE_EVIDENCE = (
    ("adaptive mode: topk 1 only", _A, '"(only topk=1 is supported)"'),
    ("adaptive mode: EAGLE/EAGLE3 only", _A,
     'if cfg.speculative_algorithm not in ("EAGLE", "EAGLE3"):'),
    ("DEFAULT_ADAPTIVE_CONFIG's batch-size-1 candidates", _A, '"candidate_steps": [1, 3, 5, 7],'),
    ("0 steps reached below 0.5 accepted drafts", _A,
     "drop_threshold = 0.5 if prev_step == 0 else prev_step - 0.5"),
    ("the band at or below the padded batch", _A,
     "idx = bisect.bisect_right(self._bs_list, target) - 1"),
    ("adaptive: num_steps defaults to the middle candidate", _S + "arg_groups/speculative_hook.py",
     "speculative_num_steps=candidate_steps[len(candidate_steps) // 2],"),
)
#: The speculation flags a schedule's launch command sets itself.
_SPEC_SHAPE_FLAGS = ("--speculative-num-steps", "--speculative-eagle-topk",
                     "--speculative-num-draft-tokens")



#: Prefill CUDA-graph capture sizes in tokens (srt/arg_groups/cuda_graph_hook.py
#: generate_prefill_cuda_graph_batch_sizes), up to the chunked prefill size.
def prefill_graph_sizes(max_tokens: int) -> list[int]:
    sizes = (list(range(4, 33, 4)) + list(range(48, 257, 16)) + list(range(288, 513, 32))
             + list(range(576, 1025, 64)) + list(range(1280, 4097, 256))
             + list(range(4608, max_tokens + 1, 512)))
    return [s for s in sizes if s <= max_tokens]


def auto_mem_fraction_static(*, gpu_memory_gb: float, tp: int, pp: int = 1,
                             max_running_requests: int | None = None,
                             cuda_graph_max_bs: int | None = None, mla: bool = False) -> float:
    """``mem_fraction_static`` as 0.5.23 picks it when not given
    (srt/arg_groups/memory_hook.py ``handle_gpu_memory_settings``), for the common case:
    no post-capture KV sizing (off by default), no disaggregation, no DP attention, no
    DeepEP, no VLM adjustment, CUDA graphs on.

    reserved MiB = 512 + 1.5 x chunked_prefill_size + tp x pp / 8 x 1024
    + 2 x decode graph max bs + the prefill graph's reserve, at least 10 GiB above 60 GiB.
    The decode max bs is the memory tier's, or ``cuda_graph_max_bs`` when given, capped by
    a GIVEN ``max_running_requests`` only: the memory hook runs before the speculative hook
    (srt/arg_groups/pipeline.py), so speculation's default cap of 48 is not yet set. The
    prefill (breakable) graph, on by default on CUDA and off with pp > 1
    (cuda_graph_hook.py), reserves 8 MiB per capture size, 1.5 GiB with MLA attention.
    There is no EAGLE reserve (0.5.23 has none). tests/drift compares this with 0.5.23's
    own resolution on every command specc emits.
    """
    mem = gpu_memory_gb * 1024.0
    tiers = ((20, 2048, 8, 8), (35, 4096, 48, 160), (60, 4096, 32, 160), (90, 8192, 256, 512),
             (160, 8192, 256, 512))
    chunked, bs = 16384, 512
    for limit_gb, chunk, bs_small, bs_large in tiers:
        if mem < limit_gb * 1024:
            chunked, bs = chunk, (bs_small if tp < 4 else bs_large)
            break
    if cuda_graph_max_bs is not None:
        bs = cuda_graph_max_bs
    elif max_running_requests is not None:
        bs = min(bs, max_running_requests)
    reserved = 512 + max(chunked, 2048) * 1.5 + tp * pp / 8 * 1024 + bs * 2
    if pp == 1:   # the prefill graph
        reserved += 1.5 * 1024 if mla else len(prefill_graph_sizes(chunked)) * 8
    if mem > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    return round((mem - reserved) / mem, 3)


# --- the adapter -------------------------------------------------------------

class SGLang(Engine):
    """`python -m sglang.launch_server`."""

    name = "sglang"
    launcher = ("python", "-m", "sglang.launch_server")
    parser = "specc.engines.parsers.sglang_parse"
    #: The distribution whose version and parser `inv doctor` and tests/drift read.
    package: str | None = "sglang"
    pinned_version = PINNED_VERSION
    #: /server_info's "version" (0.5.23: server_args plus version, internal_states).
    release_probe = {"paths": list(SERVER_INFO_PATHS), "field": "version"}
    oldest_version = OLDEST_VERSION
    version_read = SGLANG_VERSION_READ
    default_port = 30000
    health_path = HEALTH_PATH
    health_timeout_s = HEALTH_CHECK_TIMEOUT_S
    ready_line = READY_LINE
    fatal_messages = FATAL_MESSAGES
    draft_context_policy = "error"
    context_override_env = ALLOW_LONGER_CONTEXT_ENV
    rewrites_topk1_draft_tokens = True
    resolves_ngram_knobs = True
    multinode = True
    join_phase = JOIN_PHASE
    spec_default_max_running = SPEC_DEFAULT_MAX_RUNNING_REQUESTS
    launch_budget_s = 300.0
    #: "Decode batch" every 40 decode steps (--decode-log-interval) and a "Prefill
    #: batch" line per prefill: 60 s of silence with requests in flight is a wedge.
    serving_silence_s = 60.0
    request_id_field = "rid"          # GenerateReqInput.rid, and the OpenAI requests' rid
    flush_cache_path = FLUSH_CACHE_PATH
    server_flags = SERVER_FLAGS

    def argv(self, spec, *, host, port, rendezvous_port=None):
        mp, hw, eng, sp = spec.model_pair, spec.hardware, spec.engine, spec.speculation
        args = list(self.launcher) + flag_args([
            ("--model-path", mp["target"]["path"]),
            ("--tp-size", hw["tp"]),
            ("--dp-size", hw.get("dp") if hw.get("dp", 1) > 1 else None),
            ("--pp-size", hw.get("pp") if hw.get("pp", 1) > 1 else None),
            ("--ep-size", hw.get("ep") if hw.get("ep", 1) > 1 else None),
            ("--host", host),
            ("--port", port),
            ("--trust-remote-code", bool(mp["target"].get("trust_remote_code"))),
            ("--context-length", mp.get("context_length")),
        ]) + self.server_args(spec) + flag_args([
            ("--attention-backend", eng.get("attention_backend")),
            ("--enable-metrics", bool(eng.get("enable_metrics"))),
        ])
        if spec.nodes > 1:   # each node's rank and the head's address: on the node
            if rendezvous_port is None:
                raise ValueError("a multi-node server needs its planned rendezvous port")
            args += flag_args([("--nnodes", spec.nodes), ("--node-rank", NODE_RANK),
                               ("--dist-init-addr", f"{HEAD}:{rendezvous_port}")])
        if spec.speculative:
            ngram = spec.algorithm == "NGRAM"
            args += flag_args([
                ("--speculative-algorithm", sp["algorithm"]),
                ("--speculative-draft-model-path",
                 mp["draft"]["path"] if spec.uses_draft_model and mp.get("draft") else None),
                # NGRAM: 0.5.23 replaces both (topk by --speculative-ngram-max-bfs-breadth,
                # num_steps by num_draft_tokens // topk): SPEC_NGRAM_KNOBS says so
                ("--speculative-num-steps", None if ngram else sp.get("num_steps")),
                ("--speculative-eagle-topk", None if ngram else sp.get("topk")),
                ("--speculative-num-draft-tokens", sp.get("num_draft_tokens")),
            ])
        return args + [str(a) for a in eng.get("extra_args") or []]

    def max_draft_tokens(self, num_steps: int, topk: int) -> int | None:
        return max_draft_tokens(num_steps, topk)

    def schedule_format(self, argv, *, dp, algorithm):
        """0.5.23's adaptive mode: one band per batch-size key of the config file, each with
        a single candidate (the decided num_steps; 0 = no drafting), so the EMA never moves
        it off the decision; the server starts at the largest num_steps (it must be one of
        the candidates, and sizes the draft buffers)."""
        out = super().schedule_format(argv, dp=dp, algorithm=algorithm)
        base = drop_flags(argv, _SPEC_SHAPE_FLAGS + ("--speculative-adaptive",
                                                     "--speculative-adaptive-config"))
        why = None
        if parse_version(self.version) < parse_version(ADAPTIVE_SINCE):
            why = (f"sglang {self.version} is older than {ADAPTIVE_SINCE}, the release "
                   "specc read --speculative-adaptive from")
        elif algorithm not in ADAPTIVE_ALGORITHMS:
            why = (f"sglang's adaptive mode runs EAGLE/EAGLE3 only, not {algorithm} "
                   "(adaptive_unsupported_reason)")
        return {**out, "kind": "sglang_adaptive", "why_not": why, "chains_only": True,
                "varies": "SGLang's adaptive mode varies num_steps of a topk-1 chain "
                          "(num_draft_tokens = num_steps + 1) by batch size",
                "routing": "the running batch, padded up to the next CUDA-graph batch size, "
                           "routed to the band at or below it (adaptive_spec_params.py _route)",
                "argv": base + ["--speculative-num-steps", "{max_steps}",
                                "--speculative-eagle-topk", "1",
                                "--speculative-num-draft-tokens", "{max_draft_tokens}",
                                "--speculative-adaptive", "--speculative-adaptive-config",
                                "{config_file}"],
                "file": {"name": "sglang-adaptive.json",
                         "entry": {"candidate_steps": ["{steps}"], "up_hysteresis": 0.0,
                                   "down_hysteresis": 0.0}},
                "engine_default_argv": None if why else base + [
                    "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
                    "--speculative-num-draft-tokens", "4", "--speculative-adaptive"]}

    def pp_speculation_refusal(self, spec):
        allowed = for_version(self.version, PP_SPEC_ALGORITHMS)
        if spec.algorithm in allowed:
            return None
        if not allowed:
            return (f"sglang {self.version} refuses speculative decoding with pipeline "
                    "parallelism (pp_size must be 1)",
                    f"set hardware.pp=1, or engine.version>={PINNED_VERSION} with "
                    "speculation.algorithm=EAGLE")
        return (f"sglang {self.version} refuses {spec.algorithm} with pipeline parallelism at "
                f"launch: \"{PP_SPEC_REFUSAL}\"",
                "set hardware.pp=1, or use speculation=eagle (EAGLE or NEXTN serve with pp > 1)")

    def env(self, spec, gpus, *, flush_cache=False):
        env, secrets = super().env(spec, gpus, flush_cache=flush_cache)
        if spec.speculative and spec.hardware.get("pp", 1) > 1:
            env.setdefault(PP_SPEC_ENV, "1")   # else 0.5.23 serves PP + EAGLE only in PD prefill
        if spec.uses_draft_model and spec.model_pair.get("draft_context_override"):
            env[ALLOW_LONGER_CONTEXT_ENV] = "1"
        return env, secrets

    def derived_context_length(self, model_config):
        return derived_context_length(model_config, self.version)

    def startup_context_error(self, target_len, draft_len):
        """The first sentence of SGLang's startup ValueError."""
        return context_mismatch_message(target_len, draft_len).split(". ")[0].removeprefix(
            "Warning: ")

    def memory_fraction(self, spec):
        value = spec.server.get("mem_fraction")
        if value is not None:
            return float(value), "server.mem_fraction"
        hw = spec.hardware
        return auto_mem_fraction_static(
            gpu_memory_gb=hw["gpu_memory_gb"], tp=hw["tp"], pp=hw.get("pp", 1),
            max_running_requests=spec.server.get("max_running_requests"),
            cuda_graph_max_bs=spec.server.get("cuda_graph_max_bs"),
            mla=bool(spec.target.get("kv_lora_rank"))), "SGLang auto (0.5.23 formula)"

    def max_running_requests(self, spec):
        value = spec.server.get("max_running_requests")
        if value is not None:
            return int(value), "server.max_running_requests"
        if spec.speculative:
            return self.spec_default_max_running, "SGLang's default with speculation"
        return None, "SGLang auto (from KV cache size)"

    def phase_markers(self):
        return phase_markers(self.version)

    def phase_estimates(self, spec):
        est = estimate_phase_seconds(
            weight_gb_per_gpu=spec.weight_gb_per_gpu("target"),
            draft_weight_gb_per_gpu=spec.weight_gb_per_gpu("draft"),
            speculative=spec.uses_draft_model, num_steps=spec.speculation.get("num_steps"))
        if not any(m.name == "load_draft_weights" for m in self.phase_markers()):
            est["load_weights"] += est.pop("load_draft_weights", 0.0)
        return est

    @property
    def spec_verify_metric(self) -> str | None:
        return for_version(self.version, SPEC_VERIFY_COUNTER)

    def acceptance(self, spec):
        """Run-scoped: generated tokens per verify call over the point, from two reads of
        the counters (both counted when a request finishes, so the two deltas cover the
        same requests; the verify-call counter exists from 0.5.13). Fallback: DP rank 0's
        cumulative average since start, warm-up included, folded in only every 40 decode
        iterations, so no difference of it is run-scoped."""
        if not spec.speculative:
            return None
        run = None
        if spec.engine.get("enable_metrics") and self.spec_verify_metric:
            run = CounterRatio(path=METRICS_PATH, numerator=GENERATION_TOKENS_METRIC,
                               denominator=self.spec_verify_metric)
        return Acceptance(run=run, cumulative=ServerField(
            paths=SERVER_INFO_PATHS, field="internal_states.0.avg_spec_accept_length"))

    def source_evidence(self) -> list[tuple[str, str, str]]:
        """(fact, file in the package, text) for every marker, metric and endpoint this
        adapter relies on, as the pinned release's source says them (tests/drift)."""
        out = [(f"phase {m.name}", path, text)
               for m in phase_markers(PINNED_VERSION) + (JOIN_PHASE,) for path, text in m.evidence]
        out += [(f"fatal pattern {m.text!r} ({m.exits})", m.source, m.printed)
                for m in FATAL_MESSAGES]
        out.append(("a warning that logs its traceback and carries on",) + WARNING_WITH_TRACEBACK)
        return out + list(METRIC_EVIDENCE + ENDPOINT_EVIDENCE + OTHER_EVIDENCE
                          + ADAPTIVE_EVIDENCE)

    def sim_facts_json(self, facts) -> str:
        """Facts in config.json's own keys, for the simulator (`architectures` is a list)."""
        values = dict(facts.values)
        arch = values.pop("architecture", None)
        if arch:
            values["architectures"] = [arch]
        return _json.dumps(values, sort_keys=True, separators=(",", ":"))
