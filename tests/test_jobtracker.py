"""The Slurm job tracker on a fake clock: each row of docs/slurm-tracker.md's events table
fed to specc.run.jobtracker.Tracker, and the action the table documents. No Slurm, no
files, no sleeping: the clock is the number each event is fed with."""

from __future__ import annotations

import ast
import inspect

from specc.run import jobtracker
from specc.run.jobtracker import (CANCEL_GRACE_S, KILL_WAIT_S, AskAcct, AskQueue, Cancel,
                                  FailPoints, JobSpec, Log, Phase, PointStarted, ReadNode,
                                  Row, ServerState, Submit, Tracker)

RUN = "/runs/sweep"
SPECS = [JobSpec("base", ("base",), ("b1", "b2"), "00:10:00"),
         JobSpec("spec", ("spec",), ("s1", "s2"), "00:10:00")]


def make(**kw) -> Tracker:
    kw.setdefault("poll_s", 1.0)
    return Tracker(SPECS, comment=RUN, **kw)


def of(actions, kind) -> list:
    return [a for a in actions if isinstance(a, kind)]


def logs(actions) -> list[str]:
    return [a.text for a in of(actions, Log)]


def row(job_id, name, state, reason="", nodes="", comment=RUN) -> Row:
    return Row(job_id, state, nodes, reason, name, comment)


def submitted(t: Tracker, now=0.0) -> Tracker:
    """Both jobs submitted: base is 11, spec is 12."""
    assert t.start(now, ["base", "spec"]) == [Submit("base")]
    assert Submit("spec") in t.submitted(now, "base", "11")
    assert of(t.submitted(now, "spec", "12"), Submit) == []
    return t


def running(t: Tracker, now=1.0) -> Tracker:
    t.squeue(now, {"11": row("11", "base", "RUNNING", nodes="n1"),
                   "12": row("12", "spec", "RUNNING", nodes="n2")})
    return t


def node_file(job_id, *, finished_at=None, stopped_by=None, **servers) -> dict:
    return {"executor": {"job_id": job_id, "finished_at": finished_at, "stopped_by": stopped_by},
            "servers": servers}


# ----------------------------------------------------------------------------- submitting
def test_jobs_are_submitted_in_the_given_order_one_sbatch_answer_at_a_time():
    t = make()
    assert t.start(0.0, ["spec", "base"]) == [Submit("spec")]
    out = t.submitted(0.5, "spec", "12")
    assert ServerState("spec", {"status": "pending", "job": "spec", "job_id": "12"},
                       fresh=True) in out
    assert out[-1] == Submit("base")
    t.submitted(0.6, "base", "11")
    rec = t.records()
    assert (rec["spec"]["id"], rec["spec"]["state"], rec["spec"]["submitted_at"]) == \
        ("12", "PENDING", 0.5)
    assert not t.idle


def test_an_sbatch_refusal_fails_the_jobs_points_with_sbatchs_line():
    t = make()
    t.start(0.0, ["base", "spec"])
    out = t.refused(0.0, "base", "sbatch: error: invalid partition specified: gpu")
    [fail] = of(out, FailPoints)
    assert fail.points == ("b1", "b2") and fail.verdict == "REFUSED"
    assert fail.reason == "sbatch refused the job: sbatch: error: invalid partition specified: gpu"
    assert out[-1] == Submit("spec")   # the next one is still submitted
    assert t.job("base").done and t.records()["base"]["state"] == "REFUSED"


def test_a_submit_limit_waits_for_one_of_ours_to_end_then_submits_again():
    t = make()
    t.start(0.0, ["base", "spec"])
    t.submitted(0.0, "base", "11")
    out = t.refused(0.0, "spec", "sbatch: error: AssocMaxSubmitJobLimit")
    assert logs(out) == ["spec: sbatch: error: AssocMaxSubmitJobLimit; "
                         "submitting again when a job ends"]
    assert not of(out, FailPoints) and not t.job("spec").done
    for now in (0.2, 0.4, 5.0):   # no sbatch every tick while ours still runs
        assert not of(t.poll(now), Submit)
    t.points_finished(["b1", "b2"])
    out = t.squeue(6.0, {"11": row("11", "base", "COMPLETED", nodes="n1")})
    assert out[-1] == Submit("spec")
    t.submitted(6.0, "spec", "12")
    assert t.records()["spec"]["id"] == "12"


