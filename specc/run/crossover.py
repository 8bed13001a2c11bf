"""The crossover refined between ladder points, on the deployed command and the baseline up
side by side (docs/tune.md "Crossover refined").

A speedup pairs two points at the same concurrency and the same prompts; the baseline is
up only first, before any speedup says where the crossover lies. So at the end, while the
deployed command's verification start is up (after its ladder points), the baseline is
started once more beside it (its own port; its GPUs must not overlap the deployed
command's), and the pure bisection (``specc.tune.crossover``) is fed pairs measured
alternately -- the baseline's point, then the deployed command's, at the same concurrency
-- so drift on the machine hits both. That start comes out of the search's budget
(``search.max_starts``): it runs only where the search stopped with a start left, and is
skipped with the reason in ``crossover.refined`` otherwise. Rows go to
``crossover.jsonl``; requests to ``requests/<server>~crossover-c<load>-n<requests>.jsonl``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import socket
from pathlib import Path
from typing import Any

from specc.files import append_durable
from specc.tune import crossover as X
from specc.tune.bracket import Next

#: One line per pair measured, in the order run.
CROSSOVER_JSONL = "crossover.jsonl"
#: The side-by-side baseline's own rows (it measures no planned point).
BASELINE_RESULTS = "crossover/results.jsonl"


def not_refined(why: str, between=None) -> dict:
    return {"status": "not refined", "why": why,
            **({"ladder": list(between)} if between else {})}


class Refinement:
    """Whether and how the crossover is refined after the search; `result` is tune.json's
    crossover.refined (None: the crossover is not between two ladder points)."""

    def __init__(self, plan, decision: dict):
        self.plan, self.rec = plan, plan.search
        self.gap = X.refinable(decision.get("crossover"), self.rec.precision)
        self.result: dict | None = None
        self.why_not: str | None = None
        if self.gap is None:
            return
        if len(decision.get("starts") or []) >= self.rec.max_starts:
            self.why_not = (f"the search spent its budget of {self.rec.max_starts} starts; "
                            "the baseline's second start (side by side with the deployed "
                            "command) comes out of the same budget")
        elif not self.rec.verify:
            self.why_not = "search.verify=false: no deployed command is started to pair with"
        self.ladder = self._ladder_ends(decision)
        if self.why_not:
            self.result = not_refined(self.why_not, self.gap)

    def _ladder_ends(self, decision: dict) -> dict:
        """The ladder's figures at both ends (the best speculative speedup there)."""
        out = {}
        for c in self.gap or ():
            e = (decision.get("best") or {}).get(str(c)) or {}
            e = e.get("best_speculative") or e
            lo, hi = (e.get("interval") or [None, None])[:2]
            out[c] = X.Pair(c, X.PAYS if c == (self.gap or (0,))[0] else X.DOES_NOT_PAY,
                            e.get("speedup"), lo, hi)
        return out

    def planned(self) -> bool:
        return self.gap is not None and self.why_not is None

    def skip(self, why: str) -> None:
        if self.planned():
            self.why_not = why
            self.result = not_refined(why, self.gap)

    def side_by_side(self, deployed) -> tuple[Any, str | None]:
        """The baseline as a second server beside `deployed` (its own port, its planned
        GPUs), or None and why it cannot be up at the same time."""
        base = self.plan.server(self.rec.baseline)
        if self.plan.engine_info.uses_gpus and set(base.gpus) & set(deployed.gpus):
            return None, (f"the baseline and the deployed command are planned on the same "
                          f"GPU(s) {','.join(map(str, sorted(set(base.gpus) & set(deployed.gpus))))}"
                          ": they cannot be up side by side")
        if base.nodes > 1 or deployed.nodes > 1:
            return None, "a server spans nodes: it cannot be started twice side by side"
        argv, port = list(base.argv), base.port
        if base.host == deployed.host and base.port == deployed.port:
            flag = next((i for i, a in enumerate(argv[:-1])
                         if a == "--port" and argv[i + 1] == str(base.port)), None)
            if flag is None:
                return None, ("the baseline's command gives its port other than as "
                              "`--port N`: it cannot be moved beside the deployed command")
            port = _free_port()
            argv[flag + 1] = str(port)
        sid = "crossover-baseline-" + hashlib.sha256(json.dumps(argv).encode()).hexdigest()[:10]
        return dataclasses.replace(base, id=sid, label="baseline (side by side)",
                                   argv=tuple(argv), port=port, log=f"servers/{sid}.log"), None

    def hook(self, ex):
        """The verification start's after_points: start the baseline beside the deployed
        command, then bisect on the two."""
        async def after_points(deployed, deployed_running) -> None:
            from specc.results import ResultLog

            base, why = self.side_by_side(deployed)
            if base is None:
                self.skip(why or "")
                return
            path = ex.run_dir / BASELINE_RESULTS
            path.parent.mkdir(parents=True, exist_ok=True)
            sub_plan = dataclasses.replace(ex.plan, servers=(base,), benchmarks=(), search=None)
            base_ex = type(ex)(sub_plan, ex.run_dir, ctx=ex.ctx, progress=ex.progress,
                               results=ResultLog(path), state=ex.state)
            base_ex.running = ex.running   # an interrupt tears it down with the rest
            lo, hi = self.gap or (None, None)
            ex.progress.log(f"crossover: start the baseline beside the deployed command to "
                            f"refine between concurrency {lo} and {hi}")

            async def both_up(_server, base_running) -> None:
                self.result = await self.bisect(base_ex, base_running, ex, deployed_running)

            await base_ex.run_server(base, after_points=both_up)
            if self.result is None:
                why = base_ex.failed_servers.get(base.id) or "the run stopped first"
                self.result = not_refined(f"the side-by-side baseline did not come up "
                                          f"({why[:200]})", self.gap)
            else:
                self.result["baseline_server"] = base.id
                self.result["server"] = deployed.id

        return after_points

    async def bisect(self, base_ex, base_running, dep_ex, dep_running) -> dict:
        from specc.run.figures import point_figures

        assert self.gap is not None
        lo, hi = self.gap
        cx = X.Crossover(lo, hi, self.rec.precision, self.ladder.get(lo), self.ladder.get(hi))
        run_dir = Path(base_ex.run_dir)
        while True:
            step = cx.next()
            if not isinstance(step, Next):
                out = step.result
                break
            at = int(step.at)
            b_bench, d_bench = self._benches(base_running.server.id, dep_running.server.id,
                                             at, step.requests)
            n = b_bench.params.num_prompts
            base_ex.progress.log(f"crossover: concurrency {at} ({n} requests, baseline "
                                 f"then deployed): {step.reason}")
            b_row = await base_ex.extra_point(base_running, b_bench)   # alternately:
            d_row = await dep_ex.extra_point(dep_running, d_bench) if b_row else None
            if b_row is None or d_row is None:
                out = cx.result(unfinished="a server stopped before the refinement was done")
                break
            failed = next(((r.get("reason") or "failed") for r in (b_row, d_row)
                           if r.get("status") != "ok"), None)
            iv = None if failed else point_figures(run_dir, d_row, b_row).get("speedup")
            pair = X.judge(at, iv and iv.value, iv and iv.lo, iv and iv.hi, n,
                           failed=failed or (None if iv else "no paired interval"))
            cx.observe(pair)
            append_durable(run_dir / CROSSOVER_JSONL, json.dumps(
                {"at": at, "baseline": b_bench.id, "deployed": d_bench.id,
                 "verdict": pair.verdict, "speedup": pair.speedup,
                 "interval": [pair.lo, pair.hi], "requests": n,
                 **({"why": pair.why} if pair.why else {})}) + "\n")
        base_ex.progress.log(f"crossover: {out['text']}")
        return out

    def _benches(self, base_id: str, dep_id: str, at: int, requests: int):
        """The baseline's own benchmark at the nearest ladder concurrency below `at`, moved
        to `at` (max(its prompts, at, `requests`) requests), for both servers: the same
        prompt sequence, so the two pair."""
        ladder = sorted(self.plan.benchmarks_of(self.rec.baseline),
                        key=lambda b: b.params.concurrency)
        tpl = next((b for b in reversed(ladder) if b.params.concurrency <= at), ladder[0])
        n = max(tpl.params.num_prompts, at, requests)
        params = dataclasses.replace(tpl.params, concurrency=at, num_prompts=n,
                                     min_requests=n, max_requests=n, target_ci=None)
        return tuple(dataclasses.replace(tpl, id=f"{sid}~crossover-c{at}-n{n}", server=sid,
                                         params=params, baseline=None, argv=None)
                     for sid in (base_id, dep_id))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
