"""The Slurm driver's job tracker: every job of a plan's `cluster` record as a pure state
machine, built like readiness.Startup.

`Tracker` is fed events -- sbatch's answer, squeue's rows (a job's absence included),
sacct's verdicts, the node entry's state file, the points whose rows were merged, a clock
tick, an interrupt -- and returns actions: submit, ask squeue or sacct, scancel, read a
job's node files, show progress, write a server's state, fail points with a reason. It
runs no command, reads no file and no clock, so it is tested on a fake clock
(tests/test_jobtracker.py); `specc.run.slurm` feeds it with the real clock and performs
what it returns. Its states and events are docs/slurm-tracker.md's tables.

Times are epoch seconds (`submitted_at` outlives the driver in slurm/jobs.json, and the
pending deadline of a job an earlier driver submitted counts from it).
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: Job states after which nothing more happens to a job.
TERMINAL = frozenset({"COMPLETED", "FAILED", "TIMEOUT", "NODE_FAIL", "CANCELLED",
                      "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL", "DEADLINE", "REVOKED",
                      "SPECIAL_EXIT"})
#: States in which the job is on its nodes and its node entry writes its files.
ON_NODES = frozenset({"RUNNING", "CONFIGURING", "COMPLETING"})
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
SUBMIT_LIMITS = ("MaxSubmit", "SubmitJob", "JobLimit", "Resource temporarily unavailable")
#: Who may stop a job without its points failing (they are left for a rerun).
STOPPED_BY_US = frozenset({"interrupt", "fail_fast", "down"})
#: Seconds a running job gets to tear its servers down after SIGTERM before scancel kills it.
CANCEL_GRACE_S = 15.0
#: Seconds after that kill before the tracker stops waiting for squeue to let the job go.
KILL_WAIT_S = 10.0
#: The node entry's server fields copied into state.json.
NODE_FIELDS = ("status", "phase", "phase_started_at", "pid", "host", "port", "started_at",
               "ready_at", "reason", "point", "gpus", "log", "stop", "stopped_at")


# -- what it is fed --------------------------------------------------------------------------
@dataclass(frozen=True)
class JobSpec:
    name: str
    servers: tuple[str, ...]
    points: tuple[str, ...]   # benchmark ids of its servers' points
    time_limit: str = ""


@dataclass(frozen=True)
class Row:
    """One squeue line of the user's jobs."""
    id: str
    state: str
    nodes: str = ""
    reason: str = ""
    name: str = ""
    comment: str = ""


# -- actions ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Submit:
    """sbatch the job; feed `submitted` or `refused`."""
    job: str


@dataclass(frozen=True)
class AskQueue:
    """squeue for these ids; read the jobs' node files first (as ReadNode), then feed `squeue`
    (or `queue_failed`)."""
    ids: tuple[str, ...]
    jobs: tuple[str, ...]


@dataclass(frozen=True)
class AskAcct:
    """sacct for these ids; feed `acct` ({} when sacct cannot answer)."""
    ids: tuple[str, ...]


@dataclass(frozen=True)
class Cancel:
    """scancel the ids; `signal` ("TERM"): only that signal, to the batch step."""
    ids: tuple[str, ...]
    signal: str | None = None


@dataclass(frozen=True)
class ReadNode:
    """Read the job's node files: its state file (feed `node`), its servers' rows (merge
    them; feed `points_finished`)."""
    job: str


@dataclass(frozen=True)
class Log:
    text: str


@dataclass(frozen=True)
class Phase:
    server: str
    phase: str
    since: float | None
    detail: str = ""


@dataclass(frozen=True)
class PointStarted:
    point: str
    server: str


@dataclass(frozen=True)
class ServerState:
    """Fields of the server's state.json entry; `fresh`: a new entry (a submission)."""
    server: str
    fields: dict
    fresh: bool = False


@dataclass(frozen=True)
class FailPoints:
    """The job ended without finishing `points`: each gets a failed row with the reason,
    `servers` are marked failed with it, and every server of the job shows "failed".
    `log_tail`: the reason ends with the job log's last lines (the actor reads them)."""
    job: str
    job_id: str | None
    verdict: str
    reason: str
    points: tuple[str, ...]
    servers: tuple[str, ...]
    all_servers: tuple[str, ...]
    at: float
    log_tail: bool = False


