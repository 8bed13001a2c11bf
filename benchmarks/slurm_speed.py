"""What Slurm costs and gains a specc sweep: a throw-away cluster of fake nodes, the simulator.

    .venv/bin/python benchmarks/slurm_speed.py [--nodes 4] [--repeat 3] [--json PATH]

Needs root (it starts the cluster with tools/slurm/slurm-up.sh and stops it after),
or a running cluster ($SLURM_CONF set and squeue answering), which it uses as is.
Every run is the CLI a user types (`python -m specc ... execute=true`), timed from
outside.

1. sweep wall time: the eagle3 sweep (5 servers of 8 GPUs, 20 points; engine=sim at
   its default time scale, as the main job) with cluster=slurm on all nodes, vs the
   same plan pinned to one node (sbatch --nodelist=n1: one job at a time), and vs
   cluster=local (specc's executor on this machine).   target: <= 0.35 x one node
2. Slurm's overhead per server: one server with one short point, cluster=slurm vs
   cluster=local, --repeat times each: the difference of the median wall times, and
   where it goes (submit -> the driver sees RUNNING -> the node entry starts -> ...
   -> the node entry ends -> the driver sees the job end).   target: <= 2 s
3. the driver noticing a job's end: the driver's `ended_at` (slurm/jobs.json) minus
   the node entry's `finished_at` (slurm/state/<job>.json), over every job run here.
                                                             target: <= 2 s
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from executor_helpers import free_port_block  # noqa: E402

SWEEP = ["+experiment=eagle3_sweep", "engine=sim"]
ONE = ["model_pair=kimi_k25_eagle3", "speculation=none", "engine=sim", "baseline=false",
       "engine.sim.time_scale=0.002", "benchmark.concurrency=1", "benchmark.input_len=32",
       "benchmark.output_len=16", "benchmark.num_prompts=4", "model_pair.context_length=2048"]


def cluster_env(nodes: int, tmp: Path) -> tuple[dict, Path | None]:
    """(environment with a working Slurm, root of the cluster we started or None)."""
    if os.environ.get("SLURM_CONF") and shutil.which("squeue") and \
            subprocess.run(["squeue", "-h"], capture_output=True).returncode == 0:
        return dict(os.environ), None
    if os.geteuid() != 0:
        sys.exit("needs root to start a cluster (or $SLURM_CONF of a running one)")
    root = tmp / "cluster"
    up = subprocess.run(["bash", str(REPO / "tools/slurm/slurm-up.sh"), str(root)],
                        env={**os.environ, "NNODES": str(nodes)}, capture_output=True, text=True)
    if up.returncode:
        sys.exit(f"slurm-up.sh failed: {up.stderr[-2000:]}")
    env = {**os.environ, "SLURM_CONF": str(root / "etc/slurm.conf"),
           "PATH": f"{root / 'bin'}:{os.environ['PATH']}"}
    return env, root


#: run dir -> (epoch seconds at the CLI's start, at its exit)
SPANS: dict[Path, tuple[float, float]] = {}


def run(args, run_dir: Path, env: dict) -> float:
    """Wall seconds of `python -m specc ARGS execute=true` into run_dir (must exit 0)."""
    t0, start = time.monotonic(), time.time()
    p = subprocess.run([sys.executable, "-m", "specc", *args, f"hydra.run.dir={run_dir}",
                        f"engine.base_port={free_port_block(8)}", "execute=true"],
                       cwd=REPO, env=env, capture_output=True, text=True)
    wall = time.monotonic() - t0
    SPANS[run_dir] = (start, time.time())
    if p.returncode:
        sys.exit(f"{' '.join(args)} exited {p.returncode}:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    return wall


def job_times(run_dir: Path) -> list[dict]:
    """Per job: the driver's view (jobs.json) joined with the node entry's (slurm/state)."""
    jobs = json.loads((run_dir / "slurm/jobs.json").read_text())["jobs"]
    out = []
    for name, rec in jobs.items():
        node = json.loads((run_dir / "slurm/state" / f"{name}.json").read_text())
        ex = node["executor"]
        srv = next(iter(node["servers"].values()))
        out.append({"name": name, "id": rec["id"], "submitted": rec["submitted_at"], "running_seen": rec["started_at"],
                    "node_started": ex["started_at"], "server_launched": srv["started_at"],
                    "server_stopped": srv["stopped_at"], "node_finished": ex["finished_at"],
                    "end_seen": rec["ended_at"], "nodes": rec["nodes"]})
    return out


def ctld_times(root: Path | None) -> dict[str, dict]:
    """Slurm's own view from slurmctld's log (ms timestamps, this host's local time): per job
    id, when it was allocated its node and when it completed; {} for a cluster we did not
    start."""
    out: dict[str, dict] = {}
    try:
        text = (root / "log/slurmctld.log").read_text(errors="replace") if root else ""
    except OSError:
        return out
    for m in re.finditer(r"^\[([0-9T:.-]+)\] (?:sched: Allocate JobId=(\d+)|"
                         r"_job_complete: JobId=(\d+) done)", text, re.M):
        t = datetime.datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S.%f").timestamp()
        out.setdefault(m.group(2) or m.group(3), {})["allocated" if m.group(2) else
                                                     "completed"] = t
    return out


def med(xs) -> float:
    return statistics.median(xs)


def sweep_breakdown(run_dir: Path, ctld: dict) -> dict:
    """Where a sweep's Slurm time goes: the CLI's start -> the first submission (compile);
    per job, submit -> the driver sees it RUNNING and submit -> its node entry runs (the
    jobs Slurm started at once); for each job that waited for a node, the node's previous
    job's node entry end -> this one's start (freed-node pickup: the entry's exit, Slurm's
    completion and the next job's launch); the driver seeing the last job end -> the CLI's
    exit (the report)."""
    jobs = sorted(job_times(run_dir), key=lambda j: j["node_started"])
    t0 = min(j["submitted"] for j in jobs)
    first, pickup, slurm_pickup, last = [], [], [], {}
    for j in jobs:
        prev = last.get(j["nodes"])
        if prev is not None and prev["node_finished"] <= j["node_started"]:
            pickup.append(j["node_started"] - prev["node_finished"])
            a, c = ctld.get(j["id"], {}), ctld.get(prev["id"], {})
            if "allocated" in a and "completed" in c:
                slurm_pickup.append((c["completed"] - prev["node_finished"],
                                     a["allocated"] - c["completed"],
                                     j["node_started"] - a["allocated"]))
        else:
            first.append(j)
        last[j["nodes"]] = j
    alloc = [ctld.get(j["id"], {}).get("allocated") for j in first]
    slurm = {} if None in alloc else {
        "submit_to_allocated": [round(a - j["submitted"], 2) for a, j in zip(alloc, first)],
        "allocated_to_node_entry": [round(j["node_started"] - a, 2) for a, j in zip(alloc, first)],
        "pickup_split":   # (entry end -> Slurm: completed, -> next allocated, -> its entry runs)
            [tuple(round(x, 2) for x in p) for p in slurm_pickup]}
    return {"submit_to_running_seen": [round(j["running_seen"] - j["submitted"], 2) for j in first],
            "submit_to_node_entry": [round(j["node_started"] - j["submitted"], 2) for j in first],
            "freed_node_pickup": [round(x, 2) for x in pickup], **slurm,
            "node_entry_to_server_launch": round(med(j["server_launched"] - j["node_started"]
                                                     for j in jobs), 2),
            "server_stop_to_node_end": round(med(j["node_finished"] - j["server_stopped"]
                                                 for j in jobs), 2),
            "cli_start_to_first_submit": round(t0 - SPANS[run_dir][0], 2),
            "last_end_seen_to_exit": round(SPANS[run_dir][1] - max(j["end_seen"] for j in jobs), 2)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="specc-slurm-bench-"))
    env, root = cluster_env(args.nodes, tmp)
    figures: dict = {}
    try:
        # 1. the sweep
        walls = {}
        for name, extra in (("slurm_all_nodes", ["cluster=slurm"]),
                            ("slurm_one_node", ["cluster=slurm",
                                                "cluster.sbatch_args=['--nodelist=n1']"]),
                            ("local", ["cluster=local"])):
            walls[name] = run(SWEEP + extra, tmp / name, env)
            print(f"sweep {name}: {walls[name]:.1f} s", flush=True)
        nodes_used = sorted({j["nodes"] for j in job_times(tmp / "slurm_all_nodes")})
        figures["sweep"] = {**{k: round(v, 1) for k, v in walls.items()},
                            "nodes_used": nodes_used,
                            "ratio_vs_one_node": round(walls["slurm_all_nodes"]
                                                       / walls["slurm_one_node"], 3),
                            "ratio_vs_local": round(walls["slurm_all_nodes"] / walls["local"], 3)}
        print(f"  {args.nodes} nodes / one node: {figures['sweep']['ratio_vs_one_node']:.3f}  "
              f"(target <= 0.35); / local: {figures['sweep']['ratio_vs_local']:.3f}; "
              f"nodes used: {', '.join(nodes_used)}")
        for name in ("slurm_all_nodes", "slurm_one_node"):
            figures["sweep"][f"{name}_parts_s"] = parts = sweep_breakdown(tmp / name,
                                                                          ctld_times(root))
            print(f"  {name}: " + "; ".join(f"{k} {v}" for k, v in parts.items()))

        # 2. one server: slurm vs local, alternating
        local, slurm, parts = [], [], []
        for i in range(args.repeat):
            local.append(run(ONE + ["cluster=local"], tmp / f"one-local-{i}", env))
            slurm.append(run(ONE + ["cluster=slurm"], tmp / f"one-slurm-{i}", env))
            parts += job_times(tmp / f"one-slurm-{i}")
        split = {
            "submit_to_running_seen": med(p["running_seen"] - p["submitted"] for p in parts),
            "submit_to_node_entry": med(p["node_started"] - p["submitted"] for p in parts),
            "node_entry_to_server_launch": med(p["server_launched"] - p["node_started"]
                                               for p in parts),
            "server_stop_to_node_end": med(p["node_finished"] - p["server_stopped"]
                                           for p in parts),
            "node_end_to_end_seen": med(p["end_seen"] - p["node_finished"] for p in parts)}
        figures["per_server"] = {"local_s": [round(x, 2) for x in local],
                                 "slurm_s": [round(x, 2) for x in slurm],
                                 "overhead_s": round(med(slurm) - med(local), 2),
                                 "parts_s": {k: round(v, 2) for k, v in split.items()}}
        print(f"one server: local median {med(local):.2f} s, slurm {med(slurm):.2f} s: "
              f"overhead {figures['per_server']['overhead_s']:.2f} s per server (target <= 2 s)")
        for k, v in split.items():
            print(f"  {k}: {v:.2f} s")

        # 3. noticing a job's end, over every job above
        every = parts + job_times(tmp / "slurm_all_nodes") + job_times(tmp / "slurm_one_node")
        lag = [p["end_seen"] - p["node_finished"] for p in every]
        figures["end_noticed_s"] = {"median": round(med(lag), 3), "max": round(max(lag), 3),
                                    "n": len(lag)}
        print(f"job end noticed after: median {med(lag):.3f} s, max {max(lag):.3f} s "
              f"(n={len(lag)}, target <= 2 s)")
    finally:
        if root is not None:
            subprocess.run(["bash", str(REPO / "tools/slurm/slurm-down.sh"), str(root)],
                           capture_output=True)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
