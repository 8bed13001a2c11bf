"""The report's data: one PointRow per plan point, grouped per workload and concurrency.

Also the value formatting the rows and tables share (unknown values show as a dash).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from collections.abc import Iterable

from specc import stats
from specc.diagnostics import Diagnostic
from specc.plan import BenchParams, ServerParams

DASH = "\u2014"  # shown for unknown values

#: Figures whose intervals go into report.csv / report.json as <name>_lo / <name>_hi.
FIGURES = ("output_throughput", "accept_length") + tuple(
    f"{s}_{m}_ms" for m in stats.LATENCIES for s in ("mean", "median", "p90", "p99"))

_STATUS_ORDER = {"ok": 0, "failed": 1, "pending": 2}
_NOT_WORKLOAD = ("concurrency", "num_prompts")  # point params that do not define a workload


class ReportError(Exception):
    """The run dir cannot be reported on (e.g. no plan.json)."""


# --------------------------------------------------------------------------- values

def _num(value: Any) -> float | None:
    """A finite number, or None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _fmt(value: Any, digits: int) -> str:
    v = _num(value)
    return DASH if v is None else f"{v:.{digits}f}"


def fmt_tps(value: Any) -> str:
    return _fmt(value, 1)


def fmt_ms(value: Any) -> str:
    v = _num(value)
    if v is None:
        return DASH
    return f"{v:.2f}" if abs(v) < 10 else f"{v:.1f}"


def fmt_pair(a: Any, b: Any) -> str:
    if _num(a) is None and _num(b) is None:
        return DASH
    return f"{fmt_ms(a)} / {fmt_ms(b)}"


def fmt_accept(value: Any, scope: Any) -> str:
    v = _num(value)
    if v is None:
        return DASH
    marker = {"run": "run", "cumulative": "cum."}.get(scope, "?")
    return f"{v:.2f} ({marker})"


