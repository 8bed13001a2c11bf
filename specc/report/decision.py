"""The report's "Decision" section for a `search=tune` run: tune.json, for people."""

from __future__ import annotations


def _setting(e: dict) -> str:
    return f"s{e['num_steps']} k{e['topk']} d{e['num_draft_tokens']}"


def _iv(e: dict) -> str:
    lo, hi = (e.get("interval") or [None, None])[:2]
    return f"{e['speedup']:.2f}x" + (f" [{lo:.2f}, {hi:.2f}]" if lo is not None else "")


def lines(d: dict, label=lambda sid: sid) -> list[str]:
    """Markdown lines: best per concurrency, crossover, SLO, starts and why it stopped."""
    out = ["## Decision", "",
           f"search=tune: {d.get('server_starts')} server starts of the grid's "
           f"{d.get('grid_server_starts')} (budget {d.get('max_starts')}); stopped: "
           f"{d.get('stopped') or 'interrupted'}.", ""]
    if d.get("no_decision"):
        out += [f"**No decision: {d['no_decision']}.** Every speedup is paired with the "
                "baseline, so without it no setting is chosen and no crossover is drawn.", ""]
    out += ["| concurrency | deploy | speedup [95%] | tied |", "|---|---|---|---|"]
    for c, e in (d.get("best") or {}).items():
        if e.get("no_decision"):
            out.append(f"| {c} | no decision | {e['no_decision']} | |")
        elif e.get("baseline"):
            spec = e.get("best_speculative")
            why = (f"best speculative {_setting(spec)} {_iv(spec)}" if spec
                   else "no speculative point measured")
            out.append(f"| {c} | baseline (no setting pays) | {why} | |")
        else:
            ties = ", ".join(_setting(t) for t in e.get("ties") or []) or "-"
            out.append(f"| {c} | {_setting(e)} | {_iv(e)} | {ties} |")
    x = d.get("crossover") or {}
    if x.get("concurrency") is not None:
        lo = x["between"][0]
        text = (f"speculation stops paying at concurrency {x['concurrency']}"
                + (f" (between {lo} and {x['concurrency']} on the ladder)" if lo else
                   " (already at the ladder's bottom)"))
    else:
        text = x.get("note") or "no crossover found"
    out += ["", f"Crossover: {text}."]
    for key, s in (d.get("slo") or {}).items():
        b, sp = s.get("baseline") or {}, s.get("speculative") or {}
        out.append(f"SLO {key} <= {s['limit_ms']:g} ms: baseline up to concurrency "
                   f"{b.get('concurrency')} {b.get('interval')}, speculation up to "
                   f"{sp.get('concurrency')} {sp.get('interval')}"
                   + (f": {s['text']}." if s.get("text") else "."))
    out += ["", "| candidate | started | predicted speedup | measured |", "|---|---|---|---|"]
    for row in d.get("candidates") or []:
        fmt = lambda m: ", ".join(f"c{c}: {v:.2f}" for c, v in (m or {}).items()  # noqa: E731
                                  if v is not None) or "-"
        out.append(f"| {_setting(row)} | {'yes' if row.get('started') else 'no'} | "
                   f"{fmt(row.get('predicted'))} | {fmt(row.get('measured'))} |")
    return out + [""]
