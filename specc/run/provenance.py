"""The run manifest (manifest.json): what produced a run dir, so two runs can be compared.

Written by the run side from plan.json, state.json and this machine; it never imports
the compiler. Fields in docs/run-dir.md ("manifest.json"). Everything here is best
effort: a field that cannot be read holds null (or "none" for GPUs) and never stops a
run's report.
"""

from __future__ import annotations

import hashlib
import platform
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

from specc.files import atomic_write
from specc.manifest import (MANIFEST, MANIFEST_VERSION, DatasetHash, EngineRelease, GpuInfo,
                            GpuProcess, Launch, LoadRange, MachineState, Manifest, SpeccInfo)
from specc.plan import Plan, ReleaseProbe
from specc.rundir import RunDir, StateError

#: The prompt set specc ships (dataset=specc): the file a `specc` point's prompts come from.
SHIPPED_PROMPTS = Path(__file__).resolve().parent.parent / "data" / "prompts.jsonl"


def sha256_file(path: Path | str) -> str | None:
    """Hex sha256 of a file's bytes; None when it cannot be read."""
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    except OSError:
        return None
    return h.hexdigest()


# -- specc itself ------------------------------------------------------------------------

def _git(root: Path, *args: str) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                             timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def specc_info() -> dict:
    """specc's version; its git commit and dirty flag when it runs from a checkout."""
    try:
        from importlib.metadata import version

        ver = version("specc")
    except Exception:   # not installed (a bare checkout on sys.path)
        ver = None
    root = Path(__file__).resolve().parent.parent.parent
    commit = dirty = None
    if (root / ".git").exists() and shutil.which("git"):
        commit = _git(root, "rev-parse", "HEAD")
        status = _git(root, "status", "--porcelain", "--untracked-files=no")
        dirty = None if status is None else bool(status)
    return {"version": ver, "commit": commit, "dirty": dirty}


# -- GPUs ------------------------------------------------------------------------------

NVIDIA_SMI_QUERY = ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"]


def parse_gpus(query_csv: str, banner: str = "") -> dict:
    """GPUs from `nvidia-smi --query-gpu=name,driver_version --format=csv,noheader` and
    the CUDA release from plain `nvidia-smi`'s banner ("CUDA Version: 12.8")."""
    names, drivers = [], []
    for line in query_csv.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 2 and parts[0]:
            names.append(parts[0])
            drivers.append(parts[1])
    if not names:
        return {"name": "none", "count": 0, "driver": None, "cuda": None}
    cuda = re.search(r"CUDA Version:\s*([0-9.]+)", banner)
    kinds = sorted(set(names))
    return {"name": kinds[0] if len(kinds) == 1 else " + ".join(kinds), "count": len(names),
            "driver": drivers[0] if len(set(drivers)) == 1 else ", ".join(sorted(set(drivers))),
            "cuda": cuda.group(1) if cuda else None}


