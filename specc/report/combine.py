"""Hydra multirun: one combined review (and report, when executed) in the sweep dir."""

from __future__ import annotations

from pathlib import Path


def combine(sweep_dir: Path, run_dirs: list[Path]) -> int:
    lines = [f"# specc multirun: {len(run_dirs)} job(s)", ""]
    for d in run_dirs:
        ok = (d / "plan.json").exists()
        lines.append(f"- [{d.name}]({d.name}/review.md): {'valid' if ok else 'INVALID'}")
    lines.append("")
    for d in run_dirs:
        review = d / "review.md"
        if review.exists():
            body = review.read_text().replace("\n# ", "\n## ").replace("\n## ", "\n### ")
            lines += [f"## job {d.name}", "", body, ""]
    sweep_dir.mkdir(parents=True, exist_ok=True)
    (sweep_dir / "review.md").write_text("\n".join(lines))
    executed = [d for d in run_dirs if (d / "results.jsonl").exists()]
    if executed:
        from specc.report import combine_reports

        combine_reports(sweep_dir, executed)
    print(f"combined review: {sweep_dir / 'review.md'}")
    return 0
