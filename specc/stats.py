"""Numbers you can trust: 95% intervals, paired speedups, ties and adaptive stopping (pure functions).

Why: speculative configurations often differ by a few percent, and a table
that prints 1.96x next to 1.90x with nothing else cannot say whether the
difference is real. Every figure here comes with its interval and the number of
units it rests on.

Units. A point's requests are the units (bootstrap over requests); when a
point is repeated (``benchmark.repeats`` > 1) the repeats are (bootstrap over
repeats). Above ``MAX_UNITS`` units, consecutive units are summed into
``MAX_UNITS`` blocks in send order before resampling (a blocked bootstrap:
the same estimator, 100k requests in well under a second, and requests that
were in flight together stay together).

Throughput. A point's output throughput is ``sum(tokens) / duration``. Written
as ``C * sum(tokens) / sum(latency)``, with ``C = sum(latency) / duration`` the
measured mean number of requests in flight, it becomes a ratio of sums over
requests; the bootstrap resamples requests and holds ``C`` at its measured
value, so the interval reflects what varies between requests (the text asked
for, and so the acceptance) at the load the point ran. The full-sample value
is exactly the point's throughput.

Speedup. Matched baseline and speculative points send the same prompts in the
same order, so request ``i`` of one pairs with request ``i`` of the other. The
paired bootstrap resamples pair indices and takes the ratio of the two
throughput estimators on the same resample: variation that comes from the
prompts themselves cancels. ``1.30x [1.24, 1.37]``; an interval that covers
1.0 is "no significant difference".

Quantiles (median, p90, p99 of TTFT, TPOT, end-to-end latency) get the
distribution-free order-statistic interval, which is what the bootstrap
percentile interval of a quantile converges to, without resampling.

Every interval is a 95% percentile-bootstrap interval with a fixed seed (the
same data give the same interval). numpy is imported when a function needs it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from collections.abc import Sequence

__all__ = ["Interval", "LEVEL", "RESAMPLES", "MAX_UNITS", "ratio_interval", "mean_interval",
           "quantile_interval", "throughput_interval", "speedup_interval",
           "paired_ratio_interval", "paired_ratio_resamples", "resampled_percentiles",
           "significance", "fmt_speedup", "ties", "stop_decision", "requests_for",
           "quantile_upper_defined"]

LEVEL = 0.95
RESAMPLES = 2000
MAX_UNITS = 1000
_Z = 1.959963984540054   # two-sided 95% normal quantile


@dataclass(frozen=True)
class Interval:
    """A figure with its interval and what it rests on (``lo``/``hi`` None below 2 units)."""

    value: float
    lo: float | None
    hi: float | None
    n: int                  # units resampled: requests, pairs or repeats
    unit: str = "request"   # "request" | "pair" | "repeat"

    @property
    def half_width(self) -> float | None:
        """Relative half-width: (hi - lo) / 2 / |value| (None if unknown)."""
        if self.lo is None or self.hi is None or not self.value:
            return None
        return (self.hi - self.lo) / 2.0 / abs(self.value)

    def covers(self, x: float) -> bool:
        return self.lo is not None and self.hi is not None and self.lo <= x <= self.hi

    def overlaps(self, other: Interval) -> bool:
        if self.lo is None or self.hi is None or other.lo is None or other.hi is None:
            return self.value == other.value
        return self.lo <= other.hi and other.lo <= self.hi

    def to_json(self, digits: int = 4) -> dict:
        r = (lambda x: None if x is None else round(float(x), digits))
        return {"value": r(self.value), "lo": r(self.lo), "hi": r(self.hi), "n": self.n,
                "unit": self.unit}


def _np():
    import numpy

    return numpy


def _blocks(np, cols: list, max_units: int) -> list:
    """Sum consecutive units into at most ``max_units`` blocks (send order kept)."""
    n = len(cols[0])
    if n <= max_units:
        return cols
    k = math.ceil(n / max_units)
    m = math.ceil(n / k)
    out = []
    for c in cols:
        pad = np.zeros(m * k, dtype=float)
        pad[:n] = c
        out.append(pad.reshape(m, k).sum(axis=1))
    return out


@lru_cache(maxsize=4)
def _weights(m: int, resamples: int, seed: int):
    """How often each of ``m`` units is drawn in each resample (resamples x m, float32):
    a sum over a resample is then one matrix product, for every column at once."""
    np = _np()
    idx = np.random.default_rng(seed).integers(0, m, size=(resamples, m), dtype=np.int64)
    idx += np.arange(resamples, dtype=np.int64)[:, None] * m
    return np.bincount(idx.ravel(), minlength=resamples * m).reshape(resamples, m).astype(
        np.float32)


def _resampled_sums(cols: list, resamples: int, seed: int, max_units: int):
    """Per column, its sum over each of ``resamples`` bootstrap resamples (same draws)."""
    np = _np()
    arrs = _blocks(np, cols, max_units)
    w = _weights(len(arrs[0]), resamples, seed)
    x = np.stack(arrs, axis=1).astype(np.float32)
    # In slices of 64 resamples: each product stays under OpenBLAS's threading threshold;
    # on a busy machine its threads spin against each other (12 ms vs 0.6 ms per product).
    sums = np.concatenate([w[i:i + 64] @ x for i in range(0, len(w), 64)]).astype(float)
    return [sums[:, j] for j in range(len(arrs))]


def _percentiles(np, stats, level: float) -> tuple[float | None, float | None]:
    stats = stats[np.isfinite(stats)]
    if not len(stats):
        return None, None
    a = (1.0 - level) / 2.0
    lo, hi = np.quantile(stats, [a, 1.0 - a])
    return float(lo), float(hi)


def ratio_interval(num: Sequence[float], den: Sequence[float], *, scale: float = 1.0,
                   unit: str = "request", resamples: int = RESAMPLES, seed: int = 0,
                   level: float = LEVEL, max_units: int = MAX_UNITS) -> Interval:
    """``scale * sum(num) / sum(den)`` over units, with its bootstrap interval."""
    np = _np()
    num, den = np.asarray(num, dtype=float), np.asarray(den, dtype=float)
    n = len(num)
    if n != len(den):
        raise ValueError(f"num and den differ in length ({n} vs {len(den)})")
    if n == 0:
        raise ValueError("no units")
    tot = float(np.sum(den))
    value = scale * float(np.sum(num)) / tot if tot else float("nan")
    if n < 2:
        return Interval(value, None, None, n, unit)
    sn, sd = _resampled_sums([num, den], resamples, seed, max_units)
    with np.errstate(divide="ignore", invalid="ignore"):
        stats = scale * sn / sd
    lo, hi = _percentiles(np, stats, level)
    return Interval(value, lo, hi, n, unit)


def mean_interval(values: Sequence[float], **kw) -> Interval:
    """The mean over units, with its bootstrap interval."""
    return ratio_interval(values, [1.0] * len(values), **kw)


def paired_ratio_interval(num_a, den_a, num_b, den_b, *, scale: float = 1.0,
                          unit: str = "pair", resamples: int = RESAMPLES, seed: int = 0,
                          level: float = LEVEL, max_units: int = MAX_UNITS) -> Interval:
    """``scale * (sum(num_a)/sum(den_a)) / (sum(num_b)/sum(den_b))``, units resampled in pairs."""
    np = _np()
    num_a, den_a, num_b, den_b = (np.asarray(x, dtype=float) for x in (num_a, den_a, num_b, den_b))
    n = len(num_a)
    if not n == len(den_a) == len(num_b) == len(den_b):
        raise ValueError("paired columns differ in length")
    if n == 0:
        raise ValueError("no pairs")
    a = float(num_a.sum()) / float(den_a.sum())
    b = float(num_b.sum()) / float(den_b.sum())
    value = scale * a / b if b else float("nan")
    if n < 2:
        return Interval(value, None, None, n, unit)
    na, da, nb, db = _resampled_sums([num_a, den_a, num_b, den_b], resamples, seed, max_units)
    with np.errstate(divide="ignore", invalid="ignore"):
        stats = scale * (na / da) / (nb / db)
    lo, hi = _percentiles(np, stats, level)
    return Interval(value, lo, hi, n, unit)


def paired_ratio_resamples(num_a, den_a, num_b, den_b, *, resamples: int = RESAMPLES,
                           seed: int = 0):
    """Many points at once: rows are points, columns their ``n`` pairs (the same for all).
    Returns (values, resampled) with ``values[p] = (sum num_a/sum den_a)/(sum num_b/sum den_b)``
    and ``resampled[p, r]`` the same ratio on bootstrap resample r -- every row drawn with
    the same pair indices, so ratios of rows are themselves paired resamples. One matrix
    product for the four columns: 10^4 points of 16 pairs in a fraction of a second.
    (Not in slices of resamples as _resampled_sums: a product this narrow costs less
    whole, even with OpenBLAS's threads on a busy machine -- median 29 ms against 237 ms
    in slices of 64 for 1024 points, on 2 cores at load 14 -- and gives the same bits.)"""
    np = _np()
    cols = [np.asarray(x, dtype=np.float32) for x in (num_a, den_a, num_b, den_b)]
    w = _weights(cols[0].shape[1], resamples, seed)
    p = cols[0].shape[0]
    with np.errstate(divide="ignore", invalid="ignore"):
        sums = [c.sum(axis=1, dtype=float) for c in cols]
        values = (sums[0] / sums[1]) / (sums[2] / sums[3])
        s = np.concatenate(cols) @ w.T
        na, da, nb, db = (s[j * p:(j + 1) * p] for j in range(4))
        return values, (na / da) / (nb / db)


def resampled_percentiles(resampled, level: float = LEVEL):
    """Per row, the percentile interval of its resamples (numpy's linear rule, as
    ``_percentiles``), by one sort of each row: (lo, hi) arrays."""
    np = _np()
    r = np.where(np.isfinite(resampled), resampled, np.inf)   # a 0/0 resample sorts last
    a, last = (1.0 - level) / 2.0, r.shape[1] - 1
    pos = [q * last for q in (a, 1.0 - a)]
    ks = [int(math.floor(p)) for p in pos]
    # a full sort, not a partition: numpy sorts float32 rows with SIMD, ~6x faster than
    # np.partition at four kth (the same order statistics)
    part = np.sort(r, axis=1)
    lo, hi = (part[:, k] + (part[:, min(k + 1, last)] - part[:, k]) * (p - k)
              for k, p in zip(ks, pos))
    return lo, hi


def throughput_interval(tokens: Sequence[float], latencies: Sequence[float], duration: float,
                        **kw) -> Interval:
    """A point's output throughput (tokens / duration) from its requests, with its interval."""
    lat = float(_np().asarray(latencies, dtype=float).sum())
    if duration <= 0 or lat <= 0:
        raise ValueError("duration and latencies must be positive")
    return ratio_interval(tokens, latencies, scale=lat / duration, **kw)


