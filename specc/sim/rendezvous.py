"""The rendezvous of a multi-node server (``--nnodes N --node-rank i --dist-init-addr H:P``).

As SGLang's ``init_torch_distributed`` (srt/distributed/bootstrap.py logs "Init parallel
begin." / "Init parallel ends."): rank 0 listens on the dist-init address and waits
for every other node before it loads anything, so a peer that never joins stalls it
here, in the readiness plan's `join` phase. Every other node logs its own TP ranks,
joins, and exits when rank 0 goes (its end of the connection closes). Faults at `join`
(hang, crash) hit the other nodes only: rank 0 waits for them.
"""

from __future__ import annotations

import socket
import time

from . import truth
from .log import log


def _addr(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host.strip("[]") or "127.0.0.1", int(port)


def _ranks(sim, node: int) -> range:
    per = max(1, sim.tp // sim.args.nnodes)
    return range(node * per, (node + 1) * per)


def join(sim) -> list[socket.socket]:
    """Rank 0: wait for the other nodes (their connections, kept open). Other ranks: join,
    then wait for rank 0 to go and exit; they never return."""
    a = sim.args
    if not a.dist_init_addr:
        log("specc.sim: --nnodes > 1 needs --dist-init-addr HOST:PORT")
        truth.hard_exit(1)
    host, port = _addr(a.dist_init_addr)
    t0 = time.perf_counter()
    if a.node_rank == 0:
        log("Init parallel begin.", 0)
        lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        lsock.bind((host, port))
        lsock.listen(a.nnodes)
        joined: set[int]
        peers, joined = [], set()
        while len(joined) < a.nnodes - 1:
            conn, _ = lsock.accept()
            rank = int(conn.makefile().readline() or -1)
            peers.append(conn)
            joined.add(rank)
            log(f"specc.sim: node {rank} joined ({len(joined) + 1}/{a.nnodes} nodes)", 0)
        lsock.close()
        log(f"Init parallel ends. elapsed={time.perf_counter() - t0:.2f} s", 0)
        return peers
    f = sim.fault
    for r in _ranks(sim, a.node_rank):
        log("Init parallel begin.", r)
    if f is not None and f.name == "hang" and f.phase == "join":
        log(f"specc.sim: node {a.node_rank} never joins (fault {f})")
        while True:
            time.sleep(0.2)
    if f is not None and f.name == "crash" and f.phase == "join":
        from .startup import print_traceback
        print_traceback(sim, f"RuntimeError: simulated failure in phase join on node "
                             f"{a.node_rank} (specc.sim fault {f})")
        truth.hard_exit(1)
    while True:   # rank 0 may not listen yet
        try:
            conn = socket.create_connection((host, port), timeout=1.0)
            break
        except OSError:
            time.sleep(0.05)
    conn.sendall(f"{a.node_rank}\n".encode())
    for r in _ranks(sim, a.node_rank):
        log(f"Init parallel ends. elapsed={time.perf_counter() - t0:.2f} s", r)
    conn.settimeout(None)
    while conn.recv(4096):
        pass
    log(f"specc.sim: rank 0 at {a.dist_init_addr} has gone: node {a.node_rank} exits")
    truth.hard_exit(0)