def test_a_submit_limit_with_none_of_ours_in_squeue_is_a_refusal():
    t = make()
    t.start(0.0, ["base"])
    [fail] = of(t.refused(0.0, "base", "sbatch: error: QOSMaxSubmitJobPerUserLimit"), FailPoints)
    assert fail.reason.startswith("sbatch refused the job") and fail.points == ("b1", "b2")
    assert t.idle


# ----------------------------------------------------------------------------- pending
def test_a_pending_reason_is_shown_when_it_changes_and_written_to_state_json():
    t = submitted(make())
    out = t.squeue(1.0, {"11": row("11", "base", "PENDING", "Priority"),
                         "12": row("12", "spec", "PENDING", "Priority")})
    assert "job 11 base: pending (Priority)" in logs(out)
    assert Phase("base", "pending", 0.0, "job 11: Priority") in out
    assert ServerState("base", {"status": "pending", "job_state": "PENDING",
                                "reason": "Priority"}) in out
    again = t.squeue(2.0, {"11": row("11", "base", "PENDING", "Priority"),
                           "12": row("12", "spec", "PENDING", "Resources")})
    assert logs(again) == ["job 12 spec: pending (Resources)"]


def test_pending_past_the_timeout_is_scancelled_and_its_points_fail_saying_why():
    t = submitted(make(pending_timeout_s=3))
    pend = {"11": row("11", "base", "PENDING", "BeginTime"),
            "12": row("12", "spec", "RUNNING", nodes="n2")}
    assert not of(t.squeue(3.0, pend), FailPoints)   # 3 s: not past it yet
    out = t.squeue(3.5, pend)
    [fail] = of(out, FailPoints)
    assert fail.points == ("b1", "b2")
    assert fail.reason == ("slurm job 11 still pending after 3 s (BeginTime); cancelled "
                           "(raise cluster.pending_timeout_s to wait longer)")
    assert Cancel(("11",)) in out   # pending: scancel outright, no signal to a batch step
    assert t.records()["base"]["cancelled_by"] == "pending_timeout"
    # followed until squeue lets it go, asked every tick
    assert [a.ids for a in of(t.poll(3.7), AskQueue)] == [("11", "12")]
    t.squeue(3.7, {"11": row("11", "base", "CANCELLED"),
                   "12": row("12", "spec", "RUNNING", nodes="n2")})
    assert t.records()["base"]["state"] == "CANCELLED" and not t.job("base").live


def test_an_adopted_jobs_pending_deadline_counts_from_its_first_submission():
    t = make(pending_timeout_s=100)
    earlier = {"comment": RUN, "jobs": {"base": {"id": "11", "state": "PENDING",
                                                 "submitted_at": 1000.0, "done": False}}}
    t.adopt(1050.0, earlier)
    out = t.squeue(1101.0, {"11": row("11", "base", "PENDING", "Resources")})
    assert "still pending after 100 s (Resources)" in of(out, FailPoints)[0].reason


# ----------------------------------------------------------------------------- running
def test_a_started_job_shows_its_node_and_its_files_are_read_every_tick():
    t = submitted(make())
    t.squeue(1.0, {"11": row("11", "base", "PENDING", "Resources"),
                   "12": row("12", "spec", "PENDING", "Resources")})
    assert of(t.tick(1.2), ReadNode) == []   # pending: the node entry writes nothing yet
    out = t.squeue(2.0, {"11": row("11", "base", "RUNNING", nodes="n3"),
                         "12": row("12", "spec", "PENDING", "Resources")})
    assert logs(out) == ["job 11 base: running on n3"]
    assert Phase("base", "running", 2.0, "job 11 on n3") in out
    assert t.records()["base"]["started_at"] == 2.0
    assert of(t.tick(2.2), ReadNode) == [ReadNode("base")]


