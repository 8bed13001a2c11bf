"""A 10^6-line trace: time to the first send and peak memory, built up front vs streamed.

    .venv/bin/python benchmarks/trace_stream.py [--lines 1000000] [--send 2000]

Writes a mooncake-style trace (`--lines` rows, 1 ms apart; input 64-192 tokens, a shared
512-token block per 8 rows plus a row's own words; output 8-24), starts `python -m
specc.sim` on a free port, then replays the trace's first `--send` requests against it
(keep_sending says no after them, as adaptive stopping would) in a fresh process per way:

- `lists`: what point.py did before: `trace.load` (every prompt built), then `run_load`
  with the lists (every request body and record built before the first send);
- `stream`: `trace.Replay` handed to `run_load(stream=...)`: each request read and built
  as the schedule reaches it.

Each child prints the seconds from its start (before the trace is opened) to the first
request on the wire (the earliest record's `start`), and its peak RSS (ru_maxrss). The
figures are in docs/workloads.md.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def write_trace(path: Path, lines: int) -> None:
    rng = random.Random(0)
    with open(path, "w") as f:
        for k in range(lines):
            f.write(json.dumps({"timestamp": k, "input_length": rng.randint(64, 192),
                                "output_length": rng.randint(8, 24),
                                "hash_ids": [k // 8]}) + "\n")


def child(way: str, url: str, path: str, send: int) -> None:
    import asyncio

    from specc.prompts import trace
    from specc.run.loadgen import run_load

    start = time.time()
    asked = 0

    def keep_sending() -> bool:
        nonlocal asked
        asked += 1
        return asked <= send

    common = dict(api="completions", model="m", concurrency=64, warmup=1,
                  keep_sending=keep_sending)
    if way == "lists":
        prompts, due = trace.load(path, num=10**9)
        res = asyncio.run(run_load(url, prompts, send_at=due, **common))
    else:
        res = asyncio.run(run_load(url, [], stream=trace.Replay(path, num=10**9), **common))
    sent = [r.start for r in res.records if r.start]
    bad = sum(not r.ok for r in res.records)
    print(json.dumps({"way": way, "first_send_s": round(min(sent) - start, 3),
                      "requests": len(res.records), "failed": bad,
                      "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
                                           / 1024, 1)}))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=1_000_000)
    ap.add_argument("--send", type=int, default=2000)
    ap.add_argument("--ways", default="stream,lists")
    ap.add_argument("--child", nargs=3, metavar=("WAY", "URL", "TRACE"))
    args = ap.parse_args()
    if args.child:
        return child(*args.child, args.send)
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from send_lateness import _sim

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.jsonl"
        t = time.time()
        write_trace(path, args.lines)
        print(f"trace: {args.lines} lines, {path.stat().st_size / 2**20:.0f} MiB "
              f"(written in {time.time() - t:.1f} s)")
        proc, url = _sim(_free_port())
        try:
            for way in args.ways.split(","):
                out = subprocess.run([sys.executable, __file__, "--send", str(args.send),
                                      "--child", way, url, str(path)], cwd=ROOT,
                                     capture_output=True, text=True,
                                     env={**os.environ, "PYTHONPATH": str(ROOT)})
                print(out.stdout.strip() or out.stderr[-2000:])
        finally:
            proc.terminate()
            proc.wait(10)


if __name__ == "__main__":
    main()
