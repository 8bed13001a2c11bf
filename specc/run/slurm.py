"""The Slurm driver: submits a plan's jobs from the login node and follows each to its end.

    execute_slurm(plan, run_dir)   what `inv run` / execute=true call for a plan with Slurm jobs

Only Slurm's own commands, which read the same across versions: `sbatch
--parsable` to submit (every job at once; Slurm queues what it cannot start
yet, and a submit limit is waited out), `squeue -h -t all -o ...` to follow,
`sacct` for jobs squeue no longer shows, `scancel` to stop. Each job is followed
through pending (with squeue's reason) -> running (on which node) -> the server's
phase -> its points, from the job's files in the run dir (slurm/state/<job>.json,
slurm/results/<server>.jsonl, written by `python -m specc.run.node` on the node).

The driver is the only writer of results.jsonl and state.json: it merges each
job's rows by benchmark id (no duplicate row), and turns Slurm's verdict on a
job that ended early (FAILED, TIMEOUT, NODE_FAIL, CANCELLED, OUT_OF_MEMORY, or
pending past `pending_timeout_s`) into failed rows with the reason for the
points it did not finish. Ctrl-C or SIGTERM cancels every job it submitted
and checks squeue until they are gone; those points get no row, so a rerun
runs them. A rerun of the same plan follows jobs an earlier (killed) driver
left running instead of submitting them twice, and submits only servers with
unfinished points.

What to do about each job -- every decision above -- is the job tracker's
(specc.run.jobtracker, a pure state machine on the clock it is fed); this module
only feeds it what Slurm and the run dir say and performs the actions it returns.
"""

from __future__ import annotations

import getpass
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path

from specc import exits
from specc.files import (LOG_TAIL_BYTES, STATE_BYTES, atomic_write, load_json,
                         read_text)
from specc.plan import Plan
from specc.results import ResultLog, with_speedup
from specc.run import jobtracker as jt
from specc.run import rundir
from specc.run.jobtracker import TERMINAL, JobSpec, Row, Tracker
from specc.run.node import read_rows, results_path, state_path
from specc.run.outcome import backfill_speedups, exit_code, point_summary
from specc.state import RunState

#: How often the run dir is read for phases and rows (file reads only, no Slurm RPC).
TICK_S = 0.2


def warm_report() -> threading.Thread:
    """Import the report's modules (matplotlib: 0.3-0.6 s) in a background thread, started
    once the jobs are submitted: the report is the sweep's last step, and the driver has
    nothing to do while Slurm schedules the jobs. The report needs no join: an import in
    progress in this thread makes its own import wait.

    At the driver's own priority, not niced: a niced thread holds the import lock and the
    GIL, and on a busy login node it was starved of CPU for minutes while the driver's
    report (and its main loop) waited on it."""
    def work():
        try:
            import specc.report  # noqa: F401
            from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: F401
            from matplotlib.figure import Figure  # noqa: F401
        except Exception:  # the report itself says what is missing
            pass

    thread = threading.Thread(target=work, name="specc-report-warmup", daemon=True)
    thread.start()
    return thread


def jobs_path(run_dir: Path) -> Path:
    return Path(run_dir) / "slurm" / "jobs.json"


def read_jobs(run_dir: Path) -> dict:
    try:
        return load_json(jobs_path(run_dir), STATE_BYTES)
    except (OSError, ValueError):
        return {}


class SlurmError(Exception):
    """A Slurm command failed in a way the driver cannot work around."""


def _cmd(argv, *, cwd=None, env=None, timeout=30.0) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)
    except FileNotFoundError as e:
        raise SlurmError(f"{argv[0]} not found: is this a Slurm login node? ({e})") from e
    except subprocess.TimeoutExpired as e:
        raise SlurmError(f"{' '.join(argv[:2])} did not answer in {timeout:g} s") from e


#: One squeue line (the tracker's Row).
QueueEntry = Row


