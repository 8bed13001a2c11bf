"""One benchmark point against a ready server: flush, acceptance before, load, acceptance after.

Reads only the plan (never an engine adapter), so a plan runs anywhere specc.run is installed.

Also `python -m specc.run.point --plan plan.json --benchmark ID` (what plan.sh calls).
"""

from __future__ import annotations

import asyncio
import json
import shlex
import sys
import time
from pathlib import Path

import httpx

from specc.net import base_url
from specc.plan import Benchmark, Plan, PlanError, Server
from specc.results import with_speedup  # noqa: F401  (re-export: the executor imports it from here)
from specc.run.acceptance import AcceptanceReading
from specc.run.datasets import DatasetError, load_prompts


def _row(bench: Benchmark, status: str, reason: str | None, metrics: dict, **extra) -> dict:
    return {"benchmark": bench.id, "server": bench.server, "status": status, "reason": reason,
            "metrics": metrics, "params": bench.params, "finished_at": time.time(), **extra}


def failed_row(bench: Benchmark, reason: str) -> dict:
    return _row(bench, "failed", reason, {})


async def _builtin(server: Server, bench: Benchmark, url: str):
    from specc.run.loadgen import run_load

    p = bench.params
    prompts = load_prompts(p["dataset"], num=p["num_prompts"], input_len=p["input_len"],
                           output_len=p["output_len"], range_ratio=p.get("range_ratio", 1.0),
                           path=p.get("dataset_path"), seed=p.get("seed", 0))
    rate = p.get("request_rate") or float("inf")
    res = await run_load(url, prompts, api=p["api"], model=p["model"],
                         concurrency=p["concurrency"], request_rate=rate,
                         warmup=p.get("warmup_requests", 1), seed=p.get("seed", 0),
                         timeout_s=p.get("timeout_s", 600))
    errors = [r.error for r in res.records if not r.ok]
    return dict(res.metrics), errors, getattr(res, "server_gone", None)


class DriverError(Exception):
    """The benchmark client itself failed (not one request): the point's reason."""


async def _bench_serving(bench: Benchmark, run_dir: Path, ctx):
    """SGLang's own client, run as the plan says (from the run dir, like plan.sh);
    its last JSON line becomes the metrics."""
    from specc.run.lifecycle import resolve_argv

    out = run_dir / "bench_serving" / f"{bench.id}.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    lines_before = len(out.read_text().splitlines()) if out.exists() else 0
    command = f"cd {shlex.quote(str(run_dir))} && {shlex.join(resolve_argv(bench.argv))}"
    result = await asyncio.to_thread(ctx.run, command, hide=True, warn=True, in_stream=False)
    if not result.ok or not out.exists() or len(out.read_text().splitlines()) <= lines_before:
        tail = (result.stderr or result.stdout or "").strip().splitlines()[-3:]
        raise DriverError(f"bench_serving exited {result.exited}: {' | '.join(tail)}")
    last = out.read_text().strip().splitlines()[-1]
    data = json.loads(last)   # bench_serving writes Infinity for an unlimited rate
    keys = ("completed", "duration", "total_input_tokens", "total_output_tokens",
            "request_throughput", "input_throughput", "output_throughput", "total_throughput")
    metrics = {k: data[k] for k in keys if k in data}
    for m in ("ttft", "itl", "tpot", "e2e_latency"):
        for stat in ("mean", "median", "std", "p90", "p95", "p99"):
            k = f"{stat}_{m}_ms"
            if k in data:
                metrics[k] = data[k]
    if data.get("accept_length") is not None:
        metrics["bench_serving_accept_length"] = data["accept_length"]
    missing = bench.params["num_prompts"] - int(data.get("completed", 0))
    return metrics, ["bench_serving: request failed"] * max(missing, 0), None


async def flush_cache(client: httpx.AsyncClient, url: str, server: Server) -> str:
    """Empty the server's prefix cache as the plan says; what happened, for the row."""
    req = server.cache_flush
    if req.path is None:
        return f"not flushed: {req.unavailable}"
    try:
        r = await client.request(req.method, url + req.path, timeout=30.0)
    except httpx.HTTPError as e:
        return f"not flushed: {req.method} {req.path} failed ({type(e).__name__})"
    if not 200 <= r.status_code < 300:
        return f"not flushed: {req.method} {req.path} answered {r.status_code}"
    return "flushed"


async def run_point(server: Server, bench: Benchmark, *, run_dir: Path, ctx=None) -> dict:
    """Run one point and return its results row (never raises for a server's fault).

    Everything it needs is in the plan: the flush request, the client, the acceptance recipe.
    """
    url = base_url(server.host, server.port)
    accept = AcceptanceReading(server.acceptance)
    async with httpx.AsyncClient(trust_env=False) as client:
        flushed = await flush_cache(client, url, server) if bench.params.get("flush_cache") \
            else None
        await accept.start(client, url)
        t0 = time.time()
        try:
            if bench.argv:
                metrics, errors, gone = await _bench_serving(bench, run_dir, ctx)
            else:
                metrics, errors, gone = await _builtin(server, bench, url)
        except DatasetError as e:
            return failed_row(bench, f"dataset: {e}")
        except DriverError as e:
            return failed_row(bench, str(e))
        metrics["accept_length"], metrics["accept_length_scope"] = await accept.finish(client, url)
    n = bench.params["num_prompts"]
    extra = {"started_at": t0, "cache_flush": flushed}
    if gone:
        why = f" (first error: {errors[0]})" if errors else ""
        return _row(bench, "failed", f"server gone mid-run: connection refused, requests left "
                    f"unsent{why}", metrics, **extra)
    if errors:
        first = errors[0]
        return _row(bench, "failed", f"{len(errors)}/{n} requests failed (first: {first})",
                    metrics, **extra)
    return _row(bench, "ok", None, metrics, **extra)


def main(argv=None) -> int:
    """Run one point of a plan against its (already ready) server, appending its row."""
    import argparse

    from specc.results import ResultLog

    ap = argparse.ArgumentParser(prog="python -m specc.run.point", description=main.__doc__)
    ap.add_argument("--plan", required=True)
    ap.add_argument("--benchmark", required=True)
    args = ap.parse_args(argv)
    try:
        plan = Plan.load(args.plan)
    except (OSError, PlanError) as e:
        print(f"error PLAN_UNREADABLE at {args.plan}: {e}", file=sys.stderr)
        return 2
    run_dir = Path(args.plan).resolve().parent
    bench = next((b for b in plan.benchmarks if b.id == args.benchmark), None)
    if bench is None:
        print(f"error: no benchmark {args.benchmark!r} in {args.plan}", file=sys.stderr)
        return 2
    results = ResultLog(run_dir / "results.jsonl")
    if results.finished(bench.id):
        print(f"{bench.id}: already finished")
        return 0
    import invoke

    row = asyncio.run(run_point(plan.server(bench.server), bench, run_dir=run_dir,
                                ctx=invoke.Context()))
    row = with_speedup(row, results.get(bench.baseline) if bench.baseline else None)
    results.append(row)
    print(json.dumps(row["metrics"]) if row["status"] == "ok" else f"failed: {row['reason']}")
    return 0 if row["status"] == "ok" else 3


if __name__ == "__main__":
    raise SystemExit(main())
