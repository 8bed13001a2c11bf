"""One benchmark point against a ready server: flush, acceptance before, load, acceptance after.

Reads only the plan (never an engine adapter), so a plan runs anywhere specc.run is installed.

Also `python -m specc.run.point --plan plan.json --benchmark ID` (what plan.sh calls).
"""

from __future__ import annotations

import asyncio
import json
import math
import shlex
import sys
import time
from pathlib import Path

import httpx

from specc.net import base_url
from specc.plan import BENCH_SERVING_RANDOM_SOURCE, Benchmark, Plan, PlanError, Server
from specc.results import with_speedup  # noqa: F401  (re-export: the executor imports it from here)
from specc.run import lag, positions
from specc.run.loadgen import turnaround
from specc.run.acceptance import AcceptanceReading
from specc.prompts.datasets import DatasetError, load_prompts, write_sharegpt_source
from specc.run.answers import accept_bound
from specc.run.lifecycle import auth_headers


def _row(bench: Benchmark, status: str, reason: str | None, metrics: dict, **extra) -> dict:
    return {"benchmark": bench.id, "server": bench.server, "status": status, "reason": reason,
            "metrics": metrics, "params": bench.params.to_json(), "finished_at": time.time(), **extra}


def failed_row(bench: Benchmark, reason: str) -> dict:
    return _row(bench, "failed", reason, {})


class _Dilated:
    """A streamed trace's (prompt, due time) rows with each time s times later; iterable
    again as the stream is (once for the warm-up, once for the run)."""

    def __init__(self, rows, s: float):
        self.rows, self.s = rows, s

    def __iter__(self):
        return ((q, t * self.s) for q, t in self.rows)


async def _builtin(server: Server, bench: Benchmark, url: str, run_dir: Path | None = None):
    """specc's load generator: the point's prompt sequence, ``repeats`` times, each run
    stopping adaptively when ``target_ci`` says so; per-request lines to requests/."""
    from specc import requestlog as reqlog
    from specc.run.loadgen import run_load
    from specc.run.loadgen.metrics import summarize

    p = bench.params
    target = p.target_ci
    first = p.num_prompts
    most = max(p.max_requests, first) if target else first
    stream = None
    prompts: list = []
    if p.dataset == "trace":   # streamed: read and built as the schedule reaches each row
        from specc.prompts import trace

        stream = trace.Replay(p.dataset_path or "", num=most)
    else:
        prompts = load_prompts(p.dataset, num=most, input_len=p.input_len,
                               output_len=p.output_len, range_ratio=p.range_ratio,
                               path=p.hf_dataset if p.dataset == "hf"
                               else p.dataset_path, seed=p.seed,
                               categories=p.categories, hf_subset=p.hf_subset,
                               hf_split=p.hf_split, multi_turn=p.multi_turn,
                               shared_prefix_len=p.shared_prefix_len,
                               shared_prefix_groups=p.shared_prefix_groups)
    rate = p.request_rate or float("inf")
    s = bench.time_dilation
    client = {"requests": 0, "total_s": 0.0, "worst_s": 0.0, "wall_s": 0.0}
    field = p.request_id_field
    attempt = time.time()
    records, lines, repeats, gone, max_in_flight = [], [], [], False, 0
    for k in range(p.repeats):
        stop = reqlog.Stopper(target_ci=target, min_requests=first, max_requests=most,
                              batch=p.concurrency)
        # the category rides in the request id (the simulator reads it; engines only echo it)
        def request_id(i, q, k=k):
            return field, f"{bench.id[-6:]}{k}{i:05d}/{q.category or '-'}/{q.id or i}"

        ids = None if not field else request_id if stream is not None else [
            request_id(i, q) for i, q in enumerate(prompts)]
        # dilated s times: the schedule's gaps and the timeout s times longer, every time
        # measured divided back by s (the stopper's intervals see the dilated times: a
        # scale does not move a relative interval)
        res = await run_load(url, prompts, api=p.api, model=p.model,
                             headers=auth_headers(server),
                             concurrency=p.concurrency, request_rate=rate / s,
                             warmup=p.warmup_requests if k == 0 else 0,
                             seed=p.seed, timeout_s=p.timeout_s * s,
                             temperature=p.temperature,
                             ignore_eos=p.ignore_eos, request_ids=ids,
                             keep_sending=stop.keep_sending, on_request_done=stop.on_done,
                             burstiness=p.burstiness or 1.0, ramp_s=(p.ramp_s or 0.0) * s,
                             stream=stream if stream is None or s == 1 else _Dilated(stream, s))
        turn = turnaround.turnaround(res.records, t0=res.t0, duration_s=res.duration_s,
                                     concurrency=p.concurrency)   # wall seconds
        if turn is not None:
            client["requests"] += turn["requests"]
            client["total_s"] += turn["total_s"]
            client["worst_s"] = max(client["worst_s"], turn["worst_s"])
            client["wall_s"] += res.duration_s
        turnaround.undilate(res.records, t0=res.t0, factor=s)
        _drop_impossible_verify_counts(res.records, accept_bound(server.params))
        mine = reqlog.lines_for(res.records, stream if stream is not None else prompts,
                                repeat=k, attempt=attempt)
        if run_dir is not None:
            reqlog.append(run_dir, bench.id, mine)
        records += res.records
        lines += mine
        repeats.append({"duration": round(res.duration_s / s, 6),
                        "output_tokens": sum(r.output_tokens for r in res.records if r.ok),
                        "requests": len(res.records), "stopped": stop.reason or "fixed"})
        max_in_flight = max(max_in_flight, res.max_in_flight)
        if res.server_gone:
            gone = True
            break
    duration = sum(x["duration"] for x in repeats)  # type: ignore[misc]  # numbers (above)
    metrics = summarize(records, duration, concurrency=p.concurrency,
                        max_in_flight=max_in_flight)
    errors = [r.error for r in records if not r.ok]
    figures = figures_extra(lines, duration, repeats, p.target_ci)
    if client["requests"] and client["wall_s"] > 0:
        figures["client_turnaround"] = turnaround.figure(
            int(client["requests"]), client["total_s"], client["worst_s"], client["wall_s"],
            p.concurrency, turnaround.floor_s())
    return metrics, errors, gone, figures


