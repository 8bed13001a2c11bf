"""How long `specc compare` takes on two 10^4-point runs (issue 20: under 2 s).

Writes two synthetic run dirs (plan.json, results.jsonl with intervals, requests/ with
16 requests a point, the same prompts in both: the paired path) into a temp dir, then
times `compare_runs` in-process (median of 3) and the whole `specc compare` command
once. Rerun: python benchmarks/compare_speed.py [POINTS]
"""

from __future__ import annotations

import json
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
                               verify_ct=None))
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


def main() -> None:
    points = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    from specc.report.compare import compare_runs

    with tempfile.TemporaryDirectory() as tmp:
        a, b = Path(tmp) / "a", Path(tmp) / "b"
        write_run(a, points, 1)
        write_run(b, points, 2, slower=1.03)
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            out = compare_runs([a, b])
            times.append(time.perf_counter() - t0)
        n = len(out["comparisons"][0]["points"])
        print(f"compare_runs, {points} points a run ({n} matched, {REQUESTS} requests each, "
              f"paired): median {statistics.median(times):.2f} s of {len(times)}")
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "specc", "compare", str(a), str(b),
                               "--json"], capture_output=True, text=True)
        print(f"`specc compare A B --json` (the whole command, start-up included): "
              f"{time.perf_counter() - t0:.2f} s, exit {proc.returncode}")


if __name__ == "__main__":
    main()
