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
import signal
import sys
import time
from pathlib import Path

from specc import exits
from specc.run import lifecycle
from specc.run.point import failed_row, run_point, with_speedup
from specc.plan import Plan, Server
from specc.run.progress import SweepProgress
from specc.run.readiness import wait_ready
from specc.results import ResultLog
from specc.run.state import RunState


#: How often a running benchmark checks that its server process is still alive.
WATCH_S = 0.1


class PlanRefused(Exception):
    """The plan cannot be run as written (it holds errors)."""


class Executor:
    def __init__(self, plan: Plan, run_dir: Path, *, ctx=None, progress: SweepProgress | None = None,
                 grace_s: float = 10.0):
        if plan.errors:
            raise PlanRefused(f"the plan holds {len(plan.errors)} error(s): "
                              + "; ".join(d["message"] for d in plan.errors))
        import invoke

        self.plan = plan
        self.run_dir = Path(run_dir)
        self.ctx = ctx if ctx is not None else invoke.Context()
        self.results = ResultLog(self.run_dir / "results.jsonl")
        self.state = RunState(self.run_dir / "state.json")
        self.running: dict[str, lifecycle.Running] = {}
        self.failed_servers: dict[str, str] = {}
        self.grace_s = grace_s
        self.stop_all = False
        self.progress = progress or SweepProgress(len(plan.benchmarks))

    # -- servers ----------------------------------------------------------------
    def _preflight(self, server: Server) -> str | None:
        if lifecycle.port_in_use(server.host, server.port):
            return (f"port {server.port} is already in use by {lifecycle.port_holder(server.port)}"
                    f"; stop it or change engine.base_port")
        if not self.plan.engine_info.get("uses_gpus", True):
            return None   # e.g. the simulator: no GPUs to check
        problems, note = lifecycle.gpu_holders(self.ctx, server.gpus)
        if note:
            self.progress.log(f"{server.id}: {note}")
        if problems:
            return "; ".join(problems) + " (free them, or `inv down` a previous run)"
        return None

    def _fail_points(self, server: Server, reason: str) -> None:
        for b in self.plan.benchmarks_of(server.id):
            if not self.results.finished(b.id):
                self.results.append(failed_row(b, reason))
                self.progress.point_finished(b.id, "failed", reason[:120])

    def _stop(self, server: Server, status: str, **fields) -> None:
        running = self.running.pop(server.id, None)
        if running is None:
            return
        how = lifecycle.stop(running, grace_s=self.grace_s)
        self._stopped(server, status, how, **fields)

    async def _stop_async(self, server: Server, status: str, **fields) -> None:
        """_stop in a worker thread: a teardown (SIGTERM, grace, port check) must not freeze
        the event loop, where the other packed servers' readiness and benchmarks run."""
        running = self.running.get(server.id)
        if running is None:
            return
        how = await asyncio.to_thread(lifecycle.stop, running, grace_s=self.grace_s)
        if self.running.pop(server.id, None) is not None:
            self._stopped(server, status, how, **fields)

    def _stopped(self, server: Server, status: str, how: str, **fields) -> None:
        self.state.update(server.id, status=status, stopped_at=time.time(), stop=how, **fields)
        self.progress.server_phase(server.id, "stopped" if status != "failed" else "failed",
                                   time.time(), how)

    async def run_server(self, server: Server) -> None:
        todo = [b for b in self.plan.benchmarks_of(server.id) if not self.results.finished(b.id)]
        if not todo or self.stop_all:
            return
        reason = self._preflight(server)
        if reason:
            self.state.start(server.id, status="failed", reason=reason, host=server.host,
                             port=server.port, failed_at=time.time())
            self.progress.server_phase(server.id, "failed", time.time(), reason)
            self.failed_servers[server.id] = reason
            self._fail_points(server, f"server failed preflight: {reason}")
            return
        running = lifecycle.launch(server, self.run_dir)
        self.running[server.id] = running
        self.state.start(server.id, pid=running.pid, pgid=running.pid, host=server.host,
                         port=server.port, started_at=running.started_at, ready_at=None,
                         status="starting", log=server.log, gpus=list(server.gpus))

        def on_phase(phase, since, detail=""):
            self.state.update(server.id, phase=phase, phase_started_at=since)
            self.progress.server_phase(server.id, phase, since, detail)

        outcome = await wait_ready(running, server.readiness, on_phase=on_phase)
        if not outcome.ok:
            reason = f"{outcome.reason}"
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
                self.state.update(server.id, status="benchmarking", point=bench.id)
                self.progress.point_started(bench.id, f"{server.label} @ c={bench.params['concurrency']}")
                row = await self._watched_point(running, bench)
                if (row.get("cache_flush") or "").startswith("not flushed") and not warned_flush:
                    warned_flush = True   # once per server: every point says it in its row
                    self.progress.log(f"{server.id}: prefix cache {row['cache_flush']}")
                baseline = self.results.get(bench.baseline) if bench.baseline else None
                row = with_speedup(row, baseline)
                self.results.append(row)
                self._backfill_speedups()
                self.progress.point_finished(bench.id, row["status"], _summary(row))
                if row.get("server_hung"):
                    self.failed_servers[server.id] = row["reason"]
                    self._fail_points(server, f"server hung earlier: {row['reason']}")
                    await self._stop_async(server, "failed", reason=row["reason"])
                    break
        except asyncio.CancelledError:   # Ctrl-C / SIGTERM mid-point: no row for it
            self._stop(server, "stopped", stopped_by="interrupt")
            raise
        finally:
            code = running.exit_code()
            if code is not None and server.id in self.running:
                self.failed_servers.setdefault(server.id, f"died mid-run (exit code {code})")
                await self._stop_async(server, "failed", reason=f"died mid-run (exit code {code})")
            else:
                await self._stop_async(server, "stopped")

    def _backfill_speedups(self) -> None:
        """Packed servers finish in any order: a speculative point that finished before its
        baseline gets its speedup once the baseline is known (results.jsonl rewritten)."""
        changed = False
        for b in self.plan.benchmarks:
            row = self.results.get(b.id)
            if (row and b.baseline and row["status"] == "ok"
                    and "speedup" not in (row.get("metrics") or {})):
                with_speedup(row, self.results.get(b.baseline))
                changed = changed or "speedup" in (row.get("metrics") or {})
        if changed:
            self.results.rewrite()

    async def _watched_point(self, running, bench) -> dict:
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
                    return failed_row(bench, f"server died mid-run (exit code {code})")
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
        except Exception as e:   # a bug in the client must not lose the sweep
            row = failed_row(bench, f"client error: {type(e).__name__}: {e}")
        if row["status"] != "ok":
            # the client saw errors first; if the process is gone, that is the cause to report
            for _ in range(10):
                code = running.exit_code()
                if code is not None:
                    row["reason"] = f"server died mid-run (exit code {code}): {row['reason']}"
                    break
                await asyncio.sleep(0.05)
        return row

    # -- the sweep ----------------------------------------------------------------
    async def run(self) -> int:
        left = lifecycle.stop_leftovers(self.state, grace_s=self.grace_s)
        for line in left:
            self.progress.log(f"stopped a server left by an earlier run: {line}")
        self.state.set_executor(pid=os.getpid(), started_at=time.time())
        for b in self.plan.benchmarks:
            if self.results.finished(b.id):   # counted as what it was (ok/failed), not rerun
                self.progress.point_finished(b.id, self.results.get(b.id)["status"],
                                             "finished in an earlier run, not rerun")
        for wave in self.plan.waves:
            if self.stop_all:
                break
            await asyncio.gather(*(self.run_server(s) for s in wave))
        self._backfill_speedups()   # rows of an earlier run, too
        bad = [r for b in self.plan.benchmarks if (r := self.results.get(b.id))
               and r["status"] != "ok"]
        missing = [b for b in self.plan.benchmarks if not self.results.finished(b.id)]
        return exits.OK if not bad and not missing else exits.FAILED

    def teardown_all(self) -> None:
        for sid in list(self.running):
            self._stop(self.running[sid].server, "stopped", stopped_by="interrupt")


