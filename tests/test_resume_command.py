"""Resuming as a user finds it: Ctrl-C names the one command that resumes, the same compile
command again says an unfinished run of that plan exists (and runs nothing), `resume=true`
carries it on, and `--run latest` / `--plan latest` find it. All through the real CLI, on
the simulator, from a working directory of the user's (outputs/ relative to it)."""

from __future__ import annotations

import json
import signal
import subprocess

from executor_helpers import PY, SMALL, plan_json, results, sim_processes, wait_for, wait_no_sim

#: Two servers in two waves, three points each.
SEQUENTIAL = [*SMALL, "+sweep={benchmark.concurrency:[1,2,4]}"]


def _specc(args, cwd, timeout=120):
    return subprocess.run([PY, "-m", "specc", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


def test_ctrl_c_names_the_resume_command_and_the_same_command_offers_it(guard, tmp_path):
    port = guard.port(1)
    command = [*SEQUENTIAL, f"engine.base_port={port}", "execute=true"]
    first = tmp_path / "outputs" / "x" / "a"
    out = open(tmp_path / "first.out", "w")
    proc = guard.spawn([PY, "-m", "specc", *command, f"hydra.run.dir={first}"], cwd=tmp_path,
                       stdout=out, stderr=subprocess.PIPE, text=True)
    assert wait_for(lambda: results(first), timeout=60), (tmp_path / "first.out").read_text()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)   # a hang guard, not a timing target
    assert proc.returncode == 130, err[-2000:]
    assert wait_no_sim(first, [port], timeout=10.0) == []
    # the last line the user sees: the one command that resumes, as typed from here
    assert err.rstrip().splitlines()[-1] == ("interrupted: finished points are kept; resume "
                                             "with: specc run --plan outputs/x/a/plan.json")
    before = results(first)
    total = len(plan_json(first)["benchmarks"])
    assert 1 <= len(before) < total

    # the same command again: it says so, offers the command, runs nothing (exit 0)
    second = tmp_path / "outputs" / "x" / "b"
    again = _specc([*command, f"hydra.run.dir={second}"], tmp_path)
    assert again.returncode == 0, again.stderr[-2000:]
    assert (f"unfinished run of this plan: outputs/x/a ({len(before)} of {total} points "
            f"finished; {total - len(before)} point(s) not run)") in again.stdout
    assert "resume it with: specc run --plan outputs/x/a/plan.json" in again.stdout
    assert "nothing was run" in again.stdout
    assert (second / "review.md").exists() and not (second / "results.jsonl").exists()
    assert not (second / "state.json").exists() and results(first) == before
    assert sim_processes(second, [port]) == []

    # resume=true carries the first run on, in its own run dir
    third = tmp_path / "outputs" / "x" / "c"
    resumed = _specc([*command, "resume=true", f"hydra.run.dir={third}"], tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "resuming the unfinished run in outputs/x/a" in resumed.stdout
    rows = results(first)
    assert sorted(r["benchmark"] for r in rows) == sorted(b["id"] for b in
                                                         plan_json(first)["benchmarks"])
    assert not (third / "results.jsonl").exists()

    # finished now: the same command is no longer stopped, and latest is the run that ran
    status = _specc(["status", "--run", "latest"], tmp_path)
    assert status.returncode == 0, status.stderr
    assert "run dir: outputs/x/a (latest)" in status.stderr
    assert f"points: {total}/{total} finished" in status.stdout
    fresh = _specc([*SEQUENTIAL, f"engine.base_port={port}",
                    f"hydra.run.dir={tmp_path / 'outputs' / 'x' / 'd'}"], tmp_path)
    assert fresh.returncode == 0 and "unfinished run" not in fresh.stdout
    report = _specc(["report", "--run", "latest"], tmp_path)   # now d: compiled last
    assert "run dir: outputs/x/d (latest)" in report.stderr


def test_latest_with_no_run_dir_is_one_line_and_exit_2(tmp_path):
    for args in (["status", "--run", "latest"], ["logs", "--run", "latest"],
                 ["down", "--run", "latest"], ["report", "--run", "latest"],
                 ["run", "--plan", "latest"]):
        res = _specc(args, tmp_path, timeout=60)
        assert res.returncode == 2, (args, res.stderr)
        flag = "--plan" if args[0] == "run" else "--run"
        assert res.stderr.strip().splitlines() == [
            f"error RUN_DIR_INVALID at {flag}: no run dir under ./outputs/ for 'latest' (fix: "
            "run this where you ran `specc`, or give the run dir)"], args
        assert "Traceback" not in res.stderr


def test_a_finished_or_failed_run_is_not_offered_for_resume(tmp_path):
    """Only a run that stopped before its end is offered: a compile-only dir and a run whose
    every point has a row (ok or failed) are not."""
    runs = tmp_path / "outputs" / "x"
    first = _specc([*SEQUENTIAL, f"hydra.run.dir={runs / 'a'}"], tmp_path)
    assert first.returncode == 0, first.stderr
    again = _specc([*SEQUENTIAL, f"hydra.run.dir={runs / 'b'}"], tmp_path)
    assert again.returncode == 0 and "unfinished run" not in again.stdout   # never run
    plan = json.loads((runs / "a" / "plan.json").read_text())
    rows = [{"benchmark": b["id"], "server": b["server"], "status": "failed",
             "reason": "server failed: test", "metrics": {}, "params": {}}
            for b in plan["benchmarks"]]
    (runs / "a" / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:2]))
    third = _specc([*SEQUENTIAL, f"hydra.run.dir={runs / 'c'}"], tmp_path)
    assert "unfinished run of this plan: outputs/x/a (2 of 6 points finished" in third.stdout
    (runs / "a" / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    fourth = _specc([*SEQUENTIAL, f"hydra.run.dir={runs / 'd'}"], tmp_path)
    assert fourth.returncode == 0 and "unfinished run" not in fourth.stdout


def test_latest_is_the_run_dir_last_compiled_into_or_run(tmp_path):
    """By its lock's time (every compile, executor and `specc down` rewrites it), not by its
    name: a resumed run is the latest though a newer folder exists beside it."""
    import os

    from specc.run.rundir import latest

    out = tmp_path / "outputs"
    dirs = {name: out / name for name in ("x/2026-01-02", "x/2026-01-01",
                                          "multirun/2026-01-03/0")}
    for i, d in enumerate(dirs.values()):
        d.mkdir(parents=True)
        (d / "plan.json").write_text("{}")
        (d / ".lock").write_text("")
        os.utime(d / ".lock", (1000 + i, 1000 + i))
    assert latest(out) == dirs["multirun/2026-01-03/0"]
    os.utime(dirs["x/2026-01-01"] / ".lock", (2000, 2000))   # resumed
    assert latest(out) == dirs["x/2026-01-01"]
    deep = dirs["x/2026-01-02"] / "requests" / "a" / "b"   # never a run dir
    deep.mkdir(parents=True)
    (deep / "plan.json").write_text("{}")
    assert latest(out) == dirs["x/2026-01-01"] and latest(tmp_path / "none") is None
