"""A server that wedges mid-benchmark while its health still answers 200.

Users report exactly this with SGLang; the executor watches the server log
while a point runs and calls a silence of `serving_silence_s` a hung server.
"""

from __future__ import annotations

from executor_helpers import SimGuard, compile_plan, execute, results, set_server_env, state

SILENCE_S = 1.5


def test_wedged_server_is_caught_by_its_silent_log(tmp_path):
    guard = SimGuard(tmp_path)
    run_dir = tmp_path / "run"

    def edit(plan):
        for i, s in enumerate(plan["servers"]):
            s["readiness"]["serving_silence_s"] = SILENCE_S   # a user may edit a plan so
            set_server_env(plan, i, SPECC_SIM_FAULT="hang_mid_run:30")

    plan = compile_plan(run_dir, ["hardware.tp=8", "baseline=false",
                                  "+sweep={benchmark.concurrency:[1,2]}"],
                        port=guard.port(), edit=edit)
    try:
        code = execute(plan, run_dir)
    finally:
        left = guard.check()
    assert left == []
    assert code == 3
    rows = sorted(results(run_dir), key=lambda r: r["params"]["concurrency"])
    assert len(rows) == 2
    # caught by the silent-log watch (not the client's 600 s request timeout)
    assert rows[0]["status"] == "failed"
    assert rows[0]["reason"].startswith("server hung: no log output for 1.5 s")
    assert rows[1]["status"] == "failed" and "hung earlier" in rows[1]["reason"]
    (entry,) = state(run_dir)["servers"].values()
    assert entry["status"] == "failed" and "server hung" in entry["reason"]
    assert entry["stop"] in ("terminated", "killed")

