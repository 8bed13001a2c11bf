"""From the tune decision to one deployable schedule: bands of batch size, each with the
setting it runs, or one static setting where that loses nothing worth a start.

Pure: fed the decision (tune.json), the candidates' shapes and what the engine can express
(its adapter's `ScheduleSupport`), it returns the schedule with its predicted loss per
concurrency; the adapter turns it into a launch command (specc/engines/*.py) and the
executor verifies it in one more start (specc/run/deploy.py). See docs/tune.md, "Deploy".

A band starts at a ladder concurrency where the measured best changes, and runs up to the
next such point: a batch size between two ladder points runs the setting decided at the
lower one, since nothing was measured in between (both engines route a batch size to the
band at or below it).
"""

from __future__ import annotations

from dataclasses import dataclass

#: The baseline as a band's setting: no speculation (SGLang adaptive: 0 steps; vLLM: K 0).
BASELINE: dict = {"baseline": True}


@dataclass(frozen=True)
class ScheduleSupport:
    """What an engine release can express in one launch command (from its adapter).

    `kind`: "sglang_adaptive" (per-band num_steps, topk 1 chains only), "vllm_batch_size"
    (per-band K of one chain), or None (no schedule: only a static setting). `why_not`:
    why there is none for this plan (None: there is one). `chains_only`: a band's setting
    must be a topk-1 chain (num_draft_tokens = num_steps + 1)."""
    kind: str | None
    why_not: str | None = None
    chains_only: bool = True
    #: What the engine varies by band, in words (for the report).
    varies: str = ""
    #: Why a band cannot run as the baseline does, without speculation (None: it can, as
    #: SGLang's 0 steps). vLLM's K=0 band still runs the draft model's first pass.
    no_draft_band: str | None = None


def setting_of(cand) -> dict:
    return {"server": cand.server, "num_steps": cand.num_steps, "topk": cand.topk,
            "num_draft_tokens": cand.num_draft_tokens}


def label(setting: dict) -> str:
    if setting.get("baseline"):
        return "baseline (no speculation)"
    return f"s{setting['num_steps']} k{setting['topk']} d{setting['num_draft_tokens']}"


def expressible(setting: dict, support: ScheduleSupport) -> bool:
    """Can one band of the engine's schedule run this setting?"""
    if setting.get("baseline"):
        return support.no_draft_band is None
    if support.chains_only:
        return setting["topk"] == 1 and setting["num_draft_tokens"] == setting["num_steps"] + 1
    return True


