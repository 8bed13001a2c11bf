"""A server that wedges mid-benchmark while its health still answers 200.

Users report exactly this with SGLang; the executor watches the server log
while a point runs and calls a silence of `serving_silence_s` a hung server.
"""

from __future__ import annotations

import time

from executor_helpers import SimGuard, compile_plan, execute, results, set_server_env, state

SILENCE_S = 1.5


def test_wedged_server_is_caught_by_its_silent_log(tmp_path):
    guard = SimGuard(tmp_path)
    run_dir = tmp_path / "run"

    def edit(plan):
        for i, s in enumerate(plan["servers"]):
            s["readiness"]["serving_silence_s"] = SILENCE_S
            set_server_env(plan, i, SPECC_SIM_FAULT="hang_mid_run:30")

    plan = compile_plan(run_dir, ["hardware.tp=8", "baseline=false",
                                  "+sweep={benchmark.concurrency:[1,2]}"],
                        port=guard.port(), edit=edit)
    t0 = time.time()
    try:
        code = execute(plan, run_dir)
    finally:
        left = guard.check()
    wall = time.time() - t0
    assert left == []
    assert code == 3
    rows = sorted(results(run_dir), key=lambda r: r["params"]["concurrency"])
    assert len(rows) == 2
    assert rows[0]["status"] == "failed" and "server hung" in rows[0]["reason"]
    assert "1.5 s" in rows[0]["reason"]
    assert rows[1]["status"] == "failed" and "hung earlier" in rows[1]["reason"]
    (entry,) = state(run_dir)["servers"].values()
    assert entry["status"] == "failed" and "server hung" in entry["reason"]
    # caught within the silence window (+ startup and the ~1 s of serving before the wedge),
    # not after the client's 600 s request timeout
    assert wall < 20

