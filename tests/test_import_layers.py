"""The layers hold (docs/architecture.md): the process that runs a plan imports no compile,
config, simulator or engine-adapter module, and the import contracts in pyproject.toml
([tool.importlinter]) are kept."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

from executor_helpers import SimGuard, compile_plan

REPO = Path(__file__).resolve().parent.parent
FORBIDDEN = re.compile(r"\|\s*(specc\.(?:compile|config|sim|engines)(?:\.\w+)*)\s*$")


def test_running_a_plan_imports_no_compile_config_sim_or_engine_module(tmp_path):
    """A real run on the simulator, preflight (its parser) to report, under -X importtime."""
    guard = SimGuard(tmp_path)
    run_dir = tmp_path / "run"
    compile_plan(run_dir, ["hardware.tp=1"], port=guard.port(2))
    try:
        res = subprocess.run([sys.executable, "-X", "importtime", "-m", "specc", "run", "--plan",
                              str(run_dir / "plan.json")], cwd=REPO, capture_output=True,
                             text=True, timeout=180)
    finally:
        left = guard.check()
    assert res.returncode == 0, res.stderr[-3000:]
    assert not left
    imported = [m.group(1) for line in res.stderr.splitlines() if (m := FORBIDDEN.search(line))]
    assert imported == []
    assert "specc.run.executor" in res.stderr and "specc.report" in res.stderr   # it was read


def test_the_import_contracts_are_kept():
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    assert lint, "import-linter is in the test extra: pip install -e '.[test]'"
    res = subprocess.run([lint, "--no-cache"], cwd=REPO, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stdout[-3000:]
    assert "0 broken" in res.stdout
