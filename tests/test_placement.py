"""Placement: servers of different sizes -> waves with disjoint GPUs and ports on one node."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from specc.compile.placement import MAX_PORT, place, rendezvous_ports

NODE, PORT = 8, 30000


def _check_invariants(sizes, slots, node=NODE):
    """Each server gets exactly its size in contiguous GPUs of the node; nothing repeats in a wave."""
    assert len(slots) == len(sizes)
    for size, slot in zip(sizes, slots):
        assert len(slot.gpus) == size
        assert list(slot.gpus) == list(range(slot.gpus[0], slot.gpus[0] + size))
        assert 0 <= slot.gpus[0] and slot.gpus[-1] < node
    for w in {s.wave for s in slots}:
        wave = [s for s in slots if s.wave == w]
        gpus = [g for s in wave for g in s.gpus]
        assert len(gpus) == len(set(gpus))
        assert sorted(s.port for s in wave) == list(range(PORT, PORT + len(wave)))
    assert sorted({s.wave for s in slots}) == list(range(len({s.wave for s in slots})))


def test_servers_of_different_sizes_get_their_own_gpu_counts():
    """The issue's case: tp 1 and tp 8 servers (baselines first) on one 8-GPU node."""
    slots, errors = place([1, 8, 1, 8], gpus_per_node=NODE, base_port=PORT)
    assert errors == []
    assert [(s.wave, s.gpus, s.port) for s in slots] == [
        (0, (0,), 30000), (1, tuple(range(8)), 30000), (0, (1,), 30001), (2, tuple(range(8)), 30000)]
    _check_invariants([1, 8, 1, 8], slots)


def test_mixed_tp_and_dp_fill_the_gaps_first_fit():
    # tp2 x dp2 = 4, tp1 = 1, tp2 = 2, tp4 x dp2 = 8
    sizes = [4, 1, 4, 2, 1, 8, 2]
    slots, errors = place(sizes, gpus_per_node=NODE, base_port=PORT)
    assert errors == []
    assert [(s.wave, s.gpus) for s in slots] == [
        (0, (0, 1, 2, 3)), (0, (4,)), (1, (0, 1, 2, 3)), (0, (5, 6)), (0, (7,)),
        (2, tuple(range(8))), (1, (4, 5))]
    _check_invariants(sizes, slots)


def test_more_servers_than_fit_open_more_waves():
    sizes = [1] * 9 + [2] * 5
    slots, errors = place(sizes, gpus_per_node=NODE, base_port=PORT)
    assert errors == []
    assert [s.wave for s in slots] == [0] * 8 + [1] * 4 + [2] * 2
    assert [(s.gpus, s.port) for s in slots[8:]] == [
        ((0,), 30000), ((1, 2), 30001), ((3, 4), 30002), ((5, 6), 30003),
        ((0, 1), 30000), ((2, 3), 30001)]
    _check_invariants(sizes, slots)


def test_uniform_servers_keep_todays_slots():
    """Same-size servers: slot i of a wave = GPUs [i*n, (i+1)*n), port base + i (ids and golden files rely on it)."""
    slots, _ = place([2] * 6, gpus_per_node=NODE, base_port=PORT)
    assert [(s.wave, s.gpus, s.port) for s in slots] == [
        (0, (0, 1), 30000), (0, (2, 3), 30001), (0, (4, 5), 30002), (0, (6, 7), 30003),
        (1, (0, 1), 30000), (1, (2, 3), 30001)]


def test_a_server_larger_than_the_node_is_an_error():
    slots, errors = place([1, 16, 8], gpus_per_node=NODE, base_port=PORT)
    assert slots == []
    (e,) = errors
    assert e.severity == "error" and e.path == "hardware.tp"
    assert "16 GPUs" in e.message and "8" in e.message
    assert "at most 8 GPUs per server" in e.hint


