"""After a tune: the schedule to deploy (deploy.json), verified in one more start.

The search's decision becomes one launch command (specc.tune.schedule, filled from the
engine's schedule format that the plan carries); that command is started once more, as
any server, and measured at every concurrency of the ladder, each point paired with the
baseline's: its speedup with the 95% interval and its gap to the envelope (the best static
setting measured there). `search.vs_engine_default` adds one start of the engine's own
default adaptive mode, as a reference row. Rows go to verify/results.jsonl (the plan's own
results.jsonl holds only the plan's points); a rerun does not start a verified server again.
See docs/tune.md "Deploy" and docs/run-dir.md.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

from specc.files import atomic_write

DEPLOY_JSON = "deploy.json"
#: Where the verification's rows go (the plan's results.jsonl holds the plan's points).
VERIFY_RESULTS = "verify/results.jsonl"


#: How the progress and the report name the verification starts.
LABELS = {"deploy": "deployed schedule", "engine-default": "engine's default adaptive mode"}


def schedule_of(plan, decision: dict) -> dict:
    """The schedule the decision deploys (specc.tune.schedule.plan), with its command."""
    from specc.tune import schedule as sch

    rec = plan.search
    fmt = rec.schedule_format or {}
    support = sch.ScheduleSupport(kind=None if fmt.get("why_not") else fmt.get("kind"),
                                  why_not=fmt.get("why_not"),
                                  chains_only=bool(fmt.get("chains_only", True)),
                                  varies=fmt.get("varies") or "",
                                  no_draft_band=fmt.get("no_draft_band"))
    out = sch.plan(decision, rec.candidates, support, rec.margin, rec.deploy)
    if not out["bands"]:
        return out
    argv, files = sch.launch(fmt, out, {c.server: plan.server(c.server).argv
                                        for c in rec.candidates},
                             plan.server(rec.baseline).argv)
    return {**out, "argv": argv, "files": files, "routing": fmt.get("routing") or ""}


def _server(plan, template_id: str, argv: list, tag: str):
    """A plan Server record for `argv`, shaped as `template_id` (its host, port, GPUs,
    readiness), and its benchmarks paired with the baseline's at each concurrency."""
    t = plan.server(template_id)
    sid = f"{tag}-" + hashlib.sha256(json.dumps(argv).encode()).hexdigest()[:10]
    server = dataclasses.replace(t, id=sid, label=LABELS.get(tag, tag), argv=tuple(argv),
                                 log=f"servers/{sid}.log")
    # paired with the baseline's point here (measured()), not by the sub-plan, which
    # holds only this server
    benches = tuple(dataclasses.replace(b, id=f"{sid}-c{b.params.concurrency}", server=sid,
                                        baseline=None)
                    for b in plan.benchmarks_of(template_id))
    return server, benches


async def verify(ex, server, benches, after_points=None) -> dict:
    """Start `server` once (as the executor starts any) and measure its points; returns
    {concurrency: row}. Its rows go to verify/results.jsonl; a finished point is not run
    again. `after_points(server, running)`: awaited while it is up, after its points (the
    crossover's refinement beside it)."""
    from specc.results import ResultLog

    path = ex.run_dir / VERIFY_RESULTS
    path.parent.mkdir(parents=True, exist_ok=True)
    results = ResultLog(path)
    sub_plan = dataclasses.replace(ex.plan, servers=(server,), benchmarks=benches, search=None)
    # the executor's own class: run_server as for every server (no import of the executor,
    # which imports the search that imports this)
    sub = type(ex)(sub_plan, ex.run_dir, ctx=ex.ctx, progress=ex.progress, results=results,
                   state=ex.state)
    sub.running = ex.running   # an interrupt tears it down with the rest
    todo = sum(not results.finished(b.id) for b in benches)
    sub.after_points = after_points if todo else None   # finished earlier: not started again
    ex.progress.plan(todo, servers=1 if todo else 0, earlier=ex.progress.earlier)
    if not ex.stop_all:
        await sub.run_server(server)
    return {b.params.concurrency: results.get(b.id) for b in benches}


def measured(plan, run_dir: Path, rows: dict, envelope: dict) -> dict:
    """Per concurrency (a string): {speedup, interval, gap, gap_interval} of a verified
    server's rows, each paired with the baseline's point (or {failed: reason})."""
    from specc.results import ResultLog
    from specc.run.figures import point_figures as _figures
    from specc.tune import schedule as sch

    base = ResultLog(Path(run_dir) / "results.jsonl")
    base_of = {b.params.concurrency: b.id for b in plan.benchmarks_of(plan.search.baseline)}
    out = {}
    for c, row in sorted(rows.items()):
        if not row or row.get("status") != "ok":
            out[str(c)] = {"failed": (row or {}).get("reason") or "not measured"}
            continue
        base_row = base.get(base_of.get(c, ""))
        iv = _figures(Path(run_dir), row, base_row).get("speedup")
        if iv is None or iv.value is None:
            out[str(c)] = {"failed": "no paired baseline point"}
            continue
        out[str(c)] = sch.gap((iv.value, iv.lo, iv.hi), envelope.get(str(c)) or 1.0)
        inflight = (row.get("metrics") or {}).get("mean_concurrency")
        if inflight is not None:   # what the engine's running batch saw, not the client's cap
            out[str(c)]["mean_in_flight"] = round(float(inflight), 2)
    return out


