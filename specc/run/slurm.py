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
from dataclasses import dataclass, field
from pathlib import Path

from specc import exits
from specc.files import (LOG_TAIL_BYTES, STATE_BYTES, atomic_write, load_json,
                         read_text)
from specc.plan import Plan
from specc.results import ResultLog, with_speedup
from specc.run import rundir
from specc.run.node import read_rows, results_path, state_path
from specc.run.outcome import backfill_speedups, exit_code, point_summary
from specc.run.point import failed_row
from specc.state import RunState

#: Job states after which nothing more happens to a job.
TERMINAL = frozenset({"COMPLETED", "FAILED", "TIMEOUT", "NODE_FAIL", "CANCELLED",
                      "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL", "DEADLINE", "REVOKED",
                      "SPECIAL_EXIT"})
#: What each failure verdict means, for the points' reasons.
MEANING = {
    "FAILED": "the job's script exited non-zero",
    "TIMEOUT": "killed at its time limit",
    "NODE_FAIL": "its node failed",
    "CANCELLED": "cancelled outside specc (scancel or an administrator)",
    "OUT_OF_MEMORY": "killed for exceeding its host memory",
    "PREEMPTED": "preempted by a higher-priority job",
    "BOOT_FAIL": "its node failed to boot",
    "DEADLINE": "past its --deadline",
}
#: sbatch refusals that go away when some of our jobs end: wait, then submit again.
_SUBMIT_LIMITS = ("MaxSubmit", "SubmitJob", "JobLimit", "Resource temporarily unavailable")
#: Who may stop a job without its points failing (they are left for a rerun).
STOPPED_BY_US = frozenset({"interrupt", "fail_fast", "down"})
#: How often the run dir is read for phases and rows (file reads only, no Slurm RPC).
TICK_S = 0.2
#: Seconds a job gets to tear its servers down after SIGTERM before scancel kills it.
CANCEL_GRACE_S = 15.0


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


@dataclass
class QueueEntry:
    id: str
    state: str
    nodes: str
    reason: str
    name: str
    comment: str


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
@dataclass
class Job:
    name: str
    servers: list[str]
    script: str
    time_limit: str
    id: str | None = None
    state: str = "UNSUBMITTED"
    nodes: str = ""
    reason: str = ""
    submitted_at: float | None = None
    started_at: float | None = None
    ended_at: float | None = None   # when the driver saw it end
    cancelled_by: str | None = None
    done: bool = False
    exit_code: str | None = None
    seen: dict = field(default_factory=dict)   # per-server: last phase/point shown

    def record(self) -> dict:
        return {"id": self.id, "state": self.state, "nodes": self.nodes, "reason": self.reason,
                "servers": self.servers, "submitted_at": self.submitted_at,
                "started_at": self.started_at, "ended_at": self.ended_at,
                "cancelled_by": self.cancelled_by,
                "done": self.done, "exit_code": self.exit_code}


class Interrupted(Exception):
    pass


