"""Reading a run dir (plan.json, results.jsonl, state.json) into a Report."""

from __future__ import annotations

from pathlib import Path

from specc.report.model import PointRow, Report
from specc.results import ResultRow, speedup
from specc.rundir import RunDir, StateError


def build_report(run_dir: Path | str) -> Report:
    """Read plan.json, results.jsonl and state.json of ``run_dir``; write nothing.
    RunDirError (one line) for a plan.json that is not the reviewed plan."""
    rd = RunDir.open(run_dir)
    run_dir, plan = rd.path, rd.plan
    results, warnings = rd.results()
    warnings = list(warnings)

    try:   # the one strict reader the executor and `specc down` use
        state = rd.state()
    except StateError as e:
        state = {}
        warnings.append(f"state.json: {e}; server states not shown")

    servers = {s.id: s for s in plan.servers}
    rows: list[PointRow] = []
    planned = set()
    decision = None
    deploy = None
    measured = None   # search=tune: the servers the search started (others are not pending)
    if plan.search is not None:
        decision = rd.tune()
        from specc.report.deploy import read as read_deploy

        deploy = read_deploy(run_dir)
        measured = {r.server for r in results.values()}
    for b in plan.benchmarks:
        bid = b.id
        planned.add(bid)
        if measured is not None and b.server not in measured:
            continue
        srv = servers[b.server]
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
        rows.append(PointRow(
            benchmark=bid, server=b.server, label=srv.label or b.server,
            is_baseline=srv.baseline,
            server_params=srv.params,
            params=b.params,
            status=status, reason=reason, metrics=dict(metrics),
            baseline_benchmark=b.baseline,
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
                "server": sid, "label": servers[sid].label if sid in servers else sid,
                "reason": st.get("reason") or "no reason given",
            })

    return Report(
        run_dir=run_dir,
        experiment=plan.experiment or run_dir.name,
        engine=plan.engine,
        rows=rows,
        server_failures=server_failures,
        dropped=[d.to_json() for d in plan.dropped],
        diagnostics=list(plan.diagnostics),
        warnings=warnings,
        decision=decision,
        deploy=deploy,
    )


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
