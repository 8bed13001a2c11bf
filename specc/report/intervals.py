"""The report's statistics: intervals, paired speedups, categories and ties (issue 10).

For every successful point it reads the per-request records the point left in
``requests/<benchmark id>.jsonl`` (and its baseline's) and computes, with
``specc.stats``, each figure's 95% interval, the speedup from a paired
bootstrap over matched prompts, and the per-category speedup and accept
length. A point without request records (an older run, SGLang's
bench_serving) keeps the intervals its result line carries, if any.
"""

from __future__ import annotations

from specc import stats
from specc import requestlog as reqlog
from specc.report.model import DASH, Group, PointRow, _num


def _duration(row: PointRow, basis: dict) -> float:
    reps = basis.get("repeats") or []
    d = sum(_num(x.get("duration")) or 0.0 for x in reps if isinstance(x, dict))
    return d or (row.metric("duration") or 0.0)


def attach(rows: list[PointRow], results: dict, run_dir) -> None:
    """Fill each ok row's ``intervals``, ``speedup_iv``, ``categories`` and ``basis``."""
    by_id = {r.benchmark: r for r in rows}
    lines = {}

    def reqs(bid):
        if bid not in lines:
            lines[bid] = reqlog.read(run_dir, bid) if run_dir is not None else []
        return lines[bid]

    for r in rows:
        if r.status != "ok":
            continue
        res = results.get(r.benchmark)
        extra = res.extra if res is not None else {}
        r.basis = dict(extra.get("basis") or {})
        pp = extra.get("accept_per_position")
        r.accept_per_position = [float(x) for x in pp] if isinstance(pp, list) and all(
            _num(x) is not None for x in pp) else None
        mine = reqs(r.benchmark)
        if not mine:   # no request records: the intervals the result line carries
            r.intervals = {k: stats.Interval(r.metric(k), lo, hi, r.basis.get("requests") or 0)  # type: ignore[arg-type]  # not None: filtered below
                           for k, (lo, hi) in (extra.get("intervals") or {}).items()
                           if r.metric(k) is not None}
            continue
        base_row = by_id.get(r.baseline_benchmark) if r.baseline_benchmark else None
        base = reqs(base_row.benchmark) if base_row is not None and base_row.status == "ok" \
            else None
        base_basis: dict = {}
        if base and base_row is not None and results.get(base_row.benchmark) is not None:
            base_basis = results[base_row.benchmark].extra.get("basis") or {}
        figs = stats.point_figures(
            mine, _duration(r, r.basis), base=base or None,
            base_duration=_duration(base_row, base_basis) if base and base_row is not None else None,
            repeats=r.basis.get("repeats"), base_repeats=base_basis.get("repeats"))
        r.intervals = {k: v for k, v in figs.items() if isinstance(v, stats.Interval)}
        r.speedup_iv = r.intervals.pop("speedup", None)
        r.categories = figs.get("categories") or {}
        r.turns = figs.get("turns") or {}
        r.input_buckets = figs.get("input_buckets") or {}
        r.basis.setdefault("requests", figs["requests"])
        r.basis.setdefault("output_tokens", figs["output_tokens"])
        r.basis["pairs"] = figs.get("pairs", 0)


# --------------------------------------------------------------------------- text

def fmt_iv(iv: stats.Interval | None, digits: int = 1) -> str:
    """``420.0 [418.1, 421.9]``; the value alone below 2 units."""
    if iv is None or iv.value is None:
        return DASH
    if iv.lo is None:
        return f"{iv.value:.{digits}f}"
    return f"{iv.value:.{digits}f} [{iv.lo:.{digits}f}, {iv.hi:.{digits}f}]"


def speedup_text(r: PointRow) -> str:
    """The paired interval when known (``1.30x [1.24, 1.37]``, ``n.s.`` when it covers 1)."""
    if r.speedup_iv is not None:
        return stats.fmt_speedup(r.speedup_iv)
    return DASH if r.speedup is None else f"{r.speedup:.2f}x"


