"""Reading a run dir (plan.json, results.jsonl, state.json) into a Report."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from specc.files import PLAN_BYTES, STATE_BYTES, UnreadableFile, load_json
from specc.report.model import PointRow, Report, ReportError
from specc.results import ResultRow, read_rows, speedup


def _read_json(path: Path, limit: int = PLAN_BYTES) -> Any:
    try:
        return load_json(path, limit)
    except UnreadableFile as e:
        raise ReportError(str(e)) from None


def build_report(run_dir: Path | str) -> Report:
    """Read plan.json, results.jsonl and state.json of ``run_dir``; write nothing."""
    run_dir = Path(run_dir)
    plan_path = run_dir / "plan.json"
    if not plan_path.exists():
        raise ReportError(f"{run_dir}: no plan.json (was the config valid?)")
    plan = _read_json(plan_path)
    if not isinstance(plan, dict):
        raise ReportError(f"{plan_path}: expected a JSON object")
    results, warnings = read_rows(run_dir / "results.jsonl")

    state: dict = {}
    state_path = run_dir / "state.json"
    if state_path.exists():
        try:
            state = load_json(state_path, STATE_BYTES)
        except (UnreadableFile, OSError) as e:
            warnings.append(f"state.json: {str(e).split(': ', 1)[-1]}; server states not shown")
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
            status, reason, metrics = res.status, res.reason, res.metrics
            if status == "failed" and not reason:
                reason = "no reason given"
            # a figure the server's answers made impossible: say why it is blank
            if res.extra.get("accept_length_unknown"):
                warnings.append(f"{bid}: accept length unknown: "
                                f"{str(res.extra['accept_length_unknown'])[:200]}")
            if res.extra.get("not_finite"):
                warnings.append(f"{bid}: not a finite number, written as null: "
                                f"{', '.join(map(str, res.extra['not_finite']))[:200]}")
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
    _fill_speedups(rows, results)
    from specc.report.intervals import attach

    attach(rows, results, run_dir)

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


def _fill_speedups(rows: list[PointRow], results: dict[str, ResultRow]) -> None:
    """The result line's speedup; else the one ``specc.results.speedup`` computes."""
    for r in rows:
        given = r.metric("speedup")
        if r.status != "ok":
            r.speedup = None
        elif given is not None:
            r.speedup = given
        elif r.baseline_benchmark:
            r.speedup = speedup(results[r.benchmark], results.get(r.baseline_benchmark))
            r.speedup_computed = r.speedup is not None
