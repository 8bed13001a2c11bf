"""Lowering: a validated config -> one immutable Plan.

The stages it joins: the matrix (`matrix.py`: axes, distinct servers, dropped
points, client points), placement (`placement.py`: waves, GPUs, ports) and the
wall-time estimate (`estimate.py`). Here each server configuration becomes a
Server with its launch command, environment and readiness plan, and each client
point a Benchmark with a stable id, matched to its baseline point.
"""

from __future__ import annotations

import collections
import functools
import hashlib
import itertools
import json
import operator
import re
from dataclasses import fields, replace
from typing import Any

from specc.compile import estimate, placement, rules
from specc.compile.columns import ABSENT, Column, RecordColumns, Same
from specc.compile.matrix import NEUTRAL_WORKLOAD, ClientPoints, expand, short_hash as _hash
from specc.compile.spec import ServerSpec
from specc.diagnostics import Diagnostic, error, has_errors, info, unique
from specc.engines import get_engine
from specc.compile.build import build_many
from specc.plan import (BenchParams, Benchmark, Estimates, Plan, Readiness, Server, ServerParams,
                        launches_with)


_BENCHMARK_DEFAULTS = {f.name: f.default for f in fields(Benchmark)}


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-")


def _label(spec: ServerSpec, engine, axis_values: dict) -> str:
    base = engine.speculation_label(spec) if spec.speculative else "baseline"
    extra = [f"{k.split('.', 1)[1]}={v}" for k, v in axis_values.items()
             if not k.startswith("speculation.")]
    return " ".join([base] + extra)


def _params(spec: ServerSpec, axis_values: dict) -> ServerParams:
    mp, hw = spec.model_pair, spec.hardware
    steps, topk, ndt = spec.spec_triple
    return ServerParams(
        target=mp["target"]["path"],
        draft=mp["draft"]["path"] if spec.uses_draft_model and mp.get("draft") else None,
        tp=hw["tp"], dp=hw.get("dp", 1), pp=hw.get("pp", 1),
        algorithm=spec.algorithm, num_steps=steps, topk=topk, num_draft_tokens=ndt,
        context_length=mp.get("context_length"),
        axes=tuple((k, v) for k, v in axis_values.items() if not k.startswith("speculation.")))


def _bench_params(points: ClientPoints, extra: dict) -> tuple[list[BenchParams], dict]:
    """Each client point's params record (the config's values as they are: checked once,
    by the schema and the rules, not again per point), built a field at a time from the
    points' columns (10^5 of them on one server); and those columns, by field."""
    varying: dict[str, Any]
    varying, shared = {}, dict(extra)
    for f in fields(BenchParams):
        if f.name in extra:
            continue
        col = points.columns.get(f.name)
        if col is None:   # a workload key the points leave out at its neutral value
            assert f.name in NEUTRAL_WORKLOAD, f.name
            continue
        if f.name == "categories":   # a list in the config, a tuple in the frozen record
            col = _tuples(col)
        if type(col) is Same:
            shared[f.name] = col.value
        elif f.name in NEUTRAL_WORKLOAD:
            neutral = NEUTRAL_WORKLOAD[f.name]
            varying[f.name] = [neutral if v is ABSENT else v for v in col]
        else:
            varying[f.name] = col
    records = build_many(BenchParams, len(points), varying, shared)
    defaults = {f.name: f.default for f in fields(BenchParams)}
    return records, {f.name: varying[f.name] if f.name in varying else
                     Same(shared.get(f.name, defaults[f.name])) for f in fields(BenchParams)}


def _tuples(col):
    """Lists as tuples, each distinct list converted once (the records share it)."""
    if type(col) is Same:
        return Same(None if col.value is None else tuple(col.value))
    done: dict[int, tuple] = {}
    return [None if v is None else done.setdefault(id(v), tuple(v)) for v in col]


