"""specc's client against `vllm bench serve` 0.32.0 on one running real vLLM (CPU build).

    .venv/bin/python benchmarks/real_engine_vs_vllm_bench.py [--rounds 5] [--prompts 48]
                                                             [--alternate] [--keep DIR]

Needs `specc cpu-engine` and `specc tiny-models` (cached). Starts one server from the plan
specc compiles (tiny pair, EAGLE-3 with 3 tokens, --enforce-eager, completions,
concurrency 4; tests/real_engine/agreement.py), then runs, interleaved, specc's point and
`vllm bench serve` on the same 48 prompts of 32 tokens, the prefix cache flushed before
each. Prints each round's output throughput, median and mean TTFT, accept length and
per-position acceptance of both, then the median over rounds of specc / bench (what
tests/real_engine/test_vllm_bench_agreement.py asserts) and the load average.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "real_engine"))
import agreement  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--prompts", type=int, default=agreement.NUM_PROMPTS,
                    help="prompts per round, each side (default %(default)s)")
    ap.add_argument("--alternate", action="store_true",
                    help="alternate which side goes first, as the test does")
    ap.add_argument("--keep", type=Path, help="keep the work dir here (default: a temp dir)")
    args = ap.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="specc-vs-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    load0 = os.getloadavg()[0]
    served = agreement.Served.start(work, num_prompts=args.prompts)
    rounds = []
    try:
        served.warm()
        for k in range(args.rounds):
            if args.alternate and k % 2:
                b, s = served.vllm_bench(k), served.specc_point(k)
            else:
                s, b = served.specc_point(k), served.vllm_bench(k)
            rounds.append((s, b))
            print(f"round {k}: specc {s['output_throughput']:7.1f} tok/s  TTFT median "
                  f"{s['median_ttft_ms']:6.1f} mean {s['mean_ttft_ms']:6.1f} ms  accept "
                  f"{s['accept_length']:.2f} {s['accept_per_position']} | bench "
                  f"{b['output_throughput']:7.1f} tok/s  TTFT median {b['median_ttft_ms']:6.1f} "
                  f"mean {b['mean_ttft_ms']:6.1f} ms  accept "
                  f"{b['spec_decode_acceptance_length']:.2f} "
                  f"{b['spec_decode_per_position_acceptance_rates']}", flush=True)
    finally:
        served.stop()

    def ratios(key_s: str, key_b: str) -> list[float]:
        return [s[key_s] / b[key_b] for s, b in rounds]

    for what, ks, kb in (("output throughput", "output_throughput", "output_throughput"),
                         ("median TTFT", "median_ttft_ms", "median_ttft_ms"),
                         ("mean TTFT", "mean_ttft_ms", "mean_ttft_ms")):
        r = ratios(ks, kb)
        m = statistics.median(r)
        verdict = "within" if abs(m - 1) <= agreement.TOLERANCE else "outside"
        print(f"{what:18s} specc/bench per round {', '.join(f'{x:.3f}' for x in r)}; "
              f"median {m:.3f} ({verdict} {agreement.TOLERANCE:.0%})")
    print(f"load average {load0:.1f} at the start, {os.getloadavg()[0]:.1f} at the end; "
          f"work dir {work}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
