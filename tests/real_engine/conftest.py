"""Tests against a REAL engine: vLLM's CPU build serving the tiny models on this machine's
CPU (`specc cpu-engine`, `specc tiny-models`; docs/real-engine.md). Deselected from the
default run; `.ci/real-engine` builds what they need (cached) and runs them. One server at
a time: the machine's cores are the engine's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def pytest_collection_modifyitems(items):
    """Every test here is marked real_engine (deselected unless -m real_engine)."""
    here = Path(__file__).parent
    for item in items:
        if here in Path(item.fspath).parents:
            item.add_marker(pytest.mark.real_engine)
            item.add_marker(pytest.mark.timeout(1800))


@pytest.fixture(scope="session")
def engine_bin() -> Path:
    """The CPU engine venv's bin/ (built once; ~20 min on a busy 2-core machine)."""
    from specc.cpu import engine_venv

    return engine_venv.ensure(log=lambda m: print(m, file=sys.stderr)).parent


@pytest.fixture(scope="session")
def tiny(engine_bin) -> dict:
    """The tiny models, in their default cache dir (what conf/model_pair/tiny_cpu.yaml
    names), checked: the target predicts from the current token alone and answers open
    with characters split across tokens."""
    from specc.cpu import models

    info = models.ensure(engine_bin / "python", check=True)
    assert info["check"]["context_free"], info
    assert info["check"]["answer"].startswith("é☕"), info
    return info


@pytest.fixture
def specc_env(engine_bin, tiny) -> dict:
    """`specc`'s environment: the engine venv's `vllm` first on PATH."""
    return {**os.environ, "PATH": f"{engine_bin}{os.pathsep}{os.environ.get('PATH', '')}",
            "PYTHONUNBUFFERED": "1"}


def specc_argv(run_dir: Path, *overrides: str) -> list[str]:
    return [sys.executable, "-m", "specc", "+experiment=tiny_cpu", "execute=true",
            f"hydra.run.dir={run_dir}", *overrides]


def run_specc(run_dir: Path, env: dict, *overrides: str, timeout: float = 1500):
    proc = subprocess.run(specc_argv(run_dir, *overrides), cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)
    return proc.returncode, proc.stdout, proc.stderr
