"""The executor: runs exactly the reviewed plan.json. All side effects live here.

Per wave, its servers start at once (disjoint GPUs and ports); each goes
launch -> readiness -> its benchmark points -> teardown. Results are appended
as they finish; a rerun into the same run dir skips finished points; Ctrl-C
or SIGTERM tears down everything started; state.json lets the next run or
`inv down` stop what a SIGKILLed executor left.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

from specc import exits
from specc.files import RecordWriteError, UnreadableFile
from specc.run import interrupts, lifecycle, ownership, rundir
from specc.run.outcome import backfill_speedups, exit_code, point_summary, remember
from specc.run.point import failed_row, run_point, with_speedup
from specc.plan import Plan, ReleaseProbe, Server
from specc.run.progress import SweepProgress
from specc.run.readiness import wait_ready
from specc.results import ResultLog
from specc.rundir import accept_edited
from specc.state import RunState, StateError, corrupt_line


#: How often a running benchmark checks that its server process is still alive.
WATCH_S = 0.1


class PlanRefused(Exception):
    """The plan cannot be run as written (it holds errors)."""


class Executor:
    def __init__(self, plan: Plan, run_dir: Path, *, ctx=None, progress: SweepProgress | None = None,
                 grace_s: float = 10.0, results: ResultLog | None = None,
                 state: RunState | None = None):
        """`results`/`state`: where rows and server states go (default: the run dir's
        results.jsonl and state.json; a Slurm job passes its own files)."""
        if plan.errors:
            raise PlanRefused(f"the plan holds {len(plan.errors)} error(s): "
                              + "; ".join(d.message for d in plan.errors))
        import invoke

        self.plan = plan
        self.run_dir = Path(run_dir)
        self.ctx = ctx if ctx is not None else invoke.Context()
        self.results = results if results is not None else ResultLog(self.run_dir / "results.jsonl")
        self.state = state if state is not None else RunState(self.run_dir / "state.json")
        self.running: dict[str, lifecycle.Running] = {}
        self.failed_servers: dict[str, str] = {}
        self.grace_s = grace_s
        self.stop_all = False
        self.write_error: str | None = None   # the run dir stopped taking writes
        #: search=tune with an SLO: awaited with (server, running) after a server's points,
        #: before its teardown, to add points to the server that is up (specc.run.bracket)
        self.after_points = None
        self.progress = progress or SweepProgress(len(plan.benchmarks))
        for server in plan.servers:   # what `secrets.scrub` blanks in every file and line
            lifecycle.secret_values(server)
            lifecycle.auth_headers(server)

    # -- servers ----------------------------------------------------------------
    def _preflight(self, server: Server) -> str | None:
        missing = lifecycle.secrets_problem(server)
        if missing:
            return missing
        if lifecycle.port_in_use(server.host, server.port):
            return (f"port {server.port} is already in use by {lifecycle.port_holder(server.port)}"
                    f"; stop it or change engine.base_port")
        meet = server.rendezvous_port   # a multi-node server's ranks meet here, on this (the head) node
        if meet and lifecycle.port_in_use(server.host, meet):
            return (f"rendezvous port {meet} (where the server's nodes meet) is already in use "
                    f"by {lifecycle.port_holder(meet)}; stop it or change engine.base_port")
        if not self.plan.engine_info.uses_gpus or not server.gpus:
            return None   # e.g. the simulator, or a server on the CPU: no GPUs to check
        problems, note = lifecycle.gpu_holders(self.ctx, server.gpus)
        if note:
            self.progress.log(f"{server.id}: {note}")
        if problems:
            return "; ".join(problems) + " (free them, or `specc down` a previous run)"
        return None

    def _fail_points(self, server: Server, reason: str) -> None:
        """The server's points that did not run get a failed row each; the progress counts
        them out (skipped: they will not run)."""
        skipped = []
        for b in self.plan.benchmarks_of(server.id):
            if not self.results.finished(b.id):
                if not self._record(failed_row(b, reason)):
                    break
                skipped.append(b.id)
        self.progress.skip(skipped, reason[:120], server.label)

    # -- the run dir ----------------------------------------------------------------
    def _record(self, row: dict) -> bool:
        """Append a finished row; False (and the sweep stops) when the run dir refuses it."""
        try:
            self.results.append(row)
            return True
        except OSError as e:
            self._write_failed(f"cannot append to {self.results.path}: {e.strerror or e}")
            return False

    def _writes_ok(self) -> bool:
        """False once state.json or results.jsonl could not be written (full disk, read-only):
        nothing more is launched or measured, since none of it could be recorded."""
        if self.state.write_error and not self.write_error:
            self._write_failed(self.state.write_error)
        return self.write_error is None

    def _write_failed(self, why: str) -> None:
        if self.write_error is None:
            self.write_error = why
            self.progress.log(f"{why}: stopping the sweep")
        self.stop_all = True

    def _stop(self, server: Server, status: str, **fields) -> None:
        running = self.running.pop(server.id, None)
        if running is None:
            return
        how = lifecycle.stop(running, grace_s=self.grace_s)
        self._stopped(server, status, how, exit_code=running.proc.returncode, **fields)

    async def _stop_async(self, server: Server, status: str, **fields) -> None:
        """_stop in a worker thread: a teardown (SIGTERM, grace, port check) must not freeze
        the event loop, where the other packed servers' readiness and benchmarks run."""
        running = self.running.get(server.id)
        if running is None:
            return
        how = await asyncio.to_thread(lifecycle.stop, running, grace_s=self.grace_s)
        if self.running.pop(server.id, None) is not None:
            self._stopped(server, status, how, exit_code=running.proc.returncode, **fields)

    def _stopped(self, server: Server, status: str, how: str, **fields) -> None:
        self.state.update(server.id, status=status, stopped_at=time.time(), stop=how, **fields)
        self.progress.server_phase(server.id, "stopped" if status != "failed" else "failed",
                                   time.time(), how)

    async def run_server(self, server: Server, after_points=None) -> None:
        """Start the server, measure its unfinished points, tear it down. `after_points`
        (else the executor's): awaited with (server, running) before the teardown; with
        one, a server without points to measure is still started for it."""
        after_points = after_points or self.after_points
        todo = [b for b in self.plan.benchmarks_of(server.id) if not self.results.finished(b.id)]
        if (not todo and after_points is None) or self.stop_all:
            return
        reason = self._preflight(server)
        if reason:
            self.state.start(server.id, status="failed", reason=reason, host=server.host,
                             port=server.port, failed_at=time.time())
            self.progress.server_phase(server.id, "failed", time.time(), reason)
            self.failed_servers[server.id] = reason
            self._fail_points(server, f"server failed preflight: {reason}")
            return
        if not self._writes_ok():
            return
        running = lifecycle.launch(server, self.run_dir)
        self.running[server.id] = running
        self.state.start(server.id, pid=running.pid, pgid=running.pid, host=server.host,
                         port=server.port, started_at=running.started_at,
                         create_time=ownership.create_time(running.pid), ready_at=None,
                         status="starting", log=server.log, gpus=list(server.gpus))
        verified: list = []   # the listener was found to be this server's: nothing can take it now

        def listener_check() -> str | None:
            """Readiness asks on every answer until the listener proves to be the server."""
            if verified:
                return None
            kind, who = ownership.listener(server.host, server.port, running.pid)
            if kind == "ours":
                verified.append(True)
            return f"port {server.port} taken after preflight by {who}" if who else None

        def on_phase(phase, since, detail=""):
            self.state.update(server.id, phase=phase, phase_started_at=since)
            self.progress.server_phase(server.id, phase, since, detail)

        outcome = await wait_ready(running, server.readiness, on_phase=on_phase,
                                   listener_check=listener_check)
        if not outcome.ok:
            reason = f"{outcome.reason}"
            taken = await asyncio.to_thread(ownership.taken, server.host, server.port,
                                            running.pid)
            if taken and not reason.startswith(taken):
                reason = f"{taken}; then: {reason}"   # why it could not bind
            self.failed_servers[server.id] = reason
            self.state.update(server.id, failed_at=time.time())
            self.progress.log(f"{server.id} failed: {reason}\n--- last log lines ---\n"
                              f"{outcome.last_lines}")
            await self._stop_async(server, "failed", reason=reason, phase=outcome.phase)
            self._fail_points(server, f"server failed: {reason}")
            if self.plan.fail_fast:
                self.stop_all = True
            return
        self.state.update(server.id, status="ready", ready_at=outcome.ready_at,
                          timeline=outcome.timeline)
        release = await _reported_release(server, self.plan.engine_info.release_probe)
        if release:   # the run manifest puts it next to the pinned release
            self.state.update(server.id, engine_release=release)
        self.progress.server_phase(server.id, "ready", outcome.ready_at)
        warned_flush = False
        try:
            for bench in todo:
                if self.stop_all:
                    break
                code = running.exit_code()
                if code is not None:
                    self._fail_points(server, f"server died earlier (exit code {code})")
                    break
                if not self._writes_ok():
                    break
                taken = await asyncio.to_thread(ownership.taken, server.host, server.port,
                                                running.pid)
                if taken:   # never measure another process under this label
                    self.failed_servers[server.id] = taken
                    self._fail_points(server, f"server failed: {taken}")
                    await self._stop_async(server, "failed", reason=taken)
                    break
                self.state.update(server.id, status="benchmarking", point=bench.id)
                self.progress.point_started(bench.id, self.plan.point_label(bench))
                await self._sample_machine(f"before {bench.id}")
                row = await self._watched_point(running, bench)
                await self._sample_machine(f"after {bench.id}")
                if row is None:   # its records could not be written: the sweep stops
                    break
                if (row.get("cache_flush") or "").startswith("not flushed") and not warned_flush:
                    warned_flush = True   # once per server: every point says it in its row
                    self.progress.log(f"{server.id}: prefix cache {row['cache_flush']}")
                baseline = self.results.get(bench.baseline) if bench.baseline else None
                row = with_speedup(row, baseline)
                if not self._record(row):
                    break
                self._backfill_speedups()
                self.progress.point_finished(bench.id, row["status"], point_summary(row))
                if row.get("server_hung"):
                    self.failed_servers[server.id] = row["reason"]
                    self._fail_points(server, f"server hung earlier: {row['reason']}")
                    await self._stop_async(server, "failed", reason=row["reason"])
                    break
            else:
                if after_points is not None and not self.stop_all \
                        and server.id in self.running and running.exit_code() is None:
                    await after_points(server, running)
        except asyncio.CancelledError:   # Ctrl-C / SIGTERM mid-point: no row for it
            self._stop(server, "stopped", stopped_by="interrupt")
            raise
        finally:
            code = running.exit_code()
            if code is not None and server.id in self.running:
                why = _died(running, code, prefix="died")
                self.failed_servers.setdefault(server.id, why)
                await self._stop_async(server, "failed", reason=why)
            else:
                await self._stop_async(server, "stopped")

    async def extra_point(self, running, bench) -> dict | None:
        """One more point, not in the plan, on the server that is up (the SLO bracket's
        probes): watched as a planned one; its row is returned, not recorded (None: the
        server is gone or the sweep is stopping)."""
        if self.stop_all or not self._writes_ok() or running.exit_code() is not None:
            return None
        self.state.update(running.server.id, status="benchmarking", point=bench.id)
        row = await self._watched_point(running, bench)
        if row is not None and row.get("server_hung"):
            self.failed_servers[running.server.id] = row["reason"]
            await self._stop_async(running.server, "failed", reason=row["reason"])
            return None
        return row

    async def _sample_machine(self, when: str) -> None:
        """The machine's load, CPU steal and other GPU processes now, into machine.jsonl
        (the manifest's `machine`); in a thread: nvidia-smi may take a while."""
        from specc.run import machine

        ours = {r.pid for r in self.running.values()}
        await asyncio.to_thread(machine.record, self.run_dir, ours, when=when)

    def _backfill_speedups(self) -> None:
        """Packed servers finish in any order: a speculative point that finished before its
        baseline gets its speedup once the baseline is known (results.jsonl rewritten)."""
        why = backfill_speedups(self.plan, self.results)
        if why:
            self._write_failed(why)

    async def _watched_point(self, running, bench) -> dict | None:
        """The point, cancelled the moment its server dies or wedges (health can lie).

        Wedged = its log silent for the plan's `serving_silence_s` while the point
        runs: engines log every few decode steps while requests are in flight.
        """
        task = asyncio.ensure_future(run_point(running.server, bench, run_dir=self.run_dir,
                                               ctx=self.ctx))
        silence_s = running.server.readiness.serving_silence_s
        log_size, log_grew_at = _size(running.log_path), time.monotonic()
        try:
            while not task.done():
                code = running.exit_code()
                if code is not None:
                    return failed_row(bench, _died(running, code))
                size = _size(running.log_path)
                if size != log_size:
                    log_size, log_grew_at = size, time.monotonic()
                elif silence_s and time.monotonic() - log_grew_at > silence_s:
                    row = failed_row(bench, f"server hung: no log output for {silence_s:g} s "
                                            "while requests were in flight (its health may "
                                            "still answer 200)")
                    row["server_hung"] = True
                    return row
                await asyncio.wait({task}, timeout=WATCH_S)
        finally:   # also on Ctrl-C: no client task outlives its point
            if not task.done():
                task.cancel()
                try:
                    await task
                except (asyncio.CancelledError, Exception):
                    pass
        try:
            row = task.result()
        except RecordWriteError as e:   # not the point's fault: no row, a rerun measures it
            self._write_failed(e.strerror or str(e))
            return None
        except Exception as e:   # a bug in the client must not lose the sweep
            row = failed_row(bench, f"client error: {type(e).__name__}: {e}")
        if row["status"] != "ok":
            # the client saw errors first; if the process is gone, that is the cause to report
            for _ in range(10):
                code = running.exit_code()
                if code is not None:
                    row["reason"] = f"{_died(running, code)}: {row['reason']}"
                    break
                await asyncio.sleep(0.05)
        return row

    # -- the sweep ----------------------------------------------------------------
    async def run(self) -> int:
        for _, line in lifecycle.stop_leftovers(self.state, grace_s=self.grace_s):
            self.progress.log(f"left by an earlier run: {line}")
        self.state.set_executor(pid=os.getpid(), started_at=time.time())
        await self._sample_machine("start")
        plan_progress(self.plan, self.results, self.progress)
        chosen = None
        if self.plan.search is not None:   # search=tune: the search picks the servers
            from specc.run import tune

            chosen = await tune.run(self)
        else:
            for wave in self.plan.waves:
                if self.stop_all:
                    break
                await asyncio.gather(*(self.run_server(s) for s in wave))
        self._backfill_speedups()   # rows of an earlier run, too
        self._writes_ok()
        await self._sample_machine("end")
        return exit_code(self.plan, self.results, write_error=self.write_error, servers=chosen)

    def teardown_all(self) -> None:
        for sid in list(self.running):
            self._stop(self.running[sid].server, "stopped", stopped_by="interrupt")


