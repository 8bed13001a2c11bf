"""Preflight (`inv doctor --plan PATH`): is the engine a plan targets the one installed where
its servers will run, and does that engine's own parser accept every launch command?

For each engine program the plan launches, on this machine (run it where the
servers run: for a Slurm plan, a node of its partition), it finds the Python that
program runs under, reads the installed engine's release, and feeds every
server's argv (a multi-node server's as its rank 0 runs it) to the engine's real
argument parser
(``specc/engines/parsers/<engine>_parse.py`` run under that Python). Nothing is
launched. Each problem is one diagnostic line; none means the plan can start.
The simulator's commands are parsed by the simulator's own parser.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from specc.diagnostics import Diagnostic, error
from specc.engines import get_engine
from specc.net import connect_host

PARSERS = Path(__file__).resolve().parent.parent / "engines" / "parsers"
#: engine -> (package whose release and parser are checked, parse script)
PARSE_SCRIPTS = {"sglang": ("sglang", "sglang_parse.py"), "vllm": ("vllm", "vllm_parse.py")}
TIMEOUT_S = 300


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


class _Rejected(Exception):
    pass


def _raise(message):
    raise _Rejected(message)


def _sim_problems(plan) -> list[Diagnostic]:
    from specc.sim.args import build_parser

    out = []
    for s in plan.servers:
        parser = build_parser()
        parser.error = _raise   # argparse would print usage and exit
        try:
            parser.parse_args(_argv(s)[3:])
        except _Rejected as e:
            out.append(error("DOCTOR_REJECTED", f"servers.{s.id}.argv",
                             f"the simulator's parser rejects the launch command: {e}",
                             "recompile the plan with this specc"))
    return out


def check_plan(plan, *, python: str | None = None, timeout_s: float = TIMEOUT_S) -> list[Diagnostic]:
    """Every reason the plan's servers would not start as written (empty: none found).

    `python`: the engine's interpreter (default: the one each launch command runs under).
    """
    if plan.engine == "sim":
        return _sim_problems(plan)
    package, script = PARSE_SCRIPTS[plan.engine]
    wanted = (plan.engine_info or {}).get("version") or get_engine(plan.engine).pinned_version
    out: list[Diagnostic] = []
    remote = sorted({s.host for s in plan.servers if connect_host(s.host) != "127.0.0.1"})
    for host in remote:
        out.append(error("DOCTOR_REMOTE_HOST", "hardware.host",
                         f"servers run on {host}: run `inv doctor` there (specc checks this machine)",
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
            proc = subprocess.run([py, str(PARSERS / script)], input=payload, capture_output=True,
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
        if installed is None:
            out.append(error("DOCTOR_ENGINE_MISSING", "engine.version",
                             f"the plan targets {package} {wanted} but {py} has no {package} installed",
                             f"pip install {package}=={wanted} for {py}"))
            continue
        if installed != wanted:
            out.append(error("DOCTOR_VERSION", "engine.version",
                             f"the plan targets {package} {wanted} but {py} has {package} {installed}",
                             f"pip install {package}=={wanted} there, or recompile with "
                             f"engine.version={installed}"))
            continue
        for r in report.get("rejected", []):
            out.append(error("DOCTOR_REJECTED", f"servers.{r['id']}.argv",
                             f"{package} {installed}'s own parser rejects the launch command: "
                             f"{r['error']}", "fix the engine settings that emit it and recompile"))
    return out
