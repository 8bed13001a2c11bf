"""The machine's state while a run measures: load average, CPU steal, other processes on
the GPUs. Two runs of the same plan measured beside different loads differ by more than
any interval within a run can see; the manifest records it (manifest.json `machine`,
docs/run-dir.md) so that `specc compare` can name it as the likely cause.

The executor samples at its start, before and after every point, and at its end; the
samples go to the run dir's machine.jsonl (appended, so a resumed run keeps the earlier
session's), which the manifest summarizes. Everything is best effort: what cannot be read
is null, and a sample that cannot be written never stops a run.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import time
from collections.abc import Set as AbstractSet
from pathlib import Path

SAMPLES = "machine.jsonl"
#: A sample line is some 200 bytes; this bounds what a hand-made file makes us read.
SAMPLES_BYTES = 16 << 20
GPU_APPS_QUERY = ["--query-compute-apps=pid,process_name,used_memory",
                  "--format=csv,noheader,nounits"]


def cpu_times(path: str = "/proc/stat") -> list[int] | None:
    """[steal, total] jiffies since boot from /proc/stat's "cpu" line; None where there is
    none (not Linux) or it has no steal column (kernels before 2.6.11)."""
    try:
        with open(path) as f:
            first = f.readline().split()
    except OSError:
        return None
    if len(first) < 9 or first[0] != "cpu":
        return None
    try:
        ticks = [int(x) for x in first[1:]]
    except ValueError:
        return None
    # user nice system idle iowait irq softirq steal [guest guest_nice: inside user, nice]
    return [ticks[7], sum(ticks[:8])]


def parse_gpu_apps(csv: str, ours: AbstractSet[int] = frozenset()) -> list[dict]:
    """The processes `nvidia-smi --query-compute-apps=pid,process_name,used_memory
    --format=csv,noheader,nounits` lists, less those of ``ours`` (process groups: the
    run's own servers)."""
    out = []
    for line in csv.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 3 or not parts[0].isdigit():
            continue
        pid = int(parts[0])
        try:
            group = os.getpgid(pid)
        except OSError:   # gone, or in another pid namespace: not ours
            group = None
        if pid in ours or group in ours:
            continue
        try:
            mem = float(parts[2])
        except ValueError:
            mem = None
        out.append({"pid": pid, "name": parts[1], "memory_mib": mem})
    return out


def gpu_others(ours: AbstractSet[int] = frozenset(), smi: str = "nvidia-smi") -> list[dict] | None:
    """Compute processes on this machine's GPUs that are not the run's own; None where
    nvidia-smi is absent or fails (a machine without GPUs)."""
    if not shutil.which(smi):
        return None
    try:
        p = subprocess.run([smi, *GPU_APPS_QUERY], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return parse_gpu_apps(p.stdout, ours) if p.returncode == 0 else None


def sample(ours: AbstractSet[int] = frozenset(), *, when: str = "") -> dict:
    """One sample of the machine now."""
    try:
        load = list(os.getloadavg())
    except OSError:
        load = None
    return {"t": time.time(), "when": when, "host": os.uname().nodename,
            "cpus": os.cpu_count(), "load": load, "cpu": cpu_times(),
            "gpu_others": gpu_others(ours)}


def record(run_dir: Path | str, ours: AbstractSet[int] = frozenset(), *, when: str = "") -> None:
    """Append one sample to the run dir's machine.jsonl; silent when it cannot."""
    line = json.dumps(sample(ours, when=when)) + "\n"
    try:
        with open(Path(run_dir) / SAMPLES, "a") as f:
            f.write(line)
    except OSError:
        pass


def read_samples(run_dir: Path | str) -> list[dict]:
    """The run dir's samples (lines that are not one are skipped)."""
    try:
        with open(Path(run_dir) / SAMPLES, "rb") as f:
            text = f.read(SAMPLES_BYTES).decode("utf-8", "replace")
    except OSError:
        return []
    out = []
    for line in text.splitlines():
        try:
            s = json.loads(line)
        except ValueError:
            continue
        if isinstance(s, dict):
            out.append(s)
    return out


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def summarize(samples: list[dict]) -> dict | None:
    """What the manifest keeps (its `machine`): the 1-minute load average over the samples
    (min, median, max), the fraction of CPU time stolen between consecutive samples on one
    host, and the other processes seen on the GPUs (null where never readable)."""
    if not samples:
        return None
    loads = [s["load"][0] for s in samples
             if isinstance(s.get("load"), list) and s["load"] and _number(s["load"][0])]
    steal = total = 0
    for a, b in zip(samples, samples[1:]):
        ca, cb = a.get("cpu"), b.get("cpu")
        if (a.get("host") == b.get("host") and isinstance(ca, list) and isinstance(cb, list)
                and len(ca) == len(cb) == 2 and all(map(_number, ca + cb))
                and cb[1] > ca[1] and cb[0] >= ca[0]):   # same boot: counters only grow
            steal, total = steal + cb[0] - ca[0], total + cb[1] - ca[1]
    gpu_seen = [s["gpu_others"] for s in samples if isinstance(s.get("gpu_others"), list)]
    others: dict[tuple, dict] = {}
    for procs in gpu_seen:
        for p in procs:
            if isinstance(p, dict) and _number(p.get("pid")):
                others.setdefault((p["pid"], str(p.get("name"))), {
                    "pid": int(p["pid"]), "name": str(p.get("name")),
                    "memory_mib": float(p["memory_mib"]) if _number(p.get("memory_mib"))
                    else None})
    cpus = [s["cpus"] for s in samples if type(s.get("cpus")) is int]
    return {"samples": len(samples), "cpus": max(cpus) if cpus else None,
            "load_avg": {"min": min(loads), "median": statistics.median(loads),
                         "max": max(loads)} if loads else None,
            "cpu_steal": steal / total if total else None,
            "gpu_other_processes": list(others.values()) if gpu_seen else None}