def test_squeue_is_asked_each_poll_interval_not_each_tick():
    t = running(submitted(make(poll_s=2.0)))
    asked = [now for now in (1.2, 1.4, 2.0, 2.9, 3.0, 3.2, 5.0, 5.2)
             if of(t.poll(now), AskQueue)]
    assert asked == [1.2, 3.2, 5.2]   # tick 1.2 is the first ask; then every 2 s


def test_a_clock_that_went_back_does_not_stop_the_polls():
    t = running(submitted(make(poll_s=2.0)))
    t.poll(100.0)
    assert of(t.poll(50.0), AskQueue)


def test_the_node_entrys_phases_and_points_are_shown_once_each():
    t = running(submitted(make()))
    fed = node_file("11", base={"status": "starting", "phase": "load_weights",
                                "phase_started_at": 1.5})
    out = t.node(2.0, "base", fed)
    assert Phase("base", "load_weights", 1.5, "") in out
    assert any(isinstance(a, ServerState) and a.fields["phase"] == "load_weights" for a in out)
    assert t.node(2.2, "base", fed) == []   # nothing new: nothing shown, nothing written
    bench = node_file("11", base={"status": "benchmarking", "point": "b1", "ready_at": 3.0})
    out = t.node(3.5, "base", bench)
    assert Phase("base", "ready", 3.0, "") in out and PointStarted("b1", "base") in out
    t.points_finished(["b2"])
    later = node_file("11", base={"status": "benchmarking", "point": "b2", "ready_at": 3.0})
    assert not of(t.node(4.0, "base", later), PointStarted)   # its row is already merged


def test_an_earlier_attempts_node_file_is_not_this_jobs():
    t = running(submitted(make()))
    stale = node_file("7", finished_at=5.0, base={"status": "failed", "reason": "old"})
    assert t.node(2.0, "base", stale) == []
    assert not t.job("base").node_ended and not t.failed_servers


def test_a_suspended_job_is_followed_and_nothing_fails():
    t = running(submitted(make(pending_timeout_s=1)))
    out = t.squeue(50.0, {"11": row("11", "base", "SUSPENDED", nodes="n1"),
                          "12": row("12", "spec", "RUNNING", nodes="n2")})
    assert logs(out) == ["job 11 base: suspended on n1 (scontrol suspend); following it"]
    assert not of(out, FailPoints) and not of(out, Cancel)
    assert not logs(t.squeue(60.0, {"11": row("11", "base", "SUSPENDED", nodes="n1"),
                                    "12": row("12", "spec", "RUNNING", nodes="n2")}))
    assert t.records()["base"]["state"] == "SUSPENDED" and t.job("base").live


# ----------------------------------------------------------------------------- ending
def test_a_node_entry_that_wrote_its_end_has_squeue_asked_every_tick_until_slurm_agrees():
    t = running(submitted(make(poll_s=10.0)))
    t.poll(1.2)
    assert not of(t.poll(1.4), AskQueue)
    assert t.tick(1.5) == [ReadNode("base"), ReadNode("spec")]
    t.node(1.5, "base", node_file("11", finished_at=1.5))   # what ReadNode found ...
    assert of(t.poll(1.5), AskQueue)   # ... has squeue asked in the same tick
    t.points_finished(["b1", "b2"])
    for now in (1.6, 1.8, 2.0):   # Slurm still holds it: keep asking
        assert of(t.poll(now), AskQueue)
        assert t.squeue(now, {"11": row("11", "base", "COMPLETING", nodes="n1"),
                              "12": row("12", "spec", "RUNNING", nodes="n2")}) == []
    out = t.squeue(2.2, {"11": row("11", "base", "COMPLETED", nodes="n1"),
                         "12": row("12", "spec", "RUNNING", nodes="n2")})
    assert logs(out) == ["job 11 base: completed"] and not of(out, FailPoints)
    assert ServerState("base", {"status": "stopped", "job_state": "COMPLETED"}) in out
    assert t.records()["base"]["ended_at"] == 2.2
    assert not of(t.poll(2.4), AskQueue)   # back to the poll interval