def squeue(ids=None) -> dict[str, QueueEntry]:
    """The user's jobs Slurm still holds (finished ones too, for MinJobAge), by id."""
    r = _cmd(["squeue", "-h", "-t", "all", "-u", getpass.getuser(),
              "-o", "%i|%T|%N|%R|%j|%k"])
    if r.returncode:
        raise SlurmError(f"squeue failed: {(r.stderr or r.stdout).strip()}")
    out = {}
    for line in r.stdout.splitlines():
        parts = line.split("|", 5)
        if len(parts) == 6 and (ids is None or parts[0] in ids):
            state = parts[1].split()[0].rstrip("+")   # "CANCELLED by 0" on some versions
            out[parts[0]] = QueueEntry(parts[0], state, parts[2], parts[3].strip("()"),
                                       parts[4], parts[5])
    return out


def sacct(ids) -> dict[str, tuple[str, str]]:
    """{id: (state, exit code)} from accounting; {} where sacct is not available."""
    if not ids:
        return {}
    try:
        r = _cmd(["sacct", "-n", "-P", "-X", "-j", ",".join(ids), "-o", "JobID,State,ExitCode"])
    except SlurmError:
        return {}
    if r.returncode:
        return {}
    out = {}
    for line in r.stdout.splitlines():
        parts = line.split("|")
        if len(parts) >= 3 and parts[0] in ids:
            out[parts[0]] = (parts[1].split()[0].rstrip("+"), parts[2])
    return out


def scancel(ids, *, batch_signal: str | None = None) -> None:
    if not ids:
        return
    argv = ["scancel"] + ([f"--signal={batch_signal}", "--batch"] if batch_signal else [])
    _cmd(argv + list(ids))


