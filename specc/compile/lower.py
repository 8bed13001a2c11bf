"""Lowering: a validated config -> one immutable Plan.

The matrix is the Cartesian product of the sweep axes. Axes under `benchmark.`
are client-level (no restart); all others are server-level, so each distinct
server configuration becomes one server that starts exactly once. Invalid
speculative points are dropped with their reason; every speculative point is
matched to a baseline point with the same model, hardware and client params.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import math
import re
from functools import lru_cache

from specc.compile import facts as facts_mod
from specc.compile import rules
from specc.config import schema
from specc.diagnostics import Diagnostic, error, has_errors, info, unique, warning
from specc.engines import get_engine
from specc.plan import Benchmark, Dropped, Plan, Server
from specc.compile.spec import ServerSpec

SERVER_SECTIONS = ("model_pair", "hardware", "engine", "speculation", "readiness")
CLIENT_SECTION = "benchmark"
SPEC_KEYS = ("algorithm", "num_steps", "topk", "num_draft_tokens")


def _canonical(obj) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


def _hash(obj, n: int = 6) -> str:
    return hashlib.sha256(_canonical(obj).encode()).hexdigest()[:n]


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-")


def _set(tree: dict, path: str, value) -> None:
    """Set a dotted path; a dict value at a section merges into it (a zipped axis)."""
    parts = path.split(".")
    node = tree
    for p in parts[:-1]:
        node = node[p]
    if isinstance(value, dict) and isinstance(node.get(parts[-1]), dict):
        node[parts[-1]] = {**node[parts[-1]], **value}
    else:
        node[parts[-1]] = value


def _axis_label(path: str, value) -> dict:
    if isinstance(value, dict):
        return {f"{path}.{k}": v for k, v in value.items()}
    return {path: value}


def check_axes(cfg: dict) -> list[Diagnostic]:
    """Every sweep axis names a sweepable key and every value fits its schema."""
    out = []
    for path, values in (cfg.get("sweep") or {}).items():
        where = f"sweep.{path}"
        top = path.split(".")[0]
        if top == "readiness":
            out.append(error("SWEEP_AXIS", where, "readiness settings cannot be swept: they do "
                             "not change what a point measures",
                             f"set {path} once, outside the sweep"))
            continue
        if top not in SERVER_SECTIONS + (CLIENT_SECTION,):
            out.append(error("SWEEP_AXIS", where, f"'{path}' cannot be swept",
                             "sweep keys under model_pair, hardware, engine, speculation "
                             "or benchmark"))
            continue
        if len(set(map(_canonical, values))) != len(values):
            out.append(error("SWEEP_AXIS", where, "repeated values", "list each value once"))
        for i, value in enumerate(values):
            if isinstance(value, dict):
                node = copy.deepcopy(_get(cfg, path))
                if not isinstance(node, dict):
                    out.append(error("SWEEP_AXIS", f"{where}[{i}]",
                                     "a mapping value needs a config section here",
                                     "give scalar values"))
                    continue
                node.update(value)
                reason = schema.validate_value(path, node)
            else:
                reason = schema.validate_value(path, value)
            if reason:
                out.append(error("SWEEP_AXIS", f"{where}[{i}]", f"{value!r}: {reason}",
                                 "fix the value or the axis path"))
    return out


def _get(tree: dict, path: str):
    node = tree
    for p in path.split("."):
        if not isinstance(node, dict) or p not in node:
            return None
        node = node[p]
    return node


def _spec_for(sections: dict) -> ServerSpec:
    mp = sections["model_pair"]
    target = facts_mod.resolve(mp["target"], "model_pair.target")
    draft = facts_mod.resolve(mp["draft"], "model_pair.draft") if mp.get("draft") else None
    return ServerSpec(target=target, draft=draft, **sections)


def _baseline_of(sections: dict) -> dict:
    """The matched non-speculative server: same target, hardware and engine; no draft."""
    twin = copy.deepcopy(sections)
    twin["speculation"] = {k: None for k in SPEC_KEYS}
    twin["model_pair"]["draft"] = None   # so baselines of different drafts are one server
    return twin


def _num_prompts(bench: dict) -> int:
    """Explicit, else one full wave at the point's concurrency (at least 4)."""
    return bench.get("num_prompts") or max(4, bench["concurrency"])


