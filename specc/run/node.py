"""`python -m specc.run.node --plan plan.json --job NAME`: one Slurm job's part of a plan
(the job's servers, as the plan's `cluster` record lists them), on the job's first node,
from the run dir on the shared filesystem.

It runs the job's server(s) with specc's own executor (launch, readiness, points,
teardown; the benchmark client runs here, on the server's first node) and keeps
every write to files this job alone writes, so many jobs can run at once on a
filesystem shared by many nodes:

- each point's row is appended and fsynced to `slurm/results/<server>.jsonl`
  (one writer per file); the driver on the login node merges new rows into
  results.jsonl by benchmark id (no duplicate row) and is its only writer.
  This holds on NFS or Lustre, where O_APPEND from several nodes is not atomic
  and flock may be off or node-local; a lock would have to be trusted there.
- the executor's state goes to `slurm/state/<job>.json`, not state.json
  (RunState rewrites its whole file, so two jobs sharing one would erase each
  other's servers).
- finished points are read from results.jsonl (read-only) and the server's own
  file, so a resubmitted job skips them.

Stopped by Slurm (scancel, the time limit) or by the driver, it tears its
servers down and leaves the point in flight without a row: the driver then
fails it with Slurm's verdict, or, when the driver itself stopped the job,
leaves it for the rerun.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

from specc import exits
from specc.plan import Plan, Server
from specc.results import ResultLog, parse_rows
from specc.run.lifecycle import on_gpus
from specc.seal import pinned_problem
from specc.rundir import plan_to_run
from specc.state import RunState

#: Exit code of a job its node entry crashed in (a traceback is in the job's log).
CRASHED = 1


def results_path(run_dir: Path, server_id: str) -> Path:
    return Path(run_dir) / "slurm" / "results" / f"{server_id}.jsonl"


def state_path(run_dir: Path, job: str) -> Path:
    return Path(run_dir) / "slurm" / "state" / f"{job}.json"


def read_rows(path: Path) -> dict[str, dict]:
    """Rows of a results file another process writes: complete lines only, nothing cut
    (ResultLog would truncate a partial last line: right for its own file only)."""
    from specc.files import RECORDS_BYTES, read_bounded

    try:
        data = read_bounded(path, RECORDS_BYTES)
    except (OSError, ValueError):
        return {}
    rows, _ = parse_rows(data[: data.rfind(b"\n") + 1].decode("utf-8", "replace"), Path(path).name)
    return {k: r.to_json() for k, r in rows.items()}


class JobResults(ResultLog):
    """The executor's ResultLog inside a job: the run's results.jsonl (read-only) and the
    job's per-server files (appended, fsynced; this job is their only writer).

    While the job is being stopped a failed row is not written: the point was cut by the
    stop, not by its server, and the driver decides what it becomes."""

    def __init__(self, run_dir: Path, server_ids, stopping=lambda: False):
        self.path = Path(run_dir) / "results.jsonl"
        self.stopping = stopping
        self.warnings: list[str] = []
        self.own = {sid: ResultLog(results_path(run_dir, sid)) for sid in server_ids}
        self.rows = {}
        for b, row in read_rows(self.path).items():
            if row.get("server") in self.own:
                self.rows[b] = row
        for log in self.own.values():
            self.rows.update(log.rows)

    def _load(self) -> None:  # pragma: no cover - loading is done in __init__
        pass

    def append(self, row: dict) -> None:  # type: ignore[override]  # a node's rows are dicts
        if self.stopping() and row.get("status") != "ok":
            return
        log = self.own[row["server"]]
        log.path.parent.mkdir(parents=True, exist_ok=True)
        log.append(row)
        self.rows[row["benchmark"]] = row

    def rewrite(self) -> None:
        """The speedup backfill: this job's rows, in its own files."""
        for sid, log in self.own.items():
            log.rows = {b: r for b, r in self.rows.items() if r.get("server") == sid}
            if log.rows:
                log.rewrite()


def on_node(servers: list[Server], environ=os.environ) -> list[Server]:
    """The plan's servers with the GPUs Slurm gave this job (its CUDA_VISIBLE_DEVICES, in
    order), since a plan's GPU indices are slots on an imagined node, not this one's."""
    visible = environ.get("CUDA_VISIBLE_DEVICES") if environ.get("SLURM_JOB_ID") else None
    if not visible:
        return list(servers)
    ids, out, off = visible.split(","), [], 0
    for s in servers:
        mine = ids[off:off + len(s.gpus)]
        off += len(s.gpus)
        if len(mine) < len(s.gpus):
            out.append(s)   # fewer GPUs than planned: the engine says so at launch
            continue
        out.append(on_gpus(s, mine))
    return out


