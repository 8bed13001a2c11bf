"""SLO capacity on the server that is up: the bracket's probes as extra points (docs/tune.md).

After a started server's ladder points, and before its teardown, the executor hands the
running server here (``Executor.after_points``). For each SLO key the pure bracket
(``specc.tune.bracket``) is fed the ladder's points, then asked for loads until it is
done; each probe is one more point on the same server: the server's own benchmark at
the nearest ladder concurrency below, with the load changed and enough requests for the
percentile. Probe rows go to ``bracket.jsonl`` (never results.jsonl: the plan's points
stay the plan's), their requests to ``requests/<probe id>.jsonl``; a rerun reads them
back. Any server that is up can be bracketed: the baseline, a static setting, a deployed
schedule's verification start (``bracket_server``).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from specc.files import RECORDS_BYTES, UnreadableFile, append_durable, read_text
from specc.tune import bracket as B

#: Probe rows of every bracketed server, in the order run.
BRACKET_JSONL = "bracket.jsonl"


def metric_values(key: str, lines: list[dict]) -> list[float]:
    """The key's per-request latency (ms) from a point's request lines (ok ones)."""
    metric = B.metric_of(key)
    out = []
    for r in lines:
        if not r.get("ok"):
            continue
        ttft, lat, tok = r.get("ttft"), r.get("e2e_latency"), r.get("output_tokens") or 0
        if metric == "ttft" and ttft is not None:
            out.append(ttft * 1000.0)
        elif metric == "e2e_latency" and lat is not None:
            out.append(lat * 1000.0)
        elif metric == "tpot" and ttft is not None and lat is not None and tok > 1:
            out.append((lat - ttft) / (tok - 1) * 1000.0)
    return out


def bracketable(key: str) -> str | None:
    """Why a key cannot be bracketed, or None: per-token ITL has no per-request units."""
    if B.metric_of(key) == "itl":
        return ("ITL has no interval (a request's token gaps are not independent units): "
                "bracket tpot instead")
    return None


def rate_based(plan) -> bool:
    """The benchmark sends at a request rate: the bracket moves the rate, not concurrency."""
    return any(b.params.request_rate for b in plan.benchmarks)


class Brackets:
    """Every bracket of one run: per server and SLO key, fed and run on servers that are up."""

    def __init__(self, plan, run_dir: Path, row_of, log=print):
        self.plan, self.run_dir, self.row_of, self.log = plan, Path(run_dir), row_of, log
        self.rec = plan.search
        self.keys = dict(self.rec.slo) if self.rec is not None else {}
        self.rate = rate_based(plan)
        #: server -> key -> the bracket's result (tune.json's slo.<key>.bracket)
        self.results: dict[str, dict[str, dict]] = {}
        #: server -> its ladder benchmarks, for a server outside the plan's
        self.extra_ladders: dict[str, list] = {}

    # -- which servers ---------------------------------------------------------------
    def worth(self, server_id: str, key: str) -> str | None:
        """Why this server is not bracketed at key, or None. The baseline always is; a
        speculative setting only if its ladder could let it beat the best bracketed
        speculative capacity (its lowest failing ladder load lies above it)."""
        if server_id == self.rec.baseline:
            return None
        best = max((r[key]["capacity"] or 0 for s, r in self.results.items()
                    if s != self.rec.baseline and key in r
                    and r[key].get("capacity") is not None), default=None)
        if best is None:
            return None
        fails = self._ladder(server_id, key)._bounds()[1]
        if fails is not None and fails <= best:
            return (f"its ladder fails at {B._num(fails)}, at or below the best bracketed "
                    f"capacity {B._num(best)}: it cannot raise it")
        return None

    # -- the points ------------------------------------------------------------------
    def _ladder_benchmarks(self, server_id: str) -> list:
        """The server's measured points: the plan's, or those a caller registered for a
        server the plan does not hold (a deployed schedule's verification start)."""
        benches = self.extra_ladders.get(server_id) or self.plan.benchmarks_of(server_id)
        return sorted(benches, key=lambda b: self._load(b.params))

    def _load(self, params) -> float:
        return float(params.request_rate) if self.rate else float(params.concurrency)

    def _new(self, key: str) -> B.Bracket:
        ladder = [self._load(b.params) for b in self.plan.benchmarks]
        return B.Bracket(key, float(self.keys[key]), precision=self.rec.precision,
                         integer=not self.rate, floor=1.0 if not self.rate else min(ladder) / 8)

    def _ladder(self, server_id: str, key: str) -> B.Bracket:
        """A bracket fed the server's ladder points (and nothing else)."""
        from specc import requestlog as reqlog

        b = self._new(key)
        for bench in self._ladder_benchmarks(server_id):
            row = self.row_of(bench.id)
            if not row:
                continue
            failed = None if row.get("status") == "ok" else (row.get("reason") or "failed")
            b.observe(B.judge(key, b.limit, self._load(bench.params),
                              metric_values(key, reqlog.read(self.run_dir, bench.id)),
                              extra=False, failed=failed))
        return b

    def _probe_bench(self, server_id: str, at: float, requests: int, key: str):
        """The server's own benchmark at the nearest ladder load at or below `at`, moved
        to `at`, with enough requests for the percentile (and at least `requests`)."""
        benches = self._ladder_benchmarks(server_id)
        tpl = next((b for b in reversed(benches) if self._load(b.params) <= at), benches[0])
        p = tpl.params
        n = max(p.num_prompts, B.min_requests(key), 0 if self.rate else int(at), requests)
        load = {"request_rate": at} if self.rate else {"concurrency": int(at)}
        params = dataclasses.replace(p, num_prompts=n, min_requests=n, max_requests=n,
                                     target_ci=None, **load)
        tag = f"r{B._num(at)}" if self.rate else f"c{int(at)}"
        return dataclasses.replace(tpl, id=f"{server_id}~bracket-{tag}-n{n}", params=params,
                                   baseline=None, argv=None)

    def _recorded(self, server_id: str) -> list[dict]:
        """Probe rows an earlier run (or this one) recorded for the server, in order."""
        try:
            text = read_text(self.run_dir / BRACKET_JSONL, RECORDS_BYTES)
        except (OSError, UnreadableFile):
            return []
        out = []
        for line in text.splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if isinstance(row, dict) and row.get("server") == server_id:
                out.append(row)
        return out

    def _feed(self, b: B.Bracket, row: dict) -> None:
        from specc import requestlog as reqlog

        failed = None if row.get("status") == "ok" else (row.get("reason") or "failed")
        b.observe(B.judge(b.key, b.limit, float(row["at"]),
                          metric_values(b.key, reqlog.read(self.run_dir, row["benchmark"])),
                          failed=failed))

    # -- on a server that is up ----------------------------------------------------------
    async def bracket_server(self, server_id: str, run_probe, *, benchmarks=None,
                             always: bool = False) -> dict[str, dict]:
        """Bracket every SLO key on the server that is up; `run_probe(benchmark)` measures
        one more point on it (a results row, or None when nothing can be recorded).
        `benchmarks`: its ladder points when the plan does not hold the server (their rows
        by ``row_of``); `always`: bracket it even where it cannot raise the best (the
        deployed schedule). Returns key -> result (also kept in ``results``)."""
        if benchmarks is not None:
            self.extra_ladders[server_id] = list(benchmarks)
        out = self.results.setdefault(server_id, {})
        brackets: dict[str, B.Bracket] = {}
        for key in self.keys:
            why = bracketable(key) or (None if always else self.worth(server_id, key))
            if why:
                out[key] = {"key": key, "status": "not bracketed", "text": why,
                            "capacity": None}
                continue
            brackets[key] = self._ladder(server_id, key)
        for row in self._recorded(server_id):   # a rerun: the probes already measured
            for b in brackets.values():
                self._feed(b, row)
        for key, b in brackets.items():
            while True:
                step = b.next()
                if isinstance(step, B.Done):
                    out[key] = step.result
                    self.log(f"bracket {server_id} {key}: {step.result['text']}")
                    break
                bench = self._probe_bench(server_id, step.at, step.requests, key)
                self.log(f"bracket {server_id} {key}: {B._num(step.at)} "
                         f"({bench.params.num_prompts} requests): {step.reason}")
                row = await run_probe(bench)
                if row is None:   # the server went down or the run is stopping
                    out[key] = b.unfinished("the server stopped before the bracket was done")
                    return out
                rec = {"server": server_id, "key": key, "at": B._num(step.at),
                       "benchmark": bench.id, "status": row.get("status"),
                       "reason": row.get("reason"), "metrics": {
                           k: v for k, v in (row.get("metrics") or {}).items()
                           if k.endswith("_ms") or k in ("completed", "duration")}}
                append_durable(self.run_dir / BRACKET_JSONL, json.dumps(rec) + "\n")
                for other in brackets.values():   # a probe says something at every key
                    self._feed(other, rec)
        return out

    def replay(self, server_id: str) -> None:
        """A server not started again (its points finished earlier): its bracket from the
        probes recorded, or unfinished."""
        if server_id in self.results or not self.keys:
            return
        out = self.results.setdefault(server_id, {})
        for key in self.keys:
            why = bracketable(key) or self.worth(server_id, key)
            if why:
                out[key] = {"key": key, "status": "not bracketed", "text": why,
                            "capacity": None}
                continue
            b = self._ladder(server_id, key)
            for row in self._recorded(server_id):
                self._feed(b, row)
            step = b.next()
            out[key] = step.result if isinstance(step, B.Done) else b.unfinished(
                "the run that measured this server stopped before its bracket was done; "
                "it is not started again")
