"""The report's "Decision" section for a `search=tune` run: tune.json, for people."""

from __future__ import annotations


def _setting(e: dict, esc=str) -> str:
    return esc(f"s{e['num_steps']} k{e['topk']} d{e['num_draft_tokens']}")


def _iv(e: dict) -> str:
    lo, hi = (e.get("interval") or [None, None])[:2]
    return f"{e['speedup']:.2f}x" + (f" [{lo:.2f}, {hi:.2f}]" if lo is not None else "")


def lines(d: dict, label=lambda sid: sid, esc=None) -> list[str]:
    """Markdown lines: best per concurrency, crossover, SLO, starts and why it stopped.
    Every value from tune.json goes through ``esc`` (markdown escaping by default): a
    `stopped` text holding an image or a <script> is shown, never built."""
    if esc is None:
        from specc.report.markup import md as esc

    def e_(v) -> str:
        return esc(str(v))

    out = ["## Decision", "",
           f"search=tune: {e_(d.get('server_starts'))} server starts of the grid's "
           f"{e_(d.get('grid_server_starts'))} (budget {e_(d.get('max_starts'))}); stopped: "
           f"{e_(d.get('stopped') or 'interrupted')}.", "",
           "| concurrency | deploy | speedup [95%] | tied |", "|---|---|---|---|"]
    for c, e in (d.get("best") or {}).items():
        if e.get("baseline"):
            spec = e.get("best_speculative")
            why = (f"best speculative {_setting(spec, e_)} {_iv(spec)}" if spec
                   else "no speculative point measured")
            out.append(f"| {e_(c)} | baseline (no setting pays) | {why} | |")
        else:
            ties = ", ".join(_setting(t, e_) for t in e.get("ties") or []) or "-"
            out.append(f"| {e_(c)} | {_setting(e, e_)} | {_iv(e)} | {ties} |")
    x = d.get("crossover") or {}
    if x.get("concurrency") is not None:
        lo = x["between"][0]
        text = (f"speculation stops paying at concurrency {e_(x['concurrency'])}"
                + (f" (between {e_(lo)} and {e_(x['concurrency'])} on the ladder)" if lo else
                   " (already at the ladder's bottom)"))
    else:
        text = e_(x.get("note") or "no crossover found")
    out += ["", f"Crossover: {text}."]
    for key, s in (d.get("slo") or {}).items():
        b, sp = s.get("baseline") or {}, s.get("speculative") or {}
        out.append(f"SLO {e_(key)} <= {s['limit_ms']:g} ms: baseline up to concurrency "
                   f"{e_(b.get('concurrency'))} {e_(b.get('interval'))}, speculation up to "
                   f"{e_(sp.get('concurrency'))} {e_(sp.get('interval'))}"
                   + (f": {e_(s['text'])}." if s.get("text") else "."))
    out += ["", "| candidate | started | predicted speedup | measured |", "|---|---|---|---|"]
    for row in d.get("candidates") or []:
        fmt = lambda m: ", ".join(f"c{e_(c)}: {v:.2f}" for c, v in (m or {}).items()  # noqa: E731
                                  if v is not None) or "-"
        out.append(f"| {_setting(row, e_)} | {'yes' if row.get('started') else 'no'} | "
                   f"{fmt(row.get('predicted'))} | {fmt(row.get('measured'))} |")
    return out + [""]
