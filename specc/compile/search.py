"""`search=tune`: the lowered plan's speculative servers become the search's candidates.

Pure: it reads the config and the plan and returns the plan with its `search` record
(candidates, baseline, ladder, probe, budget), or the diagnostics that refuse it. The
probe is chosen here, from the performance model's acceptance formulas at a prior
acceptance (never an engine's or the simulator's setting), so the review can show it.
"""

from __future__ import annotations

import dataclasses
import re

from specc import facts
from specc.diagnostics import Diagnostic, error, warning
from specc.plan import Candidate, Plan, Search, ServerParams
from specc.tune import bracket

#: A latency SLO key: a statistic of TTFT, ITL, TPOT or end-to-end latency, in ms.
SLO_KEY = re.compile(r"^(mean|median|p90|p95|p99)_(ttft|itl|tpot|e2e_latency)_ms$")


def attach_search(config: dict, plan: Plan) -> tuple[Plan | None, list[Diagnostic]]:
    """The plan with its search record for `search.name: tune` (else unchanged)."""
    search = config.get("search") or {}
    if search.get("name", "grid") != "tune":
        asked = [k for k in ("verify", "vs_engine_default", "deploy") if k in search]
        return (plan, []) if not asked else (None, [error(
            "TUNE_VERIFY_GRID", f"search.{asked[0]}",
            f"search.{asked[0]} belongs to search=tune (it verifies the schedule a tune "
            "deploys); search=grid deploys nothing", f"drop search.{asked[0]}, or use "
            "search=tune")])
    out = [error("TUNE_SLO_METRIC", f"search.slo.{key}",
                 f"'{key}' is not a latency: an SLO bounds a latency statistic",
                 "use e.g. p99_ttft_ms or p99_itl_ms (mean|median|p90|p95|p99 of "
                 "ttft|itl|tpot|e2e_latency, in ms)")
           for key in (search.get("slo") or {}) if not SLO_KEY.match(str(key))]
    baselines = [s for s in plan.servers if s.baseline]
    candidates = [s for s in plan.servers if not s.baseline]
    if not baselines:
        out.append(error("TUNE_NO_BASELINE", "baseline",
                         "search=tune compares every candidate with the baseline, and there "
                         "is none", "set baseline=true"))
    elif len(baselines) > 1:
        out.append(error("TUNE_SERVER_AXES", "sweep",
                         f"search=tune explores speculation settings against one baseline; "
                         f"this sweep has {len(baselines)} baselines (a server axis outside "
                         "speculation)", "sweep only speculation.* and benchmark.concurrency, "
                         "or use search=grid"))
    shapes = [_shape(s.params) for s in candidates]
    incomplete = _incomplete_dropped(plan)
    if len(candidates) < 2 and not incomplete:
        out.append(error("TUNE_CANDIDATES", "sweep.speculation",
                         f"search=tune needs at least two speculative candidates, the sweep "
                         f"has {len(candidates)}", "sweep two or more speculation settings, "
                         "or use search=grid"))
    elif any(x is None for x in shapes):
        out.append(error("TUNE_CANDIDATES", "speculation",
                         "search=tune predicts a candidate from num_steps, topk and "
                         "num_draft_tokens; a candidate leaves them to the engine",
                         "give all three in every swept setting"))
    out += incomplete
    deploy_mode = str(search.get("deploy", "auto"))
    if deploy_mode not in DEPLOY_MODES:
        out.append(error("TUNE_DEPLOY", "search.deploy",
                         f"search.deploy={deploy_mode!r} is not one of "
                         f"{', '.join(DEPLOY_MODES)}", "use auto (the default), schedule or "
                         "static"))
    fmt = _schedule_format(plan, candidates) if candidates else None
    if fmt is not None and deploy_mode == "schedule" and not out:
        why = fmt.get("why_not") or _nothing_expressible(fmt, shapes)
        if why:
            out.append(error("TUNE_DEPLOY_SCHEDULE", "search.deploy",
                             f"search.deploy=schedule, but {why}",
                             "use search.deploy=auto (a static setting where no schedule "
                             "can run), or candidates the engine's schedule can run"))
    if fmt is not None and search.get("vs_engine_default") and not fmt.get(
            "engine_default_argv"):
        out.append(error("TUNE_ENGINE_DEFAULT", "search.vs_engine_default",
                         f"{fmt.get('release')} has no default adaptive mode to measure "
                         f"here{' (' + fmt['why_not'] + ')' if fmt.get('why_not') else ''}",
                         "set search.vs_engine_default=false"))
    if out:
        return None, out
    ladder = sorted({b.params.concurrency for b in plan.benchmarks})
    cands = tuple(Candidate(s.id, *shape) for s, shape in zip(candidates, shapes))  # type: ignore[misc]  # none is None (TUNE_CANDIDATES)
    from specc.tune import predict

    prior, margin = predict.PRIOR_ACCEPTANCE, float(search.get("margin", 0.03))
    gpu = (config.get("hardware") or {}).get("gpu")
    first = plan.benchmarks[0].params
    context = float(first.input_len) + float(first.output_len) / 2
    grid_starts = len(cands) + 1
    max_starts = search.get("max_starts") or max(2, grid_starts // 3)
    mp = config["model_pair"]
    draft = facts.resolve(mp["draft"], "model_pair.draft").values if mp.get("draft") else None
    record = Search(name="tune", baseline=baselines[0].id, candidates=cands,
                    concurrencies=tuple(ladder), probe=cands[0].server,
                    max_starts=min(int(max_starts), grid_starts), margin=margin,
                    prior_acceptance=prior, gpu=gpu, context=context,
                    draft_facts=draft, slo=dict(search.get("slo") or {}),
                    precision=float(search.get("precision", bracket.PRECISION)),
                    verify=bool(search.get("verify", True)),
                    vs_engine_default=bool(search.get("vs_engine_default", False)),
                    deploy=deploy_mode, schedule_format=fmt)
    model = predict.plan_steps(dataclasses.replace(plan, search=record),
                               tp=candidates[0].params.tp)
    probe = predict.choose_probe(cands, prior, margin, model, ladder)
    record = dataclasses.replace(record, probe=probe.server)
    return dataclasses.replace(plan, search=record), (
        [] if search.get("max_starts") else _no_race(record, grid_starts))


def _no_race(record: Search, grid_starts: int) -> list[Diagnostic]:
    """A default budget of the baseline and the probe alone decides between those two: on the
    simulator, 5 chains (6 servers, 2 starts) lost up to 12.7% against the grid where the
    probe was not the best."""
    if record.max_starts > 2 or record.max_starts >= grid_starts:
        return []
    return [warning("TUNE_NO_RACE", "search.max_starts",
                    f"a budget of {record.max_starts} starts (a third of the grid's "
                    f"{grid_starts}) is the baseline and the probe: no other candidate can "
                    "start, so the decision is between those two",
                    f"set search.max_starts={min(grid_starts, 4)} or more, or use "
                    "search=grid")]


#: search.deploy: a schedule or a static setting as the data says, or one of them asked for.
DEPLOY_MODES = ("auto", "schedule", "static")


def _schedule_format(plan: Plan, candidates) -> dict:
    """The engine release's schedule format, from a candidate's launch command (its adapter
    says how the release takes a batch-size schedule)."""
    from specc.engines import engine_for_plan

    first = candidates[0]
    return engine_for_plan(plan).schedule_format(
        list(first.argv), dp=first.params.dp, algorithm=first.params.algorithm)


def _nothing_expressible(fmt: dict, shapes) -> str | None:
    """Why no candidate can run in one of the engine's bands (None: some can)."""
    if not fmt.get("chains_only"):
        return None
    if any(s and s[1] == 1 and s[2] == s[0] + 1 for s in shapes):
        return None
    return (f"no candidate is a topk-1 chain (num_draft_tokens = num_steps + 1), and "
            f"{fmt.get('varies') or 'the engine varies nothing else'}")


def _incomplete_dropped(plan: Plan) -> list[Diagnostic]:
    """A swept setting that leaves num_steps, topk or num_draft_tokens out (`topk: null`)
    is dropped from a grid with its reason; tune would lose a candidate it was given
    without a word, so it is TUNE_CANDIDATES, one line each (docs/tune.md)."""
    out = []
    for d in plan.dropped:
        if d.code != "SPEC_PARAMS_ALL_OR_NONE":
            continue
        setting = ", ".join(f"{k.split('.')[-1]}: {'null' if v is None else v}"
                            for k, v in d.point.items() if k.startswith("speculation."))
        out.append(error("TUNE_CANDIDATES", "sweep.speculation",
                         f"the candidate {{{setting}}} leaves part of num_steps, topk, "
                         f"num_draft_tokens to the engine ({d.reason}): search=tune cannot "
                         "predict it", "give all three in every swept setting"))
    return out


def _shape(params: ServerParams) -> tuple[int, int, int] | None:
    n, k, d = params.num_steps, params.topk, params.num_draft_tokens
    return (n, k, d) if isinstance(n, int) and isinstance(k, int) and isinstance(d, int) else None


def review_section(plan: Plan) -> str:
    """The review's account of the search: candidates, most starts, stopping rule, plan.sh."""
    s = plan.search
    assert s is not None   # a search=tune plan's
    labels = {srv.id: srv.label for srv in plan.servers}
    rows = [f"| {'probe' if c.server == s.probe else ''} | {labels.get(c.server, '')} | "
            f"{c.num_steps} | {c.topk} | {c.num_draft_tokens} | `{c.server}` |"
            for c in s.candidates]
    slo = ", ".join(f"{k} <= {v:g}" for k, v in s.slo.items()) or "none"
    lines = [
        "## Search (search=tune)", "",
        f"{len(s.candidates)} candidates against the baseline `{s.baseline}`, measured at "
        f"concurrency {', '.join(map(str, s.concurrencies))}. At most **{most_starts(s)}** "
        f"server starts of the grid's {len(s.candidates) + 1}: {s.max_starts} for the search "
        f"(the baseline included){_extra_starts(s)}.", "", *_crossover_lines(s),
        "| | candidate | num_steps | topk | num_draft_tokens | server |",
        "|---|---|---|---|---|---|", *rows, "",
        "Order: the baseline, then the probe (chosen at a prior per-position acceptance of "
        f"{s.prior_acceptance:g}: the candidate, among those the model ranks within "
        f"{s.margin:.0%} of the best at some concurrency, whose accept length says the most "
        "about acceptance). Its per-request acceptance and every started server's measured "
        "step times predict each other candidate's speedup at each concurrency.", "",
        f"Race: a candidate starts only if its predicted speedup, raised by the prediction "
        f"error seen so far (at least {s.margin:.0%}), beats the best measured speedup (or "
        "1.0, the baseline) at some concurrency; the one with the largest summed gain goes "
        "first.", "",
        f"Stopping rule: stop when no unstarted candidate could beat the best at any "
        f"concurrency, or after {s.max_starts} starts. At each concurrency the best measured "
        f"setting is reported with its paired {s.level:.0%} interval and the settings whose "
        "intervals overlap it (ties); the crossover is the lowest concurrency at which no "
        "candidate's interval reaches 1.0.", "",
        f"SLO: {slo}.", "", *_bracket_lines(plan),
        *_deploy_lines(s), "",
        "plan.sh runs the whole grid (every candidate, the worst case) in plan order: the "
        "adaptive search needs the executor (`specc run --plan plan.json` or execute=true).",
    ]
    return "\n".join(lines) + "\n"


def _bracket_lines(plan: Plan) -> list[str]:
    """The SLO bracket's most extra points, so the most the search can cost stays honest."""
    s = plan.search
    if s is None or not s.slo:
        return []
    rates = sorted({b.params.request_rate for b in plan.benchmarks if b.params.request_rate})
    most = bracket.most_probes(rates or s.concurrencies, s.precision, integer=not rates)
    servers = s.max_starts
    return [f"SLO capacity: for each key, bracketed on the baseline and on each started "
            f"setting that could raise the best speculative capacity, while its server is "
            f"up ({'request rate' if rates else 'concurrency'}): double past the highest load that meets the limit (up to "
            f"{2 ** bracket.MAX_DOUBLINGS}x the ladder's top), then bisect until the first "
            f"load not meeting is within {s.precision:.0%} of it. A probe is one more point "
            "on that server with enough requests for the percentile; one whose 95% interval "
            "straddles the limit (or too few requests to bound it) is undecided, measured "
            "again with twice the requests, then reported undecided, never a pass. "
            f"At most **{most}** extra points per key and server, **{most * len(s.slo) * servers}** "
            f"in all ({len(s.slo)} key(s) x {servers} starts); no extra start.", ""]
def most_starts(s: Search) -> int:
    """The most starts the run can take: the search's, the verification, the reference."""
    return s.max_starts + int(s.verify) + int(s.vs_engine_default)


def _crossover_lines(s: Search) -> list[str]:
    """The crossover's refinement between ladder points: what it costs, where it runs."""
    if len(s.concurrencies) < 2:
        return []
    from specc.tune import crossover

    ladder = sorted(s.concurrencies)
    most = max(crossover.most_pairs(a, b, s.precision) for a, b in zip(ladder, ladder[1:]))
    return [f"Crossover: where it lies between two ladder concurrencies, it is refined at the "
            f"end{'' if s.verify else ' (not with search.verify=false: nothing to pair with)'}"
            f": the baseline is started once more beside the deployed command's verification "
            f"start (own port, GPUs apart) and the two are measured alternately at each "
            f"bisected concurrency until within {s.precision:.0%}; a pair whose speedup "
            "interval straddles 1.0 is measured again with twice the requests, then reported "
            f"undecided. At most **{most}** paired points. That start comes out of the "
            f"search's {s.max_starts}: it runs only where the search stopped with one left "
            "(else the decision says why).", ""]


def _extra_starts(s: Search) -> str:
    extra = (["one to verify the deployed schedule"] if s.verify else []) + (
        ["one for the engine's default adaptive mode (reference)"] if s.vs_engine_default
        else [])
    return "".join(f", {x}" for x in extra)


def _deploy_lines(s: Search) -> list[str]:
    """The review's account of what the decision becomes (deploy.json)."""
    fmt = s.schedule_format or {}
    how = (f"{fmt.get('release')}: {fmt.get('varies')}; bands start where the measured best "
           "changes, at a ladder concurrency"
           + (f"; no band without speculation ({fmt['no_draft_band']}): where the baseline "
              "is best, the best speculative setting runs in its band, or one static "
              "setting if that loses less" if fmt.get("no_draft_band") else "")
           if fmt.get("kind") and not fmt.get("why_not")
           else f"no schedule ({fmt.get('why_not') or 'the engine takes none'}): one static "
           "setting")
    verify = ("verified in one more start at every concurrency, paired with the baseline "
              "(speedup and gap to the best static setting, 95% intervals)" if s.verify else
              "not verified (search.verify=false)")
    lines = [f"Deploy (search.deploy={s.deploy}): deploy.json holds the launch command. "
             f"{how}; one static setting where it is within {s.margin:.0%} of the best "
             f"everywhere. It is {verify}."]
    if s.vs_engine_default:
        lines.append("Reference: the engine's own default adaptive mode, measured in one more "
                     "start (specc's schedule vs the engine's default).")
    return lines
