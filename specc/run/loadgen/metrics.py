"""bench_serving's metrics over the request records (pure functions).

Two views of the time between tokens, both named: ``itl`` is bench_serving's
(sglang 0.5.23, ``sglang/benchmark/serving.py``): a chunk's gap spread evenly
over the tokens it brought, one value per token, so on a speculative server
it is per token, not per forward pass.  ``chunk_gap`` is the time between the
chunks a user sees arrive, about accept-length times larger there.
"""

from __future__ import annotations

import math

from specc.run.loadgen.records import RequestRecord

_STATS = ("ttft", "itl", "chunk_gap", "tpot", "e2e_latency")
_PCTS = (("median", 50.0), ("p90", 90.0), ("p95", 95.0), ("p99", 99.0))
METRIC_KEYS: tuple[str, ...] = (
    "completed", "failed", "duration", "total_input_tokens", "total_output_tokens",
    "request_throughput", "input_throughput", "output_throughput", "total_throughput",
    *[f"{s}_{x}_ms" for x in _STATS for s in ("mean", "median", "std", "p90", "p95", "p99")],
    "per_stream_output_throughput", "median_per_stream_output_throughput",
    "concurrency", "mean_concurrency", "max_concurrent_requests",
)


def per_token_itls(times: list[float], counts: list[int]) -> list[float]:
    """bench_serving's ``itl`` list of one stream, from the time and cumulative token
    count of each chunk that carried output: the first chunk is TTFT; a later one
    with n new tokens adds n values of (gap since the last counted chunk) / n; one
    with no new tokens is skipped (its gap rolls into the next), as bench_serving does."""
    out: list[float] = []
    if not times:
        return out
    last_t, last_n = times[0], counts[0]
    for t, n in zip(times[1:], counts[1:]):
        new = n - last_n
        if new <= 0:
            continue
        out.extend([(t - last_t) / new] * new)
        last_t, last_n = t, n
    return out


def spread_itls(chunk_gaps: list[float], output_tokens: int) -> list[float]:
    """Per-token ITL when the server does not count tokens per chunk: each gap over the
    stream's mean tokens per chunk after the first (taken as one token); their mean
    is still the stream's decode time per token."""
    if not chunk_gaps:
        return []
    per_chunk = max(1.0, (output_tokens - 1) / len(chunk_gaps))
    return [g / per_chunk for g in chunk_gaps]



def percentile(sorted_vals: list[float], p: float) -> float:
    """numpy's default (linear) percentile of an already sorted list."""
    n = len(sorted_vals)
    if n == 0:
        return 0.0
    pos = (n - 1) * p / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, n - 1)
    frac = pos - lo
    return sorted_vals[lo] + (sorted_vals[hi] - sorted_vals[lo]) * frac


def _stats_ms(name: str, vals: list[float], out: dict[str, float]) -> None:
    """A figure's stats in ms; none at all without a sample (a point whose outputs are
    one token long has no time between tokens: 0.0 would be a measurement it never made)."""
    v = sorted(x * 1000.0 for x in vals)
    n = len(v)
    if not n:
        return
    mean = sum(v) / n
    out[f"mean_{name}_ms"] = mean
    out[f"median_{name}_ms"] = percentile(v, 50.0)
    out[f"std_{name}_ms"] = math.sqrt(sum((x - mean) ** 2 for x in v) / n)
    for label, p in _PCTS[1:]:
        out[f"{label}_{name}_ms"] = percentile(v, p)


def summarize(records: list[RequestRecord], duration_s: float, *,
              concurrency: int | None = None, max_in_flight: int | None = None
              ) -> dict[str, float]:
    """bench_serving's metrics over the successful records (pure function). A latency
    figure with no sample (TPOT, ITL, chunk gap, per-stream throughput when every output
    is one token; all of them with no request completed) is left out, not written as 0.

    ``concurrency`` is the configured cap; without one it reports the measured
    mean in-flight count (sum of e2e latencies / duration, as bench_serving's
    ``concurrency``), which is always in ``mean_concurrency``.
    """
    ok = [r for r in records if r.ok]
    dur = duration_s if duration_s > 0 else 0.0
    m: dict[str, float] = {}
    m["completed"] = len(ok)
    m["failed"] = len(records) - len(ok)
    m["duration"] = dur
    tin = sum(r.input_tokens for r in ok)
    tout = sum(r.output_tokens for r in ok)
    m["total_input_tokens"] = tin
    m["total_output_tokens"] = tout

    def rate(x: float) -> float:
        return x / dur if dur > 0 else 0.0

    m["request_throughput"] = rate(len(ok))
    m["input_throughput"] = rate(tin)
    m["output_throughput"] = rate(tout)
    m["total_throughput"] = rate(tin + tout)
    itls = [x for r in ok for x in r.itls]
    gaps = [x for r in ok for x in r.chunk_gaps]
    tpots = [t for t in (r.tpot for r in ok) if t is not None]
    _stats_ms("ttft", [r.ttft for r in ok], m)
    _stats_ms("itl", itls, m)
    _stats_ms("chunk_gap", gaps, m)
    _stats_ms("tpot", tpots, m)
    _stats_ms("e2e_latency", [r.e2e_latency for r in ok], m)
    per_stream = sorted((r.output_tokens - 1) / (r.e2e_latency - r.ttft) for r in ok
                        if r.output_tokens > 1 and r.e2e_latency > r.ttft)
    if per_stream:   # needs 2+ tokens in a request, like TPOT and ITL
        m["per_stream_output_throughput"] = sum(per_stream) / len(per_stream)
        m["median_per_stream_output_throughput"] = percentile(per_stream, 50.0)
    mean_conc = rate(sum(r.e2e_latency for r in ok))
    m["mean_concurrency"] = mean_conc
    m["concurrency"] = float(concurrency) if concurrency else mean_conc
    if max_in_flight is not None:
        m["max_concurrent_requests"] = max_in_flight
    return m
