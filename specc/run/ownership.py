"""Is the process answering on a server's port the server specc launched?

Preflight checks the port is free, but the server binds it only after loading
(minutes on a real model): in between another run, another user's server or
any listener can take it, and whatever answers would be declared ready and
benchmarked under this server's label. A listener is the launched server's
when its listening socket is open in a process of the server's process group
(its own session: the engine's workers stay in it). The socket is found by
inode in /proc/net/tcp{,6} and matched to the fds of the group's processes;
root sees every process and a user their own, which the launched server always
is. Without /proc (not Linux), psutil answers the same question.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import struct
import time
from pathlib import Path
from typing import TYPE_CHECKING

from specc.net import connect_host

if TYPE_CHECKING:   # imported where used: `specc status` on a run whose servers are gone
    import psutil   # never needs it (0.03 s)

_LISTEN = "0A"
_PROC = Path("/proc")


def _addr(hex_ip: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """/proc/net/tcp's address: 32-bit words in host byte order."""
    raw = bytes.fromhex(hex_ip)
    words = struct.unpack(f"={len(raw) // 4}I", raw)
    return ipaddress.ip_address(struct.pack(f"!{len(words)}I", *words))


def _targets(host: str) -> set[ipaddress._BaseAddress] | None:
    """The addresses a client reaching `host` connects to; None when unknown (match any)."""
    h = connect_host(host)
    try:
        return {ipaddress.ip_address(h)}
    except ValueError:
        pass
    try:
        return {ipaddress.ip_address(str(ai[4][0]).split("%")[0])
                for ai in socket.getaddrinfo(h, None, proto=socket.IPPROTO_TCP)}
    except (OSError, ValueError):
        return None


def _reaches(local: ipaddress.IPv4Address | ipaddress.IPv6Address, targets) -> bool:
    """Whether a listener bound to `local` receives connections made to `targets`."""
    if targets is None or local.is_unspecified:
        return True
    mapped = getattr(local, "ipv4_mapped", None)
    return local in targets or (mapped is not None and mapped in targets)


def listening_inodes(host: str, port: int) -> set[int] | None:
    """Inodes of the sockets listening where a client of host:port connects; None when
    /proc/net/tcp cannot be read."""
    targets = _targets(host)
    found: set[int] = set()
    read_any = False
    for name in ("tcp", "tcp6"):
        try:
            lines = (_PROC / "net" / name).read_text().splitlines()[1:]
        except OSError:
            continue
        read_any = True
        for line in lines:
            f = line.split()
            if len(f) < 10 or f[3] != _LISTEN:
                continue
            ip, _, p = f[1].partition(":")
            if int(p, 16) == port and _reaches(_addr(ip), targets):
                found.add(int(f[9]))
    return found if read_any else None