class Driver:
    def __init__(self, plan: Plan, run_dir: Path, progress, *, now=time.time):
        self.plan = plan
        self.run_dir = Path(run_dir).resolve()
        self.cluster = plan.cluster
        self.progress = progress
        self.now = now
        self.results = ResultLog(self.run_dir / "results.jsonl")
        self.state = RunState(self.run_dir / "state.json")
        self.comment = str(self.run_dir)
        self.poll_s = self.cluster.poll_interval_s
        self.jobs = [Job(j.name, list(j.servers), j.script, j.time_limit)
                     for j in self.cluster.jobs]
        self.bench = {b.id: b for b in plan.benchmarks}
        self.offsets: dict[str, tuple[int, int]] = {}   # per-server results file: (inode, size)
        self.stop_signal: int | None = None
        self.failed_servers: dict[str, str] = {}
        self.warmup: threading.Thread | None = None
        self.write_error: str | None = None   # a record that could not be written

    # -- files ----------------------------------------------------------------------------
    def _save(self) -> None:
        """slurm/jobs.json: the jobs this run dir submitted, for a rerun, `inv status`/`down`."""
        atomic_write(jobs_path(self.run_dir), json.dumps(
            {"comment": self.comment, "jobs": {j.name: j.record() for j in self.jobs}},
            indent=2, sort_keys=True))

    def _server(self, sid: str, **fields) -> None:
        entry = self.state.servers.get(sid, {})
        if any(entry.get(k) != v for k, v in fields.items()):
            self.state.update(sid, **fields)

    def unfinished(self, job: Job) -> list:
        return [b for sid in job.servers for b in self.plan.benchmarks_of(sid)
                if not self.results.finished(b.id)]

    def merge(self, job: Job, *, force: bool = False) -> None:
        """New rows of the job's per-server files -> results.jsonl (by id, never twice)."""
        for sid in job.servers:
            path = results_path(self.run_dir, sid)
            try:
                st = os.stat(path)
            except OSError:
                continue
            key = (st.st_ino, st.st_size)
            if not force and self.offsets.get(sid) == key:
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
                self.progress.point_finished(bid, row["status"], point_summary(row))

    def follow_files(self, job: Job) -> None:
        """The node's executor state -> progress and state.json (phase, point, status)."""
        try:
            data = load_json(state_path(self.run_dir, job.name), STATE_BYTES)
        except (OSError, ValueError):
            data = {}
        ex = data.get("executor") or {}
        if job.id and ex.get("job_id") not in (None, job.id):
            data = {}   # an earlier attempt's file: not this job's yet
        for sid in job.servers:
            node = (data.get("servers") or {}).get(sid)
            if node:
                seen = job.seen.setdefault(sid, {})
                status, phase = node.get("status"), node.get("phase")
                shown = ("ready" if status in ("ready", "benchmarking") else
                         status if status in ("failed", "stopped") else phase or "launch")
                since = (node.get("ready_at") if shown == "ready" else
                         node.get("phase_started_at") or node.get("started_at"))
                if seen.get("shown") != shown:
                    seen["shown"] = shown
                    self.progress.server_phase(sid, shown, since,
                                               node.get("reason") or "" if shown == "failed" else "")
                point = node.get("point") if status == "benchmarking" else None
                if point and seen.get("point") != point and not self.results.finished(point):
                    seen["point"] = point
                    bench = self.bench.get(point)
                    if bench is not None:
                        self.progress.point_started(
                            point, f"{self.plan.server(sid).label} @ c={bench.params.concurrency}")
                if status == "failed" and sid not in self.failed_servers:
                    self.failed_servers[sid] = node.get("reason") or "failed"
                keep = {k: node.get(k) for k in ("status", "phase", "phase_started_at", "pid",
                                                  "host", "port", "started_at", "ready_at",
                                                  "reason", "point", "gpus", "log", "stop", "stopped_at")
                        if k in node}
                self._server(sid, **keep)
        self.merge(job)

    # -- Slurm ----------------------------------------------------------------------------
    def submit(self, job: Job) -> bool:
        """True when submitted (or failed for good); False when a limit says wait."""
        (self.run_dir / "slurm" / "logs").mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "SPECC_PYTHON": sys.executable}
        r = _cmd(["sbatch", "--parsable", f"--comment={self.comment}", job.script],
                 cwd=self.run_dir, env=env)
        if r.returncode == 0 and r.stdout.strip():
            job.id = r.stdout.strip().split(";")[0]
            job.state, job.submitted_at, job.reason = "PENDING", self.now(), ""
            job.cancelled_by, job.done, job.started_at, job.ended_at = None, False, None, None
            job.seen.clear()
            for sid in job.servers:
                self.state.start(sid, status="pending", job=job.name, job_id=job.id)
                self.progress.server_phase(sid, "pending", job.submitted_at, f"job {job.id}")
            self._save()
            return True
        msg = " ".join((r.stderr or r.stdout).split()) or f"sbatch exited {r.returncode}"
        if any(k in msg for k in _SUBMIT_LIMITS) and any(j.id and not j.done for j in self.jobs):
            self.progress.log(f"{job.name}: {msg}; submitting again when a job ends")
            return False
        self.end(job, "REFUSED", f"sbatch refused the job: {msg}")
        return True

    def poll(self, queue: dict[str, QueueEntry]) -> None:
        for job in self.jobs:
            if not job.id or job.done:
                continue
            q = queue.get(job.id)
            if q is not None and (q.name != job.name or q.comment != self.comment):
                q = None   # the id was reused: not our job
            if q is None:
                acct = sacct([job.id]).get(job.id)
                if acct:
                    job.exit_code = acct[1]
                    self.finish(job, acct[0])
                else:
                    self.finish(job, "UNKNOWN")
                continue
            self.update(job, q)

    def update(self, job: Job, q: QueueEntry) -> None:
        changed = q.state != job.state or q.reason != job.reason or q.nodes != job.nodes
        job.state, job.nodes = q.state, q.nodes
        if q.state == "PENDING":
            if q.reason != job.reason:
                job.reason = q.reason
                self.progress.log(f"job {job.id} {job.name}: pending ({q.reason})")
                for sid in job.servers:
                    self.progress.server_phase(sid, "pending", job.submitted_at,
                                               f"job {job.id}: {q.reason}")
                    self._server(sid, status="pending", job_state="PENDING", reason=q.reason)
            limit = self.cluster.pending_timeout_s
            if limit and job.submitted_at and self.now() - job.submitted_at > limit:
                job.cancelled_by = "pending_timeout"
                self.end(job, "PENDING", f"slurm job {job.id} still pending after {limit:g} s "
                         f"({q.reason}); cancelled (raise cluster.pending_timeout_s to wait longer)")
                self.cancel([job], by="pending_timeout")
                return
        elif q.state in ("RUNNING", "COMPLETING", "CONFIGURING") and job.started_at is None:
            job.started_at, job.reason = self.now(), ""
            self.progress.log(f"job {job.id} {job.name}: running on {q.nodes}")
            for sid in job.servers:
                self.progress.server_phase(sid, "running", job.started_at,
                                           f"job {job.id} on {q.nodes}")
                self._server(sid, status="running", job_state=q.state, nodes=q.nodes, reason=None)
        elif q.state in TERMINAL:
            self.finish(job, q.state)
            return
        if changed:
            self._save()

    def finish(self, job: Job, verdict: str) -> None:
        """The job ended: last rows merged, then its unfinished points get the verdict."""
        self.follow_files(job)
        self.merge(job, force=True)
        job.state, job.ended_at = verdict, job.ended_at or self.now()
        if job.cancelled_by in STOPPED_BY_US:
            job.done = True   # we stopped it: its points are left for a rerun
            for sid in job.servers:
                self._server(sid, status="stopped", job_state=verdict, stopped_by=job.cancelled_by)
            self._save()
            return
        if verdict == "UNKNOWN":   # neither squeue nor sacct: the node entry's own record
            ex = self.node_record(job)
            if not ex.get("finished_at"):
                self.end(job, "GONE", f"slurm job {job.id} is gone from squeue and sacct has no "
                         "record of it; its node entry never wrote its end (node lost?)")
                return
            if ex.get("stopped_by"):
                self.end(job, "GONE", f"slurm job {job.id} was stopped ({ex['stopped_by']}) and "
                         "is gone from squeue; sacct has no record of it")
                return
            verdict = job.state = "COMPLETED"
        left = self.unfinished(job)
        if verdict == "FAILED" and job.exit_code is None:
            job.exit_code = (sacct([job.id]).get(job.id) or (None, None))[1]
        if verdict == "COMPLETED" and not left:
            job.done = True
            self.progress.log(f"job {job.id} {job.name}: completed")
            for sid in job.servers:
                if self.state.servers.get(sid, {}).get("status") not in ("failed", "stopped"):
                    self._server(sid, status="stopped", job_state=verdict)
            self._save()
            return
        self.end(job, verdict, self.reason(job, verdict))

    def reason(self, job: Job, verdict: str) -> str:
        what = MEANING.get(verdict, "it ended without finishing")
        if verdict == "COMPLETED":
            what = "it exited without finishing every point"
        where = f" on {job.nodes}" if job.nodes else ""
        text = f"slurm job {job.id} {verdict}{where}: {what}"
        if verdict == "TIMEOUT":
            text += f" ({job.time_limit}; raise cluster.time_limit)"
        if job.exit_code and verdict == "FAILED":
            text += f" (exit code {job.exit_code})"
        phases = {self.state.servers.get(s, {}).get("phase") for s in job.servers} - {None}
        if phases:
            text += f"; last phase {', '.join(sorted(phases))}"
        if verdict in ("FAILED", "COMPLETED"):
            tail = self.job_log_tail(job)
            if tail:
                text += f"; job log: {tail}"
        return text

    def job_log_tail(self, job: Job, n: int = 2) -> str:
        path = self.run_dir / "slurm" / "logs" / f"{job.name}-{job.id}.out"
        try:
            lines = [ln for ln in read_text(path, LOG_TAIL_BYTES, tail=True).splitlines()
                     if ln.strip()]
        except (OSError, ValueError):
            return ""
        return " | ".join(lines[-n:])

    def end(self, job: Job, verdict: str, reason: str) -> None:
        """Fail what the job left unfinished, with the reason."""
        job.state, job.done, job.reason = verdict, True, reason
        job.ended_at = job.ended_at or self.now()
        left = self.unfinished(job)
        self.progress.log(f"job {job.id or '-'} {job.name}: {reason}"
                          + (f"; {len(left)} point(s) failed" if left else ""))
        for b in left:
            self.results.append(failed_row(b, reason))
            self.progress.point_finished(b.id, "failed", reason[:120])
        for sid in job.servers:
            entry = self.state.servers.get(sid, {})
            if entry.get("status") != "failed" or not entry.get("reason"):
                self._server(sid, status="failed", reason=reason, job_state=verdict)
            self.failed_servers.setdefault(sid, reason)
            self.progress.server_phase(sid, "failed", self.now(), reason[:120])
        self._save()

    def cancel(self, jobs: list[Job], *, by: str, grace_s: float = CANCEL_GRACE_S) -> list[Job]:
        """Stop the jobs and wait until squeue shows none of them active; returns any left.

        Running jobs first get SIGTERM in their batch step only, so the node entry tears
        its servers down and leaves the point in flight without a row; anything still
        there after the grace, and every pending job, is scancelled outright."""
        live = [j for j in jobs if j.id and j.state not in TERMINAL]
        for j in live:
            j.cancelled_by = j.cancelled_by or by
        self._save()
        running = [j.id for j in live if j.state not in ("PENDING", "UNSUBMITTED")]
        pending = [j.id for j in live if j.state == "PENDING"]
        try:
            scancel(pending)
            scancel(running, batch_signal="TERM")
        except SlurmError as e:
            self.progress.log(f"scancel: {e}")
        deadline = time.monotonic() + grace_s
        killed = False
        while True:
            try:
                queue = squeue({j.id for j in live})
            except SlurmError:
                queue = {}
            active = [j for j in live if (q := queue.get(j.id)) and q.state not in TERMINAL]
            if not active:
                break
            if time.monotonic() > deadline:
                if killed:
                    return active
                scancel([j.id for j in active])
                killed, deadline = True, time.monotonic() + 10.0
            for j in live:
                self.follow_files(j)
            time.sleep(TICK_S)
        for j in live:
            self.merge(j, force=True)
            q = queue.get(j.id)
            j.state = q.state if q else "CANCELLED"
            j.ended_at = j.ended_at or self.now()
            if not j.done:   # stopped by us: unfinished points are left for a rerun
                j.done = True
                for sid in j.servers:
                    if self.state.servers.get(sid, {}).get("status") not in ("failed",):
                        self._server(sid, status="stopped", job_state=j.state, stopped_by=by)
        self._save()
        return []

    # -- the run --------------------------------------------------------------------------
    def adopt(self) -> list[Job]:
        """Jobs of an earlier driver on this run dir: follow the live ones, settle the ended."""
        earlier = read_jobs(self.run_dir)
        if earlier.get("comment") != self.comment:
            return []
        for job in self.jobs:   # ended with every point finished: kept as the record it is
            rec = (earlier.get("jobs") or {}).get(job.name) or {}
            if rec.get("id") and rec.get("done") and not self.unfinished(job):
                job.id, job.state, job.nodes = rec["id"], rec.get("state") or "?", \
                    rec.get("nodes") or ""
                job.submitted_at, job.started_at = rec.get("submitted_at"), rec.get("started_at")
                job.ended_at, job.cancelled_by = rec.get("ended_at"), rec.get("cancelled_by")
                job.done, job.exit_code = True, rec.get("exit_code")
                job.seen["_fed"] = True   # search=tune reads finished servers from results
        known = {name: rec for name, rec in (earlier.get("jobs") or {}).items()
                 if rec.get("id") and not rec.get("done")}
        if not known:
            self._save()
            return []
        queue = squeue({rec["id"] for rec in known.values()})
        adopted = []
        for job in self.jobs:
            rec = known.get(job.name)
            if not rec:
                continue
            job.id, job.submitted_at = rec["id"], rec.get("submitted_at")
            job.started_at, job.cancelled_by = rec.get("started_at"), rec.get("cancelled_by")
            job.state, job.nodes = rec.get("state") or "PENDING", rec.get("nodes") or ""
            q = queue.get(job.id)
            if q is not None and (q.name != job.name or q.comment != self.comment):
                q = None   # the id was reused: not our job
            if q is not None and q.state not in TERMINAL:
                self.progress.log(f"following job {job.id} {job.name} ({q.state}), "
                                  "submitted by an earlier driver")
                adopted.append(job)
                job.state, job.reason, job.started_at = "?", "", None   # shown afresh
                self.update(job, q)
            elif q is not None:
                self.finish(job, q.state)
            else:
                acct = sacct([job.id]).get(job.id)
                self.finish(job, acct[0] if acct else "UNKNOWN")
        self._save()
        return adopted

    def run(self, retry_failed: bool = False) -> int:
        for b in self.plan.benchmarks:
            row = self.results.get(b.id)
            if row is not None:
                self.progress.point_finished(b.id, row["status"], "finished in an earlier run, "
                                             "not rerun")
        for job in self.jobs:   # rows a job wrote while no driver was merging
            self.merge(job, force=True)
        adopted = self.adopt()
        if retry_failed:
            self.drop_failed(keep={s for j in adopted for s in j.servers})
        todo = [j for j in self.jobs if j not in adopted and self.unfinished(j)]
        # longest first: with fewer nodes than jobs, the sweep ends soonest (LPT)
        est = self.plan.estimates.get("servers_s", {})
        queue = sorted(todo, key=lambda j: -max(est.get(s, 0.0) for s in j.servers))
        tuner = None
        if self.plan.search is not None:   # search=tune: one job at a time, as it decides
            from specc.run.tune import Tuner

            tuner, queue = Tuner(self.plan, self.run_dir, self.results.get,
                                 self.progress.log), []
        last_poll = 0.0
        try:
            return self._loop(queue, tuner, last_poll)
        finally:
            if tuner is not None:
                tuner.write()

    def _next_job(self, tuner, live) -> Job | None:
        """search=tune: once no job runs, feed what ended and submit the search's next."""
        for job in [j for j in self.jobs if j.done and j.servers[0] in tuner.chosen
                    and not j.seen.get("_fed")]:
            job.seen["_fed"] = True
            for sid in job.servers:
                tuner.feed(sid)
        if live:
            return None
        sid = tuner.next_server()
        return next((j for j in self.jobs if sid in j.servers), None) if sid else None

    def _loop(self, queue: list, tuner, last_poll: float) -> int:
        while True:
            if self.stop_signal is not None:
                raise Interrupted()
            while queue and self.submit(queue[0]):
                queue.pop(0)
            if self.warmup is None:
                self.warmup = warm_report()
            live = [j for j in self.jobs if j.id and not j.done]
            if tuner is not None and not queue and not live:
                job = self._next_job(tuner, live)
                if job is not None:
                    queue.append(job)
                    continue
            if not live and not queue:
                break
            for j in live:
                if j.state not in ("PENDING", "UNSUBMITTED"):
                    self.follow_files(j)
            # a job whose node entry has ended is asked about every tick until Slurm agrees
            ending = [j for j in live if self._node_finished(j)]
            if time.monotonic() - last_poll >= (TICK_S if ending else self.poll_s):
                last_poll = time.monotonic()
                try:
                    self.poll(squeue({j.id for j in live}))
                except SlurmError as e:
                    self.progress.log(f"squeue: {e}; trying again")
            if self.plan.fail_fast and self.failed_servers:
                self.cancel([j for j in self.jobs if j.id and not j.done], by="fail_fast")
                queue.clear()
            time.sleep(TICK_S)
        self.backfill()
        return exit_code(self.plan, self.results, write_error=self.write_error,
                         servers=None if tuner is None else tuner.chosen)

    def node_record(self, job: Job) -> dict:
        """The node entry's record of this job (slurm/state/<job>.json), {} if none yet."""
        try:
            ex = load_json(state_path(self.run_dir, job.name), STATE_BYTES).get("executor") or {}
        except (OSError, ValueError, AttributeError):
            return {}
        return ex if ex.get("job_id") == job.id else {}

    def _node_finished(self, job: Job) -> bool:
        """The node entry wrote its end (Slurm's verdict follows within moments)."""
        if job.seen.get("_ended"):
            return True
        if self.node_record(job).get("finished_at"):
            job.seen["_ended"] = True
            return True
        return False

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


