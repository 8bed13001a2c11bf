"""The likely causes `specc compare` names beside a change (docs/compare.md): the machine's
state during each run (manifest.json `machine`: load average, CPU steal, other processes
on the GPUs) and the resolved-config keys whose values differ (the run dirs'
.hydra/config.yaml), not only that the config's hash differs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import cast

#: The resolved config Hydra saves into every run dir (its sha256 is the manifest's).
CONFIG = Path(".hydra") / "config.yaml"
CONFIG_BYTES = 4 << 20
#: Config keys listed at most; the rest are counted.
MAX_KEYS = 20
#: Load averages differ when their medians are this far apart, and a quarter of the CPUs.
LOAD_APART = 1.0
#: CPU steal differs by this fraction of CPU time or more.
STEAL_APART = 0.02


def _flatten(obj, prefix: str = "") -> dict:
    if isinstance(obj, dict) and obj:
        out = {}
        for k, v in obj.items():
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: obj}


def read_config(run_dir: Path | str) -> dict | None:
    """The run's resolved config, flattened to dotted keys; None where unreadable."""
    import yaml

    path = Path(run_dir) / CONFIG
    try:
        with open(path, "rb") as f:
            data = yaml.safe_load(f.read(CONFIG_BYTES))
    except (OSError, yaml.YAMLError):
        return None
    return _flatten(data) if isinstance(data, dict) else None


def _text(v) -> str:
    return v if isinstance(v, str) else json.dumps(v, default=str)


def config_diff(run_dirs: list) -> list[dict]:
    """Each config key whose value differs between the runs: {field: "config <key>",
    values}; a run without a saved config is left out (nothing to name)."""
    read = [read_config(d) for d in run_dirs]
    if any(c is None for c in read):
        return []
    configs = cast(list[dict], read)   # none is None (above)
    keys = sorted(set().union(*configs))
    out = []
    for k in keys:
        values = [c.get(k) for c in configs]
        if len({json.dumps(v, sort_keys=True, default=str) for v in values}) > 1:
            out.append({"field": f"config {k}", "values": values})
    if len(out) > MAX_KEYS:
        out = out[:MAX_KEYS] + [{"field": "config", "values": [
            f"and {len(out) - MAX_KEYS} more keys differ"] * len(run_dirs)}]
    return out


def _load_text(m: dict) -> str:
    load = m.get("load_avg") or {}
    return "?" if load.get("median") is None else f"{load['median']:.1f}"


def machine_diff(manifests: list[dict]) -> list[dict]:
    """How the machine differed between the runs, each a likely cause of a change no
    interval within a run covers: {field, values, cause} (the cause a sentence)."""
    ms = [(m or {}).get("machine") or {} for m in manifests]
    if sum(bool(m) for m in ms) < 2:
        return []
    out = []
    medians = [(m.get("load_avg") or {}).get("median") for m in ms]
    known = [x for x in medians if isinstance(x, (int, float))]
    cpus = max([m["cpus"] for m in ms if isinstance(m.get("cpus"), int)] or [1])
    if len(known) >= 2 and max(known) - min(known) >= max(LOAD_APART, 0.25 * cpus):
        out.append({"field": "load avg", "values": medians, "cause": (
            "machine load differed: load avg " + " vs ".join(_load_text(m) for m in ms)
            + f" during the run (median of its samples; {cpus} CPUs)")})
    steal = [m.get("cpu_steal") for m in ms]
    known = [x for x in steal if isinstance(x, (int, float))]
    if len(known) >= 2 and max(known) - min(known) >= STEAL_APART:
        out.append({"field": "CPU steal", "values": steal, "cause": (
            "CPU steal differed: " + " vs ".join(
                "?" if x is None else f"{100 * x:.1f}%" for x in steal)
            + " of CPU time taken by the hypervisor")})
    procs = [m.get("gpu_other_processes") for m in ms]
    if any(p for p in procs) and len({json.dumps(sorted(
            str(x.get("name")) for x in p)) if isinstance(p, list) else "?" for p in procs}) > 1:
        def said(p):
            if not isinstance(p, list):
                return "unknown"
            return ", ".join(f"{x.get('name')} (pid {x.get('pid')})" for x in p) or "none"
        out.append({"field": "other GPU processes", "values": procs, "cause": (
            "other processes on the GPUs differed: " + " vs ".join(said(p) for p in procs))})
    return out