# ----------------------------------------------------------------------------- the driver
class Driver:
    """Feeds the job tracker (specc.run.jobtracker) and performs what it returns: runs
    sbatch, squeue, sacct and scancel, reads the node entries' files, merges their rows into
    results.jsonl, writes state.json and slurm/jobs.json, shows progress. It decides nothing
    about a job itself."""

    def __init__(self, plan: Plan, run_dir: Path, progress, *, now=time.time,
                 results: ResultLog | None = None, parent: Driver | None = None):
        """`results`, `parent`: a driver of one more job after the search (the deployed
        command's verification): its rows go to `results`, its state and stop signal are
        the parent's."""
        self.plan = plan
        self.run_dir = Path(run_dir).resolve()
        assert plan.cluster is not None   # a Slurm plan's
        self.cluster = plan.cluster
        self.progress = progress
        self.now = now
        self.parent = parent
        self.results = results or ResultLog(self.run_dir / "results.jsonl")
        self.state: RunState = parent.state if parent else RunState(self.run_dir / "state.json")
        self.comment = str(self.run_dir)
        self.specs = {j.name: j for j in self.cluster.jobs}
        self.bench = {b.id: b for b in plan.benchmarks}
        self.offsets: dict[str, tuple[int, int]] = {}   # per-server results file: (inode, size)
        self.stop_signal: int | None = None
        self.warmup: threading.Thread | None = None
        self.write_error: str | None = None   # a record that could not be written
        self.saved: dict | None = None
        self.tracker = self._tracker()

    def _tracker(self) -> Tracker:
        specs = [JobSpec(j.name, tuple(j.servers),
                         tuple(b.id for sid in j.servers for b in self.plan.benchmarks_of(sid)),
                         j.time_limit) for j in self.cluster.jobs]
        return Tracker(specs, comment=self.comment, poll_s=self.cluster.poll_interval_s,
                       pending_timeout_s=self.cluster.pending_timeout_s,
                       fail_fast=self.plan.fail_fast, finished=self._finished(),
                       servers=self.state.servers)

    def _finished(self) -> set[str]:
        return {b.id for b in self.plan.benchmarks if self.results.finished(b.id)}

    # -- acting ---------------------------------------------------------------------------
    def perform(self, actions) -> None:
        """Perform the tracker's actions; what each feeds back is performed before the next."""
        todo = deque(actions)
        while todo:
            more = self._act(todo.popleft())
            todo.extendleft(reversed(more))
        self._save()

    def _act(self, a) -> list:
        t = self.tracker
        if isinstance(a, jt.ReadNode):
            return self.read_node(a.job)
        if isinstance(a, jt.AskQueue):
            out = [x for name in a.jobs for x in self.read_node(name)]   # rows before verdicts
            try:
                rows = squeue(set(a.ids))
            except SlurmError as e:
                return out + t.queue_failed(self.now(), str(e))
            return out + t.squeue(self.now(), rows)
        if isinstance(a, jt.AskAcct):
            return t.acct(self.now(), sacct(list(a.ids)))
        if isinstance(a, jt.Submit):
            return self.submit(a.job)
        if isinstance(a, jt.Cancel):
            try:
                scancel(a.ids, batch_signal=a.signal)
            except SlurmError as e:
                self.progress.log(f"scancel: {e}")
        elif isinstance(a, jt.Log):
            self.progress.log(a.text)
        elif isinstance(a, jt.Phase):
            self.progress.server_phase(a.server, a.phase, a.since, a.detail)
        elif isinstance(a, jt.PointStarted):
            bench = self.bench[a.point]
            self.progress.point_started(a.point, self.plan.point_label(bench))
        elif isinstance(a, jt.ServerState):
            if a.fresh:
                self.state.start(a.server, **a.fields)
            else:
                self._server(a.server, **a.fields)
        elif isinstance(a, jt.FailPoints):
            self.fail_points(a)
        return []

    def _save(self) -> None:
        """slurm/jobs.json: the jobs this run dir submitted, for a rerun, `inv status`/`down`;
        rewritten when a job's record changed."""
        records = self.tracker.records()
        if records != self.saved:
            earlier = read_jobs(self.run_dir)   # other drivers' jobs (the verification's) kept
            kept = (earlier.get("jobs") or {}) if earlier.get("comment") == self.comment else {}
            atomic_write(jobs_path(self.run_dir), json.dumps(
                {"comment": self.comment, "jobs": {**kept, **records}}, indent=2,
                sort_keys=True))
            self.saved = records

    def _server(self, sid: str, **fields) -> None:
        entry = self.state.servers.get(sid, {})
        if any(entry.get(k) != v for k, v in fields.items()):
            self.state.update(sid, **fields)

    def merge(self, servers) -> list[str]:
        """New rows of the servers' files -> results.jsonl (by id, never twice); their ids."""
        new = []
        for sid in servers:
            path = results_path(self.run_dir, sid)
            try:
                st = os.stat(path)
            except OSError:
                continue
            key = (st.st_ino, st.st_size)
            if self.offsets.get(sid) == key:
                continue
            self.offsets[sid] = key
            for bid, row in read_rows(path).items():
                if self.results.finished(bid):
                    continue
                bench = self.bench.get(bid)
                if bench is None or bench.server != sid:
                    continue
                with_speedup(row, self.results.get(bench.baseline) if bench.baseline else None)
                self.results.append(row)
                new.append(bid)
                self.progress.point_finished(bid, row["status"], point_summary(row))
        return new

    def read_node(self, name: str) -> list:
        """The job's node files: its state file to the tracker, its rows merged."""
        try:
            data = load_json(state_path(self.run_dir, name), STATE_BYTES)
        except (OSError, ValueError):
            data = {}
        out = self.tracker.node(self.now(), name, data)
        self.tracker.points_finished(self.merge(self.specs[name].servers))
        return out

    def submit(self, name: str) -> list:
        (self.run_dir / "slurm" / "logs").mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "SPECC_PYTHON": sys.executable}
        r = _cmd(["sbatch", "--parsable", f"--comment={self.comment}", self.specs[name].script],
                 cwd=self.run_dir, env=env)
        if r.returncode == 0 and r.stdout.strip():
            return self.tracker.submitted(self.now(), name, r.stdout.strip().split(";")[0])
        msg = " ".join((r.stderr or r.stdout).split()) or f"sbatch exited {r.returncode}"
        return self.tracker.refused(self.now(), name, msg)

    def fail_points(self, a: jt.FailPoints) -> None:
        """A job's unfinished points fail with the tracker's reason (and its log's last lines)."""
        reason = a.reason
        if a.log_tail:
            tail = self.job_log_tail(a.job, a.job_id)
            if tail:
                reason += f"; job log: {tail}"
        self.progress.log(f"job {a.job_id or '-'} {a.job}: {reason}"
                          + (f"; {len(a.points)} point(s) failed" if a.points else ""))
        from specc.run.point import failed_row   # (HTTP client and prompts: not for `specc status`)

        for bid in a.points:
            self.results.append(failed_row(self.bench[bid], reason))
        self.progress.skip(a.points, reason[:120], f"job {a.job}")
        for sid in a.servers:
            self._server(sid, status="failed", reason=reason, job_state=a.verdict)
        for sid in a.all_servers:
            self.progress.server_phase(sid, "failed", a.at, reason[:120])

    def job_log_tail(self, name: str, job_id: str | None, n: int = 2) -> str:
        path = self.run_dir / "slurm" / "logs" / f"{name}-{job_id}.out"
        try:
            lines = [ln for ln in read_text(path, LOG_TAIL_BYTES, tail=True).splitlines()
                     if ln.strip()]
        except (OSError, ValueError):
            return ""
        return " | ".join(lines[-n:])

    # -- the run --------------------------------------------------------------------------
    def run(self, retry_failed: bool = False) -> int:
        from specc.run.executor import plan_progress

        for job in self.cluster.jobs:   # rows a job wrote while no driver was merging
            self.tracker.points_finished(self.merge(job.servers))
        t = self.tracker
        self.perform(t.adopt(self.now(), read_jobs(self.run_dir)))
        following = set(t.following())
        if retry_failed:
            self.drop_failed(keep={s for n in following for s in self.specs[n].servers})
            t.reopen(set(self.bench) - self._finished())
        plan_progress(self.plan, self.results, self.progress)
        todo = [j for j in t.jobs if j.name not in following and not j.live and t.unfinished(j)]
        # longest first: with fewer nodes than jobs, the sweep ends soonest (LPT)
        est = self.plan.estimates.servers_s
        order = [j.name for j in sorted(todo, key=lambda j: -max(est.get(s, 0.0)
                                                                 for s in j.spec.servers))]
        tuner = None
        if self.plan.search is not None:   # search=tune: one job at a time, as it decides
            from specc.run.tune import Tuner

            tuner, order = Tuner(self.plan, self.run_dir, self.results.get,
                                 self.progress.log), []
        try:
            code = self._loop(order, tuner)
            if tuner is not None and tuner.search.stop_reason \
                    and self.tracker.interrupted is None:
                code = self._deploy(tuner, code)
            return code
        finally:
            if tuner is not None:
                tuner.write()

    def _deploy(self, tuner, code: int) -> int:
        """search=tune: deploy.json for the decision, verified in one more job (the deployed
        command on the resources of the job of the server it is shaped as; the node renders
        the command again from the sealed plan and deploy.json's bands)."""
        import dataclasses

        from specc.batchscript import script
        from specc.plan import SlurmJob
        from specc.run import deploy

        earlier = deploy.read(self.run_dir) or {}
        prepared = deploy.prepare(self.plan, self.run_dir, tuner.search.decision())
        if prepared is None:
            return code
        doc, sched = prepared
        tuner.deployed = doc
        server, benches = deploy.target(self.plan, sched)
        if server is None:
            doc["verify_note"] = benches
        elif earlier.get("verify_server") == server.id and earlier.get("verify"):
            doc = tuner.deployed = earlier   # verified by an earlier run: not submitted again
        else:
            job = next(j for j in self.cluster.jobs
                       if deploy.template_of(sched) in j.servers)
            name = f"{job.name}-verify"
            mine = SlurmJob(name=name, servers=(server.id,), nodes=job.nodes, gpus=job.gpus,
                            gpus_per_node=job.gpus_per_node, time_limit=job.time_limit,
                            time_limit_s=job.time_limit_s, need_s=job.need_s,
                            deadline_s=job.deadline_s, points_s=job.points_s,
                            script=f"slurm/{name}.sbatch")
            sub_plan = dataclasses.replace(
                self.plan, servers=(server,), benchmarks=tuple(benches),
                search=None, cluster=dataclasses.replace(self.cluster, jobs=(mine,)))
            atomic_write(self.run_dir / mine.script, script(sub_plan, mine, verify=job.name),
                         mode=0o755)
            self.progress.log(f"verify: submit the deployed command ({len(sched['bands'])} "
                              f"band(s)) as job {name}")
            sub = Driver(sub_plan, self.run_dir, self.progress, now=self.now,
                         results=ResultLog(self.run_dir / deploy.VERIFY_RESULTS), parent=self)
            (self.run_dir / deploy.VERIFY_RESULTS).parent.mkdir(parents=True, exist_ok=True)
            following = sub._adopted()   # a job an earlier (killed) driver left running
            sub_code = sub._loop([name] if sub.tracker.unfinished(sub.tracker.by_name[name])
                                 and name not in following else [], None)
            if sub.tracker.interrupted is not None:   # a rerun submits it again
                doc["verify_note"] = "the verification job was stopped before it finished"
                code = sub_code
            else:
                rows = {b.params.concurrency: sub.results.get(b.id) for b in benches}
                deploy.verified(self.plan, self.run_dir, doc, sched, server, rows)
        if self.plan.search is not None and self.plan.search.vs_engine_default:
            doc["engine_default_note"] = ("search.vs_engine_default: the engine's default "
                                          "adaptive mode is not started on Slurm")
        deploy.write(self.run_dir, doc, sched.get("files") or {})
        return code

    def _adopted(self) -> set[str]:
        """Jobs of an earlier (killed) driver this one follows now."""
        for job in self.cluster.jobs:   # rows its job wrote while no driver was merging
            self.tracker.points_finished(self.merge(job.servers))
        self.perform(self.tracker.adopt(self.now(), read_jobs(self.run_dir)))
        return set(self.tracker.following())

    def _loop(self, order: list[str], tuner) -> int:
        t = self.tracker
        fed = {j.name for j in t.jobs if j.done}   # search=tune: servers it was told of
        self.perform(t.start(self.now(), order))
        self.warmup = self.warmup or warm_report()
        while True:
            stop = self.parent.stop_signal if self.parent else self.stop_signal
            if stop is not None and t.interrupted is None:
                self.perform(t.interrupt(self.now(), signal.Signals(stop).name))
            if t.idle:
                if tuner is None or t.interrupted is not None:
                    break
                name = self._next_job(tuner, fed)
                if name is None:
                    break
                self.perform(t.enqueue(self.now(), name))
                if t.idle:   # not taken (fail_fast stopped the search)
                    break
                continue
            time.sleep(TICK_S)
            self.perform(t.tick(self.now()))   # the files first: they decide the poll
            self.perform(t.poll(self.now()))
        self.backfill()
        if t.interrupted is not None:
            return exits.FAILED if t.left else exits.INTERRUPTED
        return exit_code(self.plan, self.results, write_error=self.write_error,
                         servers=None if tuner is None else tuner.chosen)

    def _next_job(self, tuner, fed: set[str]) -> str | None:
        """search=tune: feed the search what ended, then the job of the server it asks next."""
        for job in self.tracker.jobs:
            if job.done and job.name not in fed and job.spec.servers[0] in tuner.chosen:
                fed.add(job.name)
                for sid in job.spec.servers:
                    tuner.feed(sid)
        sid = tuner.next_server()
        if sid is None:   # the search stopped: nothing more will run
            self.progress.plan(0, servers=0, earlier=self.progress.earlier)
        return next((j.name for j in self.cluster.jobs if sid in j.servers), None) \
            if sid else None

    def drop_failed(self, keep: set[str]) -> None:
        n = self.results.drop_failed()
        for sid in (s.id for s in self.plan.servers if s.id not in keep):
            log = ResultLog(results_path(self.run_dir, sid))
            n += log.drop_failed()
        if n:
            self.progress.log(f"retrying {n} failed point(s)")

    def backfill(self) -> None:
        """Speedups of points whose baseline ran in another job (results.jsonl rewritten once)."""
        why = backfill_speedups(self.plan, self.results)
        if why:
            self.write_error = self.write_error or why
            self.progress.log(why)