def rests_on(g: Group) -> str:
    """What a table's numbers rest on: requests, output tokens, pairs, units, stopping."""
    ok = [r for r in g.rows if r.status == "ok"]
    if not ok:
        return "No successful point in this table."
    n = [r.basis.get("requests") or r.metric("completed") or 0 for r in ok]
    t = [r.basis.get("output_tokens") or r.metric("total_output_tokens") or 0 for r in ok]
    pairs = [r.basis.get("pairs") for r in ok if r.basis.get("pairs")]

    def span(xs):
        lo, hi = int(min(xs)), int(max(xs))
        return f"{lo:,}" if lo == hi else f"{lo:,}-{hi:,}"

    units = {r.basis.get("unit") for r in ok if r.basis.get("unit")}
    how = "over repeats" if units == {"repeat"} else "over requests"
    text = (f"Rests on {span(n)} requests ({span(t)} output tokens) per point"
            + (f", speedups on {span(pairs)} matched prompt pairs" if pairs else "")
            + f"; 95% bootstrap intervals {how}.")
    stopped: dict[str, int] = {}
    for r in ok:
        s = r.basis.get("stopped")
        if s and s != "fixed":
            stopped[s] = stopped.get(s, 0) + 1
    if stopped:
        target = next((r.basis.get("target_ci") for r in ok if r.basis.get("target_ci")), None)
        parts = [f"{k} ({v} point{'s' if v > 1 else ''})" for k, v in sorted(stopped.items())]
        text += (f" Adaptive stopping (target +-{(target or 0) * 100:g}% on throughput): "
                 + ", ".join(parts) + ".")
    return text


def tied(g: Group) -> tuple[PointRow | None, list[PointRow]]:
    """The best speculative point of a table and every one whose speedup interval overlaps
    it (by throughput interval when speedups have none)."""
    spec = [r for r in g.rows if not r.is_baseline and r.status == "ok"]
    figs = {r.benchmark: r.speedup_iv for r in spec if r.speedup_iv is not None}
    if len(figs) != len(spec) or not figs:
        figs = {r.benchmark: r.intervals.get("output_throughput") for r in spec}
    best, ties = stats.ties(figs)
    by = {r.benchmark: r for r in spec}
    return by.get(best), [by[k] for k in ties if k != best]  # type: ignore[call-overload]  # best: a key of figs


def category_table(g: Group) -> tuple[list[str], list[list[str]]] | None:
    """Per category (rows) and speculative setting (columns): speedup [interval] and accept
    length; None when the table's points have no categories."""
    spec = [r for r in g.rows if not r.is_baseline and r.status == "ok" and r.categories]
    if not spec:
        return None
    cats: list[str] = []
    for r in spec:
        cats += [c for c in r.categories if c not in cats]
    if cats == ["-"]:
        return None
    head = ["category", "requests"] + [f"{r.label}: speedup / accept" for r in spec]
    rows = []
    for c in cats:
        n = max((r.categories.get(c, {}).get("requests", 0) for r in spec), default=0)
        cells = [c, str(n)]
        for r in spec:
            f = r.categories.get(c) or {}
            sp = stats.fmt_speedup(f.get("speedup")) if f.get("speedup") else DASH
            acc = f.get("accept_length")
            cells.append(f"{sp} / {acc.value:.2f}" if acc is not None else sp)
        rows.append(cells)
    return head, rows


def group_table(g: Group, key: str, label: str) -> tuple[list[str], list[list[str]]] | None:
    """Per turn or per input-length bucket (rows, ``key`` = "turns" | "input_buckets") and
    point (columns, baselines too): speedup [interval], accept length and mean TTFT; None
    when no point of the table has more than one."""
    ok = [r for r in g.rows if r.status == "ok" and getattr(r, key)]
    if not ok:
        return None
    names: list[str] = []
    for r in ok:
        names += [c for c in getattr(r, key) if c not in names]
    head = [label, "requests"] + [f"{r.label}: speedup / accept / TTFT ms" for r in ok]
    rows = []
    for c in names:
        n = max((getattr(r, key).get(c, {}).get("requests", 0) for r in ok), default=0)
        cells = [c, str(n)]
        for r in ok:
            f = getattr(r, key).get(c) or {}
            sp = stats.fmt_speedup(f["speedup"]) if f.get("speedup") else DASH
            acc, ttft = f.get("accept_length"), f.get("mean_ttft_ms")
            cells.append(" / ".join([sp, DASH if acc is None else f"{acc.value:.2f}",
                                     DASH if ttft is None else f"{ttft.value:.1f}"]))
        rows.append(cells)
    return head, rows
