"""Parse simulator launch commands with the simulator's own argument parser.

The same protocol as sglang_parse.py (stdin: {"servers": [{"id", "argv"}]}; stdout:
{"package": "specc", "version": null, "servers": n, "rejected": [{"id", "error"}]}),
run as a file under the Python the plan launches `python -m specc.sim` with, where
specc is installed (the simulator is part of it). Exit 0 if all accepted, 1 if not.
"""
import json
import sys

class Rejected(Exception):
    pass


def _raise(message):
    raise Rejected(message)


def main():
    from specc.sim.args import build_parser

    servers = json.load(sys.stdin)["servers"]
    report: dict = {"package": "specc", "version": None, "servers": len(servers), "rejected": []}
    for s in servers:
        parser = build_parser()
        parser.error = _raise  # type: ignore[method-assign]  # argparse would print usage and exit
        try:
            parser.parse_args(s["argv"][3:])   # after `python -m specc.sim` (the plan's launcher)
        except Rejected as e:
            report["rejected"].append({"id": s["id"], "error": f"{e}"[:400]})
    print(json.dumps(report))
    return 1 if report["rejected"] else 0


if __name__ == "__main__":
    sys.exit(main())