#: Ids end in SHORT_HASH hex digits of a sha256 (24 bits: short enough to read in a table and
#: a file name). Ids that collide within one plan are written with LONG_HASH digits (64 bits),
#: deterministically: a 10^5-point sweep has ~300 short collisions by chance, and two points
#: sharing an id would share one result. An id changes only while another of the same plan
#: shares its short form, so ids stay stable across sweeps that differ elsewhere.
SHORT_HASH, LONG_HASH = 6, 16


def _lengthen_repeats(ids: list[str], long_id) -> list[str]:
    """`ids` with every id that appears more than once replaced by `long_id(i)`."""
    if len(set(ids)) == len(ids):
        return ids
    counts = collections.Counter(ids)
    return [long_id(i) if counts[x] > 1 else x for i, x in enumerate(ids)]


def _benchmark_ids(sids: list[str], points: ClientPoints) -> list[list[str]]:
    """Each server's benchmark ids, point by point: `{sid}-c{concurrency}-{hash}`, the hash
    `_hash([sid, canonical(point)])`. Each point's text is written once for all servers
    (a column at a time) and hashed per server in C (10^5 points on one server)."""
    prefixes = [f"[{json.dumps(sid)},".encode() for sid in sids]
    out: list[list[str]] = [[] for _ in sids]
    texts = map(str.encode, points.canonical_texts(quoted=True, around=('"', '"]')))
    concs = iter(points.values("concurrency"))
    hexdigest, short = operator.methodcaller("hexdigest"), operator.itemgetter(slice(SHORT_HASH))
    while tails := list(itertools.islice(texts, 4096)):
        conc = list(map(str, itertools.islice(concs, len(tails))))
        for sid, prefix, ids in zip(sids, prefixes, out):
            digests = map(short, map(hexdigest, map(hashlib.sha256, map(prefix.__add__, tails))))
            ids += map("".join, zip(itertools.repeat(f"{sid}-c"), conc, itertools.repeat("-"),
                                    digests))
    if all(len(set(ids)) == len(ids) for ids in out):
        return out
    all_tails = [t.encode() for t in points.canonical_texts(quoted=True, around=('"', '"]'))]
    all_concs = points.values("concurrency")

    def long_id(sid: str, prefix: bytes, i: int) -> str:
        digest = hashlib.sha256(prefix + all_tails[i]).hexdigest()[:LONG_HASH]
        return f"{sid}-c{all_concs[i]}-{digest}"

    return [_lengthen_repeats(ids, functools.partial(long_id, sid, prefix))
            for sid, prefix, ids in zip(sids, prefixes, out)]


def _server_id(spec: ServerSpec, engine, key: str, digits: int = SHORT_HASH) -> str:
    name = "baseline" if not spec.speculative else _slug(_label(spec, engine, {}))
    return f"{_slug(spec.model_pair['name'])}-{name}-tp{spec.hardware['tp']}-{_hash(key, digits)}"


def _server_ids(servers, engine) -> list[str]:
    """Each server's id, unique within the plan (12,000 servers collide at 24 bits)."""
    sids = [_server_id(entry.spec, engine, entry.key) for entry in servers]
    return _lengthen_repeats(sids, lambda i: _server_id(servers[i].spec, engine, servers[i].key,
                                                        LONG_HASH))


def lower(cfg: dict) -> tuple[Plan | None, list[Diagnostic]]:
    """Config (schema-valid) -> (plan or None, diagnostics)."""
    plan, diags, _ = lower_columns(cfg)
    return plan, diags


