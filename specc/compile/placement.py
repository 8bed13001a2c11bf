"""Placement: servers of any size -> waves with disjoint GPUs and ports on one node.

Pure: sizes in, slots out. Servers keep their order (baselines first); each goes
into the earliest wave with a contiguous run of free GPUs large enough for it
(first fit), else opens a new wave. Servers of one wave run at once, so within a
wave GPUs and ports never repeat; a server that needs more GPUs than a node has
cannot be placed. A server's port is the engine's base port plus its index in
its wave. A server spanning nodes also gets a rendezvous port (the head's port its
ranks meet at): the next ports above every server port of the plan.
"""

from __future__ import annotations

from dataclasses import dataclass

from specc.diagnostics import Diagnostic, error

#: The highest TCP port.
MAX_PORT = 65535


@dataclass(frozen=True)
class Slot:
    wave: int
    gpus: tuple[int, ...]
    port: int


@dataclass
class _Wave:
    free: list[bool]
    servers: int = 0

    def fit(self, size: int) -> int | None:
        """First GPU of the lowest contiguous run of `size` free GPUs, or None."""
        run = 0
        for g, free in enumerate(self.free):
            run = run + 1 if free else 0
            if run == size:
                return g - size + 1
        return None


def place(sizes, *, gpus_per_node: int, base_port: int,
          multinode: bool = False) -> tuple[list[Slot], list[Diagnostic]]:
    """GPUs per server (tp x dp x pp), in plan order -> (one Slot each, errors).

    Any server larger than the node is an error and nothing is placed, unless
    `multinode` (Slurm and an engine that spans nodes): such a server has a wave of
    its own and the GPUs of its first node (every node runs the same slots)."""
    if multinode:
        big = [n > gpus_per_node for n in sizes]
        if any(big):
            small, _ = place([n for n, b in zip(sizes, big) if not b],
                             gpus_per_node=gpus_per_node, base_port=base_port)
            next_wave = max((s.wave for s in small), default=-1) + 1
            it, out = iter(small), []
            for n, b in zip(sizes, big):
                if b:
                    nodes = -(-n // gpus_per_node)
                    out.append(Slot(wave=next_wave, gpus=tuple(range(-(-n // nodes))),
                                    port=base_port))
                    next_wave += 1
                else:
                    out.append(next(it))
            return out, []
    too_large = sorted({n for n in sizes if n > gpus_per_node})
    if too_large:
        return [], [error(
            "TOPOLOGY_MULTINODE", "hardware.tp",
            f"a server needs {n} GPUs (tp x dp x pp), more than one node's {gpus_per_node}: "
            "it cannot be placed", f"use at most {gpus_per_node} GPUs per server")
            for n in too_large]
    waves: list[_Wave] = []
    slots = []
    # per size, the first wave that may still fit it: waves only fill up, so one that
    # cannot fit a size now never will (first fit in O(servers + waves), not their product)
    start = [0] * (gpus_per_node + 1)
    for size in sizes:
        w, first = start[size], None
        while w < len(waves):
            first = waves[w].fit(size)
            if first is not None:
                break
            w += 1
        start[size] = w
        if first is None:
            wave, first = _Wave([True] * gpus_per_node), 0
            waves.append(wave)
        else:
            wave = waves[w]
        gpus = tuple(range(first, first + size))
        for g in gpus:
            wave.free[g] = False
        slots.append(Slot(wave=w, gpus=gpus, port=base_port + wave.servers))
        wave.servers += 1
    return slots, []


def one_at_a_time(count: int, *, base_port: int) -> list[Slot]:
    """On a CPU (hardware.device=cpu) each server binds the cores it is given: one wave per
    server, no GPUs, every server on the base port (the one before it has stopped)."""
    return [Slot(wave=i, gpus=(), port=base_port) for i in range(count)]


def rendezvous_ports(ports, nodes, *, base_port: int) -> tuple[list[int | None], list[Diagnostic]]:
    """Each server's rendezvous port (None on one node), given every server's port and node
    count: the ports right above the plan's highest server port, one per multi-node server,
    so none is a server's port (jobs of other waves may share the head's node). A port
    past MAX_PORT, server or rendezvous, is an error naming how low the base must go."""
    top = max(ports, default=base_port - 1)
    out: list[int | None] = []
    for n in nodes:
        out.append(top + 1 if n > 1 else None)
        top = out[-1] or top
    highest = max([p for p in out if p is not None] + list(ports), default=base_port)
    if highest <= MAX_PORT:
        return out, []
    return [], [error(
        "PLACEMENT_PORTS", "engine.base_port",
        f"the plan needs ports {base_port}-{highest} ({len(ports)} server port(s) and "
        f"{sum(p is not None for p in out)} rendezvous port(s)), past {MAX_PORT}",
        f"set engine.base_port <= {MAX_PORT - (highest - base_port)}")]