# -- a job -----------------------------------------------------------------------------------
@dataclass
class Job:
    spec: JobSpec
    id: str | None = None
    state: str = "UNSUBMITTED"
    nodes: str = ""
    reason: str = ""
    submitted_at: float | None = None
    started_at: float | None = None
    ended_at: float | None = None   # when the driver saw it end
    cancelled_by: str | None = None
    done: bool = False              # settled: rows merged, unfinished points failed or left
    exit_code: str | None = None
    adopting: bool = False          # an earlier driver's job, not yet seen in squeue
    adopted: bool = False           # an earlier driver's job, followed
    node_ended: bool = False        # its node entry wrote its end (finished_at)
    node_stopped_by: str | None = None
    acct_for: str | None = None     # sacct asked: squeue's verdict ("" if squeue lost it)
    stopping: str | None = None     # scancel sent by us: who; followed until squeue lets go
    stop_deadline: float = 0.0
    killed: bool = False
    seen: dict = field(default_factory=dict)   # per server: the phase and point last shown

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def live(self) -> bool:
        """Submitted and still followed in squeue."""
        return self.id is not None and (not self.done or self.stopping is not None)

    def record(self) -> dict:
        """Its slurm/jobs.json entry (read back by a rerun, `specc status` and `down`)."""
        return {"id": self.id, "state": self.state, "nodes": self.nodes, "reason": self.reason,
                "servers": list(self.spec.servers), "submitted_at": self.submitted_at,
                "started_at": self.started_at, "ended_at": self.ended_at,
                "cancelled_by": self.cancelled_by, "done": self.done,
                "exit_code": self.exit_code}