def speedup_interval(spec_tokens, spec_latencies, spec_duration: float,
                     base_tokens, base_latencies, base_duration: float, **kw) -> Interval:
    """Paired speedup of matched requests: the ratio of the two throughput estimators.

    Its value is exactly output throughput / the baseline's when every request
    of both points is in the pairs.
    """
    np = _np()
    c_spec = float(np.asarray(spec_latencies, dtype=float).sum()) / spec_duration
    c_base = float(np.asarray(base_latencies, dtype=float).sum()) / base_duration
    return paired_ratio_interval(spec_tokens, spec_latencies, base_tokens, base_latencies,
                                 scale=c_spec / c_base, **kw)


def quantile_interval(values: Sequence[float], q: float, *, level: float = LEVEL,
                      unit: str = "request") -> Interval:
    """The ``q`` quantile (numpy's linear rule) and its order-statistic interval."""
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"q must be in [0, 1], got {q}")
    np = _np()
    v = np.sort(np.asarray(values, dtype=float))
    n = len(v)
    if n == 0:
        raise ValueError("no values")
    value = float(np.quantile(v, q))
    if n < 2:
        return Interval(value, None, None, n, unit)
    lo_rank, hi_rank = _quantile_ranks(n, q, level)
    lo_rank, hi_rank = max(1, lo_rank), min(n, hi_rank)
    return Interval(value, min(float(v[lo_rank - 1]), value), max(float(v[hi_rank - 1]), value),
                    n, unit)


