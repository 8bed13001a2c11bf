"""Resolve SGLang launch commands with the installed sglang's own ServerArgs resolution.

Run under the drift venv's Python (tests/drift/venvs.py). stdin: {"gpu": {"memory_mib",
"count", "capability", "name"}, "servers": [{"id", "argv", "env"}]}; stdout: one JSON
object {"package", "version", "servers": [{"id", "parsed", "resolved", "error"}]}:
for each command, the fields below as the parser read them and as
``ServerArgs.resolve_once()`` (every resolution hook, then ``check_server_args``) left
them, or the error it raised. Model paths must be local directories holding config.json.

Without a GPU, only the hardware probes are stubbed, each after every sglang module the
resolution imports has been imported with the machine's real (CPU) answers, so no
import takes a CUDA-only branch:

- ``torch.cuda.is_available`` / ``torch.version.cuda``: SGLang picks the device, the
  attention backend and the CUDA-graph backends from them; the plan runs on CUDA GPUs.
- ``torch.cuda.device_count`` / ``get_device_capability`` / ``get_device_name``: the
  GPU kind (e.g. Hopper, sm90) the backend defaults depend on, as given in stdin.
- ``sglang.srt.utils.common.get_nvgpu_memory_capacity`` (nvidia-smi): the GPU memory
  the memory hook sizes chunked prefill, graph batch sizes and mem_fraction_static by.

Import stubs (specc/engines/parsers/stubs.py) stand in for triton and torchvision, which
sglang imports at module level and never calls while resolving arguments: PyPI's
torchvision is a CUDA build that cannot load beside the CPU torch, and transformers is
asked about torchvision before the stub exists, so it sees the truth (absent).
"""
import json
import logging
import os
import sys
import warnings

#: ServerArgs fields compared with what specc emitted and predicts.
FIELDS = ("model_path", "tp_size", "pp_size", "dp_size", "ep_size", "context_length",
          "mem_fraction_static", "max_running_requests", "dtype", "kv_cache_dtype",
          "quantization", "attention_backend", "page_size", "chunked_prefill_size",
          "speculative_algorithm", "speculative_draft_model_path", "speculative_num_steps",
          "speculative_eagle_topk", "speculative_num_draft_tokens", "enable_metrics",
          "speculative_adaptive", "speculative_adaptive_config")


from forked import resolve_in_fork  # noqa: E402 - beside this script

def _plain(value):
    try:
        json.dumps(value)
        return value
    except TypeError:
        return str(value)


def _fields(d):
    out = {k: _plain(d.get(k)) for k in FIELDS}
    graphs = d.get("cuda_graph_config") or {}
    for phase in ("decode", "prefill"):
        g = graphs.get(phase) if isinstance(graphs, dict) else None
        if isinstance(g, dict):
            out[f"cuda_graph_{phase}_backend"] = _plain(g.get("backend"))
            out[f"cuda_graph_{phase}_max_bs"] = _plain(g.get("max_bs"))
            out[f"cuda_graph_{phase}_sizes"] = len(g.get("bs") or ())
    return out


def _import_for_cpu():
    """Everything the resolution imports, with the machine's own answers (see above)."""
    import ast
    import importlib
    import pkgutil

    from transformers.utils import import_utils

    import_utils.is_torchvision_available()          # cached: absent, the truth here
    getattr(import_utils, "is_torchvision_v2_available", lambda: None)()
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                    "specc", "engines", "parsers"))
    from stubs import install_stubs
    install_stubs(("triton", "torchvision"))
    sys.path.pop(0)
    import sglang.srt.arg_groups as groups
    import sglang.srt.arg_groups.pipeline as pipeline

    names = {f"sglang.srt.arg_groups.{m.name}" for m in pkgutil.iter_modules(groups.__path__)}
    with open(pipeline.__file__) as f:   # the modules its steps import lazily
        names |= {n.module for n in ast.walk(ast.parse(f.read()))
                  if isinstance(n, ast.ImportFrom) and n.module}
    for name in sorted(names):
        importlib.import_module(name)


def _stub_gpu(gpu):
    """The hardware probes, answering as the plan's GPUs would (see the module docstring)."""
    import torch

    import sglang.srt.utils.common as common

    torch.cuda.is_available = lambda: True
    torch.version.cuda = gpu.get("cuda", "13.0")
    torch.cuda.device_count = lambda: int(gpu["count"])
    torch.cuda.get_device_capability = lambda device=None: tuple(gpu["capability"])
    torch.cuda.get_device_name = lambda device=None: gpu["name"]
    common.get_nvgpu_memory_capacity = lambda: float(gpu["memory_mib"])
    for probe in ("is_cuda", "is_cuda_alike"):   # lru-cached at import with the CPU's answer
        getattr(common, probe).cache_clear()


def _as_data(value):
    from sglang.srt.server_args import _plain as as_plain   # Structs -> dicts

    return as_plain(value)


def _resolve(argv, env):
    from sglang.srt.server_args import ServerArgs

    from sglang_parse import RaisingParser, server_argv

    os.environ.update(env)
    parser = RaisingParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    args = parser.parse_args(server_argv(argv))
    sa = ServerArgs.from_cli_args(args)
    parsed = _fields({k: _as_data(getattr(sa, k, None)) for k in FIELDS + ("cuda_graph_config",)})
    try:
        sa.resolve_once()
        sa.check_server_args()
    except BaseException as e:   # noqa: BLE001 - reported, the parent decides
        return parsed, None, f"{type(e).__name__}: {e}"[:600]
    return parsed, _fields(sa.resolved_dict()), None


def main():
    from importlib.metadata import version

    request = json.load(sys.stdin)
    logging.disable(logging.CRITICAL)
    warnings.filterwarnings("ignore")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                    "specc", "engines", "parsers"))
    _import_for_cpu()
    _stub_gpu(request["gpu"])
    out = []
    for s in request["servers"]:
        out.append(resolve_in_fork(s["id"], lambda s=s: _resolve(s["argv"], s.get("env") or {})))
    print(json.dumps({"package": "sglang", "version": version("sglang"), "servers": out}))


if __name__ == "__main__":
    sys.exit(main())
