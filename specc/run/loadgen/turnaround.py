"""How late the load generator itself sent its requests: its turnaround.

In a closed loop (a concurrency cap) a request is due the moment a slot frees, when an
earlier response has ended; with an arrival schedule it is due at its time, and no
earlier than a slot frees. A client starved of CPU between a response's end (the kernel's
receive time) and its next send stretches the point's duration by what nobody asked for,
and its throughput with it: the server was idle, waiting on the client. This module says
by how much, from the records alone (pure functions; a fake clock is just numbers).
"""

from __future__ import annotations

import os

from specc.run.loadgen.records import RequestRecord

#: A point whose client's own delays add up to more than this share of its duration (per
#: slot of the concurrency cap) measured the client's CPU, not the server: it is measured
#: again, then failed. The same 5% as the simulator's own schedule bound
#: (specc/engines/sim.py): a valid point's throughput stays within 5% of what the server gave.
BOUND_SHARE = 0.05
#: ... but never under this (s per slot): a process scheduler's slice on a busy machine,
#: which no point is failed for (the simulator's floor, for the same reason).
FLOOR_S = 0.01
#: A test hook, read by the point runner: a floor in seconds (> 0) in place of FLOOR_S. The
#: test suite raises it (its points of a few tiny requests last a fraction of a second on
#: a machine other suites keep busy); tests/test_turnaround.py checks the real bound.
FLOOR_ENV = "SPECC_CLIENT_TURNAROUND_FLOOR_S"


def floor_s() -> float:
    try:
        v = float(os.environ.get(FLOOR_ENV) or FLOOR_S)
    except ValueError:
        return FLOOR_S
    return v if v > 0 else FLOOR_S


def turnaround(records: list[RequestRecord], *, t0: float, duration_s: float,
               concurrency: int | None, floor_s: float = FLOOR_S) -> dict | None:
    """The point's client figure: `requests` sent, their delays beyond what the schedule
    and the cap allowed (`total_s`, `worst_s`), `per_slot_s` (the sum over the cap's
    slots; uncapped: the worst), `share` (that over the point's duration) and `bound_s`
    (5% of the duration, at least `floor_s`). None when nothing was sent."""
    sent = sorted((r for r in records if r.start > 0), key=lambda r: r.start)
    if not sent or duration_s <= 0:
        return None
    ends = sorted(r.end for r in records if r.end > 0)
    total = worst = 0.0
    for j, r in enumerate(sent):
        due = t0 + (r.scheduled_s or 0.0)
        if concurrency and j >= concurrency:
            # the j-th send (from 0) takes the slot the (j - concurrency)-th response to
            # end freed (the cap's semaphore is first come, first served)
            k = j - concurrency
            due = max(due, ends[k] if k < len(ends) else r.start)
        late = max(0.0, r.start - due)
        total += late
        worst = max(worst, late)
    return figure(len(sent), total, worst, duration_s, concurrency, floor_s)


def figure(requests: int, total_s: float, worst_s: float, duration_s: float,
           concurrency: int | None, floor_s: float = FLOOR_S) -> dict:
    """The row's `client_turnaround` from its sums (a point of several repeats adds them)."""
    per_slot = total_s / concurrency if concurrency else worst_s
    return {"requests": requests, "total_s": round(total_s, 6), "worst_s": round(worst_s, 6),
            "per_slot_s": round(per_slot, 6), "share": round(per_slot / duration_s, 5),
            "bound_s": round(max(BOUND_SHARE * duration_s, floor_s), 4)}


def behind(fig: dict | None) -> str | None:
    """The point's reason not to be valid, or None when the client kept up."""
    if not fig or fig["per_slot_s"] <= fig["bound_s"]:
        return None
    return (f"load generator fell behind: its own turnaround took {fig['per_slot_s'] * 1e3:.0f}"
            f" ms per slot, {fig['share']:.1%} of the point (bound {fig['bound_s'] * 1e3:.0f} "
            f"ms; {fig['requests']} requests, worst {fig['worst_s'] * 1e3:.0f} ms)")


def undilate(records: list[RequestRecord], *, t0: float, factor: float) -> None:
    """A point run `factor` times slower than modelled (the simulator's time dilation):
    every time the records hold, divided back to the model's time (epoch stamps as
    offsets from `t0`, the point's start)."""
    if factor == 1:
        return
    f = 1.0 / factor

    def at(t: float) -> float:
        return t0 + (t - t0) * f if t else t

    for r in records:
        r.ttft *= f
        r.e2e_latency *= f
        r.itls = [x * f for x in r.itls]
        r.chunk_gaps = [x * f for x in r.chunk_gaps]
        r.start, r.first_token_t, r.end = at(r.start), at(r.first_token_t), at(r.end)
        r.chunk_times = [at(t) for t in r.chunk_times]
        if r.scheduled_s is not None:
            r.scheduled_s *= f
        if r.sent_at_s is not None:
            r.sent_at_s *= f