def _size(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return -1


def _summary(row: dict) -> str:
    m = row.get("metrics") or {}
    if row["status"] != "ok":
        return (row.get("reason") or "")[:120]
    parts = [f"{m.get('output_throughput', 0):.1f} tok/s"]
    if m.get("per_stream_output_throughput"):
        parts.append(f"{m['per_stream_output_throughput']:.1f} tok/s/stream")
    if m.get("accept_length"):
        parts.append(f"accept {m['accept_length']:.2f}")
    if m.get("speedup"):
        parts.append(f"{m['speedup']:.2f}x")
    return ", ".join(parts)


def execute_plan(plan: Plan, run_dir: Path, *, ctx=None, retry_failed: bool = False) -> int:
    """Run the plan into run_dir; print the results table. Exit code per CONTRACT.md."""
    run_dir = Path(run_dir)
    if retry_failed:
        ResultLog(run_dir / "results.jsonl").drop_failed()
    try:
        with SweepProgress(len(plan.benchmarks)) as progress:
            ex = Executor(plan, run_dir, ctx=ctx, progress=progress)
            code = _run_with_signals(ex)
    except PlanRefused as e:
        print(f"error PLAN_HAS_ERRORS: {e}", file=sys.stderr)
        return exits.INVALID
    _finish_report(run_dir)
    return code


def _run_with_signals(ex: Executor) -> int:
    """Ctrl-C or SIGTERM: cancel the sweep, tear down every server, keep finished results."""
    loop = asyncio.new_event_loop()
    main = loop.create_task(ex.run())
    interrupted = []

    def on_signal(signum):
        interrupted.append(signum)
        ex.progress.log(f"{signal.Signals(signum).name}: stopping servers, keeping finished results")
        main.cancel()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal, sig)
    try:
        return loop.run_until_complete(main)
    except asyncio.CancelledError:
        return exits.INTERRUPTED
    finally:
        ex.teardown_all()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()


def _finish_report(run_dir: Path) -> None:
    from specc.report import render_terminal, write_report

    try:
        report = write_report(run_dir)
    except Exception as e:  # the results are on disk; the report can be rebuilt with `inv report`
        print(f"warning: report failed ({type(e).__name__}: {e}); results are in "
              f"{run_dir / 'results.jsonl'}", file=sys.stderr)
        return
    print(render_terminal(report))
    print(f"report: {run_dir / 'report.md'}")
