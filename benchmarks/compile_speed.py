"""How fast specc compiles: a 10,000-point matrix in-process, and the whole CLI process.

    .venv/bin/python benchmarks/compile_speed.py [--runs 5] [--profile]

Prints medians over several runs measured in this one invocation:
- in-process `compile_config` of llama3_eagle3_pack widened to 10,000 sweep points
  (10 server configurations x 1,000 client points, plus the matched baselines);
- wall time of `python -m specc +experiment=eagle3_sweep` (process start to exit).
Target: the 10k-point compile well under 1 s.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def big_config() -> dict:
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    with initialize_config_dir(version_base="1.3", config_dir=str(REPO / "specc" / "conf")):
        cfg = compose(config_name="config", overrides=["+experiment=llama3_eagle3_pack"])
    cfg = OmegaConf.to_container(cfg, resolve=True)
    cfg.pop("hydra", None)
    cfg["max_points"] = 20000
    cfg["sweep"] = {
        "speculation": cfg["sweep"]["speculation"][:5],                       # 5
        "engine.max_running_requests": [512, 1024],                            # x 2 = 10 servers
        "benchmark.concurrency": [1, 2, 3, 4, 6, 8, 16, 32, 64, 128],         # 10
        "benchmark.output_len": list(range(8, 808, 8)),                       # x 100 = 1000 client
    }
    return cfg


def time_compile(runs: int) -> tuple[float, int, int]:
    from specc.compile.pipeline import compile_config

    cfg = big_config()
    times, result = [], None
    for _ in range(runs):
        t0 = time.perf_counter()
        result = compile_config(cfg)
        times.append(time.perf_counter() - t0)
    assert result.ok, [d.line() for d in result.diagnostics if d.severity == "error"][:3]
    return statistics.median(times), len(result.plan.benchmarks), len(result.plan.servers)


def time_cli(runs: int) -> float:
    times = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(runs):
            t0 = time.perf_counter()
            proc = subprocess.run([sys.executable, "-m", "specc", "+experiment=eagle3_sweep",
                                   f"hydra.run.dir={tmp}/{i}"], cwd=REPO, capture_output=True)
            times.append(time.perf_counter() - t0)
            assert proc.returncode == 0, proc.stderr.decode()
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--profile", action="store_true", help="cProfile one 10k compile")
    args = ap.parse_args()
    if args.profile:
        import cProfile
        import pstats

        from specc.compile.pipeline import compile_config

        cfg = big_config()
        compile_config(cfg)
        prof = cProfile.Profile()
        prof.runcall(compile_config, cfg)
        pstats.Stats(prof).sort_stats("cumulative").print_stats(25)
        return
    med, n_bench, n_servers = time_compile(args.runs)
    print(f"compile 10,000-point matrix (in-process): median {med * 1000:.0f} ms over "
          f"{args.runs} runs ({n_bench} benchmark points incl. baselines, {n_servers} servers)")
    cli = time_cli(args.runs)
    print(f"python -m specc +experiment=eagle3_sweep (whole process): median {cli:.2f} s "
          f"over {args.runs} runs")


if __name__ == "__main__":
    main()
