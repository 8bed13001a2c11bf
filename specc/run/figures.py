"""A point's figures with intervals, paired with its baseline's: what the search and the
verification of its deployed schedule are fed (specc.run.tune, specc.run.deploy)."""

from __future__ import annotations

from pathlib import Path


def point_figures(run_dir: Path, row: dict, base_row: dict | None) -> dict:
    """The point's figures with intervals (the report's statistics) and its per-request
    (output tokens, verify passes) and (output tokens, decode seconds)."""
    from specc import stats
    from specc import requestlog as reqlog

    mine = reqlog.read(run_dir, row["benchmark"])
    if not mine:
        return {}
    base = reqlog.read(run_dir, base_row["benchmark"]) if base_row and \
        base_row.get("status") == "ok" else None
    figs = stats.point_figures(mine, _duration(row), base=base or None,
                               base_duration=_duration(base_row) if base else None)
    figs["_requests"] = tuple((float(r.get("output_tokens") or 0), float(r.get("verify_ct") or 0))
                              for r in mine if r.get("ok"))
    # (output tokens, decode seconds): at concurrency 1 a request's decode time counts its
    # verify passes, which the chat APIs' responses do not (the tuner's straggler model)
    figs["_decode"] = tuple((float(r.get("output_tokens") or 0),
                             float(r.get("e2e_latency") or 0) - float(r.get("ttft") or 0))
                            for r in mine if r.get("ok") and r.get("e2e_latency"))
    return figs


def _duration(row: dict | None) -> float:
    if not row:
        return 0.0
    reps = (row.get("basis") or {}).get("repeats") or []
    d = sum(float(x.get("duration") or 0.0) for x in reps if isinstance(x, dict))
    return d or float((row.get("metrics") or {}).get("duration") or 0.0)
