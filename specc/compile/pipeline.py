"""The pipeline in one line: schema -> rules + lowering -> Plan (or diagnostics)."""

from __future__ import annotations

from dataclasses import dataclass, field

from specc.config import schema
from specc.diagnostics import Diagnostic, has_errors
from specc.compile.cluster import compile_cluster
from specc.compile.lower import lower
from specc.plan import Plan


@dataclass(frozen=True)
class Compilation:
    config: dict
    plan: Plan | None
    diagnostics: list[Diagnostic] = field(default_factory=list)
    #: plan.json's `cluster` section (the Slurm jobs); None runs on this machine.
    cluster: dict | None = None

    @property
    def ok(self) -> bool:
        return self.plan is not None and not has_errors(self.diagnostics)


def compile_config(config: dict) -> Compilation:
    """A composed config (plain dict) -> Compilation. Pure: reads model config.json files only."""
    diags = schema.validate(config)
    if has_errors(diags):
        return Compilation(config, None, diags)
    plan, found = lower(config)
    cluster, placed = compile_cluster(config, plan) if plan is not None else (None, [])
    return Compilation(config, plan, diags + found + placed, cluster)