def execute_slurm(plan: Plan, run_dir: Path, *, retry_failed: bool = False) -> int:
    """Submit and follow the plan's jobs; print the results table. Exit code per CONTRACT.md."""
    run_dir = Path(run_dir).resolve()
    missing = [c for c in ("sbatch", "squeue", "scancel") if not shutil.which(c)]
    if missing:
        print(f"error SLURM_UNAVAILABLE at cluster.name: {', '.join(missing)} not found on PATH "
              "(fix: run this on a Slurm login node, or compile with cluster=local)",
              file=sys.stderr)
        return exits.INVALID
    if plan.errors:
        print(f"error PLAN_HAS_ERRORS: the plan holds {len(plan.errors)} error(s): "
              + "; ".join(d["message"] for d in plan.errors), file=sys.stderr)
        return exits.INVALID
    try:
        with rundir.locked(run_dir, command="specc run (Slurm driver)"):
            code = _drive(plan, run_dir, retry_failed)
    except rundir.RunDirBusy as e:   # one driver (or executor) per run dir
        print(f"error RUN_DIR_BUSY: {e}", file=sys.stderr)
        return exits.BUSY
    except rundir.RunDirUnwritable as e:
        print(f"error RUN_DIR_UNWRITABLE: {e}", file=sys.stderr)
        return exits.INVALID
    _report(run_dir)
    return code


