"""How fast and how exactly the executor notices what its servers do (against specc.sim).

    .venv/bin/python benchmarks/executor_timing.py [--servers 8] [--skip-loadgen] [--json PATH]

Everything is measured in this one invocation, in-process (compile + execute_plan),
and printed as medians/max:

1. readiness detection latency: state.json `ready_at` minus the simulator's true
   ready instant ($SPECC_SIM_TRUTH "ready" events), over N packed servers
   (TP 1, one wave, all starting at once), at sim time_scale 0.01 (phases spread over
   seconds) and 0.002 (all N come up in the same second: a CPU pile-up on a small
   machine), plus how late the ready log line was seen.   target: median <= 0.25 s
2. crash detection latency: `failed_at` minus the crashed server's last log write
   (its traceback; the process exits right after), crash@load_weights and
   crash@capture_cuda_graph on N packed servers.           target: <= 1 s
3. zombie detection: `failed_at` minus the instant the capture_draft_cuda_graph
   phase's begin line (the last before the hang; the plan's patterns) was written (a 2 ms log watcher,
   independent of the executor), minus the phase budget: a stall is a log
   silent for the budget; hang@capture_draft_cuda_graph.    target: <= 1 s
4. sweep overhead: a sequential sweep (TP 8: one server per wave, three servers,
   two points each): wall time of the run vs the sum of each server's start
   time (started_at -> ready_at) and its points' client durations; each server
   must have been launched exactly once.                   target: ratio <= 1.05
5. (unless --skip-loadgen) the load generator's TTFT/ITL error vs the simulator's
   truth at concurrency 64: benchmarks/loadgen_accuracy.py, which the executor's
   builtin driver uses as is.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from executor_helpers import (compile_plan, execute, free_port_block, results,  # noqa: E402
                              set_server_env, sim_processes, state)

SPEC = [(1, 1, 2), (2, 1, 3), (3, 1, 4), (5, 1, 6), (3, 4, 8), (5, 4, 8), (5, 8, 16), (2, 4, 8)]


def packed_sweep(n_spec: int, conc=(1,)) -> str:
    entries = ",".join(f"{{num_steps:{s},topk:{k},num_draft_tokens:{d}}}" for s, k, d in SPEC[:n_spec])
    return f"+sweep={{speculation:[{entries}],benchmark.concurrency:[{','.join(map(str, conc))}]}}"


def stats(xs) -> str:
    xs = list(xs)
    if not xs:
        return "n/a"
    return f"median {statistics.median(xs):.3f} s, max {max(xs):.3f} s (n={len(xs)})"


def quiet_execute(plan, run_dir: Path) -> int:
    """execute_plan with its progress/report output sent to a file."""
    out = run_dir.parent / f"{run_dir.name}.out"
    saved = os.dup(1), os.dup(2)
    with open(out, "w") as f:
        os.dup2(f.fileno(), 1)
        os.dup2(f.fileno(), 2)
        try:
            return execute(plan, run_dir)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])


def check_no_sim(run_dir: Path) -> None:
    left = sim_processes(run_dir)
    if left:
        for p in left:
            p.kill()
        raise SystemExit(f"simulator processes left by the executor: {[p.pid for p in left]}")


def readiness(root: Path, n: int, time_scale: float) -> dict:
    """Startup at `time_scale`: at 0.002 all N simulators import Python and come up within
    the same ~second on this machine's cores, a CPU pile-up no real node sees; the default
    0.01 spreads the phases over a few seconds, as real startups are."""
    run_dir = root / f"ready-{time_scale:g}"
    truth = root / f"truth-{time_scale:g}.jsonl"
    os.environ["SPECC_SIM_TRUTH"] = str(truth)
    try:
        plan = compile_plan(run_dir, ["hardware.tp=1", packed_sweep(n - 1),
                                      f"engine.sim.time_scale={time_scale}"],
                            port=free_port_block(n))
        code = quiet_execute(plan, run_dir)
    finally:
        os.environ.pop("SPECC_SIM_TRUTH", None)
    check_no_sim(run_dir)
    true_ready = {e["port"]: e["t"] for e in map(json.loads, truth.read_text().splitlines())
                  if e.get("event") == "ready"}
    st = state(run_dir)["servers"]
    lags = [st[s.id]["ready_at"] - true_ready[s.port] for s in plan.servers]
    tl = [dict(st[s.id]["timeline"]) for s in plan.servers]
    seen = [t["ready_line"] - true_ready[s.port] for t, s in zip(tl, plan.servers) if "ready_line" in t]
    return {"exit": code, "lags": lags, "servers": len(plan.servers), "line_seen": seen,
            "time_scale": time_scale}


def crash(root: Path, n: int) -> dict:
    run_dir = root / "crash"
    faults = {}

    def edit(p):
        for i, s in enumerate(p["servers"]):
            faults[s["id"]] = "crash@load_weights" if i % 2 == 0 else "crash@capture_cuda_graph"
            set_server_env(p, i, SPECC_SIM_FAULT=faults[s["id"]])

    plan = compile_plan(run_dir, ["hardware.tp=1", packed_sweep(n - 1)],
                        port=free_port_block(n), edit=edit)
    code = quiet_execute(plan, run_dir)
    check_no_sim(run_dir)
    st = state(run_dir)["servers"]
    lat = [st[s.id]["failed_at"] - (run_dir / s.log).stat().st_mtime for s in plan.servers]
    named = all("RuntimeError: simulated failure" in st[s.id]["reason"] for s in plan.servers)
    return {"exit": code, "latency": lat, "named": named}


class LogWatcher(threading.Thread):
    """Records when a line first appears in each log (polling every 2 ms)."""

    def __init__(self, paths, patterns):
        super().__init__(daemon=True)
        self.paths, self.patterns = list(paths), [re.compile(p) for p in patterns]
        self.seen: dict[Path, float] = {}
        self.stop = False

    def run(self):
        while not self.stop and len(self.seen) < len(self.paths):
            for p in self.paths:
                if p not in self.seen:
                    try:
                        text = p.read_text(errors="replace")
                        if any(rx.search(text) for rx in self.patterns):
                            self.seen[p] = time.time()
                    except OSError:
                        pass
            time.sleep(0.002)


def zombie(root: Path, n: int) -> dict:
    run_dir = root / "zombie"

    def edit(p):
        for i in range(len(p["servers"])):
            set_server_env(p, i, SPECC_SIM_FAULT="hang@capture_draft_cuda_graph")

    # speculative servers with num_steps > 1 only (they capture draft graphs)
    plan = compile_plan(run_dir, ["hardware.tp=1", "baseline=false",
                                  packed_sweep_steps(n)],
                        port=free_port_block(n), edit=edit)
    # the phase's own begin patterns, from the plan (they follow the engine release)
    begin = next(p.begin for p in plan.servers[0].readiness.phases
                 if p.name == "capture_draft_cuda_graph")
    watcher = LogWatcher([run_dir / s.log for s in plan.servers], begin)
    watcher.start()
    code = quiet_execute(plan, run_dir)
    watcher.stop = True
    check_no_sim(run_dir)
    st = state(run_dir)["servers"]
    over, named = [], True
    for s in plan.servers:
        budget = next(p.budget_s for p in s.readiness.phases
                      if p.name == "capture_draft_cuda_graph")
        began = watcher.seen.get(run_dir / s.log)
        named &= "stalled in capture_draft_cuda_graph" in st[s.id]["reason"]
        if began is not None:
            over.append(st[s.id]["failed_at"] - began - budget)
    return {"exit": code, "over_budget": over, "named": named, "budget": budget}


def packed_sweep_steps(n: int) -> str:
    multi = [c for c in SPEC if c[0] > 1][:n]
    entries = ",".join(f"{{num_steps:{s},topk:{k},num_draft_tokens:{d}}}" for s, k, d in multi)
    return f"+sweep={{speculation:[{entries}]}}"


def sweep(root: Path) -> dict:
    run_dir = root / "sweep"
    plan = compile_plan(run_dir, ["benchmark.output_len=64", "benchmark.num_prompts=8",
                                  "engine.sim.time_scale=0.01",
                                  "+sweep={speculation:[{num_steps:3,topk:1,num_draft_tokens:4},"
                                  "{num_steps:3,topk:4,num_draft_tokens:8}],"
                                  "benchmark.concurrency:[1,4]}"],
                        port=free_port_block(1))
    t0 = time.time()
    code = quiet_execute(plan, run_dir)
    t1 = time.time()
    check_no_sim(run_dir)
    st = state(run_dir)
    servers = st["servers"]
    rows = results(run_dir)
    start = sum(e["ready_at"] - e["started_at"] for e in servers.values())
    bench = sum(r["metrics"]["duration"] for r in rows if r["status"] == "ok")
    points = sum(r["finished_at"] - r["started_at"] for r in rows if r["status"] == "ok")
    first_launch = min(e["started_at"] for e in servers.values())
    last_stop = max(e["stopped_at"] for e in servers.values())
    launches = {sid: e.get("attempt") for sid, e in servers.items()}
    teardown = sum(e["stopped_at"] - max(r["finished_at"] for r in rows if r["server"] == sid)
                   for sid, e in servers.items())
    order = sorted(servers.values(), key=lambda e: e["started_at"])
    gaps = sum(b["started_at"] - a["stopped_at"] for a, b in zip(order, order[1:]))
    between = sum(b["started_at"] - a["finished_at"] for sid in servers
                  for a, b in zip(*(lambda rs: (rs, rs[1:]))(
                      sorted((r for r in rows if r["server"] == sid), key=lambda r: r["started_at"]))))
    ready_to_first = sum(min(r["started_at"] for r in rows if r["server"] == sid) - e["ready_at"]
                         for sid, e in servers.items())
    logs_once = all((run_dir / s.log).read_text().count("server_args={") == 1
                    for s in plan.servers)
    return {"exit": code, "waves": len(plan.waves), "start_s": start, "bench_s": bench,
            "points_s": points, "teardown_s": teardown, "gaps_s": gaps, "between_points_s": between,
            "ready_to_first_point_s": ready_to_first, "servers_wall": last_stop - first_launch, "total_wall": t1 - t0,
            "launched_once": all(v == 1 for v in launches.values()) and logs_once,
            "ok": sum(r["status"] == "ok" for r in rows), "points": len(plan.benchmarks)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--servers", type=int, default=8, help="servers per packed run (<= 8)")
    ap.add_argument("--skip-loadgen", action="store_true")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    n = max(2, min(8, args.servers))
    out: dict = {}
    with tempfile.TemporaryDirectory(prefix="specc-exec-timing-") as tmp:
        root = Path(tmp)
        for scale in (0.01, 0.002):
            r = readiness(root, n, scale)
            out[f"readiness@{scale:g}"] = r
            print(f"1. readiness detection lag (ready_at - true ready), {r['servers']} packed "
                  f"servers, time_scale {scale:g}: {stats(r['lags'])}; min {min(r['lags']):.3f} s"
                  f"  [target median <= 0.25 s] exit {r['exit']}\n"
                  f"   of which the ready log line seen after: {stats(r['line_seen'])}")
        c = crash(root, n)
        out["crash"] = c
        print(f"2. crash detection latency (failed_at - last log write): {stats(c['latency'])}; "
              f"fatal line named: {c['named']}  [target <= 1 s] exit {c['exit']}")
        z = zombie(root, min(n, 6))
        out["zombie"] = z
        print(f"3. zombie detection beyond the {z['budget']:g} s phase budget: "
              f"{stats(z['over_budget'])}; phase named: {z['named']}  [target <= 1 s] "
              f"exit {z['exit']}")
        s = sweep(root)
        out["sweep"] = s
        ideal = s["start_s"] + s["points_s"]
        print(f"4. sequential sweep ({s['waves']} waves, {s['ok']}/{s['points']} points ok): "
              f"wall {s['total_wall']:.2f} s (servers' first launch -> last stop "
              f"{s['servers_wall']:.2f} s) vs start {s['start_s']:.2f} s + points "
              f"{s['points_s']:.2f} s (client load alone {s['bench_s']:.2f} s) = {ideal:.2f} s: "
              f"ratio {s['total_wall'] / ideal:.3f} (servers only {s['servers_wall'] / ideal:.3f})"
              f"  [target <= 1.05]; each server launched once: {s['launched_once']}")
        print(f"   overheads: teardown {s['teardown_s']:.2f} s, launch gaps {s['gaps_s']:.2f} s, "
              f"ready -> first point {s['ready_to_first_point_s']:.2f} s, between points "
              f"{s['between_points_s']:.2f} s, report {s['total_wall'] - s['servers_wall']:.2f} s")
        out["sweep"]["ratio"] = s["total_wall"] / ideal
        out["sweep"]["ratio_servers"] = s["servers_wall"] / ideal
    if not args.skip_loadgen:
        print("5. load generator accuracy at concurrency 64 (benchmarks/loadgen_accuracy.py):",
              flush=True)
        subprocess.run([sys.executable, str(REPO / "benchmarks" / "loadgen_accuracy.py"),
                        "--concurrency", "64", "--num", "128", "--output-len", "64"], cwd=REPO)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