def plan(decision: dict, candidates, support: ScheduleSupport, margin: float,
         mode: str = "auto") -> dict:
    """The schedule to deploy: {static, setting | bands, why, expressible, predicted_loss,
    envelope}. `mode`: "auto" (static where within margin, else a schedule), "schedule" or
    "static" (asked for explicitly; compile refuses "schedule" the engine cannot express)."""
    cands = {c.server: c for c in candidates}
    best = decision.get("best") or {}
    decided: dict[int, dict] = {int(c): d for c in best
                                if (d := _decided(best[c])) is not None}
    ladder = sorted(decided)
    if not ladder:
        return {"static": None, "bands": [], "why": "no decision at any concurrency: "
                "nothing to deploy", "expressible": False, "predicted_loss": {}}
    table = {r["server"]: r for r in decision.get("candidates") or []}

    def value(setting: dict, c: int) -> tuple[float | None, bool]:
        """(speedup at c, measured?): the baseline 1.0; a candidate's measured speedup, else
        its prediction."""
        if setting.get("baseline"):
            return 1.0, True
        row = table.get(setting["server"]) or {}
        m = (row.get("measured") or {}).get(str(c))
        if m is not None:
            return float(m), True
        p = (row.get("predicted") or {}).get(str(c))
        return (None if p is None else float(p)), False

    envelope = {c: max(1.0, value(decided[c], c)[0] or 1.0) for c in ladder}

    def losses(per_c: dict) -> dict:
        return {str(c): round(max(0.0, 1.0 - (value(per_c[c], c)[0] or 0.0) / envelope[c]), 4)
                for c in ladder}

    # the best static setting: the largest worst-case ratio to the envelope
    statics = [BASELINE] + [setting_of(cands[s]) for s in cands]
    static_loss = {label(s) + s.get("server", ""): losses({c: s for c in ladder})
                   for s in statics}
    best_static = min(statics, key=lambda s: (max(static_loss[label(s) + s.get("server", "")]
                                                   .values()),
                                              not value(s, ladder[0])[1]))
    bs_loss = static_loss[label(best_static) + best_static.get("server", "")]
    static_measured = all(value(best_static, c)[1] for c in ladder)

    def static(why: str, expressible_: bool = True) -> dict:
        return {"static": best_static, "bands": [{"from": 1, "to": None,
                                                  "setting": best_static}],
                "why": why, "expressible": expressible_, "predicted_loss": bs_loss,
                "envelope": {str(c): round(envelope[c], 4) for c in ladder}}

    if mode == "static":
        return static(f"a static setting was asked for (search.deploy=static): "
                      f"{label(best_static)}, the best worst case over the ladder")
    one = len({label(decided[c]) + decided[c].get("server", "") for c in ladder}) == 1
    if mode == "auto" and (one or (max(bs_loss.values()) <= margin and static_measured)):
        why = (f"{label(best_static)} is the best at every concurrency" if one else
               f"{label(best_static)} is within search.margin ({margin:.0%}) of the best "
               f"measured at every concurrency (worst {max(bs_loss.values()):.1%}): one "
               "static setting, no schedule to maintain")
        return static(why)
    if support.kind is None:
        return static(f"the engine cannot run a schedule here ({support.why_not}): "
                      f"deploying the best static setting, {label(best_static)}",
                      expressible_=False)
    chosen, unexpressed = {}, []
    for c in ladder:
        want = decided[c]
        if expressible(want, support):
            chosen[c] = want
            continue
        unexpressed.append(c)
        ok = [s for s in [BASELINE] + [setting_of(cands[s]) for s in cands]
              if expressible(s, support)]
        if not ok:
            return static(f"no candidate can run in a band of the engine's schedule "
                          f"({support.varies}): deploying the best static setting, "
                          f"{label(best_static)}", expressible_=False)
        chosen[c] = max(ok, key=lambda s: (value(s, c)[0] or 0.0, value(s, c)[1]))
    sched_loss = losses(chosen)
    note = ""
    if unexpressed:
        why_not = "; ".join(dict.fromkeys(
            (support.no_draft_band if decided[c].get("baseline") else support.varies) or ""
            for c in unexpressed))
        note = (f"the engine cannot express the decision at concurrency "
                f"{', '.join(map(str, unexpressed))} ({why_not}): there the best "
                "expressible setting runs")
        if mode == "auto" and max(bs_loss.values()) < max(sched_loss.values()):
            return static(note + f"; one static setting, {label(best_static)}, loses less "
                          f"(worst {max(bs_loss.values()):.1%} against "
                          f"{max(sched_loss.values()):.1%})", expressible_=False)
    bands: list[dict] = []
    for c in ladder:
        if bands and _same(bands[-1]["setting"], chosen[c]):
            continue
        if bands:
            bands[-1]["to"] = c - 1
        bands.append({"from": 1 if not bands else c, "to": None, "setting": chosen[c]})
    if len(bands) == 1:
        best_static = bands[0]["setting"]
        bs_loss = sched_loss
        return static(note or f"{label(best_static)} is the best expressible setting at "
                      "every concurrency decided: a schedule of one band is this static "
                      "setting", expressible_=not unexpressed)
    why = ("the measured best changes at concurrency "
           + ", ".join(str(b["from"]) for b in bands[1:])
           + f"; no static setting is within {margin:.0%} everywhere (the best static, "
           f"{label(best_static)}, loses {max(bs_loss.values()):.1%} at worst)")
    return {"static": None, "bands": bands, "why": why + ("; " + note if note else ""),
            "expressible": not unexpressed, "predicted_loss": sched_loss,
            "envelope": {str(c): round(envelope[c], 4) for c in ladder}}