def _plain(value: Any) -> Any:
    """JSON-safe: non-finite floats become None."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


# --------------------------------------------------------------------------- model

@dataclass
class PointRow:
    """One benchmark point of the plan and what became of it."""

    benchmark: str
    server: str
    label: str
    is_baseline: bool
    #: the plan's own records, as the compiler wrote them (compare keys points by the same)
    server_params: ServerParams
    params: BenchParams
    status: str  # "ok" | "failed" | "pending"
    reason: str | None = None
    metrics: dict = field(default_factory=dict)
    baseline_benchmark: str | None = None
    speedup: float | None = None
    speedup_computed: bool = False  # True when computed here, not read from the result line
    job: str | None = None  # set by combine_reports: the job's run dir, relative to the sweep dir
    experiment: str | None = None  # likewise
    #: set by combine_reports: the overrides that set the job apart (`engine=vllm`)
    job_label: str | None = None
    # the statistics (report/intervals.py): figure -> specc.stats.Interval, the paired
    # speedup's interval, per-category figures, and what they rest on
    intervals: dict = field(default_factory=dict)
    speedup_iv: Any = None
    categories: dict = field(default_factory=dict)
    turns: dict = field(default_factory=dict)           # multi-turn: per turn ("1", "2", ...)
    input_buckets: dict = field(default_factory=dict)   # per prompt-length bucket ("2k-4k")
    basis: dict = field(default_factory=dict)
    accept_per_position: list | None = None   # vLLM's per-position acceptance rates

    @property
    def job_text(self) -> str:
        if self.job is None:
            return DASH
        name = self.job_label or self.job
        return (f"{name} ({self.experiment})" if self.experiment
                and f"={self.experiment}" not in name else name)

    def metric(self, name: str) -> float | None:
        return _num(self.metrics.get(name))

    @property
    def concurrency(self) -> Any:
        return self.params.concurrency

    @property
    def output_tps(self) -> float | None:
        return self.metric("output_throughput")

    @property
    def per_stream_tps(self) -> float | None:
        v = self.metric("per_stream_output_throughput")
        if v is None:
            tpot = self.metric("mean_tpot_ms")
            if tpot:
                v = 1000.0 / tpot
        return v

    @property
    def accept_text(self) -> str:
        return fmt_accept(self.metrics.get("accept_length"), self.metrics.get("accept_length_scope"))

    @property
    def workload(self) -> tuple:
        return tuple(sorted((k, _key(v)) for k, v in self.params.to_json().items()
                            if k not in _NOT_WORKLOAD))

    @property
    def group_key(self) -> tuple:
        return (self.workload, _sort_num(self.concurrency))

    def flat(self) -> dict:
        """Flat row for report.csv / report.json (no nesting)."""
        out: dict[str, Any] = {}
        if self.job is not None:
            out["job"] = self.job
        out.update({
            "benchmark": self.benchmark, "server": self.server, "label": self.label,
            "baseline": self.is_baseline, "status": self.status, "reason": self.reason,
            "baseline_benchmark": self.baseline_benchmark, "speedup": self.speedup,
        })
        for source in (self.server_params.to_json(), self.params.to_json()):
            for k, v in source.items():
                out[k if k not in out else f"param.{k}"] = v
        for k, v in self.metrics.items():
            if k == "speedup":
                continue
            out[k if k not in out else f"metric.{k}"] = v
        out.update(flat_fields(self))
        return out


def _key(v: Any) -> Any:
    return json.dumps(v, sort_keys=True) if isinstance(v, (dict, list)) else v


def _sort_num(v: Any) -> Any:
    n = _num(v)
    return n if n is not None else math.inf


def _workload_text(workload: tuple) -> str:
    d = dict(workload)
    parts = []
    kind = d.get("dataset")
    if d.get("dataset") is not None:
        parts.append(str(d.pop("dataset")))
    else:
        d.pop("dataset", None)
    il, ol = d.pop("input_len", None), d.pop("output_len", None)
    if kind not in (None, "random", "jsonl", "sharegpt"):
        il = None    # a prompt set sends its own text: input_len does not apply
        parts.append(f"out {ol if ol is not None else '?'} tokens")
    elif il is not None or ol is not None:
        parts.append(f"in {il if il is not None else '?'} / out {ol if ol is not None else '?'} tokens")
    if not d.get("shared_prefix_len"):
        d.pop("shared_prefix_groups", None)
    for k, default in (("repeats", 1), ("ignore_eos", True), ("multi_turn", False),
                       ("shared_prefix_len", 0)):
        if d.get(k) == default:
            d.pop(k)
    rate = d.pop("request_rate", None)
    if rate is not None:
        parts.append(f"rate {rate}/s")
    # how the client runs and reads a point, not what it asks (accept_positions: where vLLM's
    # per-position counters are, the same on every point of the engine)
    quiet = {"model", "flush_cache", "seed", "timeout_s", "warmup_requests", "driver",
             "request_id_field", "hf_split", "min_requests", "min_output_tokens", "max_requests",
             "accept_positions"}
    if d.get("range_ratio") == 1.0:
        quiet.add("range_ratio")
    parts += [f"{k}={v}" for k, v in d.items() if v is not None and k not in quiet]
    return ", ".join(parts)


def _conc_text(c: Any) -> str:
    n = _num(c)
    return str(int(n)) if n is not None and n == int(n) else str(c)


@dataclass
class Group:
    """Rows that share a workload and a concurrency: one table."""

    workload: tuple
    concurrency: Any
    rows: list[PointRow]

    def title(self, with_workload: bool = True) -> str:
        t = f"Concurrency {_conc_text(self.concurrency)}"
        w = _workload_text(self.workload)
        prompts = sorted({str(r.params.num_prompts) for r in self.rows})
        if prompts:
            w = f"{w}, {'/'.join(prompts)} prompts" if w else f"{'/'.join(prompts)} prompts"
        return f"{t} \u2014 {w}" if (with_workload and w) else t


@dataclass
class Best:
    group: Group
    row: PointRow | None  # None: no successful speculative point
    by: str  # "speedup" | "output throughput"
    baseline: PointRow | None


@dataclass
class Report:
    run_dir: Path
    experiment: str
    engine: str
    rows: list[PointRow]
    server_failures: list[dict] = field(default_factory=list)
    dropped: list[dict] = field(default_factory=list)
    diagnostics: list[Diagnostic] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    plots: dict[str, Path] = field(default_factory=dict)
    plot_notes: list[str] = field(default_factory=list)
    #: search=tune: tune.json (the decision), shown first.
    decision: dict | None = None
    #: search=tune: deploy.json (the schedule to deploy and its verification).
    deploy: dict | None = None

    # -- derived views
    def count(self, status: str) -> int:
        return sum(r.status == status for r in self.rows)

    @property
    def failed(self) -> list[PointRow]:
        return [r for r in self.rows if r.status == "failed"]

    @property
    def pending(self) -> list[PointRow]:
        return [r for r in self.rows if r.status == "pending"]

    def groups(self) -> list[Group]:
        return _groups(self.rows)

    def best(self) -> list[Best]:
        return [_best(g) for g in self.groups()]

    def summary(self) -> dict:
        return {
            "experiment": self.experiment, "engine": self.engine,
            "points": len(self.rows), "ok": self.count("ok"),
            "failed": self.count("failed"), "pending": self.count("pending"),
            "server_failures": self.server_failures,
            "best": [
                {"concurrency": b.group.concurrency, "workload": dict(b.group.workload),
                 "benchmark": b.row.benchmark if b.row else None,
                 "label": b.row.label if b.row else None,
                 "speedup": b.row.speedup if b.row else None,
                 "output_throughput": b.row.output_tps if b.row else None,
                 "chosen_by": b.by}
                for b in self.best()
            ],
            "dropped": len(self.dropped),
            "warnings": self.warnings,
            "plots": {k: str(v) for k, v in self.plots.items()},
            "plot_notes": self.plot_notes,
        }


def _groups(rows: Iterable[PointRow]) -> list[Group]:
    by_key: dict[tuple, list[PointRow]] = {}
    for r in rows:
        by_key.setdefault(r.group_key, []).append(r)
    groups = []
    for key in sorted(by_key, key=lambda k: (str(k[0]), k[1])):
        rs = sorted(by_key[key], key=_row_order)
        groups.append(Group(workload=key[0], concurrency=rs[0].concurrency, rows=rs))
    return groups


def _row_order(r: PointRow) -> tuple:
    sp = r.speedup
    out = r.output_tps
    return (
        _natural(r.job or ""),  # combined reports: each job's rows together
        0 if r.is_baseline else 1,
        _STATUS_ORDER.get(r.status, 3),
        -(sp if sp is not None else -math.inf),
        -(out if out is not None else -math.inf),
        r.label,
    )


def _natural(text: str) -> tuple:
    """Sort key with digit runs compared as numbers: 2 before 10."""
    import re
    return tuple((0, int(t), "") if t.isdigit() else (1, 0, t) for t in re.split(r"(\d+)", text) if t)


def _best(g: Group) -> Best:
    spec = [r for r in g.rows if not r.is_baseline and r.status == "ok"]
    base = next((r for r in g.rows if r.is_baseline and r.status == "ok"), None)
    # by speedup when every candidate has one; otherwise by output throughput (within one
    # job all candidates share the baseline, so the two orders agree where both are known)
    with_sp = [r for r in spec if r.speedup is not None]
    if with_sp and len(with_sp) == len(spec):
        row = max(with_sp, key=lambda r: (r.speedup, r.output_tps or 0.0))
        by = "speedup"
    else:
        with_out = [r for r in spec if r.output_tps is not None]
        row = max(with_out, key=lambda r: r.output_tps or 0.0) if with_out else None  # type: ignore[assignment]  # None: no row, said below
        by = "output throughput"
    if row is not None and row.baseline_benchmark:
        base = next((r for r in g.rows if r.benchmark == row.baseline_benchmark
                     and r.job == row.job and r.status == "ok"), base)
    return Best(group=g, row=row, by=by, baseline=base)


def flat_fields(r: PointRow) -> dict:
    """Columns for report.csv / report.json: intervals, significance, what they rest on."""
    out: dict = {}
    if r.status != "ok":
        return out
    for k in FIGURES:
        iv = r.intervals.get(k)
        if iv is not None and iv.lo is not None:
            out[f"{k}_lo"], out[f"{k}_hi"] = round(iv.lo, 4), round(iv.hi, 4)
    if r.speedup_iv is not None:
        iv = r.speedup_iv
        out["speedup_lo"] = None if iv.lo is None else round(iv.lo, 4)
        out["speedup_hi"] = None if iv.hi is None else round(iv.hi, 4)
        out["speedup_significance"] = stats.significance(iv)
    out["n_requests"] = r.basis.get("requests")
    out["n_output_tokens"] = r.basis.get("output_tokens")
    if r.basis.get("pairs"):
        out["n_pairs"] = r.basis["pairs"]
    if r.basis.get("stopped"):
        out["stopped"] = r.basis["stopped"]
    if r.accept_per_position:
        out["accept_per_position"] = r.accept_per_position
    for key in ("categories", "turns", "input_buckets"):
        groups = getattr(r, key)
        if groups:
            out[key] = {c: {k: (v.to_json() if isinstance(v, stats.Interval) else v)
                            for k, v in f.items()} for c, f in groups.items()}
    return out
