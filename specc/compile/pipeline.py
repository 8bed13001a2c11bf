"""The pipeline in one line: secrets -> schema -> paths -> rules + lowering -> Plan (or diagnostics)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from specc import secrets
from specc.config import schema
from specc.diagnostics import Diagnostic, error, has_errors, info
from specc.compile.cluster import compile_cluster
from specc.compile.columns import RecordColumns
from specc.compile.lower import lower_columns
from specc.compile.search import attach_search
from specc.compile.rules import DROPPABLE
from specc.plan import Plan


@dataclass(frozen=True)
class Compilation:
    config: dict
    plan: Plan | None
    diagnostics: list[Diagnostic] = field(default_factory=list)
    #: The plan's benchmarks' params a field at a time, as lowering built them (for emit).
    params: RecordColumns | None = field(default=None, repr=False)

    @property
    def ok(self) -> bool:
        return self.plan is not None and not has_errors(self.diagnostics)


def _secret_diagnostics(config: dict, problems) -> list[Diagnostic]:
    """Where the plan holds references instead of values, and values that cannot be one."""
    out = [error("SECRET_IN_CONFIG", path,
                 f"{message}: specc writes this field to plan.json, plan.sh and the review",
                 "pass credentials through engine.env (e.g. +engine.env.HF_TOKEN=...) and "
                 "export them where the plan runs") for path, message in problems]
    engine = config["engine"] if isinstance(config.get("engine"), dict) else {}
    env = engine["env"] if isinstance(engine.get("env"), dict) else {}
    args = engine["extra_args"] if isinstance(engine.get("extra_args"), list) else []
    refs = [(f"engine.env.{k}", secrets.reference_name(v)) for k, v in env.items()]
    refs += [(f"engine.extra_args[{i}]", n) for i, a in enumerate(args)
             for n in secrets.REF.findall(str(a))]
    for path, name in refs:
        if name:
            out.append(info("SECRET_REFERENCED", path,
                            f"secret: the plan holds ${{{name}}}, never the value; the server "
                            f"gets it from the executor's environment at launch",
                            f"export {name}=... where the plan runs"))
    return out


def _real_errors_first(config: dict, diags: list[Diagnostic]) -> list[Diagnostic]:
    """When a speculation sweep has real errors, the errors of points that would just be
    dropped (DROPPABLE) only drown them: leave those out."""
    sweeps_spec = any(str(p).split(".")[0] == "speculation" for p in config.get("sweep") or {})
    real = [d for d in diags if d.severity == "error" and d.code not in DROPPABLE]
    if not (sweeps_spec and real):
        return diags
    return [d for d in diags if not (d.severity == "error" and d.code in DROPPABLE)]


def _names_fit(plan: Plan) -> list[Diagnostic]:
    """Server ids name log files and point ids output files: each must fit NAME_MAX."""
    longest = max((f"{s.id}.log" for s in plan.servers), key=len, default="")
    longest = max([longest] + [f"{b.id}.jsonl" for b in plan.benchmarks], key=len)
    excess = len(longest.encode()) - schema.NAME_MAX
    if excess <= 0:
        return []
    return [error("NAME_TOO_LONG", "model_pair.name",
                  f"file name {longest[:40]}... would be {len(longest.encode())} bytes, over "
                  f"NAME_MAX {schema.NAME_MAX} (ids are built from model_pair.name)",
                  f"shorten model_pair.name by at least {excess} characters")]


def compile_config(config: dict) -> Compilation:
    """A composed config (plain dict) -> Compilation. Pure: reads model config.json files only.

    Secrets are replaced by references first, so no later stage (diagnostics, plan,
    review) can echo one.
    """
    config, _, problems = secrets.scrub_config(config)
    diags = _secret_diagnostics(config, problems) + schema.validate(config)
    if not has_errors(diags):
        diags += schema.facts_for_missing(config)
    if has_errors(diags):
        return Compilation(config, None, diags)
    config = schema.with_defaults(schema.resolve_paths(config))
    plan, found, params = lower_columns(config)
    found = _real_errors_first(config, found)
    if plan is not None and not has_errors(found):
        found += _names_fit(plan)
    if plan is not None and diags:
        plan = dataclasses.replace(
            plan, diagnostics=tuple(diags) + tuple(plan.diagnostics))
    if plan is not None and not has_errors(found):
        plan, searched = attach_search(config, plan)
        found += searched
    cluster, placed = compile_cluster(config, plan) if plan is not None else (None, [])
    if cluster is not None and plan is not None:   # the Slurm jobs go into the plan: a node needs nothing else
        plan = dataclasses.replace(plan, cluster=cluster)
    return Compilation(config, plan, diags + found + placed, params)