def slurm_node_addr(node: str) -> str | None:
    """A node's address as Slurm knows it (NodeAddr of `scontrol show node`), or None."""
    try:
        out = subprocess.run(["scontrol", "show", "node", node], capture_output=True,
                             text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"\bNodeAddr=(\S+)", out)
    return m.group(1) if m else None


def head_address(environ=os.environ, lookup=slurm_node_addr) -> str:
    """The first node's address for a multi-node server's rendezvous: $SPECC_HEAD_ADDR if
    set, else `lookup` (Slurm's NodeAddr), else the node's name. This entry runs on the
    first node, so its own name is the head's."""
    if environ.get("SPECC_HEAD_ADDR"):
        return environ["SPECC_HEAD_ADDR"]
    node = environ.get("SLURMD_NODENAME") or environ.get("HOSTNAME") or "localhost"
    return lookup(node) or node


def across_nodes(server: Server, head: str) -> Server:
    """A multi-node server launched as one `srun` task per node of this job (its node
    rank filled in by each task, on its node, and the plan's follower args added on
    ranks > 0: specc.run.rank), all ranks logging into the server's log;
    --kill-on-bad-exit ends every rank when one fails, and srun's exit is the server's."""
    from specc.run.lifecycle import resolve_argv

    n = str(server.nodes)
    srun = ["srun", "--overlap", f"--nodes={n}", f"--ntasks={n}", "--ntasks-per-node=1",
            "--kill-on-bad-exit=1"]   # srun passes whole lines (not --unbuffered): ranks interleave by line
    rank = [sys.executable, "-m", "specc.run.rank"]
    follower = [x for a in server.follower_args for x in ("--follower", a)]
    return replace(server, argv=tuple(rank + ["--group", "--"] + srun + rank
                                      + ["--head", head, *follower, "--"]
                                      + resolve_argv(server.argv)))


def job_plan(plan: Plan, server_ids: list[str], environ=os.environ) -> Plan:
    """The plan cut down to this job's servers and their points, placed on this node (no
    Slurm jobs: it runs here). A point whose baseline runs in another job loses the link
    here: the driver, which sees both rows, computes its speedup."""
    servers = on_node([plan.server(sid) for sid in server_ids], environ)
    if any(s.nodes > 1 for s in servers):
        head = head_address(environ)
        servers = [across_nodes(s, head) if s.nodes > 1 else s for s in servers]
    keep = set(server_ids)
    mine = [b for b in plan.benchmarks if b.server in keep]
    ids = {b.id for b in mine}
    # search=None: the driver runs the search; a node runs the servers it was given
    return replace(plan, servers=tuple(servers), cluster=None, search=None, benchmarks=tuple(
        b if b.baseline is None or b.baseline in ids else replace(b, baseline=None)
        for b in mine))


def engine_problems(plan: Plan, server_ids: list[str]) -> list[str]:
    """The executor's preflight, on the node: the engine installed where the job landed (a
    node's own install, a container image) is the release the plan was compiled for, and
    its parser accepts each launch command as rank 0 runs it; else the job's points fail
    with the doctor's line as their reason instead of a crash deep in a launch."""
    from specc.run.doctor import check_plan

    mine = tuple(plan.server(s) for s in server_ids)
    return [d.line() for d in check_plan(replace(plan, servers=mine, cluster=None, search=None, benchmarks=(),
                                                 dropped=()))]


