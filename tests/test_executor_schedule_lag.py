"""A point during which the simulator fell behind its own schedule is never a valid row.

The simulator runs in real time on a shared CPU; when it is starved it delivers steps
late (its schedule is kept, no time dropped) and says so on /metrics. The plan carries
where to read that and the bound (specc/engines/sim.py); a point past the bound is
measured once more, then failed with the reason. The lateness is provoked by the
`stall_mid_run` fault: the simulator's process stops for 0.3 s every N tokens.
"""

from __future__ import annotations

import asyncio
import json

from executor_helpers import SimGuard, compile_plan, execute, plan_json, results, set_server_env

from specc.run import lag, point


def test_a_point_whose_simulator_fell_behind_is_measured_again_then_failed(tmp_path,
                                                                         monkeypatch):
    monkeypatch.delenv("SPECC_SIM_LAG_FLOOR_S")   # the real bound (tests/conftest.py)
    guard = SimGuard(tmp_path)
    run_dir = tmp_path / "run"

    def edit(plan):
        set_server_env(plan, 0, SPECC_SIM_FAULT="stall_mid_run:24")

    plan = compile_plan(run_dir, ["hardware.tp=8", "baseline=false", "benchmark.concurrency=1"],
                        port=guard.port(), edit=edit)
    recipe = plan_json(run_dir)["servers"][0]["schedule_lag"]
    assert recipe["bound_s"] == 0.01 and recipe["bound_fraction"] == 0.05
    try:
        code = execute(plan, run_dir)
    finally:
        left = guard.check()
    assert left == []
    assert code == 3
    (row,) = results(run_dir)
    assert row["status"] == "failed"
    assert row["reason"].startswith("simulator fell behind its schedule by ")
    figure = row["schedule_lag"]   # the second attempt's
    # the bound: a fraction of the point's duration, never under the floor
    bound = max(recipe["bound_s"], recipe["bound_fraction"] * row["metrics"]["duration"])
    assert figure["bound_s"] == round(bound, 4)
    assert f"(bound {figure['bound_s'] * 1e3:.0f} ms)" in row["reason"]   # as the row says it
    assert "measured twice (first: simulator fell behind its schedule by " in row["reason"]
    assert figure["late_steps"] >= 1 and figure["worst_s"] >= 0.25 > bound
    # both attempts sent their requests; readers keep the second
    lines = [json.loads(x) for x in
             (run_dir / "requests" / f"{row['benchmark']}.jsonl").read_text().splitlines()]
    assert len({x["attempt"] for x in lines}) == 2


def _figure(late_steps: int, worst: float = 0.12) -> dict:
    return {"steps": 400, "late_steps": late_steps, "worst_s": worst, "worst_exact": True,
            "bound_s": 0.05}


def test_a_point_behind_once_is_valid_when_measured_again_on_schedule(monkeypatch, tmp_path):
    rows = iter([{"status": "ok", "reason": None, "metrics": {"output_throughput": 1.0},
                  "schedule_lag": _figure(3)},
                 {"status": "ok", "reason": None, "metrics": {"output_throughput": 2.0},
                  "schedule_lag": _figure(0, 0.004)}])

    async def measure(server, bench, **kw):
        return next(rows)

    monkeypatch.setattr(point, "_measure", measure)
    row = asyncio.run(point.run_point(None, None, run_dir=tmp_path))
    assert row["status"] == "ok" and row["metrics"]["output_throughput"] == 2.0
    assert row["remeasured"] == ("simulator fell behind its schedule by 120 ms (bound 50 ms) "
                                 "in 3 of 400 steps")


def _metrics(counts: list[int], worst: float) -> str:
    edges = ["0.001", "0.01", "0.05", "0.1", "0.5", "+Inf"]
    name = "specc_sim:step_lateness_seconds"
    out = [f'{name}_bucket{{model_name="m",le="{le}"}} {float(n)}' for le, n in zip(edges, counts)]
    out.append(f'specc_sim:step_lateness_max_seconds{{model_name="m"}} {worst}')
    return "\n".join(out) + "\n"


def test_steps_past_the_bound_are_counted_over_the_point_only():
    from specc.plan import ScheduleLag

    recipe = ScheduleLag(path="/metrics", histogram="specc_sim:step_lateness_seconds",
                         worst="specc_sim:step_lateness_max_seconds", bound_s=0.01,
                         bound_fraction=0.025)
    # an earlier point left 2 steps later than 0.1 s and a worst of 0.4 s
    before = lag.parse(_metrics([50, 90, 98, 98, 100, 100], 0.4), recipe)
    calm = lag.parse(_metrics([350, 390, 398, 398, 400, 400], 0.4), recipe)
    assert lag.behind(lag.over_point(recipe, before, calm, 2.0)) is None
    # the bound is 2.5% of the point's duration (2 s: 50 ms), never under 10 ms
    assert recipe.bound(2.0) == 0.05 and recipe.bound(0.1) == 0.01 and recipe.bound(None) == 0.01
    # this point: one step between 0.05 and 0.1 s late, below the worst since start
    one = lag.parse(_metrics([350, 390, 397, 398, 400, 400], 0.4), recipe)
    fig = lag.over_point(recipe, before, one, 2.0)
    assert fig == {"steps": 300, "late_steps": 1, "worst_s": 0.05, "worst_exact": False,
                   "bound_s": 0.05}
    assert lag.behind(fig) == ("simulator fell behind its schedule by more than 50 ms "
                               "(bound 50 ms) in 1 of 300 steps")
    # a new worst since start is this point's, exactly
    worse = lag.parse(_metrics([350, 390, 397, 398, 399, 401], 0.8), recipe)
    assert lag.over_point(recipe, before, worse, 2.0)["worst_s"] == 0.8
    # the same steps are within the bound of a point four times as long
    assert lag.behind(lag.over_point(recipe, before, one, 8.0)) is None
    # counters that went back (a restarted server) say nothing
    assert lag.over_point(recipe, calm, before, 2.0) is None
    assert lag.parse("sglang:num_running_reqs 1\n", recipe) is None
