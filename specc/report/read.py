"""Reading a run dir (plan.json, results.jsonl, state.json) into a Report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from specc.report.model import PointRow, Report, ReportError


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
