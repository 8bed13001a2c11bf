"""Resolve vLLM launch commands with the installed vllm's own engine configuration.

Run under the drift venv's Python (tests/drift/venvs.py). stdin: {"gpu": {"memory_bytes",
"count", "capability", "name"}, "servers": [{"id", "argv", "env"}]}; stdout: one JSON
object {"package", "version", "servers": [{"id", "parsed", "resolved", "error"}]}: for
each command, the fields below as `vllm serve`'s parser read them and as
``EngineArgs.from_cli_args(...).create_engine_config()`` (ModelConfig, CacheConfig,
SchedulerConfig, ParallelConfig, SpeculativeConfig, CompilationConfig: every check
vLLM makes before it starts a process) resolved them, or the error it raised. Model
paths must be local directories holding config.json.

Without a GPU, only the hardware probes of the CUDA platform are stubbed (the plan runs
on CUDA GPUs; vLLM's defaults are per platform and GPU):

- ``CudaPlatform.get_device_capability`` / ``get_device_name``: the GPU kind (Hopper,
  sm90) that attention and graph defaults depend on, as given in stdin;
- ``CudaPlatform.get_device_total_memory``: the memory --max-num-seqs' default depends on
  (engine/arg_utils.py get_batch_defaults: 1024 on an H100/H200);
- ``CudaPlatform.device_count`` / ``is_fully_connected``: the node's GPUs;
- ``vllm._custom_ops.cutlass_scaled_mm_supports_{fp8,block_fp8,fp4}``: the kernel
  library's answer for the GPU's compute capability, asked at import;

and the wheel's compiled CUDA kernels (``vllm._C``, ``vllm._C_stable_libtorch``,
``vllm._moe_C``, ``vllm._qutlass_C``), which the CUDA platform module imports to
register ops and which nothing calls while building a configuration, are import stubs
(they cannot load beside the CPU torch).
"""
import contextlib
import io
import json
import logging
import os
import sys

os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
if "VLLM_CACHE_ROOT" not in os.environ:   # no model-info cache from an earlier run on this machine
    import tempfile
    os.environ["VLLM_CACHE_ROOT"] = tempfile.mkdtemp(prefix="specc-drift-vllm-")
PARSERS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "specc",
                       "engines", "parsers")
KERNELS = ("vllm._C", "vllm._C_stable_libtorch", "vllm._moe_C", "vllm._qutlass_C",
           "vllm.vllm_flash_attn._vllm_fa2_C", "vllm.vllm_flash_attn._vllm_fa3_C",
           "vllm._flashmla_C", "vllm._flashmla_extension_C")


from forked import resolve_in_fork  # noqa: E402 - beside this script

def _stub_gpu(gpu):
    """The CUDA platform, its hardware probes answering as the plan's GPUs would."""
    from stubs import MockModule

    for name in KERNELS:
        sys.modules[name] = MockModule(name)
    import vllm.platforms as platforms
    from vllm.platforms.cuda import CudaPlatform
    from vllm.platforms.interface import DeviceCapability

    major, minor = gpu["capability"]
    CudaPlatform.get_device_capability = classmethod(
        lambda cls, device_id=0: DeviceCapability(major, minor))
    CudaPlatform.get_device_name = classmethod(lambda cls, device_id=0: gpu["name"])
    CudaPlatform.get_device_total_memory = classmethod(
        lambda cls, device_id=0: int(gpu["memory_bytes"]))
    CudaPlatform.device_count = classmethod(lambda cls: int(gpu["count"]))
    CudaPlatform.is_fully_connected = classmethod(lambda cls, ids: True)
    platforms.current_platform = CudaPlatform()
    import vllm._custom_ops as ops

    # the kernel library's answers to "does this GPU run CUTLASS fp8 / block-fp8 / fp4
    # GEMMs" (asked at import by quantization utils): sm90 runs fp8 and block fp8, fp4 needs
    # sm100 (as vLLM's CUTLASS kernels are built)
    ops.cutlass_scaled_mm_supports_fp8 = lambda capability: capability >= 89
    ops.cutlass_scaled_mm_supports_block_fp8 = lambda capability: capability >= 90
    ops.cutlass_scaled_mm_supports_fp4 = lambda capability: capability >= 100
    import vllm.model_executor.models.registry as registry

    # vLLM inspects a model class in a child process so that the parent never initializes
    # CUDA; there is no CUDA here, and a child would not carry the stubs above.
    registry._run_in_subprocess = lambda fn: fn()