def edited_scripts(plan: Plan, run_dir: Path) -> list[str]:
    """The jobs whose slurm/<job>.sbatch is not what plan.json renders (edited after review:
    sbatch would run it as it is). A missing script is written from the plan."""
    from specc.batchscript import script
    from specc.files import atomic_write, read_bounded

    edited = []
    for job in plan.cluster.jobs if plan.cluster else ():
        want = script(plan, job)
        path = run_dir / job.script
        try:
            have = read_bounded(path, 1 << 20).decode("utf-8", "replace")
        except FileNotFoundError:
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(path, want, mode=0o755)
            continue
        except (OSError, ValueError):
            have = None
        if have != want:
            edited.append(job.script)
    return edited


def execute_slurm(plan: Plan, run_dir: Path, *, retry_failed: bool = False,
                  accept_edited: bool = False) -> int:
    """Submit and follow the plan's jobs; print the results table. Exit code per CONTRACT.md."""
    run_dir = Path(run_dir).resolve()
    edited = edited_scripts(plan, run_dir)
    if edited and not accept_edited:
        print(f"error PLAN_EDITED at {edited[0]}: not the batch script plan.json renders (edited "
              f"after review{f'; also {len(edited) - 1} more' if len(edited) > 1 else ''}); "
              "review it and pass --accept-edited to submit it as it is, or compile the "
              "experiment again", file=sys.stderr)
        return exits.INVALID
    for name in edited:
        print(f"warning PLAN_EDITED at {name}: submitted as edited (--accept-edited)",
              file=sys.stderr)
    missing = [c for c in ("sbatch", "squeue", "scancel") if not shutil.which(c)]
    if missing:
        print(f"error SLURM_UNAVAILABLE at cluster.name: {', '.join(missing)} not found on PATH "
              "(fix: run this on a Slurm login node, or compile with cluster=local)",
              file=sys.stderr)
        return exits.INVALID
    if plan.errors:
        print(f"error PLAN_HAS_ERRORS: the plan holds {len(plan.errors)} error(s): "
              + "; ".join(d.message for d in plan.errors), file=sys.stderr)
        return exits.INVALID
    try:
        with rundir.locked(run_dir, command="specc run (Slurm driver)"):
            from specc.rundir import accept_edited as record_accepted

            record_accepted(run_dir)   # what runs is what its report reads
            code = _drive(plan, run_dir, retry_failed)
    except rundir.RunDirBusy as e:   # one driver (or executor) per run dir
        print(f"error RUN_DIR_BUSY: {e}", file=sys.stderr)
        return exits.BUSY
    except rundir.RunDirUnwritable as e:
        print(f"error RUN_DIR_UNWRITABLE: {e}", file=sys.stderr)
        return exits.INVALID
    _report(run_dir)
    if code == exits.INTERRUPTED:
        from specc.run.executor import interrupted

        interrupted(run_dir)
    return code


