"""How fast specc compiles, and in how much memory, as the matrix grows.

    .venv/bin/python benchmarks/compile_speed.py [--runs 3] [--points 10000,100000,1000000]
    .venv/bin/python benchmarks/compile_speed.py --profile 100000 [--shape servers|server]   # cProfile (SORT=tottime)

Each figure is the whole `python -m specc` process (Hydra, compile, plan.json,
plan.sh, review.md written, review printed), a fresh process per run: wall and
CPU time as the median of --runs, peak RSS (the child's ru_maxrss from wait4)
as the largest, and the size of what it wrote. Matrices, both from llama3_eagle3_pack:
- points: 10 speculative server configurations (5 speculation settings x 2
  max_running_requests) x N/10 client points (10 concurrencies x 100 output
  lengths x N/10,000 seeds); with the 2 matched baselines, 1.2 N benchmark points;
- servers: N/10 speculative server configurations (5 speculation settings x N/50
  max_running_requests) x 10 concurrencies; with the N/50 baselines, 1.2 N points
  on 0.12 N servers;
- server: ONE server (one EAGLE-3 setting, no baseline) x N client points (10
  concurrencies x 100 output lengths x N/1,000 seeds): the per-point path alone;
- server2: ONE server x N client points on two wide axes (N/100 concurrencies x 100 input
  lengths 4-400): every point a distinct shape for the wall-time estimate, and one long override.
Goal: 10^5 sweep points in under 2 s and 200 MB beyond start-up (a one-point compile of the
same experiment, measured next to each) in the points, server and server2 shapes (the
per-point path); in the servers shape, no step worse than linear (its cost is per server:
12,000 of them); files growing linearly. The machine is shared: compare medians taken
close together (docs/performance.md).
Also the whole process for `+experiment=eagle3_sweep`, the everyday case.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SPECULATION = ("{num_steps:1,topk:1,num_draft_tokens:2},{num_steps:2,topk:1,num_draft_tokens:3},"
               "{num_steps:3,topk:1,num_draft_tokens:4},{num_steps:5,topk:1,num_draft_tokens:6},"
               "{num_steps:3,topk:4,num_draft_tokens:8}")
CONCURRENCY = "1,2,3,4,6,8,16,32,64,128"


def _ints(values) -> str:
    return ",".join(map(str, values))


def overrides(points: int, shape: str) -> list[str]:
    """CLI overrides for a sweep of `points` sweep points (baselines come on top)."""
    if shape == "server":
        axes = (f"benchmark.concurrency:[{CONCURRENCY}],"
                f"benchmark.output_len:[{_ints(range(8, 808, 8))}],"
                f"benchmark.seed:[{_ints(range(max(1, points // 1_000)))}]")
        return ["+experiment=llama3_eagle3_pack", "baseline=false",
                f"++sweep={{speculation:[{{num_steps:3,topk:1,num_draft_tokens:4}}],{axes}}}",
                f"max_points={points}"]
    if shape == "server2":
        axes = (f"benchmark.concurrency:[{_ints(range(1, 1 + max(1, points // 100)))}],"
                f"benchmark.input_len:[{_ints(range(4, 404, 4))}]")
        return ["+experiment=llama3_eagle3_pack", "baseline=false",
                f"++sweep={{speculation:[{{num_steps:3,topk:1,num_draft_tokens:4}}],{axes}}}",
                f"max_points={points}"]
    if shape == "points":
        axes = (f"server.max_running_requests:[512,1024],benchmark.concurrency:[{CONCURRENCY}],"
                f"benchmark.output_len:[{_ints(range(8, 808, 8))}],"
                f"benchmark.seed:[{_ints(range(max(1, points // 10_000)))}]")
    else:
        axes = (f"server.max_running_requests:[{_ints(range(64, 64 + max(1, points // 50)))}],"
                f"benchmark.concurrency:[{CONCURRENCY}]")
    return ["+experiment=llama3_eagle3_pack", f"++sweep={{speculation:[{SPECULATION}],{axes}}}",
            f"max_points={points}"]


def run_once(args: list[str], run_dir: Path) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds, peak RSS bytes) of one `python -m specc` process (CPU
    time is the steadier figure on a shared machine)."""
    with tempfile.TemporaryFile() as stderr:   # a pipe read after wait4 would block a long stderr
        t0 = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "specc", *args, f"hydra.run.dir={run_dir}"],
                                cwd=REPO, stdout=subprocess.DEVNULL, stderr=stderr)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        stderr.seek(0)
        err = stderr.read().decode(errors="replace")
    assert proc.returncode == 0, err[-2000:]
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024