def _server_key(sections: dict) -> dict:
    return {k: sections[k] for k in SERVER_SECTIONS if k != "readiness"}


def _same_server(engine, spec: ServerSpec, key: str, launched: dict, servers: dict):
    """The entry of an earlier, differently configured server that the engine would run
    identically (same command and environment), else None; records this one's command."""
    env, _ = engine.env(spec, [])
    ident = _canonical([engine.argv(spec, host="", port=0), env])
    first = launched.setdefault(ident, key)
    if first != key and first in servers:
        return servers[first]
    return None


def _label(spec: ServerSpec, engine, axis_values: dict) -> str:
    if not spec.speculative:
        base = "baseline"
    else:
        steps, topk, ndt = spec.spec_triple
        if spec.algorithm == "NGRAM":
            base = f"NGRAM d{ndt}"
        elif steps is None:
            base = f"{spec.algorithm} (engine defaults)"
        else:
            base = f"{spec.algorithm} s{steps} k{topk} d{ndt}"
    extra = [f"{k.split('.', 1)[1]}={v}" for k, v in axis_values.items()
             if not k.startswith("speculation.")]
    return " ".join([base] + extra)


def _params(spec: ServerSpec, axis_values: dict) -> dict:
    mp, hw = spec.model_pair, spec.hardware
    steps, topk, ndt = spec.spec_triple
    p = {"target": mp["target"]["path"],
         "draft": mp["draft"]["path"] if spec.uses_draft_model and mp.get("draft") else None,
         "tp": hw["tp"], "dp": hw.get("dp", 1), "pp": hw.get("pp", 1),
         "algorithm": spec.algorithm, "num_steps": steps, "topk": topk, "num_draft_tokens": ndt,
         "context_length": mp.get("context_length")}
    for k, v in axis_values.items():
        if not k.startswith("speculation."):
            p[k] = v
    return p


def _point_estimator(spec: ServerSpec):
    """bench -> wall time of one point, from the simulator's H200 performance model
    (calibrated to the incident's 82 tok/s Kimi-K2.5 baseline); for the review only."""
    from specc.perf import model as perf

    tp = spec.hardware["tp"]
    target = perf.model_cost(spec.target.values, tp=tp)
    spec_cfg = draft = None
    steps, topk, ndt = spec.spec_triple
    if spec.speculative and steps and topk and ndt:
        acceptance = (spec.engine.get("sim") or {}).get("acceptance") or perf.DEFAULT_ACCEPTANCE
        spec_cfg = perf.SpecConfig(steps, topk, ndt, acceptance)
        draft = perf.draft_cost(spec.draft.values, tp=tp) if spec.draft else None

    @lru_cache(maxsize=None)
    def wave_s(running: int, input_len: int, output_len: int) -> float:
        per_stream = perf.tokens_per_s_per_stream(target, running, spec_cfg, draft)
        return target.prefill_s(running * input_len) + output_len / per_stream

    def estimate(bench: dict) -> float:
        n, conc = bench["num_prompts"], bench["concurrency"]
        return math.ceil(n / conc) * wave_s(min(n, conc), bench["input_len"],
                                            bench["output_len"]) + 0.3

    return estimate