def _drive(plan: Plan, run_dir: Path, retry_failed: bool) -> int:
    """The driver under the run dir's lock. Ctrl-C and SIGTERM only set a flag: the driver
    feeds the tracker the interrupt and carries out its cancel (a second Ctrl-C repeats it
    harmlessly)."""
    from specc.run.progress import SweepProgress

    code = exits.OK
    with SweepProgress(len(plan.benchmarks)) as progress:
        driver = Driver(plan, run_dir, progress)

        def on_signal(signum, _frame):
            driver.stop_signal = signum

        old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            driver.state.set_executor(pid=os.getpid(), started_at=time.time(), kind="slurm")
            code = driver.run(retry_failed=retry_failed)
        except SlurmError as e:
            progress.log(f"error: {e}")
            code = exits.FAILED
        finally:
            for s, h in old.items():
                signal.signal(s, h)
    return code


def _report(run_dir: Path) -> None:
    """The manifest and report, as a local run writes them."""
    from specc.run.executor import _finish_report

    _finish_report(run_dir)


# ----------------------------------------------------------------------------- inv status / down
def is_slurm_run(run_dir: Path, plan: Plan | None = None) -> bool:
    """A run dir whose plan.json (or ``plan``, read already) has Slurm jobs (its `cluster`
    record), or was compiled for Slurm by an older specc. A plan.json that cannot be read
    leaves the driver's record to say so: `down` must still cancel the jobs."""
    from specc.plan import OLD_JOBS_FILE
    from specc.rundir import RunDir, RunDirError, compiled_for_slurm

    if plan is not None:
        return compiled_for_slurm(run_dir, plan)
    if (Path(run_dir) / OLD_JOBS_FILE).exists():
        return True

    try:   # whatever its digest: `down` must cancel the jobs of a plan edited since
        return RunDir.open(run_dir, edited_ok=True).plan.cluster is not None
    except RunDirError:
        return jobs_path(run_dir).exists()