def test_a_completed_job_that_left_points_fails_them_with_its_log_tail():
    t = running(submitted(make()))
    t.node(2.0, "base", node_file("11", base={"status": "benchmarking", "phase": "ready",
                                              "point": "b2"}))
    t.points_finished(["b1"])
    [fail] = of(t.squeue(3.0, {"11": row("11", "base", "COMPLETED", nodes="n1"),
                               "12": row("12", "spec", "RUNNING")}), FailPoints)
    assert fail.points == ("b2",) and fail.log_tail
    assert fail.reason == ("slurm job 11 COMPLETED on n1: it exited without finishing every "
                           "point; last phase ready")


def test_a_failed_job_has_sacct_asked_for_its_exit_code_and_squeues_verdict_stands():
    t = running(submitted(make()))
    out = t.squeue(3.0, {"11": row("11", "base", "FAILED", nodes="n1"),
                         "12": row("12", "spec", "RUNNING", nodes="n2")})
    assert out == [AskAcct(("11",))]
    [fail] = of(t.acct(3.1, {"11": ("CANCELLED", "1:0")}), FailPoints)
    assert fail.verdict == "FAILED" and fail.log_tail
    assert fail.reason == ("slurm job 11 FAILED on n1: the job's script exited non-zero "
                           "(exit code 1:0)")
    assert t.records()["base"]["exit_code"] == "1:0"


def test_each_verdict_fails_the_unfinished_points_with_its_meaning():
    for verdict, says in (("NODE_FAIL", "slurm job 12 NODE_FAIL on n2: its node failed"),
                          ("TIMEOUT", "slurm job 12 TIMEOUT on n2: killed at its time limit "
                                      "(00:10:00; raise cluster.time_limit)"),
                          ("CANCELLED", "slurm job 12 CANCELLED on n2: cancelled outside specc"),
                          ("OUT_OF_MEMORY", "killed for exceeding its host memory")):
        t = running(submitted(make()))
        t.points_finished(["s1"])
        out = t.squeue(3.0, {"11": row("11", "base", "RUNNING", nodes="n1"),
                             "12": row("12", "spec", verdict, nodes="n2")})
        [fail] = of(out, FailPoints)
        assert says in fail.reason and fail.points == ("s2",) and not fail.log_tail, verdict
        assert fail.servers == ("spec",) and t.failed_servers["spec"] == fail.reason


def test_a_server_the_node_entry_failed_keeps_its_own_reason():
    t = running(submitted(make()))
    t.node(2.0, "spec", node_file("12", spec={"status": "failed", "reason": "OOM in kv_cache"}))
    t.squeue(3.0, {"11": row("11", "base", "RUNNING"), "12": row("12", "spec", "FAILED")})
    [fail] = of(t.acct(3.0, {}), FailPoints)
    assert fail.servers == ()   # state.json keeps "OOM in kv_cache"
    assert t.failed_servers["spec"] == "OOM in kv_cache"


def test_a_job_id_reused_by_another_job_is_treated_as_ended_and_sacct_decides():
    for other in (row("12", "someone-elses", "RUNNING"),
                  row("12", "spec", "RUNNING", comment="/runs/another-run")):
        t = running(submitted(make()))
        t.points_finished(["s1", "s2"])
        out = t.squeue(3.0, {"11": row("11", "base", "RUNNING"), "12": other})
        assert out == [AskAcct(("12",))]
        assert logs(t.acct(3.1, {"12": ("COMPLETED", "0:0")})) == ["job 12 spec: completed"]
        assert t.job("spec").done and t.job("base").live


