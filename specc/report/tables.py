"""The report as text: markdown (report.md), plain terminal tables and CSV."""

from __future__ import annotations

import csv
import io
import json
import math
from typing import Any

from tabulate import tabulate

from specc.files import one_line
from specc.report import intervals as iv
from specc.report.markup import md, md_code
from specc.report.model import (DASH, Best, Group, PointRow, Report, _conc_text, _workload_text,
                                fmt_pair, fmt_tps)

# Metric columns in the order the CSV lists them; others follow, sorted.
_METRIC_ORDER = [
    "completed", "duration", "request_throughput", "output_throughput", "output_throughput_lo",
    "output_throughput_hi", "total_throughput",
    "per_stream_output_throughput", "accept_length", "accept_length_scope",
] + [f"{stat}_{m}_ms" for m in ("ttft", "itl", "chunk_gap", "tpot", "e2e_latency")
     for stat in ("mean", "median", "p90", "p99")]

NOTES = [
    "**output tok/s**: generated tokens per second over the whole benchmark (all streams).",
    "**per-stream tok/s**: decode speed one request sees (`per_stream_output_throughput`; "
    "when absent, 1000 / mean TPOT).",
    "**TTFT / ITL / chunk gap p50 / p99**: median and 99th percentile, in ms, of the time to "
    "first token; of the inter-token latency as SGLang's `bench_serving` computes it "
    "(`*_itl_ms`: each chunk's gap spread over the tokens it brought, so per token); and "
    "of the gap between the chunks a client sees arrive (`*_chunk_gap_ms`), "
    "tokens-per-chunk (about the accept length) times the ITL on a speculative server.",
    "**speedup**: output throughput divided by the matched baseline's output throughput "
    "(same model, hardware, dataset and concurrency); " + DASH + " when either is unknown.",
    "**[lo, hi]**: the 95% interval. Throughput: bootstrap over the point's requests (over "
    "repeats when a point ran more than once), the measured number of requests in flight "
    "held fixed. Speedup: paired bootstrap over matched prompts (request i of the "
    "speculative point and of its baseline sent the same prompt), so what the prompts do "
    "to both sides cancels. `n.s.`: the interval covers 1.00x, no significant difference.",
    "**tied**: speculative settings whose speedup interval overlaps the best one's: the "
    "data do not tell them apart.",
    "**by category**: speedup per category is the paired ratio of tokens per second of "
    "request (categories share batches, so a category has no throughput of its own); "
    "accept length = output tokens / verify passes, where the engine reports them per "
    "request (SGLang's `/generate`).",
    "**by turn** / **by input length**: the same per-request figures per turn of a "
    "multi-turn conversation and per prompt-length bucket (a draft accepts less as the "
    "context grows; a later turn's prefix may be cached): paired speedup, accept length "
    "and mean TTFT (ms).",
    "**accept length**: mean tokens accepted per target forward pass. "
    "`(run)` = measured over this point only; `(cum.)` = cumulative since server start, "
    "warm-up included (SGLang's `avg_spec_accept_length`), so not strictly per point; "
    "`(?)` = scope unknown.",
]


def _esc(fmt: str):
    """The escape for a table's data cells: markdown for report.md, one line for a terminal."""
    return md if fmt == "pipe" else one_line


_TABLE_HEAD = ["config", "output tok/s", "per-stream tok/s", "TTFT p50 / p99 (ms)",
               "ITL p50 / p99 (ms)", "chunk gap p50 / p99 (ms)", "accept length", "speedup",
               "status"]
_TABLE_ALIGN = ("left", "right", "right", "right", "right", "right", "right", "right", "left")


def _status_text(r: PointRow) -> str:
    return {"ok": "ok", "failed": "FAILED", "pending": "pending"}.get(r.status, r.status)


def _point_cells(r: PointRow, esc=one_line) -> list[str]:
    m = r.metrics
    if r.status != "ok":
        out, per, ttft, itl, gap, acc, sp = (DASH,) * 7
    else:
        thr = r.intervals.get("output_throughput")
        out = iv.fmt_iv(thr) if thr is not None else fmt_tps(r.output_tps)
        per = fmt_tps(r.per_stream_tps)
        ttft = fmt_pair(m.get("median_ttft_ms"), m.get("p99_ttft_ms"))
        itl = fmt_pair(m.get("median_itl_ms"), m.get("p99_itl_ms"))
        gap = fmt_pair(m.get("median_chunk_gap_ms"), m.get("p99_chunk_gap_ms"))
        acc = DASH if r.is_baseline else r.accept_text
        sp = "1.00x" if r.is_baseline else iv.speedup_text(r)
    return [esc(r.label), out, per, ttft, itl, gap, acc, sp, esc(_status_text(r))]