def _quantile_ranks(n: int, q: float, level: float) -> tuple[int, int]:
    """The order-statistic interval's 1-based ranks, before clamping to the sample."""
    z = _Z if level == LEVEL else _normal_quantile(0.5 + level / 2.0)
    sd = math.sqrt(n * q * (1.0 - q))
    return math.floor(n * q - z * sd), math.ceil(n * q + z * sd) + 1


def quantile_upper_defined(n: int, q: float, level: float = LEVEL) -> bool:
    """Whether ``n`` values bound the ``q`` quantile from above at ``level``: the upper
    rank lies within the sample (else quantile_interval's hi is only the sample's
    maximum, which p99 of 100 values exceeds one time in three)."""
    return n >= 2 and _quantile_ranks(n, q, level)[1] <= n


def _normal_quantile(p: float) -> float:
    """Inverse normal CDF by bisection on erf (only for a non-default level)."""
    lo, hi = -10.0, 10.0
    for _ in range(100):
        mid = (lo + hi) / 2.0
        if 0.5 * (1.0 + math.erf(mid / math.sqrt(2.0))) < p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2.0


# --------------------------------------------------------------------------- reading them

def significance(iv: Interval, null: float = 1.0) -> str:
    """"faster" / "slower" than ``null``, or "no significant difference" (interval covers it)."""
    if iv.lo is None or iv.hi is None:
        return "no interval"
    if iv.lo <= null <= iv.hi:
        return "no significant difference"
    return "faster" if iv.lo > null else "slower"


