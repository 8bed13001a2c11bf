"""Turn a run dir (plan.json + results.jsonl [+ state.json]) into a report.

    build_report(run_dir) -> Report           read the files, nothing written
    write_report(run_dir) -> Report           report.md, report.csv, report.json, plots/*.png
    render_terminal(report) -> str            the same tables as plain text
    combine_reports(sweep_dir, run_dirs)      one report over a Hydra multirun

Every benchmark point in the plan becomes one row, whatever happened to it:
``ok`` and ``failed`` rows come from results.jsonl (the last line for an id
wins; an unparseable last line -- a writer killed mid-write -- is ignored),
points with no result are ``pending``.  Speedup is the output-throughput ratio
against the point's matched baseline (same model, hardware, dataset and
concurrency); it is taken from the result line, or computed here when the
result line lacks it and both throughputs are known.
"""

from __future__ import annotations

import csv
import io
import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from tabulate import tabulate

from specc.files import atomic_write

__all__ = [
    "PointRow",
    "Report",
    "ReportError",
    "build_report",
    "write_report",
    "render_terminal",
    "render_markdown",
    "combine_reports",
]

DASH = "\u2014"  # shown for unknown values

# Metric columns in the order the CSV lists them; others follow, sorted.
_METRIC_ORDER = [
    "completed", "duration", "request_throughput", "output_throughput", "total_throughput",
    "per_stream_output_throughput", "accept_length", "accept_length_scope",
] + [f"{stat}_{m}_ms" for m in ("ttft", "itl", "tpot", "e2e_latency")
     for stat in ("mean", "median", "p90", "p99")]

_STATUS_ORDER = {"ok": 0, "failed": 1, "pending": 2}
_NOT_WORKLOAD = ("concurrency", "num_prompts")  # point params that do not define a workload

NOTES = [
    "**output tok/s**: generated tokens per second over the whole benchmark (all streams).",
    "**per-stream tok/s**: decode speed one request sees (`per_stream_output_throughput`; "
    "when absent, 1000 / mean TPOT).",
    "**TTFT / ITL p50 / p99**: median and 99th percentile time to first token and "
    "inter-token latency, in ms.",
    "**speedup**: output throughput divided by the matched baseline's output throughput "
    "(same model, hardware, dataset and concurrency); " + DASH + " when either is unknown.",
    "**accept length**: mean tokens accepted per target forward pass. "
    "`(run)` = measured over this point only; `(cum.)` = cumulative since server start, "
    "warm-up included (SGLang's `avg_spec_accept_length`), so not strictly per point; "
    "`(?)` = scope unknown.",
]


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


def fmt_speedup(value: Any) -> str:
    v = _num(value)
    return DASH if v is None else f"{v:.2f}x"


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
    server_params: dict
    params: dict
    status: str  # "ok" | "failed" | "pending"
    reason: str | None = None
    metrics: dict = field(default_factory=dict)
    baseline_benchmark: str | None = None
    speedup: float | None = None
    speedup_computed: bool = False  # True when computed here, not read from the result line
    job: str | None = None  # set by combine_reports: the job's run dir, relative to the sweep dir
    experiment: str | None = None  # likewise

    @property
    def job_text(self) -> str:
        if self.job is None:
            return DASH
        return f"{self.job} ({self.experiment})" if self.experiment else self.job

    def metric(self, name: str) -> float | None:
        return _num(self.metrics.get(name))

    @property
    def concurrency(self) -> Any:
        return self.params.get("concurrency")

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
        return tuple(sorted((k, _key(v)) for k, v in self.params.items() if k not in _NOT_WORKLOAD))

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
        for source in (self.server_params, self.params):
            for k, v in source.items():
                out[k if k not in out else f"param.{k}"] = v
        for k, v in self.metrics.items():
            if k == "speedup":
                continue
            out[k if k not in out else f"metric.{k}"] = v
        return out


def _key(v: Any) -> Any:
    return json.dumps(v, sort_keys=True) if isinstance(v, (dict, list)) else v


def _sort_num(v: Any) -> Any:
    n = _num(v)
    return n if n is not None else math.inf


