"""The report's "Deploy" section for a `search=tune` run: deploy.json, for people."""

from __future__ import annotations

import shlex
from pathlib import Path


def read(run_dir: Path) -> dict | None:
    """deploy.json, or None (a grid run, a tune that decided nothing, unreadable)."""
    from specc.rundir import deploy_decision

    return deploy_decision(run_dir)


def _pct(x) -> str:
    return "-" if x is None else f"{x:.1%}"


def _rows(measured: dict, e_) -> list[str]:
    out = ["| concurrency | speedup [95%] | gap to the envelope [95%] |", "|---|---|---|"]
    for c, v in measured.items():
        if "speedup" not in v:
            out.append(f"| {e_(c)} | failed: {e_(v.get('failed'))} | |")
            continue
        lo, hi = v.get("interval") or [None, None]
        glo, ghi = v.get("gap_interval") or [None, None]
        iv = f" [{lo:.2f}, {hi:.2f}]" if lo is not None and hi is not None else ""
        out.append(f"| {e_(c)} | {v['speedup']:.2f}x{iv} | {_pct(v.get('gap'))} "
                   f"[{_pct(glo)}, {_pct(ghi)}] |")
    return out


def lines(d: dict, esc=None) -> list[str]:
    """Markdown lines: the command, its bands, why, the predicted loss and the verification.
    Every value from deploy.json goes through ``esc``."""
    if esc is None:
        from specc.report.markup import md as esc

    def e_(v) -> str:
        return esc(str(v))

    out = ["## Deploy", "",
           f"{'One static setting' if d.get('static') else 'A batch-size schedule'} for "
           f"{e_(d.get('engine'))}: {e_(d.get('why'))}.", ""]
    out += ["| batch size | runs | predicted loss at the ladder points in it |",
            "|---|---|---|"]
    loss = d.get("predicted_loss") or {}
    for b in d.get("bands") or []:
        hi = b.get("to")
        span = f"{b['from']}+" if hi is None else f"{b['from']}-{hi}"
        inside = [f"{c}: {_pct(v)}" for c, v in loss.items()
                  if int(c) >= b["from"] and (hi is None or int(c) <= hi)]
        out.append(f"| {e_(span)} | {e_(b.get('label'))} | {e_(', '.join(inside) or '-')} |")
    if not d.get("expressible", True):
        out.append("")
        out.append("The engine cannot express the decision everywhere: the loss above is "
                   "against it.")
    cmd = shlex.join(str(a) for a in d.get("argv") or [])
    out += ["", f"Command: `{cmd}`" if "`" not in cmd else f"Command: {e_(cmd)}"]
    if d.get("files"):
        out.append(f"Beside it: {e_(', '.join(d['files']))}.")
    if d.get("applies_to") and not d.get("static"):
        out.append(f"The schedule applies to {e_(d['applies_to'])}.")
    out.append("")
    if d.get("verify"):
        out += ["Verification (one more start of this command, each point paired with the "
                "baseline; gap = 1 - deployed / the best static setting measured there):", ""]
        out += _rows(d["verify"], e_) + [""]
        moved = {c: b for c, b in (d.get("running_batch") or {}).items()
                 if b["band_at_concurrency"] != b["band_at_mean_in_flight"]}
        for c, b in moved.items():
            out.append(f"At concurrency {e_(c)} the engine's batch held "
                       f"{b['mean_in_flight']:.1f} requests on average: it ran "
                       f"{e_(b['band_at_mean_in_flight'])} there, not "
                       f"{e_(b['band_at_concurrency'])}.")
        if moved:
            out.append("")
    elif d.get("verify_note"):
        out += [f"Not verified: {e_(d['verify_note'])}.", ""]
    ref = d.get("engine_default")
    if ref:
        out += ["Reference: the engine's own default adaptive mode (specc's schedule vs the "
                "engine's default):", ""] + _rows(ref.get("measured") or {}, e_) + [""]
    return out
