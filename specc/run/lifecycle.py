"""Server processes: preflight, launch in their own process group, teardown that verifies.

Each server runs in its own session/process group with its output in its log.
The kernel sends it SIGTERM if the executor dies (PR_SET_PDEATHSIG, set by the exec
wrapper specc/run/pdeathsig.py: no Python runs between fork and exec), and
state.json lets the next run or `inv down` find anything left behind.
"""

from __future__ import annotations

import errno
import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import psutil

from specc import secrets
from specc.net import connect_host
from specc.run import pdeathsig
from specc.run.ownership import launched_group, listener
from specc.plan import Server

_REF = re.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$")


def port_in_use(host: str, port: int) -> bool:
    """True when something accepts connections or holds the port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        try:
            s.connect((connect_host(host), port))
            return True
        except OSError:
            pass
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError as e:
            return e.errno == errno.EADDRINUSE
    return False


def port_holder(port: int) -> str:
    """Who listens on the port, for the error message (best effort)."""
    try:
        for c in psutil.net_connections("tcp"):
            if c.laddr and c.laddr.port == port and c.status == psutil.CONN_LISTEN and c.pid:
                p = psutil.Process(c.pid)
                return f"pid {c.pid} ({' '.join(p.cmdline()[:4])})"
    except (psutil.Error, OSError):
        pass
    return "another process"


def on_visible_gpus(plan, environ=os.environ):
    """(plan, problems): the plan's GPU slots taken as indices into the CUDA_VISIBLE_DEVICES
    this executor was given (a user's `CUDA_VISIBLE_DEVICES=4,5,6,7 specc ...`, a Slurm
    allocation's GPUs under hydra/launcher=submitit_slurm), so a server planned on GPU 0
    runs on the first GPU granted, never on a GPU someone else holds. Unset: as planned."""
    visible = [g.strip() for g in environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if g.strip()]
    if not visible:
        return plan, []
    servers, problems = [], []
    for s in plan.servers:
        if any(g >= len(visible) for g in s.gpus):
            problems.append(
                f"error GPUS_NOT_VISIBLE at servers.{s.id}: planned on GPUs "
                f"{','.join(map(str, s.gpus))} but CUDA_VISIBLE_DEVICES={','.join(visible)} "
                f"gives this executor {len(visible)} GPU(s) (fix: compile with "
                f"hardware.gpus_per_node={len(visible)}, or give it more GPUs)")
            continue
        servers.append(on_gpus(s, [visible[g] for g in s.gpus]))
    return (plan if problems else replace(plan, servers=tuple(servers))), problems


def on_gpus(server, ids: list[str]):
    """The server on these CUDA device ids: its CUDA_VISIBLE_DEVICES, and its `gpus` too where
    they are indices (UUIDs or MIG ids keep the planned numbers: no index to check holders by)."""
    gpus = tuple(int(g) for g in ids) if all(g.isdigit() for g in ids) else server.gpus
    return replace(server, gpus=gpus, env={**server.env, "CUDA_VISIBLE_DEVICES": ",".join(ids)})


def gpu_holders(ctx, gpus) -> tuple[list[str], str | None]:
    """([problems], note): processes holding memory on the server's GPUs, via nvidia-smi.

    Runs through the invoke Context so a remote (fabric) context checks the
    right machine. No nvidia-smi: no check, and a note saying so.
    """
    probe = ctx.run("command -v nvidia-smi", hide=True, warn=True)
    if not probe.ok:
        return [], "GPU check skipped: nvidia-smi not found on this host"
    idx = ctx.run("nvidia-smi --query-gpu=index,uuid --format=csv,noheader", hide=True, warn=True)
    apps = ctx.run("nvidia-smi --query-compute-apps=gpu_uuid,pid,used_memory --format=csv,noheader",
                   hide=True, warn=True)
    if not (idx.ok and apps.ok):
        return [], "GPU check skipped: nvidia-smi failed"
    uuid_to_index = {}
    for line in idx.stdout.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2:
            uuid_to_index[parts[1]] = int(parts[0])
    problems = []
    for line in apps.stdout.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 3 and uuid_to_index.get(parts[0]) in gpus:
            problems.append(f"GPU {uuid_to_index[parts[0]]} is held by pid {parts[1]} ({parts[2]})")
    return problems, None


@dataclass
class Running:
    server: Server
    proc: subprocess.Popen
    log_path: Path
    started_at: float      # epoch seconds, for state.json and display
    started_mono: float    # time.monotonic(), for every duration

    @property
    def pid(self) -> int:
        return self.proc.pid

    def exit_code(self) -> int | None:
        return self.proc.poll()


def resolve_argv(argv) -> list[str]:
    """`python` in a plan means the executor's own interpreter (the same environment)."""
    argv = list(argv)
    if argv and argv[0] == "python":
        argv[0] = sys.executable
    return argv


def resolve_env(server: Server) -> dict:
    """The executor's environment + the plan's; secrets are resolved only here, at launch."""
    env = dict(os.environ)
    for name, value in server.env.items():
        m = _REF.match(str(value))
        if m and name in server.secrets:
            if m.group(1) in os.environ:
                env[name] = os.environ[m.group(1)]
        else:
            env[name] = str(value)
    return env


def secrets_problem(server: Server) -> str | None:
    """The line that stops a launch whose secrets are not set here (nothing is started)."""
    missing = secrets.missing_secrets(server)
    return secrets.missing_line(server, missing) if missing else None


def launch_argv(server: Server) -> list[str]:
    """The argv to exec: `python` resolved, secret references expanded (only here, at launch)."""
    return [secrets.expand(a, server.secrets) for a in resolve_argv(server.argv)]


def auth_headers(server: Server) -> dict[str, str]:
    """`Authorization: Bearer <key>` when the server was launched with an API key (SGLang and
    vLLM then refuse the API routes without it); resolved from the environment, kept in
    memory only."""
    if server.api_key is None:
        return {}
    key = secrets.expand(server.api_key, server.secrets)
    secrets.remember([key])   # a server may echo it back (a 401 body): never written
    return {"Authorization": f"Bearer {key}"} if key else {}


def secret_values(server: Server) -> list[str]:
    """The values the server's launch resolves from the environment (to keep out of its log,
    and out of everything this process writes or prints)."""
    values = [v for n in secrets.referenced(server) if (v := os.environ.get(n))]
    secrets.remember(values)
    return values


def launch(server: Server, run_dir: Path) -> Running:
    log_path = run_dir / server.log
    log_path.parent.mkdir(parents=True, exist_ok=True)
    argv, env = launch_argv(server), resolve_env(server)
    hide = secret_values(server)
    if hide:   # engines print their arguments: the server runs under a log redactor
        argv = [sys.executable, "-m", "specc.run.redact", str(log_path), "--", *argv]
        env = {**env, secrets.REDACT_VALUES_ENV: "\n".join(hide)}
    log = open(log_path, "ab", buffering=0)
    try:
        proc = subprocess.Popen(pdeathsig.wrap(argv), stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                cwd=run_dir, start_new_session=True)
    finally:
        log.close()
    return Running(server=server, proc=proc, log_path=log_path, started_at=time.time(),
                   started_mono=time.monotonic())


def group_alive(pgid: int) -> bool:
    """Any non-zombie process left in the group."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    for p in psutil.process_iter(["pid", "status"]):
        try:
            if os.getpgid(p.pid) == pgid and p.info["status"] != psutil.STATUS_ZOMBIE:
                return True
        except (ProcessLookupError, psutil.Error, OSError):
            continue
    return False


def stop_group(pgid: int, *, grace_s: float = 10.0, reap=None) -> str:
    """SIGTERM to the group, grace, SIGKILL; returns how it ended: "gone", "terminated",
    "killed", or why it did not ("still alive after SIGKILL", "not permitted ...")."""
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return "gone"
    except PermissionError as e:
        return f"not permitted to signal process group {pgid} ({e.strerror})"
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if reap:
            reap()
        if not group_alive(pgid):
            return "terminated"
        time.sleep(0.05)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        return "terminated"
    except PermissionError as e:
        return f"not permitted to SIGKILL process group {pgid} ({e.strerror})"
    for _ in range(100):
        if reap:
            reap()
        if not group_alive(pgid):
            return "killed"
        time.sleep(0.05)
    return "still alive after SIGKILL"


def wait_port_free(host: str, port: int, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not port_in_use(host, port):
            return True
        time.sleep(0.05)
    return False


def stop(running: Running, grace_s: float = 10.0) -> str:
    how = stop_group(running.pid, grace_s=grace_s, reap=running.proc.poll)
    try:
        running.proc.wait(timeout=1)
    except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILLed above
        pass
    kind, who = listener(running.server.host, running.server.port, running.pid)
    if kind == "foreign":   # someone else's listener: not this server's to free or wait for
        return how + f"; port {running.server.port} held by {who}, not this server"
    if not wait_port_free(running.server.host, running.server.port):
        return how + f"; port {running.server.port} still in use"
    return how


def is_leftover(entry: dict) -> bool:
    """A state.json server whose process group still runs and is the one launched
    (ownership.launched_group: its leader's start time matches)."""
    return launched_group(entry)[0] == "alive"


def stop_leftovers(state, grace_s: float = 10.0) -> list[tuple[str, str]]:
    """Stop every server group a previous executor started and left running: one
    (outcome, line) each, outcome "stopped", "alive" (could not) or "foreign" (the recorded
    pgid now names an unrelated process: left alone, never signalled)."""
    done = []
    for sid, entry in list(state.servers.items()):
        found, why = launched_group(entry)
        pgid = entry.get("pgid") or entry.get("pid")
        if found == "alive":
            how = stop_group(pgid, grace_s=grace_s)
            if launched_group(entry)[0] == "alive":
                state.update(sid, stop=how)
                done.append(("alive", f"could not stop {sid} (process group {pgid}): {how}"))
            else:
                state.update(sid, status="stopped", stopped_by="cleanup", stop=how)
                done.append(("stopped", f"stopped {sid} (process group {pgid}): {how}"))
        elif found == "foreign":
            if entry.get("status") != "stopped":
                state.update(sid, status="stopped", stopped_by="cleanup",
                             stop=f"gone; left alone: {why}")
            done.append(("foreign", f"left alone process group {pgid} recorded for {sid}: "
                                    f"{why}"))
        elif entry.get("status") not in ("stopped", None) and entry.get("pid"):
            state.update(sid, status="stopped")
    return done