def gpu_info(smi: str = "nvidia-smi") -> dict:
    """This machine's GPUs through nvidia-smi; name "none" and count 0 where it has none
    (no nvidia-smi, or nvidia-smi finds no device)."""
    if not shutil.which(smi):
        return {"name": "none", "count": 0, "driver": None, "cuda": None,
                "source": "no nvidia-smi on PATH"}
    try:
        query = subprocess.run([smi, *NVIDIA_SMI_QUERY[1:]], capture_output=True, text=True,
                               timeout=30)
        banner = subprocess.run([smi], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as e:
        return {"name": "none", "count": 0, "driver": None, "cuda": None,
                "source": f"nvidia-smi failed: {e}"}
    out = parse_gpus(query.stdout if query.returncode == 0 else "", banner.stdout)
    out["source"] = "nvidia-smi" if out["count"] else "nvidia-smi: no device"
    return out


# -- the plan's inputs -----------------------------------------------------------------

def dataset_hashes(benchmarks) -> list[dict]:
    """Each distinct prompt source the points read, with its content's sha256 (null with
    `note` where it is not a local file: generated prompts, a Hugging Face dataset id)."""
    seen: dict[tuple, dict] = {}
    for b in benchmarks:
        p = b.params
        kind, path = p.dataset, p.dataset_path
        key = (kind, path)
        if key in seen:
            continue
        entry: dict = {"dataset": kind, "path": path, "sha256": None}
        if kind == "specc" and not path:
            entry["path"] = "specc/data/prompts.jsonl"
            entry["sha256"] = sha256_file(SHIPPED_PROMPTS)
        elif kind == "random":
            entry["note"] = f"generated from the seed ({p.seed})"
        elif path and Path(path).is_file():
            entry["sha256"] = sha256_file(path)
        elif path:
            entry["note"] = "not a local file (a dataset id, or missing here)"
        seen[key] = entry
    return list(seen.values())


def launch_commands(servers) -> list[dict]:
    """Each server's resolved launch command, secrets as `${NAME}` references (they are in
    the plan already; split again so that a hand-edited plan cannot leak one here)."""
    from specc.secrets import split_args, split_env

    out = []
    for s in servers:
        argv, _, _ = split_args(list(s.argv))
        env, _ = split_env(dict(s.env))
        out.append({"server": s.id, "label": s.label, "argv": argv, "env": env,
                    "secrets": list(s.secrets)})
    return out


def engine_info(plan: Plan, state: dict) -> dict:
    """The engine and its release: as the plan pinned it, and as each running server
    reported it (recorded in state.json when the server became ready)."""
    info = plan.engine_info
    reported = {}
    for sid, st in ((state or {}).get("servers") or {}).items():
        if isinstance(st, dict) and st.get("engine_release"):
            reported[sid] = st["engine_release"]
    releases = sorted(set(reported.values()))
    return {"name": plan.engine, "pinned_release": info.pinned_version,
            "plan_release": info.version,
            "reported_release": releases[0] if len(releases) == 1 else (releases or None),
            "reported_by_server": reported}


def machine_state(run_dir: Path) -> MachineState | None:
    """The run dir's machine samples (machine.jsonl), summarized; None without any."""
    from specc.run import machine

    got = machine.summarize(machine.read_samples(run_dir))
    if got is None:
        return None
    procs = got["gpu_other_processes"]
    return MachineState(
        samples=got["samples"], cpus=got["cpus"],
        load_avg=LoadRange(**got["load_avg"]) if got["load_avg"] else None,
        cpu_steal=got["cpu_steal"],
        gpu_other_processes=None if procs is None else tuple(GpuProcess(**p) for p in procs))


def build_manifest(run_dir: Path | str, *, gpus: dict | None = None) -> Manifest:
    """The manifest of ``run_dir`` (plan.json required, through its one door; state.json
    optional)."""
    rd = RunDir.open(run_dir)
    run_dir, plan = rd.path, rd.plan
    try:
        state = rd.state()
    except StateError:
        state = {}
    config = run_dir / ".hydra" / "config.yaml"
    engine = engine_info(plan, state)
    reported = engine["reported_release"]
    gpu = gpus if gpus is not None else gpu_info()
    return Manifest(
        version=MANIFEST_VERSION,
        experiment=plan.experiment,
        specc=SpeccInfo(**specc_info()),
        engine=EngineRelease(**{**engine, "reported_release": tuple(reported) if isinstance(
            reported, list) else reported}),
        host=socket.gethostname(),
        python=platform.python_version(),
        python_executable=sys.executable,
        platform=platform.platform(),
        gpu=GpuInfo(**gpu),
        datasets=tuple(DatasetHash(**d) for d in dataset_hashes(plan.benchmarks)),
        config_sha256=sha256_file(config) if config.exists() else None,
        plan_sha256=rd.plan_sha256,
        plan_digest=rd.digest,
        plan_seal=_seal_state(run_dir / "plan.json"),
        launch=tuple(Launch(server=x["server"], label=x["label"], argv=tuple(x["argv"]),
                            env=x["env"], secrets=tuple(x["secrets"]))
                     for x in launch_commands(plan.servers)),
        machine=machine_state(run_dir))


def _seal_state(plan_file: Path) -> str | None:
    """Whether the plan that ran carries this user's seal (anything else ran only with
    --accept-edited, or from plan.sh by hand)."""
    from specc import seal

    try:
        return seal.check_file(plan_file).state
    except (OSError, ValueError):
        return None


def write_manifest(run_dir: Path | str, **kw) -> Path | None:
    """Write manifest.json; a warning (never an exception) when it cannot be written."""
    run_dir = Path(run_dir)
    try:
        atomic_write(run_dir / MANIFEST, build_manifest(run_dir, **kw).dumps())
    except (OSError, ValueError, TypeError) as e:   # RunDirError is a ValueError
        print(f"warning: {MANIFEST} not written ({e})", file=sys.stderr)
        return None
    return run_dir / MANIFEST


# -- the server's own word on its release ------------------------------------------------

async def read_release(client, url: str, probe: ReleaseProbe | None) -> str | None:
    """The release a running server reports (``probe``: plan.json's
    engine_info.release_probe); None when it does not say."""
    if not probe:
        return None
    import httpx

    from specc.run.answers import BadAnswer, get_capped, loads

    for path in probe.paths:
        try:
            status, body = await get_capped(client, url + path, total_s=10.0)
            if status != 200:
                continue
            value = loads(body)
        except (httpx.HTTPError, BadAnswer):
            continue
        for key in (probe.field or "version").split("."):
            value = value.get(key) if isinstance(value, dict) else None
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return str(value)[:100]
    return None