def lower(cfg: dict) -> tuple[Plan | None, list[Diagnostic]]:
    """Config (schema-valid) -> (plan or None, diagnostics)."""
    engine = get_engine(cfg["engine"]["name"], cfg["engine"].get("version"))
    diags: list[Diagnostic] = check_axes(cfg)
    if has_errors(diags):
        return None, diags

    axes = list((cfg.get("sweep") or {}).items())
    server_axes = [(p, v) for p, v in axes if not p.startswith(CLIENT_SECTION)]
    client_axes = [(p, v) for p, v in axes if p.startswith(CLIENT_SECTION)]
    n_server = math.prod(len(v) for _, v in server_axes)
    n_client = math.prod(len(v) for _, v in client_axes)
    worst = n_server * n_client * (2 if cfg.get("baseline") else 1)
    if n_server * n_client > cfg["max_points"]:
        return None, diags + [error(
            "MATRIX_TOO_LARGE", "sweep",
            f"the sweep has {n_server * n_client} points (up to {worst} with baselines), "
            f"over max_points={cfg['max_points']}",
            f"narrow the sweep, or raise the cap knowingly: max_points={n_server * n_client * 2}")]

    base = {k: cfg[k] for k in SERVER_SECTIONS}
    sweeps_spec = any(p.split(".")[0] == "speculation" for p, _ in server_axes)

    # 1. distinct server configurations (speculative ones, then their baseline twins)
    servers: dict[str, dict] = {}   # key -> {"sections", "spec", "axes"}
    dropped: list[Dropped] = []
    order: list[str] = []
    launched: dict[str, str] = {}   # what the engine would run -> the first key that runs it
    for combo in itertools.product(*(v for _, v in server_axes)):
        sections = copy.deepcopy(base)
        axis_values: dict = {}
        for (path, _), value in zip(server_axes, combo):
            _set(sections, path, value)
            axis_values.update(_axis_label(path, value))
        spec = _spec_for(sections)
        found = rules.check_server(spec, engine)
        errors = [d for d in found if d.severity == "error"]
        if errors and sweeps_spec and all(d.code in rules.DROPPABLE for d in errors):
            dropped.append(Dropped(point=axis_values, code=errors[0].code,
                                   reason=errors[0].message, points=n_client))
            continue
        diags += found
        twins = [(sections, spec, axis_values)]
        if cfg.get("baseline") and spec.speculative:
            bs = _baseline_of(sections)
            b_axes = {k: v for k, v in axis_values.items()
                      if not k.startswith(("speculation.", "model_pair.draft"))}
            twins.insert(0, (bs, _spec_for(bs), b_axes))
        for secs, sp, ax in twins:
            key = _canonical(_server_key(secs))
            same = _same_server(engine, sp, key, launched, servers)
            if same is not None:   # e.g. vLLM, which has no tree: topk does not change the server
                dropped.append(Dropped(
                    point=ax, code="ENGINE_SAME_SERVER", points=n_client,
                    reason=f"{engine.name} runs the same server as "
                           f"{_label(same['spec'], engine, same['axes'])!r} (the settings differ "
                           f"only in what {engine.name} ignores); measured once, there"))
                continue
            if key not in servers:
                servers[key] = {"sections": secs, "spec": sp, "axes": ax}
                order.append(key)
                if sp is not spec:
                    diags += rules.check_server(sp, engine)
    merged = [d for d in dropped if d.code == "ENGINE_SAME_SERVER"]
    if merged:
        diags.append(warning(
            "ENGINE_SAME_SERVER", "sweep",
            f"{len(merged)} server configuration(s) launch the same {engine.name} server as "
            "another one; each server is measured once (see the dropped points)",
            "sweep only what the engine distinguishes (vLLM: speculation.num_steps)"))
    if has_errors(diags):
        return None, unique(diags)
    if not servers:
        return None, unique(diags + [error(
            "MATRIX_EMPTY", "sweep", f"all {len(dropped)} server configurations were dropped",
            "see the dropped points and fix the speculation grid")])

    # baselines first: speedups can be computed as soon as a speculative point finishes
    order.sort(key=lambda k: servers[k]["spec"].speculative)

    # 2. placement: waves of servers with disjoint GPUs and ports
    hw = cfg["hardware"]
    per = servers[order[0]]["spec"].gpus_per_server
    slots = max(1, hw["gpus_per_node"] // per)
    host = hw.get("host", "localhost")
    engine_cfg = cfg["engine"]

    # 3. client combos
    client_points = []
    for combo in itertools.product(*(v for _, v in client_axes)):
        bench = dict(cfg[CLIENT_SECTION])
        for (path, _), value in zip(client_axes, combo):
            if path == CLIENT_SECTION:
                bench.update(value)
            else:
                bench[path.split(".", 1)[1]] = value
        bench["num_prompts"] = _num_prompts(bench)
        client_points.append(bench)
    client_keys = [(b, ck, json.dumps(ck)) for b in client_points for ck in (_canonical(b),)]

    plan_servers: list[Server] = []
    benchmarks: list[Benchmark] = []
    bench_index: dict[tuple[str, str], str] = {}   # (baseline server key, client key) -> id
    estimates: dict[str, float] = {}
    for i, key in enumerate(order):
        entry = servers[key]
        spec: ServerSpec = entry["spec"]
        wave, slot = divmod(i, slots)
        gpus = tuple(range(slot * spec.gpus_per_server, (slot + 1) * spec.gpus_per_server))
        port = engine_cfg["base_port"] + slot
        name = "baseline" if not spec.speculative else _slug(_label(spec, engine, {}))
        sid = f"{_slug(spec.model_pair['name'])}-{name}-tp{spec.hardware['tp']}-{_hash(key)}"
        env, secrets = engine.env(spec, list(gpus), flush_cache=any(
            b.get("flush_cache") for b in client_points))
        readiness = engine.readiness(spec)
        for bench in client_points:
            diags += rules.check_point(spec, engine, bench)
        plan_servers.append(Server(
            id=sid, label=_label(spec, engine, entry["axes"]), baseline=not spec.speculative,
            params=_params(spec, entry["axes"]), host=host, port=port, gpus=gpus, wave=wave,
            argv=tuple(engine.argv(spec, host=engine_cfg.get("bind_host", "127.0.0.1"), port=port)),
            env=env, log=f"servers/{sid}.log", readiness=readiness, secrets=tuple(secrets)))
        baseline_key = _canonical(_server_key(_baseline_of(entry["sections"])))
        run_s = readiness["estimated_start_s"]
        estimate = _point_estimator(spec)
        sid_json = json.dumps(sid)
        for bench, ckey, ckey_json in client_keys:
            # == _hash([sid, ckey]), without re-encoding the point for every server
            digest = hashlib.sha256(f"[{sid_json},{ckey_json}]".encode()).hexdigest()[:6]
            bid = f"{sid}-c{bench['concurrency']}-{digest}"
            if not spec.speculative:
                bench_index[(key, ckey)] = bid
            matched = None if not spec.speculative else bench_index.get((baseline_key, ckey))
            argv = None
            if bench["driver"] == "bench_serving":
                argv = tuple(engine.bench_serving_argv(
                    spec, host=host, port=port, bench=bench, num_prompts=bench["num_prompts"],
                    output_file=f"bench_serving/{bid}.jsonl"))
            benchmarks.append(Benchmark(id=bid, server=sid, baseline=matched,
                                        params={**bench, "model": engine.served_model(spec)},
                                        argv=argv))
            run_s += estimate(bench)
        estimates[sid] = round(run_s, 1)

    diags = unique(diags)
    if has_errors(diags):
        return None, diags
    waves: dict[int, float] = {}
    for s in plan_servers:
        waves[s.wave] = max(waves.get(s.wave, 0.0), estimates[s.id])
    if not any(b.baseline for b in benchmarks) and any(not s.baseline for s in plan_servers):
        diags.append(info("NO_BASELINE", "baseline",
                          "no matched baseline points: speedups will not be computed",
                          "set baseline=true"))
    first = servers[order[0]]["spec"]
    plan = Plan(
        experiment=cfg["experiment"], engine=engine.name, servers=tuple(plan_servers),
        benchmarks=tuple(benchmarks), diagnostics=tuple(d.to_json() for d in diags),
        dropped=tuple(dropped),
        engine_info=engine.info(),
        facts={"target": first.target.to_json(),
               "draft": first.draft.to_json() if first.draft else None},
        estimates={"servers_s": estimates, "wall_s": round(sum(waves.values()), 1),
                   "note": "phase estimates + the H200 performance model of specc.sim"},
        fail_fast=bool(cfg.get("fail_fast")))
    return plan, diags