def plan_progress(plan: Plan, results: ResultLog, progress: SweepProgress) -> None:
    """Tell the progress what this run will run: the points without a row (a point an
    earlier run finished is kept, not rerun, and not counted), on the servers that have
    such points; search=tune: at most the points of the `max_starts` largest of them, since
    the search starts only some."""
    earlier = [b for b in plan.benchmarks if results.finished(b.id)]
    per_server: dict[str, int] = {}
    for b in plan.benchmarks:
        if not results.finished(b.id):
            per_server[b.server] = per_server.get(b.server, 0) + 1
    points, servers, at_most = sum(per_server.values()), len(per_server), False
    if plan.search is not None:
        most = sorted(per_server.values(), reverse=True)[:plan.search.max_starts]
        at_most = sum(most) < points or plan.search.max_starts < len(per_server)
        points, servers = sum(most), len(most)
    note = ""
    if earlier:
        ok = sum(results.get(b.id).get("status") == "ok" for b in earlier)  # type: ignore[union-attr]  # finished: a row each
        note = (f"resuming: {len(earlier)} of {len(plan.benchmarks)} points finished in an "
                f"earlier run ({ok} ok, {len(earlier) - ok} failed) are kept, not rerun; "
                f"{'at most ' if at_most else ''}{points} to run")
    if at_most:
        note += ("; " if note else "") + (f"search=tune: at most {points} points on "
                                          f"{servers} servers (the search starts only some)")
    progress.plan(points, servers=servers, earlier=len(earlier), at_most=at_most, note=note)