def fmt_speedup(iv: Interval | None) -> str:
    """``1.30x [1.24, 1.37]`` (``1.02x [0.98, 1.05] n.s.`` when it covers 1.0)."""
    if iv is None or iv.value is None or math.isnan(iv.value):
        return "-"
    if iv.lo is None:
        return f"{iv.value:.2f}x"
    ns = " n.s." if iv.covers(1.0) else ""
    return f"{iv.value:.2f}x [{iv.lo:.2f}, {iv.hi:.2f}]{ns}"


def ties(figures: dict, higher_is_better: bool = True) -> tuple[object, list]:
    """(best key, every key whose interval overlaps the best's, best first).

    ``figures`` maps a setting to its Interval; the "best setting" is reported
    with its ties, since a difference inside the intervals is not a finding.
    """
    items = [(k, iv) for k, iv in figures.items()
             if iv is not None and iv.value is not None and not math.isnan(iv.value)]
    if not items:
        return None, []
    best_key, best = max(items, key=lambda kv: kv[1].value if higher_is_better else -kv[1].value)
    tied = [best_key] + [k for k, iv in items if k != best_key and iv.overlaps(best)]
    return best_key, tied


def stop_decision(iv: Interval | None, *, sent: int, target_ci: float | None,
                  min_requests: int, max_requests: int) -> str | None:
    """Adaptive stopping: None (send another batch), "target" (interval tight enough) or "max".

    ``target_ci`` is the relative half-width wanted (0.02 = +-2%); without one
    the point stops at ``min_requests`` ("fixed").
    """
    if sent < min_requests:
        return None
    if not target_ci:
        return "fixed"
    hw = iv.half_width if iv is not None else None
    if hw is not None and hw <= target_ci:
        return "target"
    if sent >= max_requests:
        return "max"
    return None


def requests_for(target_ci: float, cv: float) -> int:
    """Requests a mean needs for a relative half-width ``target_ci`` when one request's
    coefficient of variation is ``cv`` (normal approximation): (z * cv / target)^2."""
    if target_ci <= 0:
        raise ValueError("target_ci must be > 0")
    return max(2, math.ceil((_Z * cv / target_ci) ** 2))


# --------------------------------------------------------------------------- a point's figures