class Tracker:
    """Every job of one run, from submission to settled."""

    def __init__(self, jobs, *, comment: str, poll_s: float, pending_timeout_s=None,
                 fail_fast: bool = False, finished=(), servers=None):
        self.jobs = [Job(spec) for spec in jobs]
        self.by_name = {j.name: j for j in self.jobs}
        self.comment = comment
        self.poll_s = poll_s
        self.pending_timeout_s = pending_timeout_s
        self.fail_fast = fail_fast
        self.finished: set[str] = set(finished)   # points with a row in results.jsonl
        #: per server: what state.json says (status, phase, reason), kept as we write it
        self.servers: dict[str, dict] = {k: dict(v) for k, v in (servers or {}).items()}
        self.failed_servers: dict[str, str] = {}
        self.to_submit: list[str] = []    # jobs to submit, in order
        self.submitting = False       # a Submit is out, its answer not yet fed
        self.blocked = False          # a submit limit: wait until one of ours ends
        self.last_ask: float | None = None
        self.interrupted: str | None = None   # the signal's name
        self.left: list[Job] = []     # still in squeue after the kill: given up on
        self.interrupt_count = 0

    # -- what the runner asks -----------------------------------------------------------------
    def job(self, name: str) -> Job:
        return self.by_name[name]

    def live(self) -> list[Job]:
        return [j for j in self.jobs if j.live]

    @property
    def idle(self) -> bool:
        """Nothing in squeue to follow and nothing to submit: the run (or search step) ended."""
        return not self.live() and not (self.to_submit and self.interrupted is None)

    def unfinished(self, job: Job) -> list[str]:
        return [p for p in job.spec.points if p not in self.finished]

    def records(self) -> dict:
        return {j.name: j.record() for j in self.jobs}

    # -- events -------------------------------------------------------------------------------
    def adopt(self, now: float, earlier: dict) -> list:
        """slurm/jobs.json of an earlier driver on this run dir: its settled jobs kept as they
        are, the rest asked about (live ones are followed, ended ones settled)."""
        if not isinstance(earlier, dict) or earlier.get("comment") != self.comment:
            return []
        records = earlier["jobs"] if isinstance(earlier.get("jobs"), dict) else {}
        asked = []
        for job in self.jobs:
            rec = records.get(job.name)
            if not isinstance(rec, dict) or not rec.get("id"):
                continue
            if rec.get("done") and self.unfinished(job):
                continue   # settled with points left (stopped by us): submitted again
            job.id, job.state = str(rec["id"]), rec.get("state") or "PENDING"
            job.nodes = rec.get("nodes") or ""
            job.submitted_at, job.started_at = rec.get("submitted_at"), rec.get("started_at")
            job.cancelled_by, job.exit_code = rec.get("cancelled_by"), rec.get("exit_code")
            if rec.get("done"):   # ended with every point finished: the record it is
                job.done, job.ended_at = True, rec.get("ended_at")
            else:
                job.adopting = True
                asked.append(job)
        return [self._ask_queue(now, asked)] if asked else []

    def following(self) -> list[str]:
        """Jobs of an earlier driver still followed (after `adopt`'s answers)."""
        return [j.name for j in self.jobs if j.live and j.adopted]

    def start(self, now: float, order) -> list:
        """Submit these jobs, in this order (longest first), as Slurm takes them."""
        self.to_submit = [n for n in order if n in self.by_name]
        return self._pump(now)

    def enqueue(self, now: float, name: str) -> list:
        """One more job to submit (search=tune's next server)."""
        if self.interrupted is not None or (self.fail_fast and self.failed_servers):
            return []
        self.to_submit.append(name)
        return self._pump(now)

    def submitted(self, now: float, name: str, job_id: str) -> list:
        """sbatch took the job."""
        job = self.by_name[name]
        self.submitting = False
        if name in self.to_submit:
            self.to_submit.remove(name)
        job.id, job.state, job.submitted_at, job.reason = job_id, "PENDING", now, ""
        job.cancelled_by, job.done, job.started_at, job.ended_at = None, False, None, None
        job.exit_code, job.node_ended, job.node_stopped_by = None, False, None
        job.acct_for, job.stopping, job.killed, job.adopting = None, None, False, False
        job.adopted = False
        job.seen.clear()
        out: list = []
        for sid in job.spec.servers:
            out.append(ServerState(sid, {"status": "pending", "job": name, "job_id": job_id},
                                   fresh=True))
            self.servers[sid] = {"status": "pending"}
            out.append(Phase(sid, "pending", now, f"job {job_id}"))
        return out + self._pump(now)

    def refused(self, now: float, name: str, message: str) -> list:
        """sbatch did not take the job: a submit limit waits for one of ours to end; any
        other refusal is final."""
        job = self.by_name[name]
        self.submitting = False
        if any(k in message for k in SUBMIT_LIMITS) and self.live():
            self.blocked = True
            return [Log(f"{name}: {message}; submitting again when a job ends")]
        if name in self.to_submit:
            self.to_submit.remove(name)
        return self._end(now, job, "REFUSED", f"sbatch refused the job: {message}") \
            + self._pump(now)

    def queue_failed(self, now: float, message: str) -> list:
        """squeue did not answer: asked again at the next poll."""
        return [Log(f"squeue: {message}; trying again")]

    def squeue(self, now: float, rows: dict) -> list:
        """squeue's rows ({id: Row}) for the jobs asked about; a job without one (or whose
        row is another job's: a reused id) has left squeue, and sacct is asked."""
        out: list = []
        acct = []
        for job in self.live():
            row = rows.get(job.id)
            if row is not None and (row.name != job.name or row.comment != self.comment):
                row = None   # the id was reused: not our job
            if job.stopping is not None:
                if row is not None and row.state not in TERMINAL:
                    job.state, job.nodes = row.state, row.nodes
                else:
                    out += self._stopped(now, job, row.state if row else "CANCELLED")
                continue
            if job.acct_for is not None:
                continue
            if row is None:
                job.acct_for = ""
                acct.append(job)
            elif row.state in TERMINAL:
                if row.state == "FAILED" and job.exit_code is None:
                    job.nodes = row.nodes or job.nodes
                    job.acct_for = row.state   # sacct knows its exit code
                    acct.append(job)
                else:
                    job.nodes = row.nodes or job.nodes
                    out += self._finish(now, job, row.state)
            else:
                if job.adopting:
                    job.adopting, job.adopted = False, True
                    out.append(Log(f"following job {job.id} {job.name} ({row.state}), "
                                   "submitted by an earlier driver"))
                    job.state, job.reason, job.started_at = "?", "", None   # shown afresh
                out += self._update(now, job, row)
        if acct:
            out.append(AskAcct(tuple(j.id for j in acct)))  # type: ignore[misc]  # submitted: an id each
        return out + self._after(now)

    def acct(self, now: float, answers: dict) -> list:
        """sacct's {id: (state, exit code)} for the jobs asked about ({} if it cannot answer).
        squeue's verdict, when it had one, stands; sacct adds the exit code."""
        out: list = []
        for job in self.jobs:
            if job.acct_for is None or job.done:
                continue
            state, code = answers.get(job.id) or (None, None)
            verdict = job.acct_for or state or "UNKNOWN"
            job.acct_for, job.adopting = None, False
            if code is not None:
                job.exit_code = code
            out += self._finish(now, job, verdict)
        return out + self._after(now)

    def node(self, now: float, name: str, data) -> list:
        """The node entry's state file (slurm/state/<job>.json), {} when there is none."""
        job = self.by_name[name]
        data = data if isinstance(data, dict) else {}
        ex = data.get("executor") if isinstance(data.get("executor"), dict) else {}
        if job.id and ex.get("job_id") not in (None, job.id):
            return []   # an earlier attempt's file: not this job's yet
        if job.id and ex.get("job_id") == job.id and ex.get("finished_at"):
            job.node_ended = True
            job.node_stopped_by = ex.get("stopped_by")
        servers = data.get("servers") if isinstance(data.get("servers"), dict) else {}
        out: list = []
        for sid in job.spec.servers:
            node = servers.get(sid)
            if isinstance(node, dict) and node:
                out += self._node_server(now, job, sid, node)
        return out + self._after(now)

    def points_finished(self, ids) -> None:
        """Rows merged into results.jsonl for these points."""
        self.finished.update(ids)

    def reopen(self, ids) -> None:
        """These points' failed rows were dropped (--retry-failed): to run again."""
        self.finished.difference_update(ids)

    def tick(self, now: float) -> list:
        """Time passed: read the running jobs' files, kill what outlived its grace. (Then
        `poll`: what the files said decides whether squeue is asked now.)"""
        out: list = [ReadNode(j.name) for j in self.live()
                     if j.state not in ("PENDING", "UNSUBMITTED")]
        return out + self._deadlines(now)

    def poll(self, now: float) -> list:
        """Ask squeue when due: every `poll_s`, every tick while a job's node entry has ended
        or a job is being stopped; submit what waits."""
        live = self.live()
        urgent = any(j.node_ended or j.stopping is not None for j in live)
        due = self.last_ask is None or now < self.last_ask or now - self.last_ask >= self.poll_s
        out = [self._ask_queue(now, live)] if live and (urgent or due) else []
        return out + self._pump(now)

    def interrupt(self, now: float, signame: str) -> list:
        """Ctrl-C or SIGTERM: nothing more is submitted; running jobs get SIGTERM in their
        batch step, pending ones are scancelled, and each is followed until squeue lets it go
        (killed after CANCEL_GRACE_S). Their unfinished points are left for a rerun."""
        if self.interrupted is not None:
            return []
        self.interrupted = signame
        self.to_submit.clear()
        live = [j for j in self.live() if j.stopping is None]
        self.interrupt_count = len(self.live())
        out: list = [Log(f"{signame}: cancelling {self.interrupt_count} job(s), "
                         "keeping finished results")]
        out += self._stop(now, live, by="interrupt")
        out.append(self._ask_queue(now, self.live()) if self.live() else Log(
            "cancelled 0 job(s); none left in squeue"))
        return out

    # -- internals ----------------------------------------------------------------------------
    def _ask_queue(self, now: float, jobs) -> AskQueue:
        self.last_ask = now
        return AskQueue(tuple(j.id for j in jobs), tuple(j.name for j in jobs))

    def _pump(self, now: float) -> list:
        """Submit the next job, unless one is out, a limit waits, or the run is stopping."""
        if self.submitting or self.blocked or not self.to_submit or self.interrupted is not None:
            return []
        self.submitting = True
        return [Submit(self.to_submit[0])]

    def _after(self, now: float) -> list:
        """fail_fast: a failed server stops every job (their other points left for a rerun)."""
        if not (self.fail_fast and self.failed_servers) or self.interrupted is not None:
            return []
        self.to_submit = [n for n in self.to_submit if self.submitting and n == self.to_submit[0]]
        live = [j for j in self.live() if j.stopping is None and not j.done]
        return self._stop(now, live, by="fail_fast") if live else []

    def _update(self, now: float, job: Job, row: Row) -> list:
        """squeue says the job is still there: pending (why), running (where), suspended."""
        out: list = []
        was = job.state
        job.state, job.nodes = row.state, row.nodes
        if row.state == "PENDING":
            if row.reason != job.reason:
                job.reason = row.reason
                out.append(Log(f"job {job.id} {job.name}: pending ({row.reason})"))
                for sid in job.spec.servers:
                    out.append(Phase(sid, "pending", job.submitted_at,
                                     f"job {job.id}: {row.reason}"))
                    out.append(self._server(sid, status="pending", job_state="PENDING",
                                            reason=row.reason))
            limit = self.pending_timeout_s
            if limit and job.submitted_at is not None and now - job.submitted_at > limit:
                job.cancelled_by = "pending_timeout"
                out += self._end(now, job, "PENDING",
                                 f"slurm job {job.id} still pending after {limit:g} s "
                                 f"({row.reason}); cancelled (raise cluster.pending_timeout_s "
                                 "to wait longer)")
                out += self._stop(now, [job], by="pending_timeout")
        elif row.state in ON_NODES and job.started_at is None:
            job.started_at, job.reason = now, ""
            out.append(Log(f"job {job.id} {job.name}: running on {row.nodes}"))
            for sid in job.spec.servers:
                out.append(Phase(sid, "running", now, f"job {job.id} on {row.nodes}"))
                out.append(self._server(sid, status="running", job_state=row.state,
                                        nodes=row.nodes, reason=None))
        elif row.state == "SUSPENDED" and was != "SUSPENDED":
            out.append(Log(f"job {job.id} {job.name}: suspended on {row.nodes or '-'} "
                           "(scontrol suspend); following it"))
        return out

    def _node_server(self, now: float, job: Job, sid: str, node: dict) -> list:
        """One server's entry in the node entry's state file -> progress and state.json."""
        out: list = []
        seen = job.seen.setdefault(sid, {})
        status, phase = node.get("status"), node.get("phase")
        shown = ("ready" if status in ("ready", "benchmarking") else
                 status if status in ("failed", "stopped") else phase or "launch")
        if not isinstance(shown, str):
            shown = "launch"
        since = (node.get("ready_at") if shown == "ready" else
                 node.get("phase_started_at") or node.get("started_at"))
        since = since if isinstance(since, (int, float)) else None
        if seen.get("shown") != shown:
            seen["shown"] = shown
            why = node.get("reason") if shown == "failed" else ""
            out.append(Phase(sid, shown, since, why if isinstance(why, str) else ""))
        point = node.get("point") if status == "benchmarking" else None
        if isinstance(point, str) and seen.get("point") != point and point in job.spec.points \
                and point not in self.finished:
            seen["point"] = point
            out.append(PointStarted(point, sid))
        if status == "failed" and sid not in self.failed_servers:
            reason = node.get("reason")
            self.failed_servers[sid] = reason if isinstance(reason, str) and reason else "failed"
        keep = {k: node.get(k) for k in NODE_FIELDS if k in node}
        mine = self.servers.get(sid, {})
        if any(mine.get(k) != v for k, v in keep.items()):
            out.append(self._server(sid, **keep))
        return out

    def _server(self, sid: str, **fields) -> ServerState:
        entry = self.servers.setdefault(sid, {})
        entry.update(fields)
        return ServerState(sid, fields)

    def _finish(self, now: float, job: Job, verdict: str) -> list:
        """The job ended (Slurm's verdict, or UNKNOWN: neither squeue nor sacct knows it):
        settled, its unfinished points failed with the verdict unless we stopped it."""
        job.state, job.ended_at, job.adopting = verdict, job.ended_at or now, False
        self.blocked = False   # one of ours ended: a submit limit may take the next
        if job.done:
            return self._pump(now)
        if job.cancelled_by in STOPPED_BY_US:
            return self._left_for_rerun(job, verdict) + self._pump(now)
        if verdict == "UNKNOWN":   # the node entry's own record decides
            if not job.node_ended:
                return self._end(now, job, "GONE", (
                    f"slurm job {job.id} is gone from squeue and sacct has no record of it; "
                    "its node entry never wrote its end (node lost?)")) + self._pump(now)
            if job.node_stopped_by:
                return self._end(now, job, "GONE", (
                    f"slurm job {job.id} was stopped ({job.node_stopped_by}) and is gone "
                    "from squeue; sacct has no record of it")) + self._pump(now)
            verdict = job.state = "COMPLETED"
        if verdict == "COMPLETED" and not self.unfinished(job):
            job.done = True
            out: list = [Log(f"job {job.id} {job.name}: completed")]
            for sid in job.spec.servers:
                if self.servers.get(sid, {}).get("status") not in ("failed", "stopped"):
                    out.append(self._server(sid, status="stopped", job_state=verdict))
            return out + self._pump(now)
        return self._end(now, job, verdict, self._reason(job, verdict),
                         log_tail=verdict in ("FAILED", "COMPLETED")) + self._pump(now)

    def _reason(self, job: Job, verdict: str) -> str:
        what = MEANING.get(verdict, "it ended without finishing")
        if verdict == "COMPLETED":
            what = "it exited without finishing every point"
        where = f" on {job.nodes}" if job.nodes else ""
        text = f"slurm job {job.id} {verdict}{where}: {what}"
        if verdict == "TIMEOUT":
            text += f" ({job.spec.time_limit}; raise cluster.time_limit)"
        if job.exit_code and verdict == "FAILED":
            text += f" (exit code {job.exit_code})"
        phases = {self.servers.get(s, {}).get("phase") for s in job.spec.servers} - {None}
        if phases:
            text += f"; last phase {', '.join(sorted(map(str, phases)))}"
        return text

    def _end(self, now: float, job: Job, verdict: str, reason: str, *,
             log_tail: bool = False) -> list:
        """Fail what the job left unfinished, with the reason."""
        job.state, job.done, job.reason = verdict, True, reason
        job.ended_at = job.ended_at or now
        left = tuple(self.unfinished(job))
        self.finished.update(left)
        mark = []
        for sid in job.spec.servers:
            entry = self.servers.setdefault(sid, {})
            if entry.get("status") != "failed" or not entry.get("reason"):
                mark.append(sid)
                entry.update(status="failed", reason=reason, job_state=verdict)
            self.failed_servers.setdefault(sid, reason)
        return [FailPoints(job.name, job.id, verdict, reason, left, tuple(mark),
                           job.spec.servers, now, log_tail)]

    def _left_for_rerun(self, job: Job, verdict: str) -> list:
        """We stopped it: settled, its servers stopped, its unfinished points left for a rerun."""
        job.done = True
        out = []
        for sid in job.spec.servers:
            if self.servers.get(sid, {}).get("status") != "failed":
                out.append(self._server(sid, status="stopped", job_state=verdict,
                                        stopped_by=job.cancelled_by))
        return out

    def _stop(self, now: float, jobs, *, by: str) -> list:
        """scancel: pending jobs outright, running ones SIGTERM in their batch step (the node
        entry tears its servers down and leaves the point in flight without a row)."""
        jobs = [j for j in jobs if j.id and j.state not in TERMINAL]
        for j in jobs:
            j.cancelled_by = j.cancelled_by or by
            j.stopping, j.stop_deadline, j.killed = by, now + CANCEL_GRACE_S, False
        pending = tuple(j.id for j in jobs if j.state in ("PENDING", "UNSUBMITTED"))
        running = tuple(j.id for j in jobs if j.state not in ("PENDING", "UNSUBMITTED"))
        out: list = []
        if pending:
            out.append(Cancel(pending))
        if running:
            out.append(Cancel(running, signal="TERM"))
        return out

    def _stopped(self, now: float, job: Job, state: str) -> list:
        """A job we stopped has left squeue (or ended there)."""
        job.stopping, job.state = None, state
        job.ended_at = job.ended_at or now
        self.blocked = False
        out = [] if job.done else self._left_for_rerun(job, state)
        return out + self._interrupt_over(now) + self._pump(now)

    def _deadlines(self, now: float) -> list:
        """Jobs we stopped that outlived the grace: scancel outright; then give up on them."""
        out: list = []
        late = [j for j in self.live() if j.stopping is not None and now > j.stop_deadline]
        kill = [j for j in late if not j.killed]
        if kill:
            for j in kill:
                j.killed, j.stop_deadline = True, now + KILL_WAIT_S
            out.append(Cancel(tuple(j.id for j in kill)))  # type: ignore[misc]  # submitted: an id each
        for j in late:
            if j in kill:
                continue
            j.stopping, j.ended_at = None, j.ended_at or now
            self.blocked = False
            self.left.append(j)
            if not j.done:
                out += self._left_for_rerun(j, j.state)
            if self.interrupted is None:
                out.append(Log(f"job {j.id} {j.name}: still {j.state} in squeue after scancel; "
                               "no longer followed"))
            out += self._interrupt_over(now)
        return out

    def _interrupt_over(self, now: float) -> list:
        """The interrupt's last job let go: say how it ended."""
        if self.interrupted is None or self.live():
            return []
        if self.left:
            return [Log("still in squeue after scancel: "
                        + ", ".join(f"job {j.id} ({j.state})" for j in self.left))]
        return [Log(f"cancelled {self.interrupt_count} job(s); none left in squeue")]
