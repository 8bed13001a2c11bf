"""Between-run noise of the same experiment on the simulator: where `specc compare`'s
built-in noise floor comes from (docs/compare.md, "When a change is a regression").

Runs the flagship experiment (`+experiment=eagle3_sweep engine=sim`, on a smaller grid:
the baseline and EAGLE3 s3 k1 d4 at concurrency 1 and 4) ``--runs`` times on the machine
as it is ("quiet") and as many times beside ``--busy`` busy loops (`yes > /dev/null`,
one process each, started before the run and killed after), alternating, so that both
see the machine's drift alike. Then every pair of runs is compared (`compare_runs`, raw
changes) and, per figure, the largest |change| of any point is printed for quiet pairs,
busy pairs and quiet-against-busy pairs, with each run's load average.

Rerun: python benchmarks/noise_floor.py [--runs 3] [--busy 2] [--out DIR] [--json]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GRID = ("+sweep={speculation.num_steps:[3],speculation.topk:[1],"
        "speculation.num_draft_tokens:[4],benchmark.concurrency:[1,4]}")


def one_run(run_dir: Path, busy: int) -> dict:
    loops = [subprocess.Popen(["yes"], stdout=subprocess.DEVNULL) for _ in range(busy)]
    load0 = os.getloadavg()[0]
    t0 = time.monotonic()
    try:
        port = random.randrange(32000, 60000, 16)
        p = subprocess.run([sys.executable, "-m", "specc", "+experiment=eagle3_sweep",
                            "engine=sim", "execute=true", GRID, f"engine.base_port={port}",
                            f"hydra.run.dir={run_dir}"], capture_output=True, text=True,
                           env={**os.environ, "SPECC_INDEX": "off"})
    finally:
        for x in loops:
            x.kill()
            x.wait()
    if p.returncode != 0:
        sys.exit(f"{run_dir}: exit {p.returncode}\n{p.stderr[-2000:]}")
    return {"run": str(run_dir), "busy": busy, "load_at_start": load0,
            "load_at_end": os.getloadavg()[0], "wall_s": time.monotonic() - t0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3, help="runs of each kind (quiet, busy)")
    ap.add_argument("--busy", type=int, default=2, help="busy loops beside a busy run")
    ap.add_argument("--out", type=Path, default=None, help="where the run dirs go")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--compare-only", action="store_true",
                    help="compare the runs already in --out (quiet<i>, busy<i>) again")
    args = ap.parse_args()
    from specc.report.compare import FIGURES, compare_runs

    out = args.out or Path(tempfile.mkdtemp(prefix="specc-noise-"))
    runs = [{"run": str(d), "kind": d.name.rstrip("0123456789")}
            for d in sorted(out.iterdir()) if (d / "results.jsonl").is_file()
            ] if args.compare_only else []
    for i in range(0 if args.compare_only else args.runs):
        for kind, busy in (("quiet", 0), ("busy", args.busy)):
            r = one_run(out / f"{kind}{i}", busy)
            r["kind"] = kind
            runs.append(r)
            print(f"{kind}{i}: load {r['load_at_start']:.1f} -> {r['load_at_end']:.1f}, "
                  f"{r['wall_s']:.0f} s", file=sys.stderr)
    worst: dict[str, dict[str, float]] = {}
    for a, b in itertools.combinations(runs, 2):
        pair = "-".join(sorted((a["kind"], b["kind"])))
        res = compare_runs([a["run"], b["run"]], threshold=0.0)["comparisons"][0]
        for p in res["points"]:
            for name, f in p["figures"].items():
                w = worst.setdefault(pair, {})
                w[name] = max(w.get(name, 0.0), abs(f["change"]))
    result = {"runs": runs, "largest_change": worst, "figures": list(FIGURES),
              "date": time.strftime("%Y-%m-%d")}
    if args.json:
        print(json.dumps(result, indent=1))
        return
    print(f"largest |change| of any point between two identical runs ({out}):")
    print("pair".ljust(12) + "".join(n.rjust(19) for n in FIGURES))
    for pair, w in sorted(worst.items()):
        print(pair.ljust(12) + "".join(f"{100 * w.get(n, 0):18.1f}%" for n in FIGURES))


if __name__ == "__main__":
    main()
