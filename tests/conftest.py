"""Shared helpers for the compiler tests: compose a config in-process, run the CLI."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import settings

# CI: the same examples every run (a failure there reproduces here); locally: explore.
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

# Every run a test makes adds itself to the results index: into a throw-away one, never
# the project's (outputs/specc-index.sqlite beside the run dirs). Subprocesses inherit it.
os.environ["SPECC_INDEX"] = os.path.join(tempfile.mkdtemp(prefix="specc-index-"), "index.sqlite")

# Every compile seals its plan under the user's key ($XDG_STATE_HOME/specc/seal.key): a
# throw-away state dir, never the user's (docs/trust-inputs.md). Subprocesses inherit it.
os.environ["XDG_STATE_HOME"] = tempfile.mkdtemp(prefix="specc-state-")

# A simulator point is failed when the simulator fell behind its schedule by more than
# 2.5% of the point (at least 10 ms: specc/engines/sim.py). The suite's points last a
# fraction of a second on a machine other suites keep busy: its runs tolerate 60 s, and
# tests/test_executor_schedule_lag.py the real bound. Subprocesses inherit it.
os.environ["SPECC_SIM_LAG_FLOOR_S"] = "60"
# The simulator's automatic time dilation would stretch each of the suite's points of a few
# tiny requests to seconds (specc/engines/sim.py, min_point_s): the suite runs them in real
# time, and tests/test_time_dilation_plan.py checks the automatic rule.
os.environ["SPECC_SIM_TIME_DILATION"] = "1"
# The load generator's own turnaround: the same (specc/run/loadgen/turnaround.py, 10 ms
# floor); tests/test_turnaround.py checks the real bound.
os.environ["SPECC_CLIENT_TURNAROUND_FLOOR_S"] = "60"
# A simulator's health check answers once its 1-token generation is out, looked for once a
# second as SGLang does (specc/sim/http.py): each of the suite's server starts waited that
# second to be found ready. It looks every 20 ms here; tests/sim/test_endpoints.py checks
# the knob, and a simulator outside the suite keeps SGLang's second.
os.environ["SPECC_SIM_HEALTH_POLL_S"] = "0.02"

REPO = Path(__file__).resolve().parent.parent
CONF_DIR = REPO / "conf"
_CACHE: dict[tuple, dict] = {}


def compose_config(overrides=()) -> dict:
    """The plain config dict `python -m specc <overrides>` would hand the compiler."""
    key = tuple(overrides)
    if key not in _CACHE:
        from hydra import compose, initialize_config_dir
        from omegaconf import OmegaConf

        import specc.config  # noqa: F401  (registers specc's resolvers, as `specc` does)

        with initialize_config_dir(version_base="1.3", config_dir=str(CONF_DIR)):
            cfg = compose(config_name="config", overrides=list(overrides))
        plain = OmegaConf.to_container(cfg, resolve=True)
        plain.pop("hydra", None)
        _CACHE[key] = plain
    return copy.deepcopy(_CACHE[key])


@pytest.fixture
def compose():
    return compose_config


def run_specc(args, tmp_path: Path, *, cwd=None, env=None, run_dir=True, timeout=60):
    """`python -m specc <args> hydra.run.dir=<tmp>/run` -> (code, stdout, stderr)."""
    argv = [sys.executable, "-m", "specc", *args]
    if run_dir:
        argv.append(f"hydra.run.dir={tmp_path / 'run'}")
    proc = subprocess.run(argv, cwd=cwd or REPO, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})
    return proc.returncode, proc.stdout, proc.stderr


@pytest.fixture(name="run_specc")
def _run_specc_fixture():
    return run_specc


@pytest.fixture
def guard(tmp_path):
    """Ports for simulators, and a check that none of them outlives the test."""
    from executor_helpers import SimGuard

    g = SimGuard(tmp_path)
    yield g
    left = g.check()
    assert not left, f"simulator processes survived the test: {left}"


def bench_params(**kw) -> dict:
    """A client point's params as plan.json holds them: conf/benchmark/default.yaml's
    values (the defaults are said there only), what the engine adds, then `kw`."""
    import yaml

    out = yaml.safe_load((CONF_DIR / "benchmark" / "default.yaml").read_text())
    out.update(num_prompts=out["min_requests"], model="m", request_id_field="rid",
               accept_positions=None)
    from specc.compile.matrix import NEUTRAL_WORKLOAD

    for key, neutral in NEUTRAL_WORKLOAD.items():   # left out at these, as the compiler does
        if out.get(key) == neutral:
            del out[key]
    out.update(kw)
    return out


def server_params(**kw) -> dict:
    """A server's params as plan.json holds them (a baseline unless `kw` says otherwise)."""
    return {"target": "t", "draft": None, "tp": 1, "dp": 1, "pp": 1, "algorithm": None,
            "num_steps": None, "topk": None, "num_draft_tokens": None, "context_length": None,
            **kw}


def pytest_collection_finish(session):
    """The drift stage (`pytest -m drift -n0`) builds the released engines' venvs before its
    first test, saying what it builds and for how long (GBs on a fresh machine: a silent
    stage looks hung), so that no test's timeout covers a download."""
    if not any(item.get_closest_marker("drift") for item in session.items):
        return
    sys.path.insert(0, str(Path(__file__).resolve().parent / "drift"))
    try:
        from venvs import BuildFailed, RegistryUnreachable, ensure_all
    finally:
        sys.path.pop(0)
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")

    def say(msg: str) -> None:
        if reporter is not None:
            reporter.write_line(f"drift venvs: {msg}")
        else:
            print(f"drift venvs: {msg}", flush=True)
    try:
        ensure_all(say)
    except (RegistryUnreachable, BuildFailed) as e:   # each test says it again, its own way
        say(f"not built: {str(e).splitlines()[0]}")