def _drive(plan: Plan, run_dir: Path, retry_failed: bool) -> int:
    """The driver under the run dir's lock, Ctrl-C and SIGTERM cancelling every job."""
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
        except Interrupted:
            name = signal.Signals(driver.stop_signal).name
            live = [j for j in driver.jobs if j.id and not j.done]
            progress.log(f"{name}: cancelling {len(live)} job(s), keeping finished results")
            for s in old:   # a second Ctrl-C must not cut the cancel short
                signal.signal(s, signal.SIG_IGN)
            left = driver.cancel(live, by="interrupt")
            driver.backfill()
            if left:
                progress.log("still in squeue after scancel: "
                             + ", ".join(f"job {j.id} ({j.state})" for j in left))
                code = exits.FAILED
            else:
                progress.log(f"cancelled {len(live)} job(s); none left in squeue")
                code = exits.INTERRUPTED
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
def is_slurm_run(run_dir: Path) -> bool:
    """A run dir whose plan.json has Slurm jobs (its `cluster` record), or was compiled for
    Slurm by an older specc. A plan.json that cannot be read leaves the driver's record to
    say so: `down` must still cancel the jobs."""
    from specc.plan import OLD_JOBS_FILE

    if (Path(run_dir) / OLD_JOBS_FILE).exists():
        return True
    try:
        return Plan.load(Path(run_dir) / "plan.json").cluster is not None
    except (OSError, ValueError):   # PlanError is a ValueError
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

    state = {}
    try:
        state = load_json(Path(run_dir) / "state.json", STATE_BYTES).get("servers") or {}
    except (OSError, ValueError, AttributeError):
        pass
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