def _table(rows: list[list[str]], head: list[str], align: tuple, fmt: str) -> str:
    return tabulate(rows, headers=head, tablefmt=fmt, colalign=align, disable_numparse=True)


def _group_table(g: Group, fmt: str, with_job: bool = False) -> str:
    esc = _esc(fmt)
    rows = [([esc(r.job_text)] if with_job else []) + _point_cells(r, esc) for r in g.rows]
    head = (["job"] if with_job else []) + _TABLE_HEAD
    align = (("left",) if with_job else ()) + _TABLE_ALIGN
    return _table(rows, head, align, fmt)


_BEST_HEAD = ["concurrency", "best speculative setting", "speedup", "output tok/s",
              "per-stream tok/s", "accept length", "baseline tok/s", "baseline per-stream",
              "tied (intervals overlap)"]


def _best_table(bests: list[Best], fmt: str, with_workload: bool, with_job: bool = False) -> str:
    rows, esc = [], _esc(fmt)
    for b in bests:
        c = _conc_text(b.group.concurrency)
        if with_workload:
            c = f"{c} ({esc(_workload_text(b.group.workload))})"
        base_out = fmt_tps(b.baseline.output_tps) if b.baseline else DASH
        base_per = fmt_tps(b.baseline.per_stream_tps) if b.baseline else DASH
        if b.row is None:
            rows.append([c, "(no successful speculative point)", DASH, DASH, DASH, DASH, base_out,
                         base_per, DASH])
            continue
        label = esc(b.row.label)
        if with_job and b.row.job:
            label = f"{label} [{esc(b.row.job_text)}]"
        if b.by != "speedup":
            label += " (by output tok/s: speedup unknown)"
        best, ties = iv.tied(b.group)
        tie_text = (", ".join(esc(t.label) for t in ties if t is not b.row)
                    if best is not None else "")
        rows.append([c, label, iv.speedup_text(b.row), fmt_tps(b.row.output_tps),
                     fmt_tps(b.row.per_stream_tps), b.row.accept_text, base_out, base_per,
                     tie_text or "none"])
    return _table(rows, _BEST_HEAD, ("left", "left") + ("right",) * 6 + ("left",), fmt)


def _status_line(rows: list[PointRow]) -> str:
    n = len(rows)
    ok = sum(r.status == "ok" for r in rows)
    failed = sum(r.status == "failed" for r in rows)
    pending = sum(r.status == "pending" for r in rows)
    return f"{n} points: {ok} ok, {failed} failed, {pending} pending"


def _failure_lines(rows: list[PointRow], server_failures: list[dict], with_job: bool = False,
                   md=md) -> list[str]:
    """One line per failed server and point; ``md`` escapes their data (one_line for a
    terminal)."""
    lines = []
    for s in server_failures:
        job = f"[{md(s.get('job_label') or s['job'])}] " if with_job and s.get("job") else ""
        lines.append(f"- server {job}{md(s['label'])} (`{md_code(s['server'])}`): "
                     f"{md(s['reason'])}")
    for r in rows:
        if r.status == "failed":
            job = f"[{md(r.job_text)}] " if with_job and r.job else ""
            lines.append(f"- point {job}{md(r.label)} @ concurrency {_conc_text(r.concurrency)} "
                         f"(`{md_code(r.benchmark)}`): {md(r.reason)}")
    return lines


def _pending_lines(rows: list[PointRow], limit: int = 20, with_job: bool = False) -> list[str]:
    pend = [r for r in rows if r.status == "pending"]
    lines = []
    for r in pend[:limit]:
        job = f"[{md(r.job_text)}] " if with_job and r.job else ""
        lines.append(f"- {job}{md(r.label)} @ concurrency {_conc_text(r.concurrency)} "
                     f"(`{md_code(r.benchmark)}`)")
    if len(pend) > limit:
        lines.append(f"- ... and {len(pend) - limit} more")
    return lines


def _decision(report: Report, groups: list[Group], esc=md) -> list[str]:
    """The Decision section: search=tune's (tune.json), else the grid's from its tables;
    every value from data through ``esc`` (markdown escaping; one_line for a terminal)."""
    from specc.report.decision import grid_lines, lines

    if not report.decision:
        return grid_lines(groups, esc=esc)
    from specc.report import deploy

    return lines(report.decision, esc=esc) + (deploy.lines(report.deploy, esc=esc)
                                               if report.deploy else [])