def _socket_inodes(pid: int) -> set[int]:
    out: set[int] = set()
    fd_dir = _PROC / str(pid) / "fd"
    try:
        names = os.listdir(fd_dir)
    except OSError:
        return out
    for fd in names:
        try:
            target = os.readlink(fd_dir / fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            out.add(int(target[8:-1]))
    return out


def _pids() -> list[int]:
    return [int(n) for n in os.listdir(_PROC) if n.isdigit()]


def group_pids(pgid: int) -> list[int]:
    """Processes in process group `pgid`."""
    out = []
    for pid in _pids():
        try:
            if os.getpgid(pid) == pgid:
                out.append(pid)
        except OSError:
            continue
    return out


def _describe(pid: int | None) -> str:
    import psutil

    if pid is None:
        return "a process specc cannot see (another user's?)"
    try:
        cmd = " ".join(psutil.Process(pid).cmdline())[:200]
    except psutil.Error:
        cmd = ""
    return f"pid {pid}" + (f" ({cmd})" if cmd else "")


def _by_psutil(host: str, port: int, pgid: int) -> tuple[str, int | None]:
    """Fallback without /proc/net: ("none"|"ours"|"foreign", the foreign pid or None)."""
    import psutil

    targets = _targets(host)
    kind = "none"
    for c in psutil.net_connections("tcp"):
        if not c.laddr or c.laddr.port != port or c.status != psutil.CONN_LISTEN:
            continue
        if not _reaches(ipaddress.ip_address(c.laddr.ip.split("%")[0]), targets):
            continue
        try:
            ours = c.pid is not None and os.getpgid(c.pid) == pgid
        except OSError:
            ours = False
        if not ours:
            return "foreign", c.pid
        kind = "ours"
    return kind, None


def listener(host: str, port: int, pgid: int) -> tuple[str, str]:
    """Who listens where a client of host:port connects: ("none", ""), ("ours", "") when
    every listener is a process of group `pgid`, or ("foreign", who: "pid X (command)")."""
    inodes = listening_inodes(host, port)
    if inodes is None:
        kind, pid = _by_psutil(host, port, pgid)
        return kind, (_describe(pid) if kind == "foreign" else "")
    if not inodes:
        return "none", ""
    for pid in group_pids(pgid):
        inodes -= _socket_inodes(pid)
        if not inodes:
            return "ours", ""
    owner = None   # a listener the group does not hold (all must be its own: SO_REUSEPORT)
    for pid in _pids():
        if _socket_inodes(pid) & inodes:
            owner = pid
            break
    if owner is not None and _launched_by(owner, pgid):
        return "ours", ""
    return "foreign", _describe(owner)


def _launched_by(pid: int, pgid: int) -> bool:
    """A rank of a multi-node server the group launched through srun (slurmd started it,
    so it is in no group of ours; specc.run.rank marks it with the group)."""
    import psutil

    try:
        return psutil.Process(pid).environ().get("SPECC_SERVER_PGID") == str(pgid)
    except (psutil.Error, OSError):
        return False


def taken(host: str, port: int, pgid: int) -> str | None:
    """The line readiness fails with and a point refuses to start on, when another process
    listens on the server's port; None when nothing or only the server does."""
    kind, who = listener(host, port, pgid)
    return f"port {port} taken after preflight by {who}" if kind == "foreign" else None


# -- the process group a state.json entry recorded ------------------------------------------
#: The leader's create_time as psutil reads it (boot time + start ticks) is exact; the
#: launch-time `started_at` of older state files is the executor's clock, seconds off.
CREATE_TIME_TOLERANCE_S = 0.05
STARTED_AT_TOLERANCE_S = 5.0


def create_time(pid: int) -> float | None:
    """The process's start time (epoch seconds) as the kernel records it, or None."""
    import psutil

    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def _live(pid: int) -> psutil.Process | None:
    import psutil

    try:
        p = psutil.Process(pid)
        return None if p.status() == psutil.STATUS_ZOMBIE else p
    except psutil.Error:
        return None


def launched_group(entry: dict) -> tuple[str, str]:
    """Whether the process group a state.json entry recorded is still the one launched.

    ("alive", "") it runs and is the launched one: the leader (pid == pgid) has the
    recorded start time, or, the leader gone, every member started after it (the kernel
    keeps a pgid's number while any member lives); ("gone", "") nothing of it is left;
    ("foreign", why) the number now belongs to an unrelated process (a recycled pid):
    never signal it.
    """
    pgid = entry.get("pgid") or entry.get("pid")
    if not pgid:
        return "gone", ""
    members = [p for pid in group_pids(pgid) if (p := _live(pid)) is not None]
    if not members:
        return "gone", ""
    import psutil

    recorded, tol = entry.get("create_time"), CREATE_TIME_TOLERANCE_S
    if recorded is None:
        recorded, tol = entry.get("started_at"), STARTED_AT_TOLERANCE_S
    if recorded is None:
        return "foreign", (f"process group {pgid} is alive but state.json recorded no start "
                           "time to tell it is the server launched")
    leader = next((p for p in members if p.pid == pgid), None)
    try:
        if leader is not None:
            started = leader.create_time()
            if abs(started - recorded) <= tol:
                return "alive", ""
            return "foreign", (f"pid {pgid} is now {_describe(pgid)}, started "
                               f"{_stamp(started)}, not the server launched {_stamp(recorded)}")
        early = [p for p in members if p.create_time() < recorded - tol]
    except psutil.Error:
        return "gone", ""
    if early:
        return "foreign", (f"process group {pgid} holds {_describe(early[0].pid)}, started "
                           f"before the server was launched {_stamp(recorded)}")
    return "alive", ""


def _stamp(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) + f".{int(t % 1 * 100):02d}"