def test_a_job_neither_squeue_nor_sacct_knows_is_judged_by_its_node_record():
    cases = ((None, "GONE", "is gone from squeue and sacct has no record of it; its node "
                            "entry never wrote its end (node lost?)"),
             (node_file("12", finished_at=2.0, stopped_by="SIGTERM"), "GONE",
              "slurm job 12 was stopped (SIGTERM) and is gone from squeue"),
             (node_file("12", finished_at=2.0), "COMPLETED", None))
    for fed, verdict, says in cases:
        t = running(submitted(make()))
        if fed:
            t.node(2.0, "spec", fed)
        t.points_finished(["s1", "s2"] if verdict == "COMPLETED" else ["s1"])
        out = t.squeue(3.0, {"11": row("11", "base", "RUNNING")})
        assert out == [AskAcct(("12",))]
        out = t.acct(3.0, {})
        assert t.records()["spec"]["state"] == verdict
        if says:
            [fail] = of(out, FailPoints)
            assert says in fail.reason and fail.points == ("s2",)
        else:
            assert not of(out, FailPoints) and t.job("spec").done


def test_a_squeue_that_does_not_answer_is_asked_again_next_poll():
    t = running(submitted(make(poll_s=1.0)))
    t.poll(2.0)
    assert logs(t.queue_failed(2.0, "squeue did not answer in 30 s")) == [
        "squeue: squeue did not answer in 30 s; trying again"]
    assert t.job("base").live and of(t.poll(3.0), AskQueue)


# ----------------------------------------------------------------------------- stopping
def test_fail_fast_cancels_every_job_and_leaves_their_points_for_a_rerun():
    specs = SPECS + [JobSpec("third", ("third",), ("t1",))]
    t = Tracker(specs, comment=RUN, poll_s=1.0, fail_fast=True)
    t.start(0.0, ["base", "spec", "third"])
    t.submitted(0.0, "base", "11")
    t.submitted(0.0, "spec", "12")
    t.refused(0.0, "third", "sbatch: error: MaxSubmitJobsPerUser")   # waits for a slot
    running(t)
    out = t.node(2.0, "base", node_file("11", base={"status": "failed", "reason": "boom"}))
    assert Cancel(("11", "12"), signal="TERM") in out
    out = t.squeue(2.5, {})   # both gone: a slot is free, but nothing more is submitted
    assert not of(out, Submit) and not of(out, FailPoints) and t.idle
    assert t.unfinished(t.job("spec")) == ["s1", "s2"]   # left for a rerun, no failed row
    assert t.records()["spec"]["cancelled_by"] == "fail_fast"
    assert ServerState("spec", {"status": "stopped", "job_state": "CANCELLED",
                                "stopped_by": "fail_fast"}) in out


def test_ctrl_c_terms_running_jobs_scancels_pending_ones_and_waits_for_squeue():
    t = submitted(make())
    t.squeue(1.0, {"11": row("11", "base", "RUNNING", nodes="n1"),
                   "12": row("12", "spec", "PENDING", "Resources")})
    out = t.interrupt(5.0, "SIGINT")
    assert out == [Log("SIGINT: cancelling 2 job(s), keeping finished results"),
                   Cancel(("12",)), Cancel(("11",), signal="TERM"),
                   AskQueue(("11", "12"), ("base", "spec"))]
    assert t.interrupt(5.1, "SIGINT") == []   # a second Ctrl-C changes nothing
    still = {"11": row("11", "base", "RUNNING", nodes="n1")}
    out = t.squeue(5.2, still)   # the pending one is gone; the running one tears down
    assert not of(out, FailPoints) and t.job("spec").done and t.job("base").live
    assert of(t.poll(5.4), AskQueue)   # asked every tick now
    assert not of(t.tick(5.0 + CANCEL_GRACE_S), Cancel)
    assert of(t.tick(5.1 + CANCEL_GRACE_S), Cancel) == [Cancel(("11",))]   # then killed
    out = t.squeue(6.0 + CANCEL_GRACE_S, {"11": row("11", "base", "CANCELLED")})
    assert logs(out) == ["cancelled 2 job(s); none left in squeue"]
    assert t.idle and not t.left and not of(t.poll(30.0), Submit)
    assert ServerState("base", {"status": "stopped", "job_state": "CANCELLED",
                                "stopped_by": "interrupt"}) in out
    assert t.unfinished(t.job("base")) == ["b1", "b2"]   # no row for a cut point


