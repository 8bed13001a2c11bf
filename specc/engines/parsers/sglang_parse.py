"""Parse SGLang launch commands with the installed sglang's own argument parser.

stdin: {"servers": [{"id": str, "argv": [...]}]}; stdout: {"package": "sglang",
"version": str, "servers": n, "rejected": [{"id", "error"}]}. Exit 0 if all accepted,
1 if any was rejected, 2 if sglang cannot be imported.

Checks what `python -m sglang.launch_server` does before it loads anything:
ServerArgs.add_cli_args + parse_args (unknown, ambiguous or malformed flags,
choices, types) + ServerArgs.from_cli_args, and that the speculative algorithm
is one SpeculativeAlgorithm knows. triton (imported at module level, never used
for parsing) is stubbed only where it is not installed (a CPU-only machine).
"""
import argparse
import json
import logging
import os
import sys
import warnings

LAUNCHERS = ("sglang.launch_server", "specc.sim")


class Rejected(Exception):
    pass


class RaisingParser(argparse.ArgumentParser):
    def error(self, message):  # argparse would print usage and exit 2
        raise Rejected(message)


def server_argv(argv):
    """The flags of `python -m sglang.launch_server ...` (or of the simulator, minus --sim-*)."""
    argv = list(argv)
    if len(argv) >= 3 and argv[1] == "-m" and argv[2] in LAUNCHERS:
        argv = argv[3:]
    elif argv[:2] == ["sglang", "serve"]:
        argv = argv[2:]
    else:
        raise ValueError(f"not an SGLang launch command: {' '.join(argv[:3])}")
    out, i = [], 0
    while i < len(argv):   # the simulator's own --sim-* flags all take a value
        if argv[i].startswith("--sim-"):
            i += 1 if "=" in argv[i] else 2
            continue
        out.append(argv[i])
        i += 1
    return out


def main():
    from importlib.metadata import PackageNotFoundError, version

    try:
        installed = version("sglang")
    except PackageNotFoundError:
        print(json.dumps({"package": "sglang", "version": None, "error": "sglang is not installed"}))
        return 2
    servers = json.load(sys.stdin)["servers"]
    logging.disable(logging.CRITICAL)
    warnings.filterwarnings("ignore")
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from stubs import install_stubs
    install_stubs(("triton",))
    sys.path.pop(0)
    from sglang.srt.server_args import ServerArgs
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    report: dict = {"package": "sglang", "version": installed, "servers": len(servers), "rejected": []}
    for s in servers:
        try:
            argv = server_argv(s["argv"])
            parser = RaisingParser(prog="sglang serve")
            ServerArgs.add_cli_args(parser)
            sa = ServerArgs.from_cli_args(parser.parse_args(argv))
            if sa.speculative_algorithm is not None:
                SpeculativeAlgorithm.from_string(sa.speculative_algorithm)
        except (Rejected, ValueError, TypeError, KeyError) as e:
            report["rejected"].append({"id": s["id"], "error": f"{e}"[:400]})
    print(json.dumps(report))
    return 1 if report["rejected"] else 0


if __name__ == "__main__":
    sys.exit(main())
