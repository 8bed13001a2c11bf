"""The simulator's step schedule on a fake clock: a late step is delivered late, the
deadlines after it stay where the schedule put them, and the lateness is recorded
(issue 27: under CPU contention the old scheduler dropped time and never said so)."""

from __future__ import annotations

import asyncio

import pytest

from specc.sim.args import Sim, build_parser
from specc.sim.scheduler import LATENESS_BUCKETS_S, Schedule, Scheduler


def test_a_late_step_leaves_the_later_deadlines_alone():
    s = Schedule()
    assert s.next(100.0, 0.01) == pytest.approx(100.01)
    assert s.delivered(100.0105) == pytest.approx(0.0005)   # a ms timer: on time
    assert s.next(100.0105, 0.01) == pytest.approx(100.02)
    # the CPU is taken away for 0.3 s: that step is delivered late ...
    assert s.delivered(100.32) == pytest.approx(0.3)
    # ... and the next is due 10 ms after the last deadline, not after the late delivery
    assert s.next(100.32, 0.01) == pytest.approx(100.03)
    assert s.delivered(100.32) == pytest.approx(0.29)     # caught up step by step
    assert s.late_max == pytest.approx(0.3)
    assert s.steps == 3
    assert s.late_sum == pytest.approx(0.0005 + 0.3 + 0.29)
    counts = dict(s.histogram())
    assert counts["0.001"] == 1 and counts["0.25"] == 1 and counts["0.5"] == 3
    assert counts["+Inf"] == 3
    assert [le for le, _ in s.histogram()][:-1] == [repr(b) for b in LATENESS_BUCKETS_S]


def test_an_idle_scheduler_starts_a_new_schedule():
    s = Schedule()
    s.next(100.0, 0.01)
    s.delivered(100.01)
    s.idle()   # nothing to run: idle time is not simulated
    assert s.next(250.0, 0.02) == pytest.approx(250.02)


class FakeClock:
    """The scheduler's clock and sleep: sleeping moves time, nothing waits."""

    def __init__(self, t: float = 1000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t

    async def sleep(self, delay: float) -> None:
        assert delay >= 0
        self.t += delay
        await asyncio.sleep(0)


async def _steps(stall_at: int | None, stall_s: float = 0.3, dilation: float = 1.0):
    """Run 4 requests of 120 tokens through the real scheduler on a fake clock; the CPU
    is taken away for stall_s while step `stall_at` is computed. (due, delivered) per
    delivery, and the scheduler."""
    sim = Sim(build_parser().parse_args(["--model-path", "m", "--sim-seed", "3"]), None)
    sched = Scheduler(sim)
    assert sched.set_dilation(dilation)
    clock = FakeClock()
    seen: list[tuple[float, float]] = []
    deliver, advance = sched._deliver, sched._advance
    steps = {"n": 0, "last": None}

    def on_deliver(r, n, due):
        seen.append((due, clock()))
        deliver(r, n, due)

    def on_advance(r, n):
        if steps["last"] != clock():   # the first request of a step
            steps["n"] += 1
            if steps["n"] == stall_at:
                clock.t += stall_s
        steps["last"] = clock()
        return advance(r, n)

    sched._deliver, sched._advance = on_deliver, on_advance
    reqs = [sched.submit(f"p{i}", 16, 120, True, False) for i in range(4)]
    task = asyncio.ensure_future(sched.run(clock=clock, sleep=clock.sleep))
    await asyncio.wait_for(asyncio.gather(*(r.done for r in reqs)), 10)
    task.cancel()
    return seen, sched


def test_the_scheduler_keeps_its_schedule_through_a_stall():
    calm, calm_sched = asyncio.run(_steps(None))
    late, late_sched = asyncio.run(_steps(stall_at=5))
    # the same steps, due at the same instants: no time dropped
    assert [d for d, _ in late] == pytest.approx([d for d, _ in calm], abs=1e-9)
    assert calm_sched.schedule.late_max == pytest.approx(0.0)
    # the stalled step and the ones behind it are delivered late, then on time again
    lateness = [t - d for d, t in late]
    assert max(lateness) == pytest.approx(0.3, abs=0.01)
    assert lateness[-1] == pytest.approx(0.0)
    # ... and the scheduler says so
    s = late_sched.schedule
    assert s.late_max == pytest.approx(0.3, abs=0.01)
    assert s.steps == calm_sched.schedule.steps
    assert dict(s.histogram())["0.25"] < s.steps   # some steps later than 0.25 s
    # the run ends when the schedule says, not 0.3 s later
    assert late[-1][1] == pytest.approx(calm[-1][1], abs=1e-9)


def test_a_dilated_schedule_runs_every_step_that_many_times_slower():
    """Time dilation: the same steps, each modelled duration x3 on the clock, so every
    deadline's offset from the first is exactly 3x (the client divides it back)."""
    calm, _ = asyncio.run(_steps(None))
    slow, sched = asyncio.run(_steps(None, dilation=3.0))
    assert len(slow) == len(calm)
    base, base3 = calm[0][0], slow[0][0]
    assert [d - base3 for d, _ in slow] == pytest.approx([3 * (d - base) for d, _ in calm],
                                                         abs=1e-9)
    # the step log's throughput is the model's, not the dilated clock's
    assert sched.dilation == 3.0


def test_the_dilation_changes_only_between_points():
    async def go():
        sim = Sim(build_parser().parse_args(["--model-path", "m"]), None)
        sched = Scheduler(sim)
        sched.submit("p", 16, 8, True, False)
        busy = sched.set_dilation(4.0)
        sched.waiting.clear()
        return busy, sched.dilation, sched.set_dilation(4.0), sched.dilation
    assert asyncio.run(go()) == (False, 1.0, True, 4.0)