def _workload_text(workload: tuple) -> str:
    d = dict(workload)
    parts = []
    if d.get("dataset") is not None:
        parts.append(str(d.pop("dataset")))
    else:
        d.pop("dataset", None)
    il, ol = d.pop("input_len", None), d.pop("output_len", None)
    if il is not None or ol is not None:
        parts.append(f"in {il if il is not None else '?'} / out {ol if ol is not None else '?'} tokens")
    rate = d.pop("request_rate", None)
    if rate is not None:
        parts.append(f"rate {rate}/s")
    quiet = {"model", "flush_cache", "seed", "timeout_s", "warmup_requests", "driver"}
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
        prompts = sorted({str(r.params["num_prompts"]) for r in self.rows if r.params.get("num_prompts") is not None})
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
    diagnostics: list[dict] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    plots: dict[str, Path] = field(default_factory=dict)
    plot_notes: list[str] = field(default_factory=list)

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
        row = max(with_out, key=lambda r: r.output_tps) if with_out else None
        by = "output throughput"
    if row is not None and row.baseline_benchmark:
        base = next((r for r in g.rows if r.benchmark == row.baseline_benchmark
                     and r.job == row.job and r.status == "ok"), base)
    return Best(group=g, row=row, by=by, baseline=base)


# --------------------------------------------------------------------------- reading

def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ReportError(f"{path}: not valid JSON ({e})") from None


def read_results(path: Path) -> tuple[dict[str, dict], list[str]]:
    """Result lines keyed by benchmark id (the last line for an id wins), and warnings."""
    results: dict[str, dict] = {}
    warnings: list[str] = []
    if not path.exists():
        return results, warnings
    lines = path.read_text(errors="replace").splitlines()
    # the index of the last non-blank line: only it may be a truncated write
    last = max((i for i, s in enumerate(lines) if s.strip()), default=-1)
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            if not isinstance(obj, dict) or not isinstance(obj.get("benchmark"), str):
                raise ValueError("not a result object")
        except ValueError:
            if i == last:
                warnings.append(f"{path.name}: ignored an unparseable last line (line {i + 1}; "
                                "truncated by an interrupted write?)")
            else:
                warnings.append(f"{path.name}: ignored unparseable line {i + 1}")
            continue
        results[obj["benchmark"]] = obj
    return results, warnings


def build_report(run_dir: Path | str) -> Report:
    """Read plan.json, results.jsonl and state.json of ``run_dir``; write nothing."""
    run_dir = Path(run_dir)
    plan_path = run_dir / "plan.json"
    if not plan_path.exists():
        raise ReportError(f"{run_dir}: no plan.json (was the config valid?)")
    plan = _read_json(plan_path)
    if not isinstance(plan, dict):
        raise ReportError(f"{plan_path}: expected a JSON object")
    results, warnings = read_results(run_dir / "results.jsonl")

    state: dict = {}
    state_path = run_dir / "state.json"
    if state_path.exists():
        try:
            state = json.loads(state_path.read_text())
        except json.JSONDecodeError:
            warnings.append("state.json: not valid JSON, server states not shown")
        if not isinstance(state, dict):
            state = {}

    servers = {s.get("id"): s for s in plan.get("servers") or [] if isinstance(s, dict)}
    rows: list[PointRow] = []
    planned = set()
    for b in plan.get("benchmarks") or []:
        bid = b.get("id")
        planned.add(bid)
        srv = servers.get(b.get("server"), {})
        res = results.get(bid)
        if res is None:
            status, reason, metrics = "pending", None, {}
        else:
            status = res.get("status") if res.get("status") in ("ok", "failed") else "failed"
            reason = res.get("reason")
            metrics = res.get("metrics") if isinstance(res.get("metrics"), dict) else {}
            if status == "failed" and not reason:
                reason = "no reason given"
        is_baseline = bool(srv.get("baseline", b.get("baseline") is None and _looks_baseline(srv)))
        rows.append(PointRow(
            benchmark=bid, server=b.get("server"),
            label=srv.get("label") or b.get("server") or "?",
            is_baseline=is_baseline,
            server_params=dict(srv.get("params") or {}),
            params=dict(b.get("params") or {}),
            status=status, reason=reason, metrics=dict(metrics),
            baseline_benchmark=b.get("baseline"),
        ))
    _fill_speedups(rows)

    extra = sorted(set(results) - planned)
    if extra:
        warnings.append(f"results.jsonl: {len(extra)} result(s) for benchmarks not in plan.json ignored")

    server_failures = []
    for sid, st in (state.get("servers") or {}).items():
        if isinstance(st, dict) and st.get("status") == "failed":
            server_failures.append({
                "server": sid, "label": (servers.get(sid) or {}).get("label") or sid,
                "reason": st.get("reason") or "no reason given",
            })

    return Report(
        run_dir=run_dir,
        experiment=str(plan.get("experiment") or run_dir.name),
        engine=str(plan.get("engine") or "?"),
        rows=rows,
        server_failures=server_failures,
        dropped=list(plan.get("dropped") or []),
        diagnostics=list(plan.get("diagnostics") or []),
        warnings=warnings,
    )


