"""The pipeline in one line: schema -> rules + lowering -> Plan (or diagnostics)."""

from __future__ import annotations

from dataclasses import dataclass, field

from specc.config import schema
from specc.diagnostics import Diagnostic, has_errors
from specc.compile.lower import lower
from specc.plan import Plan


@dataclass(frozen=True)
class Compilation:
    config: dict
    plan: Plan | None
    diagnostics: list[Diagnostic] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.plan is not None and not has_errors(self.diagnostics)


def compile_config(config: dict) -> Compilation:
    """A composed config (plain dict) -> Compilation. Pure: reads model config.json files only."""
    diags = schema.validate(config)
    if has_errors(diags):
        return Compilation(config, None, diags)
    plan, found = lower(config)
    return Compilation(config, plan, diags + found)
