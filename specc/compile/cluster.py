"""Where the plan runs: the Slurm jobs a `cluster=slurm` plan submits, and the rules on them.

Pure (config + Plan in, the plan's `cluster` record and diagnostics out).
`cluster=local` has no record: the executor runs the waves on this machine.
With `cluster=slurm` each server and its points are one job (or, with `pack`,
each wave is one job: its servers fit one node with disjoint GPUs and ports),
sized in nodes and GPUs per node, with a time limit that covers the server's
readiness deadline plus its points' estimated time, so Slurm never kills a
job the readiness plan would still call healthy.
"""

from __future__ import annotations

import math
import re

from specc.diagnostics import Diagnostic, error
from specc.plan import Cluster, Plan

#: Seconds added to an automatic time limit for teardown and Slurm's own start-up.
AUTO_MARGIN_S = 300.0
#: Keys of the cluster config copied into plan.json as written.
_KEYS = ("name", "partition", "account", "time_limit", "gpus_per_node", "nodes_per_server",
         "pack", "sbatch_args", "container_image", "container_mounts", "pending_timeout_s",
         "poll_interval_s")


def parse_time_limit(value) -> int:
    """sbatch --time -> seconds: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS."""
    if isinstance(value, int):
        return value * 60
    text = str(value)
    days = 0
    if "-" in text:
        d, text = text.split("-", 1)
        days = int(d)
        parts = [int(p) for p in text.split(":")] + [0, 0]
        h, m, s = parts[:3]
        return ((days * 24 + h) * 60 + m) * 60 + s
    parts = [int(p) for p in text.split(":")]
    if len(parts) == 1:
        return parts[0] * 60
    if len(parts) == 2:
        return parts[0] * 60 + parts[1]
    return (parts[0] * 60 + parts[1]) * 60 + parts[2]


def format_time_limit(seconds: float) -> str:
    """Seconds -> HH:MM:SS (D-HH:MM:SS from a day), rounded up to whole minutes."""
    minutes = math.ceil(seconds / 60)
    d, rest = divmod(minutes, 24 * 60)
    h, m = divmod(rest, 60)
    return f"{d}-{h:02d}:{m:02d}:00" if d else f"{h:02d}:{m:02d}:00"


def job_name(plan: Plan, wave: int | None, server_ids: list[str]) -> str:
    """A single server's job is named after the server; a packed wave after the experiment."""
    if len(server_ids) == 1:
        return server_ids[0]
    return re.sub(r"[^A-Za-z0-9._-]+", "-", f"{plan.experiment}-wave{wave}")


def _need_s(plan: Plan, server) -> tuple[float, float]:
    """(readiness deadline, points' estimated time) of one server, in seconds."""
    est = plan.estimates.servers_s.get(server.id)
    start = server.readiness.estimated_start_s or 0.0
    points = max(0.0, (est - start)) if est is not None else 0.0
    return float(server.readiness.deadline_s), points


def _gpus(server) -> int:
    """GPUs of one server: its slots, or, spanning nodes, tp x dp x pp over all of them."""
    if server.nodes == 1:
        return len(server.gpus)
    p = server.params
    return p.tp * p.dp * p.pp


def jobs(cluster: dict, plan: Plan) -> list[dict]:
    """The jobs of a Slurm plan, in plan order (baselines first)."""
    if cluster.get("pack"):
        groups: list[tuple[int | None, list]] = [(w[0].wave, list(w)) for w in plan.waves]
    else:
        groups = [(None, [s]) for s in plan.servers]
    gpn = cluster["gpus_per_node"]
    out = []
    for wave, servers in groups:
        ids = [s.id for s in servers]
        gpus = sum(_gpus(s) for s in servers)
        nodes = max(1, math.ceil(gpus / gpn)) if gpus else 1
        needs = [_need_s(plan, s) for s in servers]   # packed servers run side by side
        deadline = max(d for d, _ in needs)
        points = max(p for _, p in needs)
        if cluster.get("time_limit") is not None:
            limit_s = parse_time_limit(cluster["time_limit"])
            limit = str(cluster["time_limit"]) if isinstance(cluster["time_limit"], str) \
                else format_time_limit(limit_s)
        else:
            limit_s = math.ceil((deadline + 2 * points + AUTO_MARGIN_S) / 60) * 60
            limit = format_time_limit(limit_s)
        name = job_name(plan, wave, ids)
        out.append({"name": name, "servers": ids, "nodes": nodes, "gpus": gpus,
                    "gpus_per_node": math.ceil(gpus / nodes) if gpus else 0,
                    "time_limit": limit, "time_limit_s": limit_s,
                    "need_s": round(deadline + points, 1), "deadline_s": deadline,
                    "points_s": round(points, 1), "script": f"slurm/{name}.sbatch"})
    return out