def lower_columns(cfg: dict) -> tuple[Plan | None, list[Diagnostic], RecordColumns | None]:
    """lower(), and the plan's benchmarks' params a field at a time as they were built
    (emit writes them from there rather than read 10^5 records back), when one model is
    served (else None)."""
    engine = get_engine(cfg["engine"]["name"], cfg["engine"].get("version"))
    matrix, diags = expand(cfg, engine)
    if matrix is None:
        return None, diags, None

    hw, engine_cfg = cfg["hardware"], cfg["engine"]
    on_slurm = (cfg.get("cluster") or {}).get("name") == "slurm"
    found: list[Diagnostic]
    if hw.get("device") == "cpu":
        slots, found = placement.one_at_a_time(len(matrix.servers),
                                               base_port=engine_cfg["base_port"]), []
    else:
        slots, found = placement.place([s.spec.gpus_per_server for s in matrix.servers],
                                       gpus_per_node=hw["gpus_per_node"],
                                       base_port=engine_cfg["base_port"],
                                       multinode=on_slurm and engine.multinode)
    if found:
        return None, unique(diags + found), None
    if on_slurm:   # jobs of other waves may share a node
        slots = [replace(s, port=engine_cfg["base_port"] + i) for i, s in enumerate(slots)]
    rendezvous, found = placement.rendezvous_ports(
        [s.port for s in slots], [s.spec.nodes for s in matrix.servers],
        base_port=engine_cfg["base_port"])
    if found:
        return None, unique(diags + found), None
    host = hw.get("host", "localhost")
    points = matrix.client_points
    sids = _server_ids(matrix.servers, engine)
    bench_ids = _benchmark_ids(sids, points)
    # served model -> the params of every client point: one record per point and model,
    # shared by the servers that serve that model
    point_params: dict[str, list[BenchParams]] = {}
    param_columns: dict[str, dict] = {}
    readiness_plans: dict[str, Readiness] = {}   # equal readiness plans: one object, shared likewise

    plan_servers: list[Server] = []
    own: dict[str, Column] = {}   # the last server's benchmarks' fields holding one value each
    matched = False   # whether any point has a baseline point
    benchmarks: list[Benchmark] = []
    baseline_ids: dict[str, list[str]] = {}   # baseline server key -> its points' ids
    estimates: dict[str, float] = {}
    server_times = estimate.ServerTimes(engine, points.rows(estimate.SHAPE_KEYS))
    flush_cache = any(points.values("flush_cache"))
    drivers = points.values("driver")
    diags += rules.check_clients(engine, points)   # whatever their server
    for entry, slot, meet, sid, ids in zip(matrix.servers, slots, rendezvous, sids, bench_ids):
        spec: ServerSpec = entry.spec
        env, secrets = engine.env(spec, list(slot.gpus), flush_cache=flush_cache)
        readiness = engine.readiness(spec)
        readiness = readiness_plans.setdefault(repr(readiness), readiness)   # repr: every field
        diags += rules.check_points(spec, engine, points)
        argv = tuple(engine.argv(spec, host=engine_cfg.get("bind_host", "127.0.0.1"),
                                 port=slot.port, rendezvous_port=meet))
        diags += _launcher_problems(engine, sid, argv)
        # bench_serving's own client cannot divide its times: its points run undilated
        dilation = engine.time_dilation(spec) if "bench_serving" not in drivers else None
        plan_servers.append(Server(
            id=sid, label=_label(spec, engine, entry.axes), baseline=not spec.speculative,
            params=_params(spec, entry.axes), host=host, port=slot.port, gpus=slot.gpus,
            wave=slot.wave,
            argv=argv, env=env, log=f"servers/{sid}.log", readiness=readiness,
            cache_flush=engine.cache_flush(spec), acceptance=engine.acceptance(spec),
            secrets=tuple(secrets), nodes=spec.nodes, rendezvous_port=meet,
            api_key=engine.api_key(list(argv)), schedule_lag=engine.schedule_lag(spec),
            time_dilation=dilation,
            follower_args=tuple(engine.follower_args(spec)) if spec.nodes > 1 else ()))
        model = engine.served_model(spec)
        if model not in point_params:
            point_params[model], param_columns[model] = _bench_params(points, {
                "model": model, "request_id_field": engine.request_id_field,
                "accept_positions": engine.accept_positions})
        varying: dict[str, Any] = {"id": ids, "params": point_params[model]}
        shared = {"server": sid, "baseline": None, "argv": None}
        if not spec.speculative:
            baseline_ids[entry.key] = ids
        elif entry.baseline_key in baseline_ids:   # matched point by point: same client points
            varying["baseline"] = baseline_ids[entry.baseline_key]
        if "bench_serving" in drivers:
            varying["argv"] = [
                tuple(engine.bench_serving_argv(
                    spec, host=host, port=slot.port, bench=points[i],
                    num_prompts=points[i]["num_prompts"],
                    output_file=f"bench_serving/{ids[i]}.jsonl"))
                if driver == "bench_serving" else None for i, driver in enumerate(drivers)]
        built = build_many(Benchmark, len(points), varying, shared)
        if dilation is not None:   # the dilated ones through the constructor (it checks)
            built = [b if f == 1 else replace(b, time_dilation=f) for b, f in zip(built, (
                engine.point_time_dilation(spec, c, i, o, n) for c, i, o, n in points.rows(
                    ("concurrency", "input_len", "output_len", "num_prompts"))))]
        benchmarks += built
        own = {name: Same(shared[name] if name in shared else default)
               for name, default in _BENCHMARK_DEFAULTS.items() if name not in varying
               and not (name == "time_dilation" and dilation is not None)}
        matched = matched or any(varying.get("baseline") or ())
        estimates[sid] = server_times.seconds(spec, readiness.estimated_start_s)

    diags = unique(diags)
    if has_errors(diags):
        return None, diags, None
    if not matched and any(not s.baseline for s in plan_servers):
        diags.append(info("NO_BASELINE", "baseline",
                          "no matched baseline points: speedups will not be computed",
                          "set baseline=true"))
    first = matrix.servers[0].spec
    all_benchmarks = tuple(benchmarks)
    params = None
    if len(param_columns) == 1:   # each server's points: the one model's records, in order
        params = RecordColumns(next(iter(param_columns.values())), None if len(plan_servers) == 1
                               else list(range(len(points))) * len(plan_servers), of=all_benchmarks,
                               # one server's fields that hold one value (10^5 points):
                               # emit need not read them back from the records (the rest it
                               # does: a list kept from here would keep freed memory from
                               # going back to the system)
                               entries=RecordColumns(own, None, of=all_benchmarks)
                               if len(plan_servers) == 1 else None)
    plan = Plan(
        experiment=cfg["experiment"], engine=engine.name, servers=tuple(plan_servers),
        benchmarks=all_benchmarks, diagnostics=tuple(diags),
        dropped=matrix.dropped,
        engine_info=engine.info(),
        facts=_facts(first, matrix.servers),
        estimates=Estimates(
            servers_s=estimates, note=estimate.note(first),
            wall_s=estimate.wall_seconds((s.wave, estimates[s.id]) for s in plan_servers)),
        fail_fast=bool(cfg.get("fail_fast")))
    return plan, diags, params


def _facts(first, servers) -> dict:
    """The model facts the plan states: the first server's target, and the draft of the first
    server that loads one (the first server is the baseline, which loads none)."""
    draft = next((e.spec.draft for e in servers if e.spec.uses_draft_model and e.spec.draft),
                 None)
    return {"target": first.target, "draft": draft or None}


def _launcher_problems(engine, sid: str, argv: tuple[str, ...]) -> list[Diagnostic]:
    """A server starts with its engine's own program, never something that merely accepts
    its flags (`specc run --plan` checks the same against plan.json's engine_info.launcher)."""
    if launches_with(argv, engine.launcher):
        return []
    return [error("ENGINE_LAUNCHER", "engine",
                  f"server {sid} would start with `{' '.join(argv[:3])}`, not {engine.name}'s "
                  f"own launcher `{' '.join(engine.launcher)}`",
                  "launch servers only through the engine's own program; extra flags go in "
                  "engine.extra_args")]