@given(st.lists(st.integers(1, NODE), max_size=40))
def test_any_sizes_that_fit_are_placed_without_overlap(sizes):
    slots, errors = place(sizes, gpus_per_node=NODE, base_port=PORT)
    assert errors == []
    _check_invariants(sizes, slots)
    # never more waves than the servers need one by one, never fewer than their GPUs need
    waves = len({s.wave for s in slots})
    assert waves <= len(sizes)
    assert waves >= -(-sum(sizes) // NODE)


def _first_fit_by_scanning(sizes, node=NODE):
    """The definition: each server into the earliest wave with a contiguous free run."""
    waves, out = [], []
    for size in sizes:
        for w, free in enumerate(waves):  # noqa: B007  w: read after the break
            first = next((g for g in range(node - size + 1) if all(free[g:g + size])), None)
            if first is not None:
                break
        else:
            w, first, free = len(waves), 0, [True] * node
            waves.append(free)
        free[first:first + size] = [False] * size
        out.append((w, tuple(range(first, first + size))))
    return out


@given(st.lists(st.integers(1, NODE), max_size=60))
def test_placement_is_first_fit(sizes):
    slots, _ = place(sizes, gpus_per_node=NODE, base_port=PORT)
    assert [(s.wave, s.gpus) for s in slots] == _first_fit_by_scanning(sizes)


def test_placement_looks_at_each_wave_a_bounded_number_of_times(monkeypatch):
    """10^4 servers of a whole node each: one wave apiece. Scanning every earlier wave for
    every server was 5 x 10^7 fits (minutes); each size now resumes where it stopped."""
    from specc.compile import placement

    calls = []
    fit = placement._Wave.fit
    monkeypatch.setattr(placement._Wave, "fit", lambda self, size: calls.append(1) or fit(self, size))
    sizes = [8] * 5000 + [1] * 5000 + [3, 5] * 2000
    slots, _ = place(sizes, gpus_per_node=NODE, base_port=PORT)
    waves = len({s.wave for s in slots})
    assert len(calls) <= len(sizes) + NODE * waves


# ----------------------------------------------------------------------------- rendezvous ports
@given(st.lists(st.tuples(st.integers(30000, 30100), st.sampled_from([1, 1, 2, 4])),
                min_size=1, max_size=30))
def test_rendezvous_ports_are_apart_from_every_server_port_and_from_each_other(servers):
    ports, nodes = [p for p, _ in servers], [n for _, n in servers]
    meets, errors = rendezvous_ports(ports, nodes, base_port=30000)
    assert errors == []
    assert [m is None for m in meets] == [n == 1 for n in nodes]   # one node: none
    given_out = [m for m in meets if m is not None]
    assert len(set(given_out)) == len(given_out) and not set(given_out) & set(ports)
    assert all(m <= MAX_PORT for m in given_out)


def test_rendezvous_ports_follow_the_highest_server_port():
    assert rendezvous_ports([8000, 8001, 8002], [2, 1, 4], base_port=8000) == ([8003, None, 8004], [])


def test_a_port_past_65535_is_an_error_naming_the_base_port_that_fits():
    meets, errors = rendezvous_ports([65000 + i for i in range(500)], [2] * 500, base_port=65000)
    (e,) = errors
    assert meets == [] and (e.code, e.path) == ("PLACEMENT_PORTS", "engine.base_port")
    assert "ports 65000-65999 (500 server port(s) and 500 rendezvous port(s)), past 65535" \
        in e.message
    assert e.hint == "set engine.base_port <= 64536"
    # the hint's base fits exactly: every port of the plan, shifted down, ends at 65535
    shifted, errors = rendezvous_ports([64536 + i for i in range(500)], [2] * 500, base_port=64536)
    assert errors == [] and max(shifted) == MAX_PORT
    # server ports alone past the top (one-node servers) are the same error
    (e,) = rendezvous_ports([65000 + i for i in range(600)], [1] * 600, base_port=65000)[1]
    assert "0 rendezvous port(s)" in e.message and e.hint == "set engine.base_port <= 64936"
