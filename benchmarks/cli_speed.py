"""How much CPU specc's quick commands take: `specc --help`, `specc <task> --help` for every
task, and `specc status` on a finished run.

    .venv/bin/python benchmarks/cli_speed.py [--runs 5] [--reference /path/to/other/checkout]

Each figure is the CPU time (user + system, from getrusage of the children) of the whole
process, the median of --runs with its range, after one run to warm up; targets: --help at
most 0.3 s, a task's help under 0.3 s, status under 0.5 s. The finished run is made here
first (the simulator, two servers, 2 x 2 short points; ~20 s). The children write their
bytecode under a temporary PYTHONPYCACHEPREFIX, as an installed specc has its own (an
environment with PYTHONDONTWRITEBYTECODE would otherwise charge every run for compiling
specc's modules). --reference: the same commands, interleaved, with another checkout's
specc (`python -m specc` there), e.g. a `git worktree` of main, for before/after figures.
CPU time is the steadier figure on a shared machine; the load average is printed with it.
"""

from __future__ import annotations

import argparse
import datetime
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TARGETS = {"--help": 0.3, "task --help": 0.3, "status": 0.5}
RUN = ["engine=sim", "engine.sim.time_scale=0.002", "benchmark.output_len=16",
       "benchmark.input_len=32", "benchmark.num_prompts=4", "model_pair.context_length=2048",
       "hardware.tp=1", "baseline=true",
       "+sweep={speculation:[{num_steps:3,topk:1,num_draft_tokens:4}],benchmark.concurrency:[1,2]}"]


def command(checkout: Path | None) -> tuple[list[str], Path, dict]:
    """How to start specc: the installed `specc` script, or `python -m specc` in a checkout."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    if checkout is None:
        script = Path(sys.executable).parent / "specc"
        return ([str(script)] if script.exists() else [sys.executable, "-m", "specc"]), REPO, env
    return [sys.executable, "-m", "specc"], checkout, {**env, "PYTHONPATH": str(checkout)}


def cpu_s(argv: list[str], cwd: Path, env: dict) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    res = subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, timeout=300)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert res.returncode == 0, res.stderr.decode(errors="replace")[-2000:]
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def finished_run(tmp: Path) -> Path:
    run_dir = tmp / "run"
    base = 20000 + os.getpid() % 20000
    res = subprocess.run([sys.executable, "-m", "specc", *RUN, f"engine.base_port={base}",
                          "execute=true", f"hydra.run.dir={run_dir}"], cwd=REPO,
                         capture_output=True, text=True, timeout=600,
                         env={**os.environ, "SPECC_INDEX": str(tmp / "index.sqlite")})
    assert res.returncode == 0, res.stderr[-2000:]
    return run_dir


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--reference", type=Path, help="another checkout to measure, interleaved")
    args = ap.parse_args()
    sys.path.insert(0, str(REPO))
    from specc import help as cli_help

    tasks = cli_help.task_names() or []
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["PYTHONPYCACHEPREFIX"] = str(Path(tmp) / "pycache")
        run_dir = finished_run(Path(tmp))
        cases = [("--help", ["--help"])] + [(f"{t} --help", [t, "--help"]) for t in tasks] \
            + [("status", ["status", "--run", str(run_dir)])]
        sides = {"this": command(None)}
        if args.reference:
            sides["reference"] = command(args.reference.resolve())
        for prefix, cwd, env in sides.values():   # warm up (bytecode, page cache)
            for _, argv in cases:
                cpu_s([*prefix, *argv], cwd, env)
        got: dict[tuple[str, str], list[float]] = {}
        for _ in range(args.runs):
            for name, argv in cases:
                for side, (prefix, cwd, env) in sides.items():
                    got.setdefault((side, name), []).append(cpu_s([*prefix, *argv], cwd, env))
        shutil.rmtree(run_dir, ignore_errors=True)
    load = os.getloadavg()
    print(f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, "
          f"{os.cpu_count()} CPUs, load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}; "
          f"CPU seconds, median of {args.runs} (range)")
    for name, _ in cases:
        target = TARGETS["task --help" if name.endswith(" --help") else name]
        row = []
        for side in sides:
            xs = got[(side, name)]
            med = statistics.median(xs)
            mark = "" if side != "this" else (" ok" if med <= target else " OVER")
            row.append(f"{side} {med:.3f} ({min(xs):.3f}-{max(xs):.3f}){mark}")
        print(f"  {name:<22} target {target:.1f}: " + "; ".join(row), flush=True)


if __name__ == "__main__":
    main()