def _mb(n: float) -> str:
    return f"{n / 1e6:.1f} MB"


#: One point on one server of the same experiment: the start-up every shape pays (Python,
#: Hydra, composing, a one-point compile and its files), taken next to each shape's runs.
STARTUP = ["+experiment=llama3_eagle3_pack", "baseline=false",
           "++sweep={speculation:[{num_steps:3,topk:1,num_draft_tokens:4}]}"]


def measure(points: int, shape: str, runs: int) -> None:
    walls, cpus, peaks, start = [], [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(runs):   # each in a folder of its own: a compile beside a run dir of the
            # same plan looks there for an unfinished run to offer (specc.run.rundir.unfinished_runs)
            wall, cpu, peak = run_once(overrides(points, shape), Path(tmp) / str(i) / "run")
            walls.append(wall)
            cpus.append(cpu)
            peaks.append(peak)
            start.append(run_once(STARTUP, Path(tmp) / f"start{i}" / "run"))
        out = Path(tmp) / "0" / "run"
        sizes = {name: (out / name).stat().st_size for name in ("plan.json", "plan.sh", "review.md")}
    s_wall, s_cpu = statistics.median(s[0] for s in start), statistics.median(s[1] for s in start)
    s_peak = max(s[2] for s in start)
    print(f"{shape:>7} {points:>9,} sweep points: {statistics.median(walls):6.2f} s "
          f"(median of {runs}; {min(walls):.2f}-{max(walls):.2f}; CPU {statistics.median(cpus):.2f} s), "
          f"peak RSS {_mb(max(peaks))}; beyond start-up (one point: {s_wall:.2f} s, CPU "
          f"{s_cpu:.2f} s, {_mb(s_peak)}): {statistics.median(walls) - s_wall:.2f} s, CPU "
          f"{statistics.median(cpus) - s_cpu:.2f} s, {_mb(max(peaks) - s_peak)}; "
          f"plan.json {_mb(sizes['plan.json'])} "
          f"({sizes['plan.json'] / ((1 if shape.startswith('server') and shape != 'servers' else 1.2) * points):.0f} B per "
          f"benchmark point), plan.sh {_mb(sizes['plan.sh'])}, review.md "
          f"{sizes['review.md'] / 1e3:.0f} KB", flush=True)


def profile(points: int, shape: str) -> None:
    """cProfile of compile + write in-process (composition excluded)."""
    import contextlib
    import cProfile
    import io
    import pstats

    sys.path.insert(0, str(REPO))
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from specc.__main__ import job

    with initialize_config_dir(version_base="1.3", config_dir=str(REPO / "conf")):
        cfg = compose(config_name="config", overrides=overrides(points, shape))
    cfg = OmegaConf.to_container(cfg, resolve=True)
    cfg.pop("hydra", None)
    prof = cProfile.Profile()
    with tempfile.TemporaryDirectory() as tmp, contextlib.redirect_stdout(io.StringIO()):
        prof.runcall(job, cfg, Path(tmp), {"multirun": False})
    pstats.Stats(prof).sort_stats(os.environ.get("SORT", "cumulative")).print_stats(30)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--points", default="10000,100000,1000000",
                    help="comma-separated sweep sizes (the points shape)")
    ap.add_argument("--servers", default="100000",
                    help="comma-separated sweep sizes of the servers shape ('' for none)")
    ap.add_argument("--server", default="100000",
                    help="comma-separated sweep sizes of the one-server shape ('' for none)")
    ap.add_argument("--server2", default="100000",
                    help="comma-separated sweep sizes of the one-server two-axis shape ('' for none)")
    ap.add_argument("--profile", type=int, metavar="N", help="cProfile one N-point compile")
    ap.add_argument("--shape", default="points", choices=["points", "servers", "server", "server2"],
                    help="the matrix --profile compiles")
    args = ap.parse_args()
    if args.profile:
        profile(args.profile, args.shape)
        return
    for shape, sizes in (("points", args.points), ("servers", args.servers),
                         ("server", args.server), ("server2", args.server2)):
        for n in filter(None, sizes.split(",")):
            measure(int(n), shape, args.runs)
    walls = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.runs):
            walls.append(run_once(["+experiment=eagle3_sweep"], Path(tmp) / str(i))[0])
    print(f"python -m specc +experiment=eagle3_sweep (whole process): median "
          f"{statistics.median(walls):.2f} s over {args.runs} runs")


if __name__ == "__main__":
    main()
