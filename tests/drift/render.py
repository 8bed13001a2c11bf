"""Render an engine's logging calls as the lines they print, from the released source.

Each logging call (``logger.info(...)``, ``print(...)``, ...) in a file becomes the
lines it can print: f-strings with their placeholders filled (a conditional gives both
branches, a local string variable each value assigned to it in the function, a
``:.2f`` spec formats a sample number), then ``%``-style and ``str.format`` arguments
filled with sample values. A placeholder named in `bindings` (its source text, e.g.
``role``) takes the values given there; every other one a sample number, ``7``. The
drift check matches each adapter regex against these lines: a regex written for the
literal fragment but not the line as printed fails there.
"""

from __future__ import annotations

import ast
import itertools
import re
import string

LOG_METHODS = {"debug", "info", "warning", "warn", "error", "exception", "critical", "log",
               "info_once", "warning_once", "debug_once", "print", "log_info_on_rank0"}
#: Helpers whose message is their second argument (after the level, or the logger).
SECOND_ARG = {"log", "log_info_on_rank0"}
_PERCENT = re.compile(r"%(?:\([^)]*\))?[-#0 +]*\d*(?:\.(\d+))?([diouxXeEfFgGcrsa%])")
MAX_LINES = 64   # renderings per call: placeholders with several values multiply


def _sample(spec: str = "") -> str:
    try:
        return format(7.5, spec) if spec else "7"
    except ValueError:
        return format(7, spec)


def _percent(text: str) -> str:
    def fill(m):
        digits, conv = m.group(1), m.group(2)
        if conv == "%":
            return "%"
        if conv in "eEfFgG":
            return format(7.5, f".{digits}{conv}" if digits else conv)
        return "7"
    return _PERCENT.sub(fill, text)


class Renderer:
    def __init__(self, source: str, bindings: dict[str, list[str]]):
        self.tree = ast.parse(source)
        self.bindings = bindings
        self._assigned: dict[int, dict[str, list[ast.expr]]] = {}

    def _scope_assignments(self, scope: ast.AST) -> dict[str, list[ast.expr]]:
        key = id(scope)
        if key not in self._assigned:
            found: dict[str, list[ast.expr]] = {}
            for n in ast.walk(scope):
                if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(
                        n.targets[0], ast.Name):
                    found.setdefault(n.targets[0].id, []).append(n.value)
            self._assigned[key] = found
        return self._assigned[key]

    def texts(self, node: ast.expr, scope: ast.AST, depth: int = 0) -> list[str]:
        """The strings `node` can evaluate to (samples where unknown)."""
        src = ast.unparse(node)
        if src in self.bindings:
            return list(self.bindings[src])
        if depth > 4:
            return [_sample()]
        if isinstance(node, ast.Constant):
            return [str(node.value)]
        if isinstance(node, ast.JoinedStr):
            parts = []
            for v in node.values:
                if isinstance(v, ast.Constant):
                    parts.append([str(v.value)])
                else:
                    spec = "".join(c.value for c in (v.format_spec.values if v.format_spec else ())
                                   if isinstance(c, ast.Constant))
                    parts.append([_sample(spec)] if spec else self.texts(v.value, scope, depth + 1))
            return ["".join(p) for p in itertools.islice(itertools.product(*parts), MAX_LINES)]
        if isinstance(node, ast.IfExp):
            return self.texts(node.body, scope, depth + 1) + self.texts(node.orelse, scope, depth + 1)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left, right = self.texts(node.left, scope, depth + 1), self.texts(node.right, scope, depth + 1)
            return [a + b for a, b in itertools.islice(itertools.product(left, right), MAX_LINES)]
        if isinstance(node, ast.Name):
            values = self._scope_assignments(scope).get(node.id)
            if values:
                return [t for v in values for t in self.texts(v, scope, depth + 1)][:MAX_LINES]
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "format"):
            out = []
            for template in self.texts(node.func.value, scope, depth + 1):
                fields = [f for _, f, _, _ in string.Formatter().parse(template) if f is not None]
                try:
                    out.append(template.format(*["7"] * len(fields),
                                               **{f: "7" for f in fields if f and not f.isdigit()}))
                except (IndexError, KeyError, ValueError):
                    out.append(template)
            return out
        return [_sample()]

    def logged_lines(self) -> list[str]:
        """Every line any logging call in the file can print."""
        lines: list[str] = []
        scopes = [n for n in ast.walk(self.tree)
                  if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))] + [self.tree]
        seen: set[int] = set()
        for scope in scopes:
            for call in ast.walk(scope):
                if id(call) in seen or not isinstance(call, ast.Call) or not call.args:
                    continue
                f = call.func
                name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
                if name not in LOG_METHODS:
                    continue
                seen.add(id(call))
                at = 1 if name in SECOND_ARG and len(call.args) > 1 else 0
                for text in self.texts(call.args[at], scope):
                    lines.append(_percent(text) if len(call.args) > at + 1 else text)
        return lines

    def raised_and_passed_lines(self) -> list[str]:
        """What the file prints besides its logging calls: the messages of the exceptions it
        raises (a traceback's last line) and the format strings it hands to a helper that
        logs them later (vLLM's monitor_torch_compile), each rendered as %-style."""
        lines: list[str] = []
        scopes = [n for n in ast.walk(self.tree)
                  if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))] + [self.tree]
        for scope in scopes:
            for node in ast.walk(scope):
                if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and node.exc.args:
                    lines += self.texts(node.exc.args[0], scope)
                elif isinstance(node, ast.Call):
                    for arg in node.args:
                        if isinstance(arg, ast.Constant) and isinstance(arg.value, str) \
                                and "%" in arg.value:
                            lines.append(_percent(arg.value))
        return lines
