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
           f"{e_(d.get('stopped') or 'interrupted')}.", ""]
    if d.get("no_decision"):
        out += [f"**No decision: {e_(d['no_decision'])}.** Every speedup is paired with the "
                "baseline, so without it no setting is chosen and no crossover is drawn.", ""]
    out += ["| concurrency | deploy | speedup [95%] | tied |", "|---|---|---|---|"]
    for c, e in (d.get("best") or {}).items():
        if e.get("no_decision"):
            out.append(f"| {e_(c)} | no decision | {e_(e['no_decision'])} | |")
        elif e.get("baseline"):
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
    r = x.get("refined") or {}
    if r.get("status") == "not refined":
        out.append(f"Not refined between ladder points: {e_(r.get('why'))}.")
    elif r:   # bisected on the baseline and the deployed command, side by side
        out.append(f"Refined ({e_(r.get('status'))}, {e_(r.get('pairs'))} paired points, the "
                   f"deployed command beside the baseline): {e_(r.get('text'))}.")
    for key, s in (d.get("slo") or {}).items():
        b, sp = s.get("baseline") or {}, s.get("speculative") or {}
        out.append(f"SLO {e_(key)} <= {s['limit_ms']:g} ms: baseline up to concurrency "
                   f"{e_(b.get('concurrency'))} {e_(b.get('interval'))}, speculation up to "
                   f"{e_(sp.get('concurrency'))} {e_(sp.get('interval'))}"
                   + (f": {e_(s['text'])}." if s.get("text") else "."))
        br = s.get("bracket")
        if br:   # bracketed on the running servers (specc.tune.bracket)
            out.append(f"SLO {e_(key)}, bracketed: {e_(br.get('text'))}" + "".join(
                f"; {who} {e_((br.get(role) or {}).get('text') or 'not bracketed')}"
                for who, role in (("baseline:", "baseline"), ("speculation:", "speculative")))
                + ".")
    out += ["", "| candidate | started | predicted speedup | measured |", "|---|---|---|---|"]
    for row in d.get("candidates") or []:
        fmt = lambda m: ", ".join(f"c{e_(c)}: {v:.2f}" for c, v in (m or {}).items()  # noqa: E731
                                  if v is not None) or "-"
        out.append(f"| {_setting(row, e_)} | {'yes' if row.get('started') else 'no'} | "
                   f"{fmt(row.get('predicted'))} | {fmt(row.get('measured'))} |")
    return out + [""]


# -- a grid run (and a multirun's jobs): the same answer from the report's own tables ----
def _reaches(r) -> bool:
    """The point's speedup interval reaches 1.0 (its value, without an interval)."""
    iv = r.speedup_iv
    hi = iv.hi if iv is not None and iv.hi is not None else r.speedup
    return hi is not None and hi >= 1.0


def grid_decision(groups) -> list[dict]:
    """Per table (concurrency, workload): what to deploy, judged only against baselines that
    were measured. Entries: {group, row (the best speculative point) or None, ties, pays,
    no_decision (why nothing can be said, else None)}."""
    from specc.report.intervals import tied
    from specc.report.model import Group, _best

    out = []
    for g in groups:
        spec = [r for r in g.rows if not r.is_baseline]
        bases = {(r.job, r.benchmark): r for r in g.rows if r.is_baseline}   # per job
        if not spec:
            continue
        paired = [r for r in spec if r.status == "ok" and (
            not r.baseline_benchmark or getattr(bases.get((r.job, r.baseline_benchmark)),
                                                "status", None) == "ok")]
        if bases and not any(r.baseline_benchmark for r in paired):
            down = [b for b in bases.values() if b.status != "ok"]
            if down:   # the baseline is what every speedup is paired with
                b = down[0]
                why = (f"the baseline failed ({b.reason})" if b.status == "failed" and b.reason
                       else "the baseline failed" if b.status == "failed"
                       else "the baseline was not measured")
                out.append({"group": g, "row": None, "ties": [], "pays": None,
                            "no_decision": why})
                continue
        sub = Group(g.workload, g.concurrency, paired + [b for b in bases.values()
                                                         if b.status == "ok"])
        best = _best(sub)
        top, ties = tied(sub)
        row = best.row
        out.append({"group": g, "row": row, "by": best.by,
                    "ties": [t for t in ties if t is not row] if top is row else [],
                    "pays": (row.speedup >= 1.0) if row is not None and row.speedup is not None
                    else None,
                    "reaches": (any(_reaches(r) for r in paired)
                                if any(r.speedup is not None for r in paired) else None),
                    "no_decision": None})
    return out