def _plain_tables(md: list[str]) -> list[str]:
    """Markdown lines for a terminal: each pipe table as a plain one, headings bare, no
    blank lines."""
    out, block = [], []
    for line in md + [""]:
        if line.startswith("|"):
            block.append([c.strip() for c in line.strip().strip("|").split("|")])
            continue
        if block:
            body = [b for b in block[1:] if not all(set(c) <= set(":-") for c in b)]
            out += tabulate(body, headers=block[0], tablefmt="simple",
                            disable_numparse=True).splitlines()
            block = []
        if line:
            out.append(line.lstrip("#").strip() if line.startswith("#") else
                       line.replace("**", ""))
    return out


def render_markdown(report: Report) -> str:
    """report.md's text."""
    rows = report.rows
    groups = report.groups()
    multi_workload = len({g.workload for g in groups}) > 1
    out = [f"# Report: {md(report.experiment)} (engine: {md(report.engine)})", ""]
    out += _decision(report, groups)   # the answer first
    out.append(f"Run dir: `{md_code(report.run_dir)}`  ")
    out.append(_status_line(rows) + ".")
    if report.pending:
        out.append(f"\n**{len(report.pending)} pending** (in the plan, no result yet).")
    out.append("")
    if not rows:
        out += ["The plan has no benchmark points.", ""]
    for g in groups:
        out += [f"## {md(g.title(with_workload=True))}", "", _group_table(g, "pipe"), "",
                md(iv.rests_on(g)), ""]
        cat = iv.category_table(g)
        if cat is not None:
            head, crow = cat
            head = head[:2] + [md(h) for h in head[2:]]
            crow = [[md(r[0]), *r[1:]] for r in crow]
            out += [f"### By category (concurrency {_conc_text(g.concurrency)})", "",
                    _table(crow, head, ("left", "right") + ("right",) * (len(head) - 2), "pipe"),
                    ""]
        for key, label, title in (("turns", "turn", "By turn"),
                                  ("input_buckets", "input tokens", "By input length")):
            t = iv.group_table(g, key, label)
            if t is not None:
                head, trow = t
                head = head[:2] + [md(h) for h in head[2:]]
                trow = [[md(r[0]), *r[1:]] for r in trow]
                out += [f"### {title} (concurrency {_conc_text(g.concurrency)})", "",
                        _table(trow, head, ("left", "right") + ("right",) * (len(head) - 2),
                               "pipe"), ""]

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
            point = md(", ".join(f"{k}={v}" for k, v in (d.get("point") or {}).items()))
            out.append(f"- {point}: `{md_code(d.get('code'))}` "
                       f"{md(d.get('reason') or '')}".rstrip())
        out.append("")

    warn_diags = [g for g in report.diagnostics if g.severity in ("warning", "error")]
    if warn_diags:
        out += ["## Compile diagnostics", ""]
        for diag in warn_diags:
            out.append(f"- {md(diag.severity)} `{md_code(diag.code)}` at "
                       f"`{md_code(diag.path)}`: {md(diag.message)}")
        out.append("")

    if report.plots or report.plot_notes:
        out += ["## Plots", ""]
        for name, p in report.plots.items():
            rel = p.relative_to(report.run_dir) if p.is_relative_to(report.run_dir) else p
            out.append(f"![{name}]({rel.as_posix()})")
        out += [f"- {md(n)}" for n in report.plot_notes]
        out.append("")

    if report.warnings:
        out += ["## Warnings", ""] + [f"- {md(w)}" for w in report.warnings] + [""]

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
    out = [f"{one_line(report.experiment)} (engine: {one_line(report.engine)}): "
           f"{_status_line(rows)}", ""]
    decision = _plain_tables(_decision(report, groups, esc=one_line))
    out += decision + ([""] if decision else [])
    for g in groups:
        out += [one_line(g.title(with_workload=True)), _group_table(g, "simple"),
                one_line(iv.rests_on(g)), ""]
    bests = report.best()
    if bests:
        out += ["Best speculative setting per concurrency", _best_table(bests, "simple", multi_workload), ""]
    fl = _failure_lines(rows, report.server_failures, md=one_line)
    if fl:
        out += ["Failures:"] + ["  " + line[2:] for line in fl] + [""]
    if report.pending:
        out.append(f"{len(report.pending)} point(s) pending (no result yet).")
    for w in report.warnings:
        out.append(f"warning: {one_line(w)}")
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
