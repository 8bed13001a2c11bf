"""How long specc's statistics take for a large point: 100k requests against a matched baseline.

    .venv/bin/python benchmarks/stats_speed.py [--requests 100000] [--runs 3]

Builds two synthetic points (8 categories, acceptance varying by category and
prompt, fixed output length) and times ``specc.stats.point_figures`` on the
speculative one with its baseline: throughput, speedup (paired bootstrap),
mean/median/p90/p99 of TTFT, TPOT and end-to-end latency, accept length, and
per category tokens/s, accept length and speedup. Prints the median of
``--runs`` runs. Target: under 1 s for 100k requests.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

CATS = ["writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities"]
BOOST = {"writing": 0.8, "roleplay": 0.85, "reasoning": 1.0, "math": 1.2, "coding": 1.3,
         "extraction": 1.1, "stem": 1.0, "humanities": 0.9}


def synthetic(n: int, seed: int = 0):
    rng = random.Random(seed)
    base, spec = [], []
    for i in range(n):
        cat = CATS[i % len(CATS)]
        tok = 256
        b_lat = 0.05 + tok / 80.0 * rng.uniform(0.97, 1.03)
        accept = min(4.0, max(1.0, 2.2 * BOOST[cat] * rng.uniform(0.8, 1.2)))
        s_lat = 0.05 + tok / (80.0 * accept * 0.8) * rng.uniform(0.97, 1.03)
        common = {"i": i, "id": f"{cat}-{i // 8}", "category": cat, "ok": True,
                  "output_tokens": tok}
        base.append({**common, "ttft": 0.05 * rng.uniform(0.9, 1.5), "e2e_latency": b_lat})
        spec.append({**common, "ttft": 0.06 * rng.uniform(0.9, 1.5), "e2e_latency": s_lat,
                     "verify_ct": max(1, round(tok / accept))})
    conc = 64
    return base, sum(r["e2e_latency"] for r in base) / conc, spec, \
        sum(r["e2e_latency"] for r in spec) / conc


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=100_000)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    from specc import stats

    base, b_dur, spec, s_dur = synthetic(args.requests)
    times = []
    for _ in range(args.runs):
        t0 = time.perf_counter()
        figs = stats.point_figures(spec, s_dur, base=base, base_duration=b_dur)
        times.append(time.perf_counter() - t0)
    sp = figs["speedup"]
    print(f"{args.requests} requests (+ {args.requests} baseline), {len(figs['categories'])} "
          f"categories: point_figures {statistics.median(times) * 1000:.0f} ms median of "
          f"{args.runs} (min {min(times) * 1000:.0f} ms); speedup {stats.fmt_speedup(sp)}, "
          f"throughput {figs['output_throughput'].value:.0f} tok/s "
          f"+-{figs['output_throughput'].half_width * 100:.2f}%")


if __name__ == "__main__":
    main()