def _drop_impossible_verify_counts(records, bound: float) -> None:
    """A request's verify passes (SGLang's spec_verify_ct) that make its accept length
    exceed what the speculation setting can yield are unknown, not a figure."""
    for r in records:
        if r.verify_ct and r.output_tokens / r.verify_ct > bound:
            r.verify_ct = None


def figures_extra(lines: list[dict], duration: float, repeats: list[dict],
                  target_ci: float | None) -> dict:
    """The row's intervals, what they rest on, and the per-category figures (pure)."""
    from specc import stats

    figs = stats.point_figures(lines, duration, repeats=repeats)
    intervals: dict = {k: [v.lo, v.hi] for k, v in figs.items()
                 if isinstance(v, stats.Interval) and v.lo is not None}
    intervals = {k: [round(lo, 4), round(hi, 4)] for k, (lo, hi) in intervals.items()}
    unit = "repeat" if len(repeats) > 1 else "request"
    thr = figs.get("output_throughput")
    basis = {"requests": figs["requests"], "output_tokens": figs["output_tokens"],
             "unit": unit, "repeats": repeats,
             "stopped": repeats[-1]["stopped"] if repeats else "fixed",
             "target_ci": target_ci,
             "half_width": None if thr is None or thr.half_width is None
             else round(thr.half_width, 5)}
    def groups(key: str) -> dict:
        return {name: {"requests": c["requests"], "output_tokens": c["output_tokens"],
                       **{k: v.to_json() for k, v in c.items() if isinstance(v, stats.Interval)}}
                for name, c in (figs.get(key) or {}).items()}

    out = {"intervals": intervals, "basis": basis, "categories": groups("categories")}
    for key in ("turns", "input_buckets"):   # only when the point has more than one
        if figs.get(key):
            out[key] = groups(key)
    return out


class DriverError(Exception):
    """The benchmark client itself failed (not one request): the point's reason."""


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