# --- rules: (cluster, jobs, plan) -> diagnostics; one per problem, naming the worst job ---------

def _more(bad: list) -> str:
    return f" ({len(bad)} jobs: the others likewise)" if len(bad) > 1 else ""


def slurm_nodes(cluster: dict, jobs: list[dict], plan: Plan):
    """A server spans no more nodes than cluster.nodes_per_server allows."""
    bad = sorted((j for j in jobs if j["nodes"] > cluster["nodes_per_server"]),
                 key=lambda j: -j["nodes"])
    if bad:
        job = bad[0]
        yield error("SLURM_NODES", "cluster.nodes_per_server",
                    f"job {job['name']} needs {job['gpus']} GPUs = {job['nodes']} nodes of "
                    f"{cluster['gpus_per_node']} GPUs, more than cluster.nodes_per_server="
                    f"{cluster['nodes_per_server']}{_more(bad)}",
                    f"set cluster.nodes_per_server={job['nodes']} (a multi-node server), or "
                    f"use at most {cluster['gpus_per_node'] * cluster['nodes_per_server']} "
                    "GPUs per server")


def slurm_gpus_per_node(cluster: dict, jobs: list[dict], plan: Plan):
    """A multi-node server splits its GPUs evenly over its nodes; a packed wave fits one node."""
    gpn = cluster["gpus_per_node"]
    waves = [j for j in jobs if j["nodes"] > 1 and len(j["servers"]) > 1]
    if waves:
        job = waves[0]
        yield error("SLURM_GPUS_PER_NODE", "cluster.pack",
                    f"wave job {job['name']} needs {job['gpus']} GPUs but a node has "
                    f"{gpn}{_more(waves)}",
                    f"set hardware.gpus_per_node={gpn} so waves fit a node, or cluster.pack=false")
    uneven = [j for j in jobs if j["nodes"] > 1 and len(j["servers"]) == 1
              and j["gpus"] % j["nodes"]]
    if uneven:
        job = uneven[0]
        yield error("SLURM_GPUS_PER_NODE", "hardware.tp",
                    f"server {job['servers'][0]}'s {job['gpus']} GPUs do not split evenly over "
                    f"{job['nodes']} nodes of {gpn} GPUs (the engine splits tensor parallelism "
                    f"evenly across nodes){_more(uneven)}",
                    f"use a tp that is a multiple of {job['nodes']} and at most "
                    f"{gpn * job['nodes']}")


def slurm_time_limit(cluster: dict, jobs: list[dict], plan: Plan):
    """The time limit covers the readiness deadline plus the points' estimated time."""
    if cluster.get("time_limit") is None:
        return
    bad = sorted((j for j in jobs if j["time_limit_s"] < j["need_s"]), key=lambda j: -j["need_s"])
    if bad:
        job = bad[0]
        fix = math.ceil(job["need_s"] * 1.25 / 60)
        yield error("SLURM_TIME_LIMIT", "cluster.time_limit",
                    f"time limit {job['time_limit']} ({job['time_limit_s']} s) is shorter than "
                    f"job {job['name']}'s readiness deadline {job['deadline_s']:g} s + its points' "
                    f"estimated {job['points_s']:g} s = {job['need_s']:g} s{_more(bad)}: Slurm "
                    "would kill it (TIMEOUT) before the plan calls it stuck or done",
                    f"set cluster.time_limit={fix} (minutes) or null (automatic)")


CLUSTER_RULES = (slurm_nodes, slurm_gpus_per_node, slurm_time_limit)


def compile_cluster(cfg: dict, plan: Plan) -> tuple[Cluster | None, list[Diagnostic]]:
    """(the plan's cluster record, or None for local; diagnostics)."""
    cluster = cfg.get("cluster") or {"name": "local"}
    if cluster["name"] != "slurm":
        return None, []
    section = {k: cluster[k] for k in _KEYS if k in cluster}
    if section.get("time_limit") is not None:   # 90 (minutes) and "90" are one sbatch value
        section["time_limit"] = str(section["time_limit"])
    section["jobs"] = jobs(cluster, plan)
    found = [d for rule in CLUSTER_RULES for d in rule(cluster, section["jobs"], plan)]
    return Cluster.from_json(section, "cluster"), found
