"""Hydra multirun: one combined review (and report, when executed) in the sweep dir."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import quote

from specc.files import STATE_BYTES, atomic_write, read_text
from specc.report.decision import grid_lines
from specc.report.html import render_html
from specc.report.model import DASH, PointRow, ReportError, _best, _groups, _plain
from specc.report.read import build_report
from specc.rundir import RunDirError
from specc.report.tables import (NOTES, _best_table, _csv_text, _failure_lines, _group_table,
                                 _pending_lines, _status_line, _table, md as md_text, md_code)

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
    labels = job_labels({d.name: _overrides(d) for d in run_dirs})
    lines = [f"# specc multirun: {len(run_dirs)} job(s)", ""]
    for d in run_dirs:
        ok = (d / "plan.json").exists()
        lines.append(f"- [{md_text(d.name)}]({quote(d.name)}/review.md) {_said(d.name, labels)}: "
                     f"{'valid' if ok else 'INVALID'}")
    lines.append("")
    for d in run_dirs:
        try:
            body = nest_headings(read_text(d / "review.md", STATE_BYTES))
        except (OSError, ValueError):
            body = None
        if body is not None:
            lines += [f"## job {d.name}: {labels[d.name]}" if labels[d.name] != d.name
                      else f"## job {d.name}", "", body, ""]
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


def _overrides(run_dir: Path) -> list[str]:
    """The job's command-line overrides as Hydra saved them (.hydra/overrides.yaml)."""
    p = run_dir / ".hydra" / "overrides.yaml"
    if not p.exists():
        return []
    try:
        import yaml
        items = yaml.safe_load(read_text(p, STATE_BYTES)) or []
        return [str(x) for x in items] if isinstance(items, list) else []
    except Exception:
        return []


def _key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


def job_labels(overrides: dict[str, list[str]]) -> dict[str, str]:
    """Each job named by the overrides that set it apart from the others (`engine=vllm`), in
    the order given; the job's folder name where none does, or to keep two apart."""
    values = {name: {_key(o): o for o in items} for name, items in overrides.items()}
    keys = {k for v in values.values() for k in v}
    differ = {k for k in keys if len({v.get(k) for v in values.values()}) > 1}
    out = {name: " ".join(o for o in overrides[name] if _key(o) in differ) or name
           for name in overrides}
    seen: dict[str, int] = {}
    for label in out.values():
        seen[label] = seen.get(label, 0) + 1
    return {name: (f"{label} [{name}]" if seen[label] > 1 and label != name else label)
            for name, label in out.items()}


def _said(name: str, labels: dict[str, str]) -> str:
    return f"(`{md_code(labels[name])}`)" if labels.get(name, name) != name else ""


def combine_reports(sweep_dir: Path | str, run_dirs: list[Path]) -> Path:
    """One report.md / report.csv / report.json in sweep_dir over all jobs' run dirs."""
    sweep_dir = Path(sweep_dir)
    sweep_dir.mkdir(parents=True, exist_ok=True)
    jobs: list[dict] = []
    rows: list[PointRow] = []
    server_failures: list[dict] = []
    warnings: list[str] = []
    names = {Path(rd): _job_name(sweep_dir, Path(rd)) for rd in run_dirs}
    labels = job_labels({names[Path(rd)]: _overrides(Path(rd)) for rd in run_dirs})
    for rd in run_dirs:
        rd = Path(rd)
        job = names[rd]
        info: dict[str, Any] = {"job": job, "label": labels[job], "run_dir": str(rd),
                "overrides": " ".join(_overrides(rd))}
        try:
            rep = build_report(rd)
        except (ReportError, RunDirError) as e:
            info.update(experiment=DASH, engine=DASH, error=str(e))
            jobs.append(info)
            continue
        info.update(experiment=rep.experiment, engine=rep.engine, points=len(rep.rows),
                    ok=rep.count("ok"), failed=rep.count("failed"), pending=rep.count("pending"))
        jobs.append(info)
        for r in rep.rows:
            r.job, r.experiment, r.job_label = job, rep.experiment, labels[job]
            rows.append(r)
        for s in rep.server_failures:
            server_failures.append({**s, "job": job, "job_label": labels[job]})
        warnings += [f"[{labels[job]}] {w}" for w in rep.warnings]

    groups = _groups(rows)
    multi_workload = len({g.workload for g in groups}) > 1
    out = [f"# Combined report: {len(jobs)} job(s)", ""]
    decision = grid_lines(groups, with_job=True)
    if decision:   # the answer first; each job's setting judged against its own baseline
        out += decision[:2] + ["Speedups are each against the baseline of the same job.",
                               ""] + decision[2:]
    out += [f"Sweep dir: `{sweep_dir}`  ", _status_line(rows) + ".", "", "## Jobs", ""]
    job_rows = []
    for j in jobs:
        label = j.get("label") or j["job"]
        job_rows.append([j["job"] if label == j["job"] else f"{j['job']} (`{label}`)",
                         j["experiment"], j["engine"],
                         j.get("overrides") or DASH,
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
        fr = {"job": r.job, "job_label": r.job_label, "experiment": jobinfo.get("experiment"),
              **{k: v for k, v in fr.items() if k != "job"}}
        flat.append(fr)
    atomic_write(sweep_dir / "report.csv", _csv_text(flat))
    atomic_write(sweep_dir / "report.json", json.dumps(_plain({
        "version": 1, "jobs": jobs,
        "summary": {"points": len(rows), "ok": sum(r.status == "ok" for r in rows),
                    "failed": sum(r.status == "failed" for r in rows), "pending": len(pend),
                    "server_failures": server_failures, "warnings": warnings},
        "rows": flat}), indent=2) + "\n")
    md = sweep_dir / "report.md"
    text = "\n".join(out)
    atomic_write(md, text)
    atomic_write(sweep_dir / "report.html", render_html(text, sweep_dir))
    return md