async def _bench_serving(server: Server, bench: Benchmark, run_dir: Path, ctx):
    """SGLang's own client, run as the plan says (from the run dir, like plan.sh);
    its last JSON line becomes the metrics."""
    from specc.run.lifecycle import resolve_argv

    out = run_dir / "bench_serving" / f"{bench.id}.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    argv = list(bench.argv or ())   # set: the caller checked
    if BENCH_SERVING_RANDOM_SOURCE in argv and not (run_dir / BENCH_SERVING_RANDOM_SOURCE).exists():
        write_sharegpt_source(run_dir / BENCH_SERVING_RANDOM_SOURCE)
    backend = argv[argv.index("--backend") + 1] if "--backend" in argv else "sglang"
    # bench_serving's /generate client spreads each chunk's gap over its tokens (per-token
    # ITL); its OpenAI clients (--backend vllm, sglang-oai, ...) append one gap per chunk
    # (benchmark/serving.py async_request_openai_completions): that is a chunk gap, about
    # accept-length times a token's under speculation, so it is reported as one.
    itl_as = "itl" if backend in ("sglang", "sglang-native") else "chunk_gap"
    lines_before = len(out.read_text().splitlines()) if out.exists() else 0
    command = f"cd {shlex.quote(str(run_dir))} && {shlex.join(resolve_argv(bench.argv))}"
    result = await asyncio.to_thread(ctx.run, command, hide=True, warn=True, in_stream=False)
    if not result.ok or not out.exists() or len(out.read_text().splitlines()) <= lines_before:
        tail = (result.stderr or result.stdout or "").strip().splitlines()[-3:]
        raise DriverError(f"bench_serving exited {result.exited}: {' | '.join(tail)}")
    last = out.read_text().strip().splitlines()[-1]
    try:   # bench_serving writes Infinity for an unlimited rate, NaN for an empty mean
        data = json.loads(last)
    except (ValueError, RecursionError):
        raise DriverError(f"bench_serving's last line in {out.name} is not JSON") from None
    if not isinstance(data, dict):
        raise DriverError(f"bench_serving's last line in {out.name} is not a JSON object")
    keys = ["completed", "duration", "total_input_tokens", "total_output_tokens",
            "request_throughput", "input_throughput", "output_throughput", "total_throughput"]
    keys += [f"{stat}_{m}_ms" for m in ("ttft", "itl", "tpot", "e2e_latency")
             for stat in ("mean", "median", "std", "p90", "p95", "p99")]
    # a figure bench_serving could not compute (NaN, Infinity) is left out, as ours are;
    # its per-chunk ITL (OpenAI clients) is named a chunk gap
    metrics = {(k.replace("_itl_", f"_{itl_as}_")): data[k] for k in keys
               if _finite(data.get(k))}
    acc = data.get("accept_length")
    if _finite(acc) and 1.0 <= acc <= accept_bound(server.params):  # type: ignore[operator]  # _finite: a number
        metrics["bench_serving_accept_length"] = acc
    missing = bench.params.num_prompts - int(metrics.get("completed", 0))
    return metrics, ["bench_serving: request failed"] * max(missing, 0), None, {}


async def flush_cache(client: httpx.AsyncClient, url: str, server: Server) -> str:
    """Empty the server's prefix cache as the plan says; what happened, for the row."""
    req = server.cache_flush
    if req.path is None:
        return f"not flushed: {req.unavailable}"
    try:
        r = await client.request(req.method, url + req.path, timeout=30.0)  # type: ignore[arg-type]  # set with path
    except httpx.HTTPError as e:
        return f"not flushed: {req.method} {req.path} failed ({type(e).__name__})"
    if not 200 <= r.status_code < 300:
        return f"not flushed: {req.method} {req.path} answered {r.status_code}"
    return "flushed"


