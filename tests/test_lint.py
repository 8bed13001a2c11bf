"""The type checker and the linter, as configured in pyproject.toml ([tool.mypy], [tool.ruff]),
report nothing: the README's test command runs both (CI included).

Each runs as its own process from the checkout's root, the way a developer runs it
(`mypy`, `ruff check .`); neither writes into the checkout (mypy's cache lives in the
temp dir, ruff's is off)."""

from __future__ import annotations

import hashlib
import importlib.util
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHOWN = 40   # findings printed on failure


def _run(tool: str, args: list[str]) -> subprocess.CompletedProcess:
    if importlib.util.find_spec(tool) is None:
        pytest.fail(f"{tool} is not installed: pip install -e '.[test]' installs it (pinned)")
    return subprocess.run([sys.executable, "-m", tool, *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=900)


def _findings(p: subprocess.CompletedProcess) -> str:
    lines = (p.stdout + p.stderr).splitlines()
    return "\n".join(lines[:SHOWN] + ([f"... and {len(lines) - SHOWN} more lines"]
                                      if len(lines) > SHOWN else []))


def test_mypy_reports_no_errors():
    # one cache per checkout, outside it: a rerun checks only what changed
    cache = Path(tempfile.gettempdir()) / (
        "specc-mypy-cache-" + hashlib.sha256(str(ROOT).encode()).hexdigest()[:12])
    p = _run("mypy", ["--cache-dir", str(cache)])
    assert p.returncode == 0, f"mypy (pyproject.toml [tool.mypy]) found errors:\n{_findings(p)}"


def test_ruff_reports_no_errors():
    p = _run("ruff", ["check", ".", "--no-cache", "--output-format", "concise"])
    assert p.returncode == 0, f"ruff check . (pyproject.toml [tool.ruff]) found errors:\n{_findings(p)}"
