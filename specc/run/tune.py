"""`search=tune` in the executor: feed the pure search (specc.tune) and act on its answers.

The search says which server to start next; the executor starts it exactly as in a
grid (launch, readiness, its points at every concurrency of the ladder, teardown:
state.json, results.jsonl and servers/*.log as always), then this module turns the
server's rows and request records into the search's points (paired speedup interval,
per-request acceptance, latencies). A rerun resumes: a server whose points finished
in an earlier run is not started again, its rows are read back instead.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from specc.files import atomic_write
from specc.run.figures import point_figures as _figures
from specc.rundir import TUNE_JSON, tune_decision


def model_for(plan):
    """The calibrated model's step costs for the plan's target and draft."""
    from specc.tune import predict

    first = plan.server(plan.search.candidates[0].server)
    return predict.plan_steps(plan, tp=first.params.tp)


class Tuner:
    """The search, fed from a run dir's rows: asks it which server to start next. Used by
    the executor (one server at a time) and the Slurm driver (one job at a time)."""

    def __init__(self, plan, run_dir: Path, row_of, log, brackets=None):
        """`brackets`: the SLO brackets (specc.run.bracket.Brackets) run on each server
        while it is up; a server not started again gets its recorded probes back."""
        from specc.tune.search import Search

        self.plan, self.run_dir, self.row_of, self.log = plan, Path(run_dir), row_of, log
        self.search = Search(plan.search, model_for(plan))
        self.chosen: set[str] = set()
        self.brackets = brackets
        #: deploy.json's content once the decision was deployed (specc.run.deploy)
        self.deployed: dict | None = None
        #: tune.json's crossover.refined once the refinement ran or was skipped
        #: (specc.run.crossover)
        self.refined: dict | None = None

    def next_server(self) -> str | None:
        """The next server to start, or None (stop). A server whose points all finished in
        an earlier run is not started again: its rows are fed back and the search asked on."""
        from specc.tune.search import Stop

        while True:
            action = self.search.next_action(time.time())
            if isinstance(action, Stop):
                self.log(f"search: stop: {action.reason}")
                return None
            sid = action.server
            earlier = all(self.row_of(b.id) for b in self.plan.benchmarks_of(sid))
            self.search.started(sid, time.time(), action.reason + (
                " (finished in an earlier run: not started again)" if earlier else ""))
            self.chosen.add(sid)
            if earlier:
                self.feed(sid)
                if self.brackets is not None:
                    self.brackets.replay(sid)
                continue
            self.log(f"search: start {self.plan.server(sid).label}: {action.reason}")
            return sid

    def feed(self, server_id: str) -> None:
        feed(self.search, self.plan, self.row_of, self.run_dir, server_id)

    def write(self) -> None:
        if self.brackets is not None:
            self.search.brackets = self.brackets.results
        decision = self.search.decision()
        if self.deployed and self.deployed.get("deployed"):   # the server bracketing runs on
            decision["deployed"] = self.deployed["deployed"]
        self._refined(decision)
        write(self.run_dir, decision)
        if self.search.stop_reason and self.deployed is None:
            from specc.run import deploy   # the schedule all the same, said unverified

            deploy.unverified(self.plan, self.run_dir, decision,
                              "the verification start did not run (the run stopped "
                              "before it)")


    def _refined(self, decision: dict) -> None:
        """crossover.refined: this run's, else an earlier run's for the same ladder gap (a
        rerun does not start the verification again), else why it did not run."""
        from specc.tune import crossover as X

        gap = X.refinable(decision.get("crossover"), self.plan.search.precision)
        if gap is None:
            return
        refined = self.refined
        if refined is None or refined.get("status") == "not refined":
            earlier = ((tune_decision(self.run_dir) or {}).get("crossover") or {}).get("refined")
            if isinstance(earlier, dict) and earlier.get("ladder") == list(gap) \
                    and earlier.get("status") != "not refined":
                refined = earlier   # measured by an earlier run
        if refined is None and self.search.stop_reason:
            from specc.run.crossover import not_refined

            refined = not_refined("the refinement did not run (on Slurm the driver holds no "
                                  "two servers at once; or the run stopped before it)", gap)
        if refined is not None:
            decision["crossover"]["refined"] = refined


async def run(ex) -> set[str]:
    """Run the search with executor `ex`; returns the servers it chose (each started once)."""
    brackets = None
    if ex.plan.search.slo:   # the SLO capacity, bracketed on each server while it is up
        from specc.run.bracket import Brackets

        brackets = Brackets(ex.plan, ex.run_dir, ex.results.get, ex.progress.log)

        async def after_points(server, running) -> None:
            async def probe(bench):
                return await ex.extra_point(running, bench)

            await brackets.bracket_server(server.id, probe)

        ex.after_points = after_points
    tuner = Tuner(ex.plan, ex.run_dir, ex.results.get, ex.progress.log, brackets)
    try:
        while not ex.stop_all:
            sid = tuner.next_server()
            if sid is None:   # nothing more will run: the progress stops counting on it
                ex.progress.plan(0, servers=0, earlier=ex.progress.earlier)
                break
            await ex.run_server(ex.plan.server(sid))
            tuner.feed(sid)
        if tuner.search.stop_reason and not ex.stop_all:   # the decision, deployed and verified
            from specc.run import deploy
            from specc.run.crossover import Refinement

            decision = tuner.search.decision()
            refine = Refinement(ex.plan, decision)
            tuner.deployed = await deploy.run(ex, decision, refine)
            tuner.refined = refine.result
    finally:
        tuner.write()
    return tuner.chosen


def feed(search, plan, row_of, run_dir: Path, server_id: str) -> None:
    """Hand the server's finished points to the search (`row_of(benchmark id)` -> its row
    or None); a server without one is failed in the search with its first reason."""
    from specc.tune.search import Point

    fed, reasons = 0, []
    for b in plan.benchmarks_of(server_id):
        row = row_of(b.id)
        if not row or row.get("status") != "ok":
            if row:
                reasons.append(row.get("reason") or "failed")
                search.miss(server_id, b.params.concurrency, reasons[-1][:200])
            continue
        figs = _figures(run_dir, row, row_of(b.baseline) if b.baseline else None)
        iv = figs.get("speedup")
        metrics = row.get("metrics") or {}
        latency = {}
        for key in search.rec.slo:
            fig = figs.get(key)
            if fig is not None and fig.value is not None:
                latency[key] = (fig.value, fig.lo, fig.hi)
            elif metrics.get(key) is not None:
                latency[key] = (float(metrics[key]), None, None)
        pp = row.get("accept_per_position")
        search.observe(Point(
            server=server_id, concurrency=b.params.concurrency,
            speedup=None if iv is None else iv.value, lo=None if iv is None else iv.lo,
            hi=None if iv is None else iv.hi, requests=figs.get("_requests", ()),
            positions=tuple(float(x) for x in pp) if isinstance(pp, list) and pp else None,
            latency=latency, accept_length=metrics.get("accept_length"),
            output_tokens=float(sum(t for t, _ in figs.get("_requests", ()))),
            per_stream_tps=metrics.get("per_stream_output_throughput"),
            decode=figs.get("_decode", ())))
        fed += 1
    if not fed:
        search.fail(server_id, (reasons or ["no point finished"])[0][:200])


def decide(plan, run_dir: Path) -> dict:
    """The search's decision over every server a run measured, as if each had been
    started (a grid run: what `search=tune` would conclude with all of them)."""
    from specc.results import ResultLog
    from specc.tune.search import Search

    results = ResultLog(Path(run_dir) / "results.jsonl")
    search = Search(plan.search, model_for(plan))
    for server in plan.servers:
        if any(results.get(b.id) for b in plan.benchmarks_of(server.id)):
            search.started(server.id, 0.0, "measured by the run")
            feed(search, plan, results.get, run_dir, server.id)
    return search.decision()


def write(run_dir: Path, decision: dict) -> None:
    atomic_write(Path(run_dir) / TUNE_JSON, json.dumps(decision, indent=2) + "\n")