def run_job(plan: Plan, run_dir: Path, server_ids: list[str], *, job: str,
            stream=None) -> int:
    """Run the job's servers side by side to the end; the exit code Slurm records."""
    import invoke

    from specc.run import executor as executor_mod
    from specc.run.progress import SweepProgress

    run_dir = Path(run_dir)
    problems = engine_problems(plan, server_ids)
    if problems:
        for line in problems:
            print(line, file=sys.stderr)
        print(f"nothing was launched on {os.environ.get('SLURMD_NODENAME') or 'this node'}: the "
              "engine here would not run this plan as written", file=sys.stderr, flush=True)
        return exits.INVALID
    stopping = threading.Event()
    sub = job_plan(plan, server_ids)
    results = JobResults(run_dir, server_ids, stopping.is_set)
    path = state_path(run_dir, job)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)   # an earlier attempt's: the driver has read it
    state = RunState(path)
    state.set_executor(pid=os.getpid(), job_id=os.environ.get("SLURM_JOB_ID"),
                       node=os.environ.get("SLURMD_NODENAME"), started_at=time.time())
    got: list[int] = []
    with SweepProgress(len(sub.benchmarks), stream=stream or sys.stdout, live=False) as progress:
        ex = executor_mod.Executor(sub, run_dir, ctx=invoke.Context(), progress=progress,
                                   results=results, state=state)
        loop = asyncio.new_event_loop()

        async def all_servers():
            return await asyncio.gather(*(ex.run_server(s) for s in sub.servers),
                                        return_exceptions=True)

        main = loop.create_task(all_servers())

        def on_signal(signum, _frame):
            stopping.set()
            got.append(signum)
            loop.call_soon_threadsafe(main.cancel)

        old = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        crashed = False
        try:
            outcome = loop.run_until_complete(main)
            for err in (o for o in outcome if isinstance(o, BaseException)):
                crashed = True
                progress.log(f"executor error: {type(err).__name__}: {err}")
        except asyncio.CancelledError:
            progress.log(f"{signal.Signals(got[0]).name if got else 'stop'}: tearing down")
        finally:
            ex.teardown_all()
            for sig, handler in old.items():
                signal.signal(sig, handler)
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()
        state.set_executor(**{**state.data.get("executor", {}), "finished_at": time.time(),
                              "stopped_by": signal.Signals(got[0]).name if got else None})
    if got:
        return 128 + got[0]
    if crashed:
        return CRASHED
    rows = [results.get(b.id) for b in sub.benchmarks]
    return exits.OK if all(r and r["status"] == "ok" for r in rows) else exits.FAILED


def main(argv=None) -> int:
    """Run this Slurm job's servers of a plan (launch, readiness, points, teardown)."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m specc.run.node", description=main.__doc__)
    ap.add_argument("--plan", required=True)
    ap.add_argument("--job", required=True,
                    help="a job of the plan's cluster record (its state file: slurm/state/JOB.json)")
    ap.add_argument("--verify", action="store_true",
                    help="search=tune: run the deployed command of the run dir's deploy.json "
                         "(rendered again from the sealed plan) on this job's resources; its "
                         "state file: slurm/state/JOB-verify.json")
    args = ap.parse_args(argv)
    path = Path(args.plan).resolve()
    try:   # read once: the bytes checked against the driver's pin are the plan that runs
        raw, _, plan = plan_to_run(path)
        problem = pinned_problem(raw)
    except (OSError, ValueError) as e:
        print(f"error PLAN_UNREADABLE at {args.plan}: {e}", file=sys.stderr)
        return exits.INVALID
    if problem:
        print(f"error PLAN_EDITED at {args.plan}: {problem}", file=sys.stderr)
        return exits.INVALID
    names = [j.name for j in plan.cluster.jobs] if plan.cluster else []
    if args.job not in names:
        known = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        print(f"error: no Slurm job {args.job!r} in {args.plan} (its jobs: "
              f"{known or 'none, it runs on one machine'})", file=sys.stderr)
        return exits.INVALID
    assert plan.cluster is not None   # its jobs were listed above
    if args.verify:
        return verify_job(plan, path.parent, args.job)
    return run_job(plan, path.parent, list(plan.cluster.job(args.job).servers), job=args.job)


def verify_job(plan: Plan, run_dir: Path, job: str) -> int:
    """search=tune's verification start as a Slurm job: the deployed server derived from the
    sealed plan and the run dir's deploy.json bands (specc.run.deploy.on_node), on the
    resources of the job that holds the server it is shaped as."""
    from specc.files import atomic_write
    from specc.run import deploy
    from specc.rundir import deploy_decision

    full, sid, files = deploy.on_node(plan, deploy_decision(run_dir))
    if full is None:
        print(f"error DEPLOY_UNVERIFIABLE at deploy.json: {sid}; nothing was run (fix: "
              "`specc run --plan plan.json` again: the driver writes it from tune.json)",
              file=sys.stderr)
        return exits.INVALID
    assert plan.cluster is not None and sid is not None   # a Slurm plan's; on_node's server
    mine, held = full.server(sid), [plan.server(x) for x in plan.cluster.job(job).servers]
    if not any(len(s.gpus) == len(mine.gpus) and s.nodes == mine.nodes for s in held):
        print(f"error DEPLOY_UNVERIFIABLE at slurm job {job}: its servers are not shaped as "
              f"the deployed one ({len(mine.gpus)} GPU(s) on {mine.nodes} node(s)); nothing "
              "was run (fix: let `specc run` submit the verification)", file=sys.stderr)
        return exits.INVALID
    for name, text in files.items():   # the command's files, as the sealed plan renders them
        atomic_write(run_dir / name, text)
    return run_job(full, run_dir, [sid], job=f"{job}-verify")


if __name__ == "__main__":
    raise SystemExit(main())