def _size(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return -1


def execute_plan(plan: Plan, run_dir: Path, *, ctx=None, retry_failed: bool = False) -> int:
    """Run the plan into run_dir; print the results table. Exit code per CONTRACT.md.

    The run dir is locked for the whole run (one executor per run dir); every stop signal
    (SIGINT, SIGTERM, SIGHUP) is handled from here to the end, report included."""
    run_dir = Path(run_dir)
    stopper = interrupts.Stopper(run_dir / "executor.log")
    with interrupts.handled(stopper):
        try:
            with rundir.locked(run_dir):
                accept_edited(run_dir)   # what runs is what its report reads (specc.rundir)
                code = _execute_locked(plan, run_dir, ctx, retry_failed, stopper)
        except rundir.RunDirBusy as e:
            print(f"error RUN_DIR_BUSY: {e}", file=sys.stderr)
            return exits.BUSY
        except UnreadableFile as e:   # results.jsonl or state.json a FIFO, a device, huge
            print(f"error RUN_DIR_FILE: {e} (move it aside)", file=sys.stderr)
            return exits.INVALID
        except rundir.RunDirUnwritable as e:
            print(f"error RUN_DIR_UNWRITABLE: {e}; run the plan from a writable copy "
                  f"(mkdir NEW && cp {run_dir / 'plan.json'} NEW/ && specc run --plan "
                  "NEW/plan.json)", file=sys.stderr)
            return exits.INVALID
    if stopper.stopping and code != exits.INVALID:
        interrupted(run_dir)
        return exits.INTERRUPTED
    return code


def interrupted(run_dir: Path) -> None:
    """The last line of an interrupted run: the one command that carries it on."""
    print(f"interrupted: finished points are kept; resume with: "
          f"{rundir.resume_command(run_dir)}", file=sys.stderr)


def _engine_problems(plan: Plan, run_dir: Path) -> list[str]:
    """Before anything launches: the engine installed here is the release the plan was
    compiled for, and its own parser accepts every launch command (specc.run.doctor)."""
    if plan.errors:
        return []   # refused below, with the plan's own errors
    done = ResultLog(run_dir / "results.jsonl")
    if all(done.finished(b.id) for b in plan.benchmarks):
        return []   # nothing left to launch
    from specc.run.doctor import check_plan

    return [d.line() for d in check_plan(plan)]


#: Descriptors beside one connection per concurrent request: logs, pipes, servers' probes,
#: Python's own (a sweep at concurrency 1 measured ~40 here).
FD_HEADROOM = 256


def open_files_problem(plan: Plan) -> str | None:
    """The load generator holds one socket per concurrent request: the open-file limit must
    allow the plan's largest concurrency. The soft limit is raised to the hard one when that
    is enough; else the one line that refuses the run (nothing launched). Without this, a
    point at concurrency 3080 under `ulimit -n 1024` printed 3080 tracebacks."""
    import resource

    most = max((b.params.concurrency for b in plan.benchmarks), default=0)
    need = most + FD_HEADROOM
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= need:
        return None
    if hard == resource.RLIM_INFINITY or hard >= need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        return None
    return (f"error OPEN_FILES_LIMIT at benchmark.concurrency: concurrency {most} needs about "
            f"{need} open files and this shell allows {soft} (hard limit {hard}); nothing was "
            f"launched (fix: `ulimit -n {need}` where specc runs, raising the hard limit in "
            f"/etc/security/limits.conf if needed, or a concurrency up to {max(1, hard - FD_HEADROOM)})")


def _execute_locked(plan: Plan, run_dir: Path, ctx, retry_failed: bool,
                    stopper: interrupts.Stopper) -> int:
    if stopper.stopping:
        return exits.INTERRUPTED
    problem = open_files_problem(plan)
    if problem:
        print(problem, file=sys.stderr)
        return exits.INVALID
    plan, problems = lifecycle.on_visible_gpus(plan)
    if problems:
        for line in problems:
            print(line, file=sys.stderr)
        print("nothing was launched", file=sys.stderr)
        return exits.INVALID
    problems = _engine_problems(plan, run_dir)
    if problems:
        for line in problems:
            print(line, file=sys.stderr)
        print("nothing was launched: the installed engine would not run this plan as written "
              f"(`specc doctor --plan {run_dir / 'plan.json'}` checks it alone)", file=sys.stderr)
        return exits.INVALID
    try:
        if retry_failed:
            ResultLog(run_dir / "results.jsonl").drop_failed()
        with SweepProgress(len(plan.benchmarks)) as progress:
            ex = Executor(plan, run_dir, ctx=ctx, progress=progress)
            code = _run_with_signals(ex, stopper)
    except PlanRefused as e:
        print(f"error PLAN_HAS_ERRORS: {e}", file=sys.stderr)
        return exits.INVALID
    except StateError as e:
        print(corrupt_line(run_dir / "state.json", e), file=sys.stderr)
        return exits.INVALID
    except OSError as e:   # --retry-failed could not rewrite results.jsonl
        print(f"error RUN_DIR_WRITE: {e.strerror or e} ({e.filename or run_dir}); nothing "
              "was run", file=sys.stderr)
        return exits.FAILED
    if ex.write_error:
        print(f"error RUN_DIR_WRITE: {ex.write_error}; the sweep stopped and its servers are "
              "down; rows finished before are kept in results.jsonl; free space (or make "
              f"the run dir writable) and run `specc run --plan {run_dir / 'plan.json'}` "
              "again: finished points are skipped", file=sys.stderr)
    _finish_report(run_dir)
    return code


def _run_with_signals(ex: Executor, stopper: interrupts.Stopper) -> int:
    """The first stop signal cancels the sweep; teardown of every server follows, and
    later signals cannot cut it short (interrupts.Stopper). Finished results are kept."""
    loop = asyncio.new_event_loop()
    main = loop.create_task(ex.run())
    stopper.loop, stopper.on_first = loop, main.cancel
    if stopper.stopping:   # a signal before the sweep began
        main.cancel()
    try:
        return loop.run_until_complete(main)
    except asyncio.CancelledError:
        return exits.INTERRUPTED
    finally:
        stopper.on_first = None
        ex.teardown_all()
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()


async def _reported_release(server: Server, probe: ReleaseProbe | None) -> str | None:
    """The release the ready server says it runs (engine_info.release_probe), or None."""
    if not probe:
        return None
    import httpx

    from specc.net import base_url
    from specc.run.provenance import read_release

    async with httpx.AsyncClient(trust_env=False,
                                 headers=lifecycle.auth_headers(server)) as client:
        return await read_release(client, base_url(server.host, server.port), probe)


def _finish_report(run_dir: Path) -> None:
    """The run manifest (manifest.json), then report.md/.csv/.json/.html and the tables,
    then the run into the results index (`specc history`)."""
    from specc.report import render_terminal, write_report
    from specc.run.provenance import write_manifest

    write_manifest(run_dir)
    try:
        report = write_report(run_dir)
    except Exception as e:  # the results are on disk; the report can be rebuilt with `inv report`
        print(f"warning: report failed ({type(e).__name__}: {e}); results are in "
              f"{run_dir / 'results.jsonl'}", file=sys.stderr)
    else:
        print(render_terminal(report))
        print(f"report: {run_dir / 'report.md'}")
    db = remember(run_dir)
    if db:
        print(f"indexed: {db} (specc history)")


#: How much of a dead server's log is read for its cause.
DIED_LOG_TAIL = 256 * 1024


def _died(running, code: int, prefix: str = "server died") -> str:
    """Why a server's point failed when its process exited mid-run: the exit code, and the
    last exception its log names (an engine core killed under vLLM's API server leaves
    `EngineDeadError: EngineCore encountered an issue` and an API server exiting 0)."""
    from specc.files import read_text
    from specc.run.readiness import last_exception

    why = f"{prefix} mid-run (exit code {code})"
    try:
        exc = last_exception(read_text(running.log_path, DIED_LOG_TAIL, tail=True).splitlines())
    except (OSError, ValueError):
        exc = None
    return f"{why}; last exception logged: {exc[:600]}" if exc else why
