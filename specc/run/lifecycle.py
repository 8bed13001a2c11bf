"""Server processes: preflight, launch in their own process group, teardown that verifies.

Each server runs in its own session/process group with its output in its log.
The kernel sends it SIGTERM if the executor dies (PR_SET_PDEATHSIG), and
state.json lets the next run or `inv down` find anything left behind.
"""

from __future__ import annotations

import ctypes
import errno
import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from specc.net import connect_host
from specc.plan import Server

_PR_SET_PDEATHSIG = 1
_REF = re.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$")


def _die_with_parent() -> None:  # runs in the child between fork and exec
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:
        pass


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


def launch(server: Server, run_dir: Path) -> Running:
    log_path = run_dir / server.log
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log = open(log_path, "ab", buffering=0)
    try:
        proc = subprocess.Popen(resolve_argv(server.argv), stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=resolve_env(server), cwd=run_dir,
                                start_new_session=True, preexec_fn=_die_with_parent)
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
    """SIGTERM to the group, grace, SIGKILL; returns how it ended ("terminated"/"killed"/"gone")."""
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return "gone"
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
    for _ in range(100):
        if reap:
            reap()
        if not group_alive(pgid):
            break
        time.sleep(0.05)
    return "killed"


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
    if not wait_port_free(running.server.host, running.server.port):
        return how + f"; port {running.server.port} still in use"
    return how


def is_leftover(entry: dict) -> bool:
    """A state.json server whose process still runs (same pid, same start time)."""
    pid, started = entry.get("pid"), entry.get("started_at")
    if not pid or entry.get("status") in ("stopped",):
        return False
    try:
        p = psutil.Process(pid)
        return p.status() != psutil.STATUS_ZOMBIE and (
            started is None or abs(p.create_time() - started) < 5.0)
    except psutil.Error:
        return False


def stop_leftovers(state, grace_s: float = 10.0) -> list[str]:
    """Stop every server a previous executor started and left running; report each."""
    done = []
    for sid, entry in list(state.servers.items()):
        if is_leftover(entry):
            how = stop_group(entry.get("pgid") or entry["pid"], grace_s=grace_s)
            state.update(sid, status="stopped", stopped_by="cleanup", stop=how)
            done.append(f"{sid} (pid {entry['pid']}): {how}")
        elif entry.get("status") not in ("stopped", None) and entry.get("pid"):
            state.update(sid, status="stopped")
    return done
