"""How late the load generator itself sent its requests: its turnaround.

In a closed loop (a concurrency cap) a request is due the moment a slot frees, when an
earlier response has ended; with an arrival schedule it is due at its time, and no
earlier than a slot frees. A client starved of CPU between a response's end (the kernel's
receive time) and its next send stretches the point's duration by what nobody asked for,
and its throughput with it: the server was idle, waiting on the client. This module says
by how much, from the records alone (pure functions; a fake clock is just numbers).
"""

from __future__ import annotations

from specc.run.loadgen.records import RequestRecord

#: A point whose client's own delays add up to more than this share of its duration (per
#: slot of the concurrency cap) measured the client's CPU, not the server: it is measured
#: again, then failed. The same 5% as the simulator's own schedule bound
#: (specc/engines/sim.py): a valid point's throughput stays within 5% of what the server gave.
BOUND_SHARE = 0.05


def turnaround(records: list[RequestRecord], *, t0: float, duration_s: float,
               concurrency: int | None) -> dict | None:
    """The point's client figure: `requests` sent, their delays beyond what the schedule
    and the cap allowed (`total_s`, `worst_s`), and `share`: the delays' sum over the
    cap's slots and the point's duration (uncapped: the worst over the duration), with
    `bound`. None when nothing was sent."""
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
    share = total / (concurrency * duration_s) if concurrency else worst / duration_s
    return {"requests": len(sent), "total_s": round(total, 6), "worst_s": round(worst, 6),
            "share": round(share, 5), "bound": BOUND_SHARE}


def behind(figure: dict | None) -> str | None:
    """The point's reason not to be valid, or None when the client kept up."""
    if not figure or figure["share"] <= figure["bound"]:
        return None
    return (f"load generator fell behind: its own turnaround took {figure['share']:.1%} of "
            f"the point's duration per slot (bound {figure['bound']:.0%}; {figure['total_s'] * 1e3:.0f}"
            f" ms over {figure['requests']} requests, worst {figure['worst_s'] * 1e3:.0f} ms)")


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
