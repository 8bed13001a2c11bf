"""Hydra multirun: one combined review (and report, when executed) in the sweep dir."""

from __future__ import annotations

import re
from pathlib import Path

from specc.files import atomic_write

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
        lines.append(f"- [{d.name}]({d.name}/review.md): {'valid' if ok else 'INVALID'}")
    lines.append("")
    for d in run_dirs:
        review = d / "review.md"
        if review.exists():
            body = nest_headings(review.read_text())
            lines += [f"## job {d.name}", "", body, ""]
    sweep_dir.mkdir(parents=True, exist_ok=True)
    atomic_write(sweep_dir / "review.md", "\n".join(lines))
    executed = [d for d in run_dirs if (d / "results.jsonl").exists()]
    if executed:
        from specc.report import combine_reports

        combine_reports(sweep_dir, executed)
    print(f"combined review: {sweep_dir / 'review.md'}")
    return 0