def setting_at(schedule: dict, batch: int) -> dict:
    """The setting the schedule runs at running batch size `batch` (its band at or below)."""
    found = schedule["bands"][0]["setting"]
    for b in schedule["bands"]:
        if b["from"] <= batch:
            found = b["setting"]
    return found


def _same(a: dict, b: dict) -> bool:
    if a.get("baseline") or b.get("baseline"):
        return bool(a.get("baseline")) == bool(b.get("baseline"))
    return a.get("server") == b.get("server")


def _decided(entry: dict) -> dict | None:
    if "no_decision" in entry or entry.get("measured") is False:
        return None
    if entry.get("baseline"):
        return BASELINE
    return {k: entry[k] for k in ("server", "num_steps", "topk", "num_draft_tokens")}


def gap(deployed: tuple[float, float | None, float | None], envelope: float) -> dict:
    """gap = 1 - deployed / envelope, its interval from the deployed speedup's interval."""
    v, lo, hi = deployed
    out = {"speedup": round(v, 4), "interval": [_r(lo), _r(hi)],
           "gap": round(1.0 - v / envelope, 4),
           "gap_interval": [_r(None if hi is None else 1.0 - hi / envelope),
                            _r(None if lo is None else 1.0 - lo / envelope)]}
    return out


def _r(x):
    return None if x is None else round(float(x), 4)


def launch(fmt: dict | None, schedule: dict, argv_of: dict, baseline_argv) -> tuple[list, dict]:
    """(the deployed launch command, {file name: text} it needs beside it), from the
    engine's `schedule_format` (plan.json search.schedule_format) and the servers' argv
    (`argv_of`: candidate server id -> its argv). A static setting is that server's own
    command."""
    import json

    if schedule.get("static") is not None or len(schedule["bands"]) == 1:
        s = schedule["bands"][0]["setting"]
        return ([str(a) for a in (baseline_argv if s.get("baseline") else argv_of[s["server"]])],
                {})
    fmt = fmt or {}
    steps = [0 if b["setting"].get("baseline") else int(b["setting"]["num_steps"])
             for b in schedule["bands"]]
    top = max(steps) or 1
    values: dict = {"{max_steps}": top, "{max_draft_tokens}": top + 1}
    files: dict[str, str] = {}
    if fmt.get("kind") == "sglang_adaptive":
        name = fmt["file"]["name"]
        body = {str(b["from"]): _fill(fmt["file"]["entry"], {"{steps}": k})
                for b, k in zip(schedule["bands"], steps)}
        files[name] = json.dumps(body, indent=2) + "\n"
        values["{config_file}"] = name
    elif fmt.get("kind") == "vllm_batch_size":
        cfg = dict(fmt.get("speculative_config") or {})
        cfg[fmt["k_key"]] = top
        cfg[fmt["list_key"]] = [[b["from"], b["to"] if b["to"] is not None else
                                 max(b["from"], fmt["last_end"]), k]
                                for b, k in zip(schedule["bands"], steps)]
        values["{speculative_config}"] = json.dumps(cfg, sort_keys=True, separators=(",", ":"))
    else:
        raise ValueError(f"no schedule format for {fmt.get('release') or 'this engine'}")
    return [str(x) for x in _fill(fmt["argv"], values)], files


def _fill(template, values: dict):
    """`template` with every string equal to a placeholder replaced by its value."""
    if isinstance(template, list):
        return [_fill(x, values) for x in template]
    if isinstance(template, dict):
        return {k: _fill(v, values) for k, v in template.items()}
    if isinstance(template, str) and template in values:
        return values[template]
    return template