async def run_point(server: Server, bench: Benchmark, *, run_dir: Path, ctx=None) -> dict:
    """Run one point and return its results row (never raises for a server's fault).

    Everything it needs is in the plan: the flush request, the client, the acceptance
    recipe, the schedule-lag recipe. A point during which the server fell behind its own
    schedule (the simulator starved of CPU) is measured once more (its request lines are
    a new attempt), then failed with the reason: never a valid row.
    """
    row = await _measure(server, bench, run_dir=run_dir, ctx=ctx)
    first = _behind(row) if row["status"] == "ok" else None
    if first is None:
        return row
    row = await _measure(server, bench, run_dir=run_dir, ctx=ctx)
    if row["status"] != "ok":
        return row
    again = _behind(row)
    if again is None:
        row["remeasured"] = first
        return row
    row.update(status="failed", reason=f"{again}, measured twice (first: {first})")
    return row


def _behind(row: dict) -> str | None:
    """Why an ok row measured the machine's CPU rather than the server: the simulator
    behind its schedule, or the load generator behind its own requests (None: neither)."""
    why = [w for w in (lag.behind(row.get("schedule_lag")),
                       turnaround.behind(row.get("client_turnaround"))) if w]
    return "; ".join(why) or None


async def set_time_dilation(client: httpx.AsyncClient, url: str, server: Server,
                            bench: Benchmark) -> str | None:
    """Tell a simulated server the point's time dilation (every point: the one before may
    have had another); the failure, or None. A server without the route runs in real
    time: what a point at 1 asks, so only a dilated point fails for it."""
    if server.time_dilation is None:
        return None if bench.time_dilation == 1 else "time dilation: the server has none"
    path, factor = server.time_dilation.path, bench.time_dilation
    try:
        r = await client.post(url + path, json={"factor": factor}, timeout=30.0)
    except httpx.HTTPError as e:
        return None if factor == 1 else \
            f"time dilation not set: POST {path} failed ({type(e).__name__})"
    if r.status_code == 404 and factor == 1:
        return None
    if r.status_code != 200:
        return f"time dilation not set: POST {path} answered {r.status_code}"
    return None


async def _measure(server: Server, bench: Benchmark, *, run_dir: Path, ctx=None) -> dict:
    url = base_url(server.host, server.port)
    accept = AcceptanceReading(server.acceptance, accept_bound(server.params))
    async with httpx.AsyncClient(trust_env=False, headers=auth_headers(server)) as client:
        flushed = await flush_cache(client, url, server) if bench.params.flush_cache \
            else None
        await accept.start(client, url)
        pos_before = await positions.read(client, url, bench.params.accept_positions)
        not_set = await set_time_dilation(client, url, server, bench)
        if not_set:
            return failed_row(bench, not_set)
        lag_before = await lag.read(client, url, server.schedule_lag)
        t0 = time.time()
        try:
            if bench.argv:
                metrics, errors, gone, figures = await _bench_serving(server, bench, run_dir, ctx)
            else:
                metrics, errors, gone, figures = await _builtin(server, bench, url, run_dir)
        except DatasetError as e:
            return failed_row(bench, f"dataset: {e}")
        except DriverError as e:
            return failed_row(bench, str(e))
        # the simulator's lateness is wall time: against the point's wall duration
        wall = metrics.get("duration")
        behind = lag.over_point(server.schedule_lag, lag_before,
                                await lag.read(client, url, server.schedule_lag),
                                None if wall is None else wall * bench.time_dilation)
        if behind is not None:
            figures["schedule_lag"] = behind
        per_pos = positions.rates(pos_before, await positions.read(
            client, url, bench.params.accept_positions))
        if per_pos is not None:
            figures["accept_per_position"] = per_pos
        metrics["accept_length"], metrics["accept_length_scope"] = await accept.finish(client, url)
    if accept.note:
        figures["accept_length_unknown" if metrics["accept_length"] is None
                else "accept_length_note"] = accept.note
    # requests sent (adaptive stopping and repeats change it), else the plan's count
    n = int(metrics.get("completed", 0)) + len(errors) or bench.params.num_prompts
    extra = {"started_at": t0, "cache_flush": flushed, **figures}
    if bench.time_dilation != 1:   # the row's times are the model's, run this many times slower
        extra["time_dilation"] = bench.time_dilation
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
