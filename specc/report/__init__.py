"""Turn a run dir (plan.json + results.jsonl [+ state.json]) into a report.

    build_report(run_dir) -> Report           read the files, nothing written
    write_report(run_dir) -> Report           report.md/.csv/.json/.html, plots/*.png
    render_terminal(report) -> str            the same tables as plain text
    combine_reports(sweep_dir, run_dirs)      one report over a Hydra multirun

Modules: ``model`` (the report's data types), ``read`` (run dir -> Report),
``tables`` (markdown, terminal and CSV text), ``plots`` (matplotlib, lazily),
``combine`` (Hydra multirun).

Every benchmark point in the plan becomes one row, whatever happened to it:
``ok`` and ``failed`` rows come from results.jsonl (the last line for an id
wins; an unparseable last line -- a writer killed mid-write -- is ignored),
points with no result are ``pending``.  Speedup is the output-throughput ratio
against the point's matched baseline (same model, hardware, dataset and
concurrency); it is taken from the result line, or computed here by
``specc.results.speedup`` (the executor's one) when the line lacks it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from specc.files import atomic_write
from specc.report.combine import combine_reports
from specc.report.html import render_html
from specc.manifest import ManifestError, read_manifest
from specc.report.model import PointRow, Report, ReportError, _plain
from specc.report.plots import make_plots
from specc.report.read import build_report
from specc.report.tables import _csv_text, render_markdown, render_terminal

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


def write_report(run_dir: Path | str, *, plots: bool = True) -> Report:
    """Build the report and write report.md, report.csv, report.json and plots/ into run_dir."""
    run_dir = Path(run_dir)
    report = build_report(run_dir)
    if plots:
        make_plots(report, run_dir / "plots")
    flat = [r.flat() for r in report.rows]
    manifest = _manifest(run_dir)
    atomic_write(run_dir / "report.csv", _csv_text(flat))
    atomic_write(run_dir / "report.json", json.dumps(
        _plain({"version": 1, **({"decision": report.decision} if report.decision else {}),
                **({"deploy": report.deploy} if report.deploy else {}),
                "summary": report.summary(), "rows": flat,
                **({"manifest": manifest} if manifest else {})}), indent=2) + "\n")
    markdown = render_markdown(report)
    atomic_write(run_dir / "report.md", markdown)
    atomic_write(run_dir / "report.html", render_html(markdown, run_dir, manifest))
    return report


def _manifest(run_dir: Path) -> dict | None:
    """The run manifest the run side wrote (manifest.json, through its one reader), or None
    when there is none; ReportError (exit 2) naming the file and field when it is not one."""
    try:
        manifest = read_manifest(run_dir)
    except ManifestError as e:
        raise ReportError(f"{e} (rerun `specc run --plan` to write it again, or delete it)") \
            from None
    return None if manifest is None else manifest.to_json()


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

