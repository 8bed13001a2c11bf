"""The load generator's own turnaround, on a fake clock (records are just numbers).

Issue 27: beside two busy loops, the gaps between one response and the load generator's
next request grew from 16-25 ms to 65-155 ms per point, stretching a closed loop's
duration while nothing checked it. A point whose client fell behind is measured again,
then failed with the reason, as one whose simulator fell behind.
"""

from __future__ import annotations

import asyncio

import pytest

from specc.run import point
from specc.run.loadgen.records import RequestRecord
from specc.run.loadgen.turnaround import FLOOR_S, behind, turnaround, undilate

T0 = 1000.0


def _rec(start: float, end: float, **kw) -> RequestRecord:
    return RequestRecord(ok=True, start=T0 + start, end=T0 + end, **kw)


def test_a_closed_loop_counts_only_the_time_past_a_freed_slot():
    # two slots: the first two go at once; the third is due when the first ends (1.0) and
    # went 30 ms later, the fourth is due when the second ends (1.2) and went 5 ms later
    recs = [_rec(0.0, 1.0), _rec(0.001, 1.2), _rec(1.030, 2.0), _rec(1.205, 2.2)]
    fig = turnaround(recs, t0=T0, duration_s=2.2, concurrency=2)
    assert fig["requests"] == 4
    assert fig["total_s"] == pytest.approx(0.001 + 0.030 + 0.005)
    assert fig["worst_s"] == pytest.approx(0.030)
    assert fig["per_slot_s"] == pytest.approx(0.018)
    assert fig["share"] == pytest.approx(0.036 / (2 * 2.2), abs=1e-5)
    assert fig["bound_s"] == pytest.approx(0.05 * 2.2)
    assert behind(fig) is None


def test_a_starved_client_fails_the_point_with_its_figures():
    # one slot, 10 requests of 0.1 s, each sent 20 ms after the previous ended: 15% lost
    recs, t = [], 0.0
    for i in range(10):
        start = t + (0.02 if i else 0.0)
        recs.append(_rec(start, start + 0.1))
        t = start + 0.1
    fig = turnaround(recs, t0=T0, duration_s=t, concurrency=1)
    assert fig["total_s"] == pytest.approx(0.18) and fig["bound_s"] == pytest.approx(0.059)
    assert fig["share"] == pytest.approx(0.18 / t, abs=1e-5)
    assert behind(fig) == ("load generator fell behind: its own turnaround took 180 ms per "
                           "slot, 15.3% of the point (bound 59 ms; 10 requests, worst 20 ms)")


def test_a_short_point_is_judged_against_the_floor():
    # 0.1 s point, 8 ms late: 8% of it, but under a process scheduler's slice
    fig = turnaround([_rec(0.008, 0.1)], t0=T0, duration_s=0.1, concurrency=1)
    assert fig["bound_s"] == FLOOR_S and behind(fig) is None
    fig = turnaround([_rec(0.008, 0.1)], t0=T0, duration_s=0.1, concurrency=1, floor_s=0.005)
    assert behind(fig) is not None


def test_an_arrival_schedule_counts_from_each_request_due_time():
    recs = [_rec(0.002, 0.5, scheduled_s=0.0), _rec(0.31, 0.8, scheduled_s=0.25)]
    fig = turnaround(recs, t0=T0, duration_s=1.0, concurrency=None)
    assert fig["worst_s"] == pytest.approx(0.06)
    assert fig["share"] == pytest.approx(0.06)   # uncapped: the worst over the duration


def test_undilating_divides_every_time_back():
    r = RequestRecord(ok=True, ttft=0.3, e2e_latency=3.0, itls=[0.03, 0.06],
                      chunk_gaps=[0.09], start=T0 + 3.0, first_token_t=T0 + 3.3, end=T0 + 6.0,
                      chunk_times=[T0 + 3.3, T0 + 6.0], scheduled_s=3.0, sent_at_s=3.0)
    undilate([r], t0=T0, factor=3.0)
    assert (r.ttft, r.e2e_latency) == pytest.approx((0.1, 1.0))
    assert r.itls == pytest.approx([0.01, 0.02]) and r.chunk_gaps == pytest.approx([0.03])
    assert (r.start, r.first_token_t, r.end) == pytest.approx((T0 + 1.0, T0 + 1.1, T0 + 2.0))
    assert r.chunk_times == pytest.approx([T0 + 1.1, T0 + 2.0])
    assert (r.scheduled_s, r.sent_at_s) == pytest.approx((1.0, 1.0))


def _row(share: float) -> dict:
    return {"status": "ok", "reason": None, "metrics": {"output_throughput": share},
            "client_turnaround": {"requests": 16, "total_s": share * 2.0, "worst_s": 0.03,
                                  "per_slot_s": share * 2.0, "share": share, "bound_s": 0.1}}


def test_a_point_whose_client_fell_behind_twice_is_failed(monkeypatch, tmp_path):
    rows = iter([_row(0.09), _row(0.08)])

    async def measure(server, bench, **kw):
        return next(rows)

    monkeypatch.setattr(point, "_measure", measure)
    row = asyncio.run(point.run_point(None, None, run_dir=tmp_path))
    assert row["status"] == "failed"
    assert row["reason"].startswith("load generator fell behind: its own turnaround took 160 "
                                    "ms per slot, 8.0% of the point (bound 100 ms")
    assert "measured twice (first: load generator fell behind: its own turnaround took 180 ms" \
        in row["reason"]


def test_a_point_whose_client_kept_up_when_measured_again_is_valid(monkeypatch, tmp_path):
    rows = iter([_row(0.09), _row(0.01)])

    async def measure(server, bench, **kw):
        return next(rows)

    monkeypatch.setattr(point, "_measure", measure)
    row = asyncio.run(point.run_point(None, None, run_dir=tmp_path))
    assert row["status"] == "ok" and row["metrics"]["output_throughput"] == 0.01
    assert row["remeasured"].startswith("load generator fell behind")