#: Per-request latency figures that get intervals (per-token ITL has none: its tokens are
#: not independent units, and there are hundreds per request).
LATENCIES = ("ttft", "tpot", "e2e_latency")
_QUANTS = (("median", 0.5), ("p90", 0.9), ("p99", 0.99))


class _Columns:
    """A point's successful requests as numpy columns (one pass over the records)."""

    def __init__(self, reqs: list[dict]):
        np = _np()
        ok = [r for r in reqs if r.get("ok")]
        self.n = len(ok)
        names: dict[str, int] = {}
        rows = [(r["output_tokens"], r["e2e_latency"], r["ttft"], r.get("verify_ct") or 0,
                 r.get("repeat", 0), r["i"], names.setdefault(r.get("category") or "-",
                                                              len(names)),
                 r.get("turn") or 1, r.get("input_tokens") or 0) for r in ok]
        a = np.array(rows, dtype=float).reshape(self.n, 9)
        self.tok, self.lat, self.ttft, self.verify = a[:, 0], a[:, 1], a[:, 2], a[:, 3]
        self.rep, self.i, self.cat = a[:, 4], a[:, 5], a[:, 6].astype(np.int64)
        self.turn, self.inp = a[:, 7].astype(np.int64), a[:, 8]
        # a request is its prompt and its turn in the conversation (multi-turn)
        self.ids = [(r.get("id"), r.get("turn") or 1) for r in ok]
        self.categories = list(names)


def _latency_figures(c: _Columns, out: dict) -> None:
    np = _np()
    with np.errstate(divide="ignore", invalid="ignore"):
        tpot = np.where(c.tok > 1, (c.lat - c.ttft) / (c.tok - 1), np.nan)
    for name, vals in (("ttft", c.ttft), ("tpot", tpot), ("e2e_latency", c.lat)):
        vals = vals[np.isfinite(vals)] * 1000.0
        if not len(vals):
            continue
        out[f"mean_{name}_ms"] = mean_interval(vals)
        for label, q in _QUANTS:
            out[f"{label}_{name}_ms"] = quantile_interval(vals, q)


def _accept(tok, verify) -> Interval | None:
    """Accept length = tokens / verify passes over the requests the engine reported it for."""
    have = verify > 0
    if not have.any():
        return None
    return ratio_interval(tok[have], verify[have])


def _pair_index(spec: _Columns, base: _Columns):
    """(spec rows, base rows) of matched requests: the same (repeat, position in the
    sequence), ok on both sides, and the same prompt (else the points did not do equal work)."""
    np = _np()
    if spec.n == base.n and np.array_equal(spec.i, base.i) and np.array_equal(spec.rep, base.rep):
        rows = np.arange(spec.n)
        if spec.ids != base.ids:
            rows = rows[np.fromiter((a == b for a, b in zip(spec.ids, base.ids)), bool, spec.n)]
        return rows, rows
    where = {k: j for j, k in enumerate(zip(base.rep.tolist(), base.i.tolist()))}
    s_idx, b_idx = [], []
    for j, k in enumerate(zip(spec.rep.tolist(), spec.i.tolist())):
        m = where.get(k)
        if m is not None and base.ids[m] == spec.ids[j]:
            s_idx.append(j)
            b_idx.append(m)
    return np.asarray(s_idx, dtype=np.int64), np.asarray(b_idx, dtype=np.int64)


