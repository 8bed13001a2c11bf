"""Time dilation in the plan and in a point's row (docs/simulator.md, "Time dilation").

The plan carries each point's factor (the simulator's adapter picks it: `auto` from the
simulator's predicted CPU per step, a busy client's turnaround, the point's length and
how long its first wave takes to send),
the point runner sets it on the simulator before the point and divides what it measured
back, and the row says it was dilated.
"""

from __future__ import annotations

import json

import pytest
from executor_helpers import SimGuard, compile_plan, execute, results

from specc.compile.pipeline import compile_config

GRID = ["+experiment=llama3_tune", "engine=sim", "search=grid"]


@pytest.fixture
def auto(monkeypatch):
    monkeypatch.delenv("SPECC_SIM_TIME_DILATION")   # the real rule (tests/conftest.py)


def _factors(compose, overrides) -> dict[int, list[float]]:
    result = compile_config(compose(overrides))
    assert result.ok, [d.line() for d in result.diagnostics if d.severity == "error"]
    out: dict[int, list[float]] = {}
    for b in result.plan.benchmarks:
        out.setdefault(b.params.concurrency, []).append(b.time_dilation)
    assert all(s.time_dilation is not None and s.time_dilation.path == "/specc_sim/time_dilation"
               for s in result.plan.servers)
    return out


def test_auto_dilates_the_points_a_busy_machine_cannot_keep_up_with(compose, auto):
    f = _factors(compose, GRID)
    assert all(1 <= x <= 16 and x == int(x) for xs in f.values() for x in xs)
    # concurrency 128 without speculation: ~6 ms of CPU per 8 ms step at real time
    assert f[128][0] >= 5
    # the short points (a wave of 8 or 32 requests, under a second) are stretched too
    assert min(f[8] + f[32]) > 1
    # the long single-stream points need the least
    assert max(f[1]) < min(f[32])


def test_a_wave_reaches_the_server_within_its_first_prefill(compose, auto):
    """A closed loop starts with `concurrency` requests at once; a busy client sends them
    ~1 ms apart, and the simulator admits them by arrival: a wave of 128 (~128 ms) would
    land in prefill batches that depend on the client's speed unless the first request's
    prefill (~8 ms for Llama-3.1-8B, 256 tokens) is stretched past it."""
    from specc.engines.sim import Sim

    f = _factors(compose, GRID)
    assert set(f[128]) == {float(Sim.max_time_dilation)}   # 128 ms / 8 ms: past the cap


def test_the_readme_job_is_dilated_only_where_needed(compose, auto):
    f = _factors(compose, ["+experiment=eagle3_sweep", "engine=sim"])
    assert f[1] == [1.0] * 5 and f[4] == [1.0] * 5   # seconds-long points: real time
    assert max(f[16] + f[64]) <= 3


def test_a_fixed_factor_applies_to_every_point_and_1_writes_nothing(compose, auto, tmp_path):
    assert set(x for xs in _factors(compose, GRID + ["engine.sim.time_dilation=3"]).values()
               for x in xs) == {3.0}
    result = compile_config(compose(GRID + ["engine.sim.time_dilation=1"]))
    assert all(b.time_dilation == 1 for b in result.plan.benchmarks)
    from specc.compile.emit import plan_json
    assert all("time_dilation" not in b for b in json.loads(plan_json(result.plan))["benchmarks"])


def test_a_factor_below_1_is_a_config_error(compose):
    result = compile_config(compose(GRID + ["engine.sim.time_dilation=0.5"]))
    (d,) = [d for d in result.diagnostics if d.severity == "error"]
    assert "engine.sim.time_dilation" in d.line()


def test_a_dilated_point_reports_the_model_time_and_says_it_was_dilated(tmp_path):
    """The same point at s=1 and s=3: the row at 3 says so, and its duration, divided back,
    is a third of the wall time it took (a busy machine only makes the wall time longer;
    tests/sim/test_time_dilation.py checks the schedule itself exactly)."""
    rows = {}
    for s in (1, 3):
        guard = SimGuard(tmp_path / f"g{s}")
        run_dir = tmp_path / f"run{s}"
        plan = compile_plan(run_dir, ["hardware.tp=8", "baseline=false",
                                      "benchmark.concurrency=1",
                                      f"engine.sim.time_dilation={s}"], port=guard.port())
        try:
            code = execute(plan, run_dir)
        finally:
            assert guard.check() == []
        assert code == 0
        (rows[s],) = results(run_dir)
    one, three = rows[1], rows[3]
    assert "time_dilation" not in one and three["time_dilation"] == 3.0
    assert three["status"] == "ok" and three["client_turnaround"]["requests"] == 4
    lines = [json.loads(x) for x in (tmp_path / "run3" / "requests" /
                                     f"{three['benchmark']}.jsonl").read_text().splitlines()]
    wall = three["finished_at"] - three["started_at"]
    assert wall >= 3 * three["metrics"]["duration"] * 0.95
    # the requests' own times are the model's too: they fit in the reported duration
    assert sum(x["e2e_latency"] for x in lines if x.get("ok", True)) \
        <= three["metrics"]["duration"] * 1.05
