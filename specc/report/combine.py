"""Hydra multirun: one combined review (and report, when executed) in the sweep dir."""

from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import quote

from specc.files import STATE_BYTES, atomic_write, read_text
from specc.report.model import DASH, PointRow, ReportError, _best, _groups, _plain
from specc.report.read import build_report
from specc.report.tables import (NOTES, _best_table, _csv_text, _failure_lines, _group_table,
                                 _pending_lines, _status_line, _table, md as md_text)

_HEADING = re.compile(r"^(#{1,6})(?=\s)")
_FENCE = re.compile(r"^\s*(```|~~~)")


def nest_headings(markdown: str, levels: int = 2) -> str:
    """Push every heading down `levels` (one job's `#` -> `###`, `##` -> `####`), keeping
    their relative depth; lines inside code fences (`# <server id>`) are not headings."""
    out, fenced = [], False
    for line in markdown.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            line = _HEADING.sub(lambda m: "#" * min(6, len(m.group(1)) + levels), line)
        out.append(line)
    return "\n".join(out)


def combine(sweep_dir: Path, run_dirs: list[Path]) -> int:
    lines = [f"# specc multirun: {len(run_dirs)} job(s)", ""]
    for d in run_dirs:
        ok = (d / "plan.json").exists()
        lines.append(f"- [{md_text(d.name)}]({quote(d.name)}/review.md): "
                     f"{'valid' if ok else 'INVALID'}")
    lines.append("")
    for d in run_dirs:
        try:
            body = nest_headings(read_text(d / "review.md", STATE_BYTES))
        except (OSError, ValueError):
            body = None
        if body is not None:
            lines += [f"## job {d.name}", "", body, ""]
    sweep_dir.mkdir(parents=True, exist_ok=True)
    atomic_write(sweep_dir / "review.md", "\n".join(lines))
    executed = [d for d in run_dirs if (d / "results.jsonl").exists()]
    if executed:
        combine_reports(sweep_dir, executed)
    print(f"combined review: {sweep_dir / 'review.md'}")
    return 0


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
        items = yaml.safe_load(read_text(p, STATE_BYTES)) or []
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
        out += [f"## {md_text(g.title(with_workload=True))}", "",
                _group_table(g, "pipe", with_job=True), ""]
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
