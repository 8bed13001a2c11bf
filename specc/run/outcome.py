"""How a sweep ends, one path for the local executor and the Slurm driver: a finished
point's one-line summary, speedups of points whose baseline finished after them, and the
exit code. (They were two copies that drifted: the driver's summary lacked per-stream
throughput and the speedup, and a full disk in its backfill was a traceback.)"""

from __future__ import annotations

import sys
from pathlib import Path

from specc import exits
from specc.plan import Plan
from specc.results import ResultLog, ResultRow, with_speedup


def point_summary(row: dict | ResultRow) -> str:
    """A finished point in one line: its reason when it failed, its figures when ok."""
    r = row if isinstance(row, ResultRow) else ResultRow.from_json(row)
    if not r.ok:
        return (r.reason or "")[:120]
    parts = [f"{r.metric('output_throughput') or 0:.1f} tok/s"]
    for name, text in (("per_stream_output_throughput", "{:.1f} tok/s/stream"),
                       ("accept_length", "accept {:.2f}")):
        if r.metric(name):
            parts.append(text.format(r.metric(name)))
            continue
        unknown = r.extra.get("accept_length_unknown")
        if name == "accept_length" and isinstance(unknown, str) and unknown:
            parts.append(f"accept length unknown: {unknown[:100]}")
    if r.metric("speedup"):
        parts.append(f"{r.metric('speedup'):.2f}x")
    return ", ".join(parts)


def backfill_speedups(plan: Plan, results: ResultLog) -> str | None:
    """Speedups of ok points whose baseline finished later (packed servers, other jobs, an
    earlier run): results.jsonl rewritten once. Returns why it could not be rewritten (the
    old file stays whole; the speedups come with the next run), else None."""
    changed = False
    for b in plan.benchmarks:
        row = results.get(b.id)   # as written (rewritten below): read as a ResultRow
        if row and b.baseline and ResultRow.from_json(row).ok \
                and "speedup" not in (row.get("metrics") or {}):
            with_speedup(row, results.get(b.baseline))
            changed = changed or "speedup" in (row.get("metrics") or {})
    if changed:
        try:
            results.rewrite()
        except OSError as e:
            return f"cannot rewrite {results.path}: {e.strerror or e}"
    return None


def exit_code(plan: Plan, results: ResultLog, *, write_error: str | None = None,
              servers=None) -> int:
    """OK only when every point of the plan has an ok row and every record was written;
    FAILED for a failed point, a point without a row, or a record that could not be written.
    `servers` (search=tune: the servers the search chose) limits the points that count."""
    for b in plan.benchmarks:
        if servers is not None and b.server not in servers:
            continue
        row = results.get(b.id)
        if row is None or not results.finished(b.id) or not ResultRow.from_json(row).ok:
            return exits.FAILED
    return exits.FAILED if write_error else exits.OK


def remember(run_dir) -> str | None:
    """Add a finished run to the results index (`specc history`); the index is a cache of
    the run dirs, so a failure here is one warning line, never a failed run. Returns the
    index's path when the run went in."""
    try:
        from specc.report import index

        db = index.default_path(run_dir)
        if db is None or not (Path(run_dir) / "results.jsonl").is_file():
            return None   # SPECC_INDEX=off, or no point finished: nothing to remember
        conn = index.connect(db)
        try:
            index.add_run(conn, run_dir)
        finally:
            conn.close()
        return str(db)
    except Exception as e:   # noqa: BLE001 -- whatever it was, the run itself is done
        print(f"warning: run not added to the results index ({type(e).__name__}: "
              f"{str(e)[:200]}); `specc index {run_dir}` adds it later", file=sys.stderr)
        return None
