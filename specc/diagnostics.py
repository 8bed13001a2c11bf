"""Diagnostics: every problem specc finds, with a stable code, a config path and a fix."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from specc.records import Record

SEVERITIES = ("error", "warning", "info")


@dataclass(frozen=True, order=True)
class Diagnostic(Record):
    """One problem: plan.json keeps the compile's (its `diagnostics`), read back by the
    records' reader."""

    code: str
    severity: str
    path: str
    message: str
    hint: str = ""

    def line(self) -> str:
        """One line for the terminal: `error SPEC_X at speculation.topk: message (fix: hint)`
        (a line break inside a value, e.g. a path, written as \\n)."""
        text = f"{self.severity} {self.code} at {self.path or '<root>'}: {self.message}"
        text = f"{text} (fix: {self.hint})" if self.hint else text
        return text.replace("\r", "\\r").replace("\n", "\\n")

    def to_json(self) -> dict:
        return asdict(self)


def error(code: str, path: str, message: str, hint: str = "") -> Diagnostic:
    return Diagnostic(code, "error", path, message, hint)


def warning(code: str, path: str, message: str, hint: str = "") -> Diagnostic:
    return Diagnostic(code, "warning", path, message, hint)


def info(code: str, path: str, message: str, hint: str = "") -> Diagnostic:
    return Diagnostic(code, "info", path, message, hint)


def has_errors(diags) -> bool:
    return any(d.severity == "error" for d in diags)


def unique(diags) -> list[Diagnostic]:
    """Drop repeats (a rule fires once per server, not once per point), keep order."""
    seen: set = set()
    out = []
    for d in diags:
        if d not in seen:
            seen.add(d)
            out.append(d)
    return out


class SpecError(Exception):
    """Invalid input: carries the diagnostics to print; maps to exit code 2."""

    def __init__(self, diagnostics: list[Diagnostic]):
        super().__init__("\n".join(d.line() for d in diagnostics))
        self.diagnostics = diagnostics
