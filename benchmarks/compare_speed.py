"""How long `specc compare` takes on two 10^4-point runs (issue 20: under 2 s).

Writes two synthetic run dirs (plan.json, results.jsonl with intervals, requests/ with
16 requests a point, the same prompts in both: the paired path) into a temp dir, then
times, each in a fresh process (wall clock and CPU time, medians):

- the first compare, which reads the files and writes each run's compare.npz (a run
  writes its own when it finishes; this is the cost for a run made before);
- compare with the copies (`compare_runs` in-process, numpy imported first);
- the whole `specc compare A B` command, table and `--json`, start-up included;
- with ``--reference DIR`` (a checkout of an earlier specc, e.g. `git worktree add
  /tmp/before main`), that one's `compare_runs` on the same runs, interleaved with this
  one's, so both see the same machine load.

Rerun: python benchmarks/compare_speed.py [POINTS] [--reference DIR] [--rounds N]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace as NS

from specc import requestlog

REQUESTS = 16
PROMPTS = [NS(id=f"p{i}", category="x", turn=1) for i in range(REQUESTS)]


def write_run(d: Path, points: int, seed: int, slower: float = 1.0) -> None:
    rng = random.Random(seed)
    d.mkdir(parents=True)
    (d / "requests").mkdir()
    servers, benches, rows = [], [], []
    per_server = 10
    for s in range(points // per_server):
        sid = f"srv{s}"
        servers.append({"id": sid, "label": f"EAGLE3 s{s}", "params": {
            "target": "t", "draft": "d", "algorithm": "EAGLE3", "num_steps": s}})
        for c in range(per_server):
            bid = f"{sid}-c{c}-{seed}"
            benches.append({"id": bid, "server": sid, "baseline": None,
                            "params": {"concurrency": c + 1, "dataset": "specc", "seed": 0}})
            reqs, tot_tok, tot_lat = [], 0, 0.0
            for i in range(REQUESTS):
                tok = 128
                ttft = rng.uniform(0.02, 0.05) * slower
                lat = ttft + tok * rng.uniform(0.004, 0.006) * slower
                tot_tok, tot_lat = tot_tok + tok, tot_lat + lat
                reqs.append(NS(index=i, ok=True, error=None, input_tokens=256,
                               output_tokens=tok, ttft=ttft, e2e_latency=lat, start=0.0,
                               verify_ct=None, sent_at_s=0.0, lateness_s=None))
            # the lines as the executor writes them (requestlog.append, less its fsync)
            (d / "requests" / f"{bid}.jsonl").write_text("".join(
                json.dumps(x, separators=(",", ":")) + "\n"
                for x in requestlog.lines_for(reqs, PROMPTS, repeat=0, attempt=1.0)))
            dur = tot_lat / (c + 1)
            tput = tot_tok / dur
            rows.append({"benchmark": bid, "server": sid, "status": "ok", "reason": None,
                         "metrics": {"output_throughput": tput, "duration": dur,
                                     "mean_ttft_ms": 35.0 * slower,
                                     "mean_tpot_ms": 5.0 * slower},
                         "params": {}, "intervals": {"output_throughput": [tput * .95,
                                                                          tput * 1.05]}})
    (d / "plan.json").write_text(json.dumps({"version": 2, "experiment": "speed",
                                             "engine": "sim", "servers": servers,
                                             "benchmarks": benches}))
    (d / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


#: One timed compare_runs in a fresh process: prints [wall s, cpu s].
SNIPPET = """
import json, sys, time
import numpy
from specc.report.compare import compare_runs
t, c = time.perf_counter(), time.process_time()
compare_runs(sys.argv[1:])
print(json.dumps([time.perf_counter() - t, time.process_time() - c]))
"""


def timed(a: Path, b: Path, code: str | None = None) -> tuple[float, float]:
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    if code:   # an earlier specc's checkout first on the path
        env["PYTHONPATH"] = str(Path(code).resolve())
    out = subprocess.run([sys.executable, "-c", SNIPPET, str(a), str(b)], env=env, check=True,
                         capture_output=True, text=True, cwd=a.parent).stdout   # not ./specc
    return tuple(json.loads(out.splitlines()[-1]))


def command(a: Path, b: Path, *extra: str) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "specc", "compare", str(a), str(b), *extra],
                          capture_output=True, text=True)
    if proc.returncode not in (0, 1):
        raise SystemExit(proc.stderr)
    return time.perf_counter() - t0


def _med(xs) -> str:
    return f"{statistics.median(xs):.2f} s"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("points", nargs="?", type=int, default=10_000)
    ap.add_argument("--reference", help="a checkout of an earlier specc to time beside")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    from specc.report.columns import FILE

    with tempfile.TemporaryDirectory() as tmp:
        a, b = Path(tmp) / "a", Path(tmp) / "b"
        write_run(a, args.points, 1)
        write_run(b, args.points, 2, slower=1.03)
        print(f"{args.points} points a run, {REQUESTS} requests each, the same prompts "
              f"(paired); load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
        cold = timed(a, b)
        assert (a / FILE).is_file() and (b / FILE).is_file()
        print(f"first compare (reads the files, writes {FILE}): {cold[0]:.2f} s "
              f"(cpu {cold[1]:.2f} s)")
        after, before = [], []
        for _ in range(args.rounds):
            if args.reference:
                before.append(timed(a, b, args.reference))
            after.append(timed(a, b))
        if before:
            print(f"compare_runs, {args.reference}: median {_med(x[0] for x in before)} "
                  f"(cpu {_med(x[1] for x in before)}) of {len(before)}")
        print(f"compare_runs, this checkout, from {FILE}: median {_med(x[0] for x in after)} "
              f"(cpu {_med(x[1] for x in after)}) of {len(after)}")
        if before:
            print(f"ratio (wall, medians): "
                  f"{statistics.median(x[0] for x in before) / statistics.median(x[0] for x in after):.1f}x")
        for extra in ((), ("--json",)):
            ts = [command(a, b, *extra) for _ in range(args.rounds)]
            print(f"`specc compare A B{' ' if extra else ''}{' '.join(extra)}` (the whole "
                  f"command, start-up included): median {_med(ts)} of {len(ts)}")


if __name__ == "__main__":
    main()