def _resolved(c):
    sc = c.speculative_config
    draft = getattr(sc, "draft_model_config", None) if sc else None
    return {
        "tensor_parallel_size": c.parallel_config.tensor_parallel_size,
        "pipeline_parallel_size": c.parallel_config.pipeline_parallel_size,
        "data_parallel_size": c.parallel_config.data_parallel_size,
        "max_model_len": c.model_config.max_model_len,
        "dtype": str(c.model_config.dtype).removeprefix("torch."),
        "quantization": c.model_config.quantization,
        "gpu_memory_utilization": c.cache_config.gpu_memory_utilization,
        "kv_cache_dtype": str(c.cache_config.cache_dtype),
        "max_num_seqs": c.scheduler_config.max_num_seqs,
        "max_cudagraph_capture_size": c.compilation_config.max_cudagraph_capture_size,
        "speculative_method": sc.method if sc else None,
        "num_speculative_tokens": sc.num_speculative_tokens if sc else None,
        "draft_max_model_len": draft.max_model_len if draft else None,
        "num_speculative_tokens_per_batch_size": _schedule(c),
        "schedule_lookup": _lookup(c),
    }


def _schedule(c):
    sc = c.speculative_config
    got = getattr(sc, "num_speculative_tokens_per_batch_size", None) if sc else None
    return None if got is None else [list(x) for x in got]


def _lookup(c):
    """The scheduler's dense batch size -> K table (its own validation included), as the
    engine core builds it (v1/core/sched/scheduler.py)."""
    got = _schedule(c)
    if got is None:
        return None
    from vllm.v1.spec_decode.dynamic.utils import build_dynamic_sd_schedule_lookup

    return build_dynamic_sd_schedule_lookup(got, c.scheduler_config.max_num_seqs,
                                            c.speculative_config.num_speculative_tokens)


def _parsed(args):
    sc = args.speculative_config
    sc = (sc if isinstance(sc, dict) else json.loads(sc)) if sc else {}
    return {"tensor_parallel_size": args.tensor_parallel_size,
            "pipeline_parallel_size": args.pipeline_parallel_size,
            "data_parallel_size": args.data_parallel_size,
            "max_model_len": args.max_model_len, "dtype": args.dtype,
            "quantization": args.quantization,
            "gpu_memory_utilization": args.gpu_memory_utilization,
            "kv_cache_dtype": args.kv_cache_dtype, "max_num_seqs": args.max_num_seqs,
            "max_cudagraph_capture_size": args.max_cudagraph_capture_size,
            "speculative_method": sc.get("method"),
            "num_speculative_tokens": sc.get("num_speculative_tokens"),
            "draft_max_model_len": sc.get("max_model_len")}


def _resolve(parser, argv, env):
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.usage.usage_lib import UsageContext

    from vllm_parse import serve_argv

    os.environ.update(env)
    args = parser.parse_args(serve_argv(argv))
    if getattr(args, "model_tag", None):   # what `vllm serve MODEL` does (cli/serve.py)
        args.model = args.model_tag
    parsed = _parsed(args)
    try:
        config = AsyncEngineArgs.from_cli_args(args).create_engine_config(
            usage_context=UsageContext.OPENAI_API_SERVER)
    except BaseException as e:   # noqa: BLE001 - reported, the parent decides
        return parsed, None, f"{type(e).__name__}: {e}"[:600]
    return parsed, _resolved(config), None


def _quiet(fn, *args):
    """fn(*args) with vLLM's prints kept off stdout (the result's channel)."""
    with contextlib.redirect_stdout(io.StringIO()):
        return fn(*args)


def main():
    from importlib.metadata import version

    request = json.load(sys.stdin)
    sys.path.insert(0, PARSERS)
    with contextlib.redirect_stdout(io.StringIO()):
        _stub_gpu(request["gpu"])
        from vllm_parse import build_parser
        parser, _ = build_parser()
        import vllm.engine.arg_utils  # noqa: F401 - imported once, before the forks
        import vllm.config  # noqa: F401
    logging.disable(logging.CRITICAL)
    out = []
    for s in request["servers"]:
        out.append(resolve_in_fork(s["id"], lambda s=s: _quiet(
            _resolve, parser, s["argv"], s.get("env") or {})))
    print(json.dumps({"package": "vllm", "version": version("vllm"), "servers": out}))


if __name__ == "__main__":
    sys.exit(main())