def test_ctrl_c_with_a_job_squeue_never_lets_go_ends_saying_so():
    t = running(submitted(make()))
    t.interrupt(0.0, "SIGTERM")
    t.squeue(0.2, {"11": row("11", "base", "RUNNING", nodes="n1")})
    t.tick(CANCEL_GRACE_S + 0.1)
    out = t.tick(CANCEL_GRACE_S + KILL_WAIT_S + 0.2)
    assert logs(out) == ["still in squeue after scancel: job 11 (RUNNING)"]
    assert t.idle and [j.name for j in t.left] == ["base"]


def test_ctrl_c_before_any_job_was_submitted_submits_nothing():
    t = make()
    t.start(0.0, ["base", "spec"])
    t.submitted(0.0, "base", "11")   # the Submit for spec is still to be performed
    t.interrupt(0.1, "SIGINT")
    assert t.submitted(0.2, "spec", "12")[-1:] != [Submit("spec")]
    assert t.to_submit == []


# ----------------------------------------------------------------------------- a rerun
def test_a_rerun_after_sigkill_follows_live_jobs_and_settles_ended_ones():
    t = make()
    earlier = {"comment": RUN, "jobs": {
        "base": {"id": "11", "state": "RUNNING", "nodes": "n1", "submitted_at": 0.0,
                 "started_at": 1.0, "done": False},
        "spec": {"id": "12", "state": "SUSPENDED", "nodes": "n2", "submitted_at": 0.0,
                 "started_at": 1.0, "done": False}}}
    assert t.adopt(100.0, earlier) == [AskQueue(("11", "12"), ("base", "spec"))]
    t.points_finished(["b1", "b2"])   # base's rows, merged before the answer
    out = t.squeue(100.0, {"12": row("12", "spec", "SUSPENDED", nodes="n2")})
    assert "following job 12 spec (SUSPENDED), submitted by an earlier driver" in logs(out)
    assert out[-1] == AskAcct(("11",))
    assert logs(t.acct(100.0, {"11": ("COMPLETED", "0:0")})) == ["job 11 base: completed"]
    assert t.following() == ["spec"] and t.job("base").done
    assert t.start(100.0, []) == [] and not t.idle   # nothing submitted twice


def test_a_rerun_resubmits_a_job_the_earlier_driver_stopped():
    t = make()
    earlier = {"comment": RUN, "jobs": {
        "base": {"id": "11", "state": "RUNNING", "submitted_at": 0.0, "done": False,
                 "cancelled_by": "interrupt"}}}
    t.adopt(50.0, earlier)
    out = t.squeue(50.0, {}) + t.acct(50.0, {"11": ("CANCELLED", "0:15")})
    assert not of(out, FailPoints) and t.job("base").done
    assert t.unfinished(t.job("base")) == ["b1", "b2"] and t.following() == []
    assert t.start(50.0, ["base"]) == [Submit("base")]


def test_a_rerun_keeps_finished_jobs_and_ignores_another_run_dirs_record():
    t = make(finished=["b1", "b2"])
    done = {"base": {"id": "11", "state": "COMPLETED", "done": True, "ended_at": 9.0}}
    assert t.adopt(50.0, {"comment": RUN, "jobs": done}) == []
    assert t.records()["base"]["id"] == "11" and t.job("base").done and not t.job("base").live
    other = make()
    assert other.adopt(50.0, {"comment": "/runs/other", "jobs": done}) == []
    assert other.records()["base"]["id"] is None
    assert make().adopt(50.0, {"comment": RUN, "jobs": ["not", "a", "dict"]}) == []


# ----------------------------------------------------------------------------- pure
def test_the_tracker_runs_no_command_reads_no_file_and_no_clock():
    tree = ast.parse(inspect.getsource(jobtracker))
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import)
                for a in n.names}
    imported |= {(n.module or "").split(".")[0] for n in ast.walk(tree)
                 if isinstance(n, ast.ImportFrom)}
    assert imported <= {"__future__", "dataclasses"}, imported
    calls = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call)
             and isinstance(n.func, ast.Name)}
    assert not calls & {"open", "print", "input"}