def batch_note(sched: dict, verified: dict) -> dict:
    """Per concurrency: the band its client concurrency names, and the band of the requests
    really in flight on average (the engine routes by its running batch): where they
    differ, the deployed command ran another setting than the decision's at that point."""
    from specc.tune import schedule as sch

    out = {}
    for c, v in verified.items():
        if "mean_in_flight" not in v:
            continue
        want = sch.label(sch.setting_at(sched, int(c)))
        got = sch.label(sch.setting_at(sched, max(1, int(v["mean_in_flight"]))))
        out[c] = {"mean_in_flight": v["mean_in_flight"], "band_at_concurrency": want,
                  "band_at_mean_in_flight": got}
    return out


def envelope_of(decision: dict) -> dict:
    """Per concurrency: the best static setting measured there (the baseline's 1.0 at least)."""
    out = {}
    for c, entry in (decision.get("best") or {}).items():
        if "no_decision" in entry:
            continue
        vals = [float(v) for r in decision.get("candidates") or []
                if (v := (r.get("measured") or {}).get(c)) is not None]
        out[c] = round(max([1.0] + vals), 4)
    return out


def prepare(plan, run_dir: Path, decision: dict) -> tuple[dict, dict] | None:
    """deploy.json (and the files its command needs) for the decision, not yet verified:
    (its content, the schedule), or None where the decision deploys nothing."""
    if decision.get("no_decision"):
        return None
    sched = schedule_of(plan, decision)
    if not sched["bands"]:
        return None
    doc = document(plan, sched, envelope_of(decision))
    write(run_dir, doc, sched.get("files") or {})
    return doc, sched


def target(plan, sched: dict):
    """(the verification start's server, its benchmarks), or (None, why it is not started)."""
    first = sched["bands"][0]["setting"]
    if not plan.search.verify:
        return None, "search.verify=false: the deployed command was not started"
    if sched["static"] is not None and first.get("baseline"):
        return None, ("the baseline is deployed: its speedup is 1.0 by definition, nothing "
                      "to verify")
    return _server(plan, template_of(sched), sched["argv"], "deploy")


def template_of(sched: dict) -> str:
    """The candidate whose server record the deployed command is measured as (its host,
    port, GPUs, readiness): the band with the most draft steps, since the command runs
    that many at most (vLLM's num_speculative_tokens, SGLang's --speculative-num-steps)
    and the accept length it can report is bounded by them (a K=1 template would refuse
    the 3.9 a K=3 band measures as impossible)."""
    spec = [b["setting"] for b in sched["bands"] if not b["setting"].get("baseline")]
    return max(spec, key=lambda s: int(s["num_steps"] or 0))["server"]


def verified(plan, run_dir: Path, doc: dict, sched: dict, server, rows: dict) -> None:
    """The verification's rows into deploy.json's content (`doc`, changed in place)."""
    doc["verify"] = measured(plan, run_dir, rows, doc["envelope"])
    if sched["static"] is None:
        doc["running_batch"] = batch_note(sched, doc["verify"])
    doc["verify_server"] = server.id
    doc["deployed"] = {"server": server.id, "host": server.host, "port": server.port}


async def run(ex, decision: dict, refine=None) -> dict | None:
    """Write deploy.json (and the files its command needs) for the decision, then verify it
    (search.verify) and measure the engine's default (search.vs_engine_default). `refine`
    (specc.run.crossover.Refinement): the crossover refined beside the verification start,
    or skipped with the reason."""
    plan, rec = ex.plan, ex.plan.search
    prepared = prepare(plan, ex.run_dir, decision)
    if prepared is None:
        if refine is not None:
            refine.skip("no command is deployed to pair with the baseline")
        return None
    doc, sched = prepared
    envelope = doc["envelope"]
    server, benches = target(plan, sched)
    if server is None:
        doc["verify_note"] = benches
        if refine is not None:
            refine.skip(f"nothing is started to pair with the baseline ({benches})")
    elif not ex.stop_all:
        ex.progress.log(f"verify: start the deployed command ({len(sched['bands'])} band(s))")
        rows = await verify(ex, server, benches, after_points=refine.hook(ex) if
                            refine is not None and refine.planned() else None)
        if refine is not None and refine.planned() and refine.result is None:
            refine.skip("the verification start did not run its points now (finished in an "
                        "earlier run, or the run is stopping): the baseline is not started "
                        "beside it")
        verified(plan, ex.run_dir, doc, sched, server, rows)
    fmt = rec.schedule_format or {}
    if rec.vs_engine_default and fmt.get("engine_default_argv") and not ex.stop_all:
        template = rec.probe
        server, benches = _server(plan, template, fmt["engine_default_argv"], "engine-default")
        ex.progress.log("verify: start the engine's default adaptive mode (reference)")
        rows = await verify(ex, server, benches)
        doc["engine_default"] = {"argv": list(fmt["engine_default_argv"]),
                                 "measured": measured(plan, ex.run_dir, rows, envelope)}
    write(ex.run_dir, doc, sched.get("files") or {})
    return doc