def point_figures(reqs: list[dict], duration: float, *, base: list[dict] | None = None,
                  base_duration: float | None = None, repeats: list[dict] | None = None,
                  base_repeats: list[dict] | None = None) -> dict:
    """A point's figures with intervals, from its per-request records (and its baseline's).

    ``reqs``: dicts with ``i`` (position in the sequence), ``id``, ``category``, ``ok``,
    ``output_tokens``, ``ttft`` and ``e2e_latency`` (s), optional ``verify_ct`` and
    ``repeat``. ``repeats``: per repeat ``{"duration", "output_tokens"}``; with more
    than one, throughput and speedup are bootstrapped over repeats (latencies stay
    over requests).
    Returns {figure: Interval, "categories": {name: {...}}, "requests": n,
    "output_tokens": n, "pairs": n}.
    """
    c = _Columns(reqs)
    out: dict = {"requests": c.n, "output_tokens": int(c.tok.sum()), "pairs": 0}
    if not c.n:
        return out
    by_repeat = repeats is not None and len(repeats) > 1
    if by_repeat and repeats:
        out["output_throughput"] = ratio_interval(
            [x["output_tokens"] for x in repeats], [x["duration"] for x in repeats], unit="repeat")
    elif duration > 0:
        out["output_throughput"] = throughput_interval(c.tok, c.lat, duration)
    _latency_figures(c, out)
    acc = _accept(c.tok, c.verify)
    if acc is not None:
        out["accept_length"] = acc
    s_idx = b_idx = None
    b: _Columns | None = None
    if base:
        b = _Columns(base)
        s_idx, b_idx = _pair_index(c, b)
        out["pairs"] = len(s_idx)
        if len(s_idx) and by_repeat and repeats and base_repeats and len(base_repeats) == len(repeats):
            out["speedup"] = paired_ratio_interval(
                [x["output_tokens"] for x in repeats], [x["duration"] for x in repeats],
                [x["output_tokens"] for x in base_repeats], [x["duration"] for x in base_repeats],
                unit="repeat")
        elif len(s_idx) and duration > 0 and base_duration:
            # each side's in-flight factor C, measured over all of its requests
            scale = (c.lat.sum() / duration) / (b.lat.sum() / base_duration)
            out["speedup"] = paired_ratio_interval(c.tok[s_idx], c.lat[s_idx], b.tok[b_idx],
                                                   b.lat[b_idx], scale=scale)
    out["categories"] = _groups(c, c.cat, c.categories, b, s_idx, b_idx)
    turns = sorted(set(c.turn.tolist()))
    if len(turns) > 1:
        out["turns"] = _groups(c, c.turn, {t: str(t) for t in turns}, b, s_idx, b_idx)
    buckets = _np().searchsorted(INPUT_BUCKETS, c.inp, side="right") - 1
    present = sorted(set(buckets.tolist()))
    if len(present) > 1:
        out["input_buckets"] = _groups(c, buckets, {k: bucket_name(k) for k in present}, b,
                                       s_idx, b_idx)
    return out


#: Input-length buckets (prompt tokens, lower edges): acceptance falls as the context grows.
INPUT_BUCKETS = (0, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)


def bucket_name(k: int) -> str:
    """``<1k``, ``2k-4k``, ``128k+`` for bucket k of INPUT_BUCKETS."""
    lo = INPUT_BUCKETS[k]
    if k == 0:
        return f"<{INPUT_BUCKETS[1] // 1024}k"
    if k == len(INPUT_BUCKETS) - 1:
        return f"{lo // 1024}k+"
    return f"{lo // 1024}k-{INPUT_BUCKETS[k + 1] // 1024}k"


def _groups(c: _Columns, codes, names, b, s_idx, b_idx) -> dict:
    """Per group (category, turn, input-length bucket; ``names``: code -> name, or a list):
    requests, tokens, tokens/s per request (sum of tokens / sum of latencies), mean TTFT,
    accept length and the paired per-request speedup (latency-based: groups share
    batches, so a group has no throughput of its own)."""
    out = {}
    items = names.items() if isinstance(names, dict) else enumerate(names)
    for code, name in items:
        mask = codes == code
        tok, lat = c.tok[mask], c.lat[mask]
        fig = {"requests": int(mask.sum()), "output_tokens": int(tok.sum()),
               "tokens_per_s": ratio_interval(tok, lat),
               "mean_ttft_ms": mean_interval(c.ttft[mask] * 1000.0)}
        acc = _accept(tok, c.verify[mask])
        if acc is not None:
            fig["accept_length"] = acc
        if s_idx is not None and len(s_idx):
            sel = codes[s_idx] == code
            if sel.any():
                si, bi = s_idx[sel], b_idx[sel]
                fig["speedup"] = paired_ratio_interval(c.tok[si], c.lat[si], b.tok[bi], b.lat[bi])
                fig["pairs"] = int(sel.sum())
        out[name] = fig
    return out