def _looks_baseline(srv: dict) -> bool:
    return (srv.get("params") or {}).get("algorithm") is None if srv else False


def _fill_speedups(rows: list[PointRow]) -> None:
    by_id = {r.benchmark: r for r in rows}
    for r in rows:
        given = r.metric("speedup")
        if r.status != "ok":
            r.speedup = None
            continue
        if given is not None:
            r.speedup = given
            continue
        base = by_id.get(r.baseline_benchmark) if r.baseline_benchmark else None
        if base is not None and base.status == "ok" and r.output_tps is not None and base.output_tps:
            r.speedup = r.output_tps / base.output_tps
            r.speedup_computed = True


# --------------------------------------------------------------------------- tables

_TABLE_HEAD = ["config", "output tok/s", "per-stream tok/s", "TTFT p50 / p99 (ms)",
               "ITL p50 / p99 (ms)", "accept length", "speedup", "status"]
_TABLE_ALIGN = ("left", "right", "right", "right", "right", "right", "right", "left")


def _status_text(r: PointRow) -> str:
    return {"ok": "ok", "failed": "FAILED", "pending": "pending"}.get(r.status, r.status)


def _point_cells(r: PointRow) -> list[str]:
    m = r.metrics
    if r.status != "ok":
        out, per, ttft, itl, acc, sp = (DASH,) * 6
    else:
        out, per = fmt_tps(r.output_tps), fmt_tps(r.per_stream_tps)
        ttft = fmt_pair(m.get("median_ttft_ms"), m.get("p99_ttft_ms"))
        itl = fmt_pair(m.get("median_itl_ms"), m.get("p99_itl_ms"))
        acc = DASH if r.is_baseline else r.accept_text
        sp = "1.00x" if r.is_baseline else fmt_speedup(r.speedup)
    return [r.label, out, per, ttft, itl, acc, sp, _status_text(r)]


def _table(rows: list[list[str]], head: list[str], align: tuple, fmt: str) -> str:
    return tabulate(rows, headers=head, tablefmt=fmt, colalign=align, disable_numparse=True)


def _group_table(g: Group, fmt: str, with_job: bool = False) -> str:
    rows = [([r.job_text] if with_job else []) + _point_cells(r) for r in g.rows]
    head = (["job"] if with_job else []) + _TABLE_HEAD
    align = (("left",) if with_job else ()) + _TABLE_ALIGN
    return _table(rows, head, align, fmt)


_BEST_HEAD = ["concurrency", "best speculative setting", "speedup", "output tok/s",
              "per-stream tok/s", "accept length", "baseline tok/s", "baseline per-stream"]


def _best_table(bests: list[Best], fmt: str, with_workload: bool, with_job: bool = False) -> str:
    rows = []
    for b in bests:
        c = _conc_text(b.group.concurrency)
        if with_workload:
            c = f"{c} ({_workload_text(b.group.workload)})"
        base_out = fmt_tps(b.baseline.output_tps) if b.baseline else DASH
        base_per = fmt_tps(b.baseline.per_stream_tps) if b.baseline else DASH
        if b.row is None:
            rows.append([c, "(no successful speculative point)", DASH, DASH, DASH, DASH, base_out, base_per])
            continue
        label = b.row.label
        if with_job and b.row.job:
            label = f"{label} [{b.row.job_text}]"
        if b.by != "speedup":
            label += " (by output tok/s: speedup unknown)"
        rows.append([c, label, fmt_speedup(b.row.speedup), fmt_tps(b.row.output_tps),
                     fmt_tps(b.row.per_stream_tps), b.row.accept_text, base_out, base_per])
    return _table(rows, _BEST_HEAD, ("left", "left") + ("right",) * 6, fmt)


def _status_line(rows: list[PointRow]) -> str:
    n = len(rows)
    ok = sum(r.status == "ok" for r in rows)
    failed = sum(r.status == "failed" for r in rows)
    pending = sum(r.status == "pending" for r in rows)
    return f"{n} points: {ok} ok, {failed} failed, {pending} pending"