def _crossover(entries) -> str | None:
    """The lowest concurrency whose best speculative interval does not reach 1.0, as tune
    says it; None with fewer than two concurrencies."""
    from specc.report.model import _conc_text, _sort_num

    ladder = sorted(entries, key=lambda e: _sort_num(e["group"].concurrency))
    if len(ladder) < 2:
        return None

    prev, unknown = None, []   # unknown: (concurrency, its text) where nothing was decided
    for e in ladder:
        c = _conc_text(e["group"].concurrency)
        if e["no_decision"] or e["row"] is None or e.get("reaches") is None:
            unknown.append((_sort_num(e["group"].concurrency), c))
            continue
        if not e["reaches"]:
            return f"speculation stops paying at concurrency {c}" + (
                f" (between {prev[1]} and {c} on the ladder)" if prev else
                " (already at the ladder's bottom)" if not unknown else
                f" (below it no decision at concurrency {', '.join(t for _, t in unknown)})")
        prev = (_sort_num(e["group"].concurrency), c)
    if prev is None:   # nothing decided anywhere
        why = next((e["no_decision"] for e in ladder if e["no_decision"]), None)
        return f"no decision: {why}" if why else None
    above = [t for v, t in unknown if v > prev[0]]
    if above:
        return (f"speculation pays up to concurrency {prev[1]}; above it no decision at "
                f"concurrency {', '.join(above)}")
    return "speculation pays up to the top of the ladder"


def grid_lines(groups, with_job: bool = False, esc=None) -> list[str]:
    """Markdown lines: the answer first -- per concurrency what to deploy (with its 95%
    interval and the settings tied with it), where no setting pays, where nothing can be
    said (a failed baseline) -- and the crossover. Empty when the plan has no speculation.
    Every text from data (labels, jobs, a server's reason) goes through ``esc`` (markdown
    escaping by default)."""
    if esc is None:
        from specc.report.markup import md as esc
    from specc.report.intervals import speedup_text
    from specc.report.model import _conc_text, _workload_text

    entries = grid_decision(groups)
    if not entries:
        return []
    workloads = sorted({e["group"].workload for e in entries}, key=str)
    label = (lambda r: f"{esc(r.label)} [{esc(r.job_text)}]" if with_job and r.job
             else esc(r.label))
    out = ["## Decision", "", "| concurrency | deploy | speedup [95%] | tied |",
           "|---|---|---|---|"]
    for e in entries:
        c = _conc_text(e["group"].concurrency)
        if len(workloads) > 1:
            c = f"{c} ({esc(_workload_text(e['group'].workload))})"
        r = e["row"]
        if e["no_decision"]:
            out.append(f"| {c} | no decision | {esc(e['no_decision'])} | |")
        elif r is None:
            out.append(f"| {c} | baseline (no speculative point finished) | | |")
        elif e["pays"] is False:
            out.append(f"| {c} | baseline (no setting pays) | best speculative {label(r)} "
                       f"{speedup_text(r)} | |")
        else:
            by = "" if e.get("by") == "speedup" else " (by output tok/s: speedup unknown)"
            out.append(f"| {c} | {label(r)}{by} | {speedup_text(r)} | "
                       f"{', '.join(label(t) for t in e['ties']) or '-'} |")
    for w in workloads:
        text = _crossover([e for e in entries if e["group"].workload == w])
        if text:
            where = f" ({esc(_workload_text(w))})" if len(workloads) > 1 else ""
            out += ["", f"Crossover{where}: {esc(text)}."]
    return out + [""]