def on_node(plan, doc: dict | None):
    """The verification start as a Slurm job runs it: (the plan with the deployed server and
    its points added, that server's id, the files its command needs), or (None, why, {}).

    Nothing in deploy.json is run as written: only its bands are read (where each starts
    and ends, and which of the sealed plan's candidates, or the baseline, runs there), and
    the command is rendered again from the sealed plan (its candidates' and baseline's
    launch commands, its engine's schedule format), exactly as the driver rendered it; a
    deploy.json whose command is not that is refused (docs/trust-inputs.md)."""
    from specc.tune import schedule as sch

    rec = plan.search
    if rec is None:
        return None, "the plan has no search=tune record: nothing is deployed", {}
    if not isinstance(doc, dict) or not isinstance(doc.get("bands"), list) or not doc["bands"]:
        return None, "deploy.json is missing or holds no bands", {}
    cands = {c.server: c for c in rec.candidates}
    bands = []
    for b in doc["bands"]:
        setting = b.get("setting") if isinstance(b, dict) else None
        lo, hi = (b.get("from"), b.get("to")) if isinstance(b, dict) else (None, None)
        if not isinstance(setting, dict) or not isinstance(lo, int) or not (
                hi is None or isinstance(hi, int)):
            return None, f"deploy.json band {b!r:.80} is not {{from, to, setting}}", {}
        if setting.get("baseline"):
            setting = dict(sch.BASELINE)
        elif setting.get("server") in cands:
            setting = sch.setting_of(cands[setting["server"]])
        else:
            return None, (f"deploy.json band from {lo} runs {setting.get('server')!r:.80}, "
                          "not a candidate of the sealed plan"), {}
        bands.append({"from": lo, "to": hi, "setting": setting})
    static = bands[0]["setting"] if doc.get("static") else None
    argv, files = sch.launch(rec.schedule_format, {"bands": bands, "static": static},
                             {c: plan.server(c).argv for c in cands},
                             plan.server(rec.baseline).argv)
    if argv != doc.get("argv"):
        return None, ("deploy.json's command is not what the sealed plan renders for its "
                      "bands (edited after the driver wrote it?)"), {}
    server, benches = target(plan, {"bands": bands, "static": static, "argv": argv})
    if server is None:
        return None, benches, {}
    return (dataclasses.replace(plan, servers=plan.servers + (server,), cluster=None,
                                benchmarks=plan.benchmarks + tuple(benches)),
            server.id, files)


def unverified(plan, run_dir: Path, decision: dict, why: str) -> None:
    """deploy.json without its verification (`verify_note` says why); nothing where the
    decision deploys nothing, and an earlier verified deploy.json is kept."""
    if decision.get("no_decision") or (read(run_dir) or {}).get("verify"):
        return
    sched = schedule_of(plan, decision)
    if not sched["bands"]:
        return
    doc = document(plan, sched, envelope_of(decision))
    doc["verify_note"] = why
    write(run_dir, doc, sched.get("files") or {})


def document(plan, sched: dict, envelope: dict) -> dict:
    """deploy.json's content before verification (docs/run-dir.md)."""
    from specc.tune import schedule as sch

    fmt = plan.search.schedule_format or {}
    return {"engine": fmt.get("release") or plan.engine, "argv": sched["argv"],
            "files": sorted(sched.get("files") or {}),
            "bands": [{"from": b["from"], "to": b["to"], "setting": b["setting"],
                       "label": sch.label(b["setting"])} for b in sched["bands"]],
            "static": sched["static"] is not None, "why": sched["why"],
            "expressible": sched["expressible"],
            "predicted_loss": sched["predicted_loss"], "envelope": envelope,
            "applies_to": ("the engine's running batch, not the client's concurrency: "
                           + (sched.get("routing") or "its own batch size")),
            "verify": {}}


def write(run_dir: Path, doc: dict, files: dict) -> None:
    for name, text in files.items():
        atomic_write(Path(run_dir) / name, text)
    atomic_write(Path(run_dir) / DEPLOY_JSON, json.dumps(doc, indent=2) + "\n")


def read(run_dir: Path) -> dict | None:
    try:
        data = json.loads((Path(run_dir) / DEPLOY_JSON).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