def _failure_lines(rows: list[PointRow], server_failures: list[dict], with_job: bool = False) -> list[str]:
    lines = []
    for s in server_failures:
        job = f"[{s['job']}] " if with_job and s.get("job") else ""
        lines.append(f"- server {job}{s['label']} (`{s['server']}`): {s['reason']}")
    for r in rows:
        if r.status == "failed":
            job = f"[{r.job_text}] " if with_job and r.job else ""
            lines.append(f"- point {job}{r.label} @ concurrency {_conc_text(r.concurrency)} "
                         f"(`{r.benchmark}`): {r.reason}")
    return lines


def _pending_lines(rows: list[PointRow], limit: int = 20, with_job: bool = False) -> list[str]:
    pend = [r for r in rows if r.status == "pending"]
    lines = []
    for r in pend[:limit]:
        job = f"[{r.job_text}] " if with_job and r.job else ""
        lines.append(f"- {job}{r.label} @ concurrency {_conc_text(r.concurrency)} (`{r.benchmark}`)")
    if len(pend) > limit:
        lines.append(f"- ... and {len(pend) - limit} more")
    return lines


def render_markdown(report: Report) -> str:
    """report.md's text."""
    rows = report.rows
    groups = report.groups()
    multi_workload = len({g.workload for g in groups}) > 1
    out = [f"# Report: {report.experiment} (engine: {report.engine})", ""]
    out.append(f"Run dir: `{report.run_dir}`  ")
    out.append(_status_line(rows) + ".")
    if report.pending:
        out.append(f"\n**{len(report.pending)} pending** (in the plan, no result yet).")
    out.append("")
    if not rows:
        out += ["The plan has no benchmark points.", ""]
    for g in groups:
        out += [f"## {g.title(with_workload=True)}", "", _group_table(g, "pipe"), ""]

    bests = report.best()
    if bests:
        out += ["## Best speculative setting per concurrency", "",
                _best_table(bests, "pipe", multi_workload), ""]

    out += ["## Failures", ""]
    fl = _failure_lines(rows, report.server_failures)
    out += (fl or ["None."]) + [""]

    if report.pending:
        out += [f"## Pending ({len(report.pending)})", ""] + _pending_lines(rows) + [""]

    if report.dropped:
        out += [f"## Dropped at compile time ({len(report.dropped)})", ""]
        for d in report.dropped:
            point = ", ".join(f"{k}={v}" for k, v in (d.get("point") or {}).items())
            out.append(f"- {point}: `{d.get('code')}` {d.get('reason') or ''}".rstrip())
        out.append("")

    warn_diags = [d for d in report.diagnostics if d.get("severity") in ("warning", "error")]
    if warn_diags:
        out += ["## Compile diagnostics", ""]
        for d in warn_diags:
            out.append(f"- {d.get('severity')} `{d.get('code')}` at `{d.get('path')}`: {d.get('message')}")
        out.append("")

    if report.plots or report.plot_notes:
        out += ["## Plots", ""]
        for name, p in report.plots.items():
            rel = p.relative_to(report.run_dir) if p.is_relative_to(report.run_dir) else p
            out.append(f"![{name}]({rel.as_posix()})")
        out += [f"- {n}" for n in report.plot_notes]
        out.append("")

    if report.warnings:
        out += ["## Warnings", ""] + [f"- {w}" for w in report.warnings] + [""]

    computed = any(r.speedup_computed for r in rows)
    out += ["## Notes", ""] + [f"- {n}" for n in NOTES]
    if computed:
        out.append("- Some speedups were computed by the report from the two output throughputs "
                   "(the result line did not carry one).")
    out.append("")
    return "\n".join(out)


def render_terminal(report: Report) -> str:
    """The report's tables as plain text, for printing at the end of a run."""
    rows = report.rows
    groups = report.groups()
    multi_workload = len({g.workload for g in groups}) > 1
    out = [f"{report.experiment} (engine: {report.engine}): {_status_line(rows)}", ""]
    for g in groups:
        out += [g.title(with_workload=True), _group_table(g, "simple"), ""]
    bests = report.best()
    if bests:
        out += ["Best speculative setting per concurrency", _best_table(bests, "simple", multi_workload), ""]
    fl = _failure_lines(rows, report.server_failures)
    if fl:
        out += ["Failures:"] + ["  " + line[2:] for line in fl] + [""]
    if report.pending:
        out.append(f"{len(report.pending)} point(s) pending (no result yet).")
    for w in report.warnings:
        out.append(f"warning: {w}")
    return "\n".join(out).rstrip() + "\n"


