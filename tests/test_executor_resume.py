"""Interrupting the executor and resuming into the same run dir, end to end.

The executor runs as a user runs it (`python -m specc ... execute=true`, a
separate process); it is interrupted once a point has finished; the next run
(`inv run --plan <run dir>/plan.json`) must finish the rest without rerunning
or duplicating anything, and no simulator may survive any of it.
"""

from __future__ import annotations

import json
import os
import signal


from executor_helpers import (PY, REPO, SMALL, compile_plan, plan_json, results,
                              run_inv, sim_processes, state, wait_for, wait_no_sim)

#: Two servers in two waves (TP 8 each: the whole node), three points each.
SEQUENTIAL = [*SMALL, "+sweep={benchmark.concurrency:[1,2,4]}"]



def _start_sweep(guard, run_dir):
    port = guard.port(1)
    proc = guard.spawn([PY, "-m", "specc", *SEQUENTIAL, f"engine.base_port={port}",
                        "execute=true", f"hydra.run.dir={run_dir}"],
                       cwd=REPO, stdout=open(run_dir.parent / "executor.out", "w"),
                       stderr=__import__("subprocess").STDOUT)
    first = wait_for(lambda: results(run_dir), timeout=60)
    assert first, (run_dir.parent / "executor.out").read_text()[-3000:]
    assert proc.poll() is None, "the sweep ended before it could be interrupted"
    return proc, port


def _resume_and_check(run_dir, before):
    """`inv run --plan`: finished points are kept as they were, the rest run, all ok."""
    done = {r["benchmark"]: r for r in before}
    res = run_inv(["run", "--plan", str(run_dir / "plan.json")], timeout=90)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    rows = results(run_dir)
    ids = [r["benchmark"] for r in rows]
    assert len(ids) == len(set(ids)), "duplicate rows"
    assert set(ids) == {b["id"] for b in plan_json(run_dir)["benchmarks"]}
    assert all(r["status"] == "ok" for r in rows)
    for r in rows:            # not rerun: the earlier row, byte for byte (speedup may be added)
        if r["benchmark"] in done:
            old = done[r["benchmark"]]
            assert r["finished_at"] == old["finished_at"]
            assert {k: v for k, v in r["metrics"].items() if k != "speedup"} == \
                {k: v for k, v in old["metrics"].items() if k != "speedup"}
    # the progress counts what this run ran: the points left, not those kept
    left = len(rows) - len(done)
    assert (f"resuming: {len(done)} of {len(rows)} points finished in an earlier run "
            f"({len(done)} ok, 0 failed) are kept, not rerun; {left} to run") in res.stderr
    assert f"[1/{left}] start " in res.stderr and f"/{len(rows)}]" not in res.stderr
    assert (f"done: {left}/{left} points ({left} ok, 0 failed) in ") in res.stderr
    assert f"; {len(done)} finished in an earlier run" in res.stderr
    return rows


def test_sigint_stops_everything_keeps_results_and_resumes(guard, tmp_path):
    run_dir = tmp_path / "run"
    proc, port = _start_sweep(guard, run_dir)
    proc.send_signal(signal.SIGINT)
    code = proc.wait(timeout=60)   # a hang guard, not a timing target
    assert code == 130, (run_dir.parent / "executor.out").read_text()[-2000:]
    assert wait_no_sim(run_dir, [port], timeout=10.0) == []   # a poll bound, not a target
    before = results(run_dir)
    assert 1 <= len(before) < len(plan_json(run_dir)["benchmarks"])
    assert all(r["status"] == "ok" for r in before)    # an interrupted point leaves no row
    st = state(run_dir)["servers"]
    assert st and all(e["status"] in ("stopped", "failed") for e in st.values())
    _resume_and_check(run_dir, before)


def test_sigkill_leaves_nothing_after_inv_down_and_resumes(guard, tmp_path):
    run_dir = tmp_path / "run"
    proc, port = _start_sweep(guard, run_dir)
    pids = [e["pid"] for e in state(run_dir)["servers"].values() if e.get("pid")]
    assert pids
    proc.kill()
    proc.wait(timeout=30)
    down = run_inv(["down", "--run", str(run_dir), "--grace", "3"], timeout=30)
    assert down.returncode == 0, down.stdout + down.stderr
    assert wait_no_sim(run_dir, [port], timeout=10.0) == []
    before = results(run_dir)
    assert before and all(r["status"] == "ok" for r in before)
    _resume_and_check(run_dir, before)


def test_inv_down_stops_a_server_left_running(guard, tmp_path):
    """A server that outlived its executor (PDEATHSIG cannot cover a remote or
    re-parented process) is found from state.json, stopped, and verified gone."""
    from specc.run import lifecycle
    from specc.state import RunState

    run_dir = tmp_path / "run"
    plan = compile_plan(run_dir, ["baseline=false"], port=guard.port(1))
    server = plan.servers[0]
    running = lifecycle.launch(server, run_dir)
    try:
        RunState(run_dir / "state.json").update(
            server.id, pid=running.pid, pgid=running.pid, host=server.host, port=server.port,
            started_at=running.started_at, ready_at=None, status="starting")
        assert sim_processes(run_dir, [server.port])
        status = run_inv(["status", "--run", str(run_dir)], timeout=30)
        assert status.returncode == 0 and "yes" in status.stdout
        down = run_inv(["down", "--run", str(run_dir), "--grace", "3"], timeout=30)
        assert down.returncode == 0, down.stdout + down.stderr
        assert "verified gone" in down.stdout
        assert running.proc.wait(timeout=30) is not None
        assert sim_processes(run_dir, [server.port]) == []
        entry = json.loads((run_dir / "state.json").read_text())["servers"][server.id]
        assert entry["status"] == "stopped" and entry["stopped_by"] == "cleanup"
        again = run_inv(["down", "--run", str(run_dir)], timeout=30)
        assert again.returncode == 0 and "nothing running" in again.stdout
    finally:
        if running.proc.poll() is None:
            os.killpg(running.pid, signal.SIGKILL)
            running.proc.wait(5)


def test_sigterm_while_a_server_starts_tears_it_down(guard, tmp_path):
    """SIGTERM during readiness (a server hung in load_weights): exit 130 at once, the
    server stopped and recorded as stopped by the interrupt, nothing left."""
    import subprocess

    run_dir = tmp_path / "run"
    port = guard.port(1)
    proc = guard.spawn([PY, "-m", "specc", *SMALL, f"engine.base_port={port}", "baseline=false",
                        "execute=true", f"hydra.run.dir={run_dir}"], cwd=REPO,
                       env={**os.environ, "SPECC_SIM_FAULT": "hang@load_weights"},
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def hanging():
        try:
            return any(e.get("phase") == "load_weights" for e in state(run_dir)["servers"].values())
        except (OSError, ValueError):
            return False

    assert wait_for(hanging, timeout=30)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 130   # a hang guard, not a timing target
    assert wait_no_sim(run_dir, [port], timeout=10.0) == []   # a poll bound, not a target
    (entry,) = state(run_dir)["servers"].values()
    assert entry["status"] == "stopped" and entry["stopped_by"] == "interrupt"
    assert results(run_dir) == []