def _ours(run_dir: Path) -> tuple[dict, dict[str, QueueEntry]]:
    """(jobs.json's jobs, squeue's entries for those of them Slurm still holds as ours)."""
    data = read_jobs(run_dir)
    jobs = data.get("jobs") or {}
    ids = {r["id"] for r in jobs.values() if r.get("id")}
    queue = squeue(ids) if ids else {}
    names = {r["id"]: name for name, r in jobs.items() if r.get("id")}
    return jobs, {i: q for i, q in queue.items()
                  if q.name == names.get(i) and q.comment == data.get("comment")}


def status_text(run_dir: Path) -> str:
    """One line per job: Slurm's state now (or the last one recorded), node, reason, and
    its servers' phase from state.json."""
    from tabulate import tabulate

    from specc.rundir import StateError, state_of

    try:   # the executor's state.json through its one checked reader
        state = state_of(run_dir).get("servers") or {}
    except StateError:
        state = {}
    try:
        jobs, queue = _ours(run_dir)
        note = ""
    except SlurmError as e:
        jobs, queue, note = read_jobs(run_dir).get("jobs") or {}, {}, f"(squeue: {e})"
    rows = []
    for name, rec in jobs.items():
        q = queue.get(rec.get("id"))
        for sid in rec.get("servers") or [name]:
            s = state.get(sid, {})
            rows.append([rec.get("id"), (q.state if q else rec.get("state")) or "",
                         (q.nodes if q else rec.get("nodes")) or "", sid, s.get("status", ""),
                         s.get("phase", ""),
                         ((q.reason if q and q.state == "PENDING" else s.get("reason")) or "")[:80]])
    if not rows:
        return "no Slurm jobs submitted yet"
    return tabulate(rows, headers=["job", "slurm", "nodes", "server", "status", "phase", "reason"],
                    tablefmt="simple") + (f"\n{note}" if note else "")


def down(run_dir: Path, *, timeout_s: float = 20.0) -> tuple[list[str], list[str]]:
    """scancel every job of the run Slurm still holds as active; ([stopped], [still there])."""
    run_dir = Path(run_dir).resolve()
    jobs, queue = _ours(run_dir)
    live = {i: q for i, q in queue.items() if q.state not in TERMINAL}
    if not live:
        return [], []
    data = read_jobs(run_dir)
    for rec in data.get("jobs", {}).values():
        if rec.get("id") in live:
            rec["cancelled_by"] = rec.get("cancelled_by") or "down"
    atomic_write(jobs_path(run_dir), json.dumps(data, indent=2, sort_keys=True))
    scancel(sorted(live))
    deadline = time.monotonic() + timeout_s
    left = live
    while left and time.monotonic() < deadline:
        time.sleep(TICK_S)
        now = squeue(set(live))
        left = {i: q for i, q in now.items() if q.state not in TERMINAL}
    stopped = [f"job {i} {q.name} ({q.state} on {q.nodes or '-'})" for i, q in live.items()
               if i not in left]
    return stopped, [f"job {i} {q.name} still {q.state} after scancel" for i, q in left.items()]