# --------------------------------------------------------------------------- files

def _csv_columns(flat_rows: list[dict]) -> list[str]:
    cols: list[str] = []
    seen = set()
    metric_names = []
    for fr in flat_rows:
        for k in fr:
            if k in seen:
                continue
            seen.add(k)
            if k in _METRIC_ORDER:
                metric_names.append(k)
            else:
                cols.append(k)
    return cols + sorted(metric_names, key=_METRIC_ORDER.index)


def _csv_text(flat_rows: list[dict]) -> str:
    buf = io.StringIO()
    cols = _csv_columns(flat_rows) or ["benchmark"]
    w = csv.DictWriter(buf, fieldnames=cols, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for fr in flat_rows:
        w.writerow({k: _csv_cell(v) for k, v in fr.items()})
    return buf.getvalue()


def _csv_cell(v: Any) -> Any:
    if v is None:
        return ""
    if isinstance(v, (dict, list)):
        return json.dumps(v, sort_keys=True)
    if isinstance(v, float) and not math.isfinite(v):
        return ""
    return v



def write_report(run_dir: Path | str, *, plots: bool = True) -> Report:
    """Build the report and write report.md, report.csv, report.json and plots/ into run_dir."""
    run_dir = Path(run_dir)
    report = build_report(run_dir)
    if plots:
        make_plots(report, run_dir / "plots")
    flat = [r.flat() for r in report.rows]
    atomic_write(run_dir / "report.csv", _csv_text(flat))
    atomic_write(run_dir / "report.json", json.dumps(
        _plain({"version": 1, "summary": report.summary(), "rows": flat}), indent=2) + "\n")
    atomic_write(run_dir / "report.md", render_markdown(report))
    return report


# --------------------------------------------------------------------------- plots

def make_plots(report: Report, plot_dir: Path) -> dict[str, Path]:
    """Write the PNG plots; never raises. Fills report.plots / report.plot_notes."""
    try:
        # lazy: only reports need matplotlib; the Agg canvas needs no display and no pyplot state
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except Exception as e:  # pragma: no cover - depends on the environment
        report.plot_notes.append(f"plots skipped: matplotlib unavailable ({type(e).__name__}: {e})")
        return report.plots
    for name, fn in (("throughput_vs_concurrency", _plot_throughput),
                     ("speedup_heatmap", _plot_heatmap)):
        try:
            fig = fn(report, Figure)
            if fig is None:
                continue
            FigureCanvasAgg(fig)
            plot_dir.mkdir(parents=True, exist_ok=True)
            path = plot_dir / f"{name}.png"
            fig.savefig(path, dpi=110)
            report.plots[name] = path
        except Exception as e:
            report.plot_notes.append(f"plot {name} failed: {type(e).__name__}: {e}")
    return report.plots


def _plot_throughput(report: Report, Figure):
    ok = [r for r in report.rows if r.status == "ok" and r.output_tps is not None
          and _num(r.concurrency) is not None and _num(r.concurrency) > 0]
    if not ok:
        report.plot_notes.append("throughput_vs_concurrency: no successful points to plot")
        return None
    multi_workload = len({r.workload for r in ok}) > 1
    multi_job = len({r.job for r in ok}) > 1
    lines: dict[tuple, list[PointRow]] = {}
    for r in ok:
        lines.setdefault((r.job or "", r.workload, not r.is_baseline, r.label), []).append(r)
    # fixed margins: constrained layout costs a second draw pass (~0.3 s a figure)
    fig = Figure(figsize=(8, 5))
    fig.subplots_adjust(left=0.1, right=0.97, bottom=0.11, top=0.92)
    ax = fig.add_subplot(1, 1, 1)
    for key in sorted(lines, key=lambda k: (k[0], str(k[1]), k[2], k[3])):
        pts = sorted(lines[key], key=lambda r: _num(r.concurrency))
        name = key[3]
        if multi_job and key[0]:
            name = f"{key[0]}: {name}"
        if multi_workload:
            name = f"{name} ({_workload_text(key[1])})"
        style = dict(color="black", linestyle="--", linewidth=2) if not key[2] else {}
        ax.plot([_num(r.concurrency) for r in pts], [r.output_tps for r in pts],
                marker="o", label=name, **style)
    ax.set_xscale("log", base=2)
    concs = sorted({_num(r.concurrency) for r in ok})
    from matplotlib.ticker import NullLocator
    ax.set_xticks(concs)
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticklabels([_conc_text(c) for c in concs])
    ax.set_xlabel("concurrency (log2)")
    ax.set_ylabel("output tokens/s")
    ax.set_title(f"{report.experiment}: output throughput vs concurrency")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small", loc="best")
    return fig


def _plot_heatmap(report: Report, Figure):
    from matplotlib.colors import TwoSlopeNorm

    cells: dict[tuple, dict[tuple, tuple[float, Any]]] = {}
    workloads: dict[tuple, tuple] = {}
    for r in report.rows:
        sp = r.speedup
        steps, topk = r.server_params.get("num_steps"), r.server_params.get("topk")
        if r.is_baseline or r.status != "ok" or sp is None or steps is None or topk is None:
            continue
        key = (str(r.workload), _sort_num(r.concurrency))
        workloads[key] = (r.workload, r.concurrency)
        panel = cells.setdefault(key, {})
        cur = panel.get((steps, topk))
        if cur is None or sp > cur[0]:
            panel[(steps, topk)] = (sp, r.server_params.get("num_draft_tokens"))
    if not cells:
        report.plot_notes.append("speedup_heatmap: no speculative points with a speedup")
        return None
    keys = sorted(cells)
    multi_workload = len({k[0] for k in keys}) > 1
    all_sp = [v[0] for p in cells.values() for v in p.values()]
    lo, hi = min(all_sp + [0.99]), max(all_sp + [1.01])
    norm = TwoSlopeNorm(vmin=min(lo, 0.999), vcenter=1.0, vmax=max(hi, 1.001))
    n = len(keys)
    width = max(4.5, 3.4 * n + 1.2)
    fig = Figure(figsize=(width, 3.8))   # fixed margins, no layout engine: one draw pass
    fig.subplots_adjust(left=0.75 / width, right=1 - 0.35 / width, bottom=0.15,
                        top=0.78 if multi_workload else 0.83, wspace=0.25)
    im = None
    for i, key in enumerate(keys):
        panel = cells[key]
        steps = sorted({s for s, _ in panel}, key=_sort_num)
        topks = sorted({k for _, k in panel}, key=_sort_num)
        data = [[panel.get((s, k), (math.nan, None))[0] for k in topks] for s in steps]
        ax = fig.add_subplot(1, n, i + 1)
        im = ax.imshow(data, cmap="RdYlGn", norm=norm, aspect="auto")
        ax.set_xticks(range(len(topks)))
        ax.set_xticklabels([str(k) for k in topks])
        ax.set_yticks(range(len(steps)))
        ax.set_yticklabels([str(s) for s in steps])
        ax.set_xlabel("topk")
        if i == 0:
            ax.set_ylabel("num_steps")
        workload, conc = workloads[key]
        title = f"concurrency {_conc_text(conc)}"
        if multi_workload:
            title += f"\n{_workload_text(workload)}"
        ax.set_title(title, fontsize="medium")
        for yi, s in enumerate(steps):
            for xi, k in enumerate(topks):
                v = panel.get((s, k))
                if v is not None:
                    txt = f"{v[0]:.2f}x" + (f"\nd{v[1]}" if v[1] is not None else "")
                    ax.text(xi, yi, txt, ha="center", va="center", fontsize="small")
    fig.suptitle(f"{report.experiment}: speedup vs baseline (best over num_draft_tokens)", fontsize="medium")
    if im is not None:
        fig.colorbar(im, ax=fig.axes, shrink=0.8, label="speedup")
    return fig


# --------------------------------------------------------------------------- multirun

def _job_name(sweep_dir: Path, run_dir: Path) -> str:
    try:
        return run_dir.relative_to(sweep_dir).as_posix()
    except ValueError:
        return run_dir.name


def _job_overrides(run_dir: Path) -> str:
    p = run_dir / ".hydra" / "overrides.yaml"
    if not p.exists():
        return ""
    try:
        import yaml
        items = yaml.safe_load(p.read_text()) or []
        return " ".join(str(x) for x in items) if isinstance(items, list) else ""
    except Exception:
        return ""


def combine_reports(sweep_dir: Path | str, run_dirs: list[Path]) -> Path:
    """One report.md / report.csv / report.json in sweep_dir over all jobs' run dirs."""
    sweep_dir = Path(sweep_dir)
    sweep_dir.mkdir(parents=True, exist_ok=True)
    jobs: list[dict] = []
    rows: list[PointRow] = []
    server_failures: list[dict] = []
    warnings: list[str] = []
    for rd in run_dirs:
        rd = Path(rd)
        job = _job_name(sweep_dir, rd)
        info = {"job": job, "run_dir": str(rd), "overrides": _job_overrides(rd)}
        try:
            rep = build_report(rd)
        except ReportError as e:
            info.update(experiment=DASH, engine=DASH, error=str(e))
            jobs.append(info)
            continue
        info.update(experiment=rep.experiment, engine=rep.engine, points=len(rep.rows),
                    ok=rep.count("ok"), failed=rep.count("failed"), pending=rep.count("pending"))
        jobs.append(info)
        for r in rep.rows:
            r.job, r.experiment = job, rep.experiment
            rows.append(r)
        for s in rep.server_failures:
            server_failures.append({**s, "job": job})
        warnings += [f"[{job}] {w}" for w in rep.warnings]

    groups = _groups(rows)
    multi_workload = len({g.workload for g in groups}) > 1
    out = [f"# Combined report: {len(jobs)} job(s)", "", f"Sweep dir: `{sweep_dir}`  ",
           _status_line(rows) + ".", "", "## Jobs", ""]
    job_rows = []
    for j in jobs:
        job_rows.append([j["job"], j["experiment"], j["engine"], j.get("overrides") or DASH,
                         str(j.get("ok", DASH)), str(j.get("failed", DASH)),
                         str(j.get("pending", DASH)), j.get("error", "")])
    out += [_table(job_rows, ["job", "experiment", "engine", "overrides", "ok", "failed", "pending", "note"],
                   ("left",) * 4 + ("right",) * 3 + ("left",), "pipe"), ""]
    for g in groups:
        out += [f"## {g.title(with_workload=True)}", "", _group_table(g, "pipe", with_job=True), ""]
    if groups:
        out += ["## Best speculative setting per concurrency (all jobs)", "",
                "Speedups are each against the baseline of the same job.", "",
                _best_table([_best(g) for g in groups], "pipe", multi_workload, with_job=True), ""]
    out += ["## Failures", ""]
    out += (_failure_lines(rows, server_failures, with_job=True) or ["None."]) + [""]
    pend = [r for r in rows if r.status == "pending"]
    if pend:
        out += [f"## Pending ({len(pend)})", ""] + _pending_lines(rows, with_job=True) + [""]
    if warnings:
        out += ["## Warnings", ""] + [f"- {w}" for w in warnings] + [""]
    out += ["## Notes", ""] + [f"- {n}" for n in NOTES] + [""]

    flat = []
    for r in rows:
        fr = r.flat()
        jobinfo = next((j for j in jobs if j["job"] == r.job), {})
        fr = {"job": r.job, "experiment": jobinfo.get("experiment"), **{k: v for k, v in fr.items() if k != "job"}}
        flat.append(fr)
    atomic_write(sweep_dir / "report.csv", _csv_text(flat))
    atomic_write(sweep_dir / "report.json", json.dumps(_plain({
        "version": 1, "jobs": jobs,
        "summary": {"points": len(rows), "ok": sum(r.status == "ok" for r in rows),
                    "failed": sum(r.status == "failed" for r in rows), "pending": len(pend),
                    "server_failures": server_failures, "warnings": warnings},
        "rows": flat}), indent=2) + "\n")
    md = sweep_dir / "report.md"
    atomic_write(md, "\n".join(out))
    return md


# --------------------------------------------------------------------------- CLI

def main(argv: list[str] | None = None) -> int:
    """python -m specc.report RUN_DIR [--no-plots]: write the report, print the tables."""
    argv = list(sys.argv[1:] if argv is None else argv)
    no_plots = "--no-plots" in argv
    dirs = [a for a in argv if a != "--no-plots"]
    if len(dirs) != 1:
        print("usage: python -m specc.report RUN_DIR [--no-plots]", file=sys.stderr)
        return 2
    try:
        rep = write_report(Path(dirs[0]), plots=not no_plots)
    except ReportError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(render_terminal(rep), end="")
    print(f"wrote {Path(dirs[0]) / 'report.md'}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
