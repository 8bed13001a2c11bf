"""`search=tune` on the real engine chooses what a grid over the same candidates chooses.

vLLM's CPU build, the tiny pair, two EAGLE-3 candidates (1 and 3 speculative tokens) and
the baseline, at one concurrency, --enforce-eager: the grid starts all three servers; the
tune starts the baseline and its probe and predicts the other from the probe's per-position
acceptance (vLLM's counters). The grid's answer is the same decision rules applied to every
server it measured (`specc.run.tune.decide`, as benchmarks/tune_vs_grid.py does on the
simulator). Both runs name their servers alike (same engine section and base port).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from agreement import free_port  # noqa: E402

sys.path.pop(0)

pytestmark = [pytest.mark.real_engine, pytest.mark.real_engine_compare, pytest.mark.timeout(2400)]

REPO = Path(__file__).resolve().parents[2]
CONCURRENCY = 4
CANDIDATES = ("+sweep={speculation:[{algorithm:EAGLE3,num_steps:1,topk:1,num_draft_tokens:2},"
              "{algorithm:EAGLE3,num_steps:3,topk:1,num_draft_tokens:4}]}")


def _run(search: str, run_dir: Path, port: int) -> tuple[float, str]:
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "specc", "+experiment=tiny_cpu", "~sweep", CANDIDATES,
         f"search={search}", f"benchmark.concurrency={CONCURRENCY}", "benchmark.num_prompts=8",
         f"engine.base_port={port}", "execute=true", f"hydra.run.dir={run_dir}"],
        cwd=REPO, capture_output=True, text=True, timeout=2000,
        env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    return time.monotonic() - t0, proc.stdout + proc.stderr


def _setting(entry: dict) -> str:
    return "baseline" if entry.get("baseline") else entry["server"]


def test_tune_chooses_what_the_grid_chooses_on_the_real_engine(tmp_path):
    from specc.plan import Plan
    from specc.run.tune import decide

    port = free_port()
    grid_s, _ = _run("grid", tmp_path / "grid", port)
    tune_s, _ = _run("tune", tmp_path / "tune", port)
    tune = json.loads((tmp_path / "tune" / "tune.json").read_text())
    grid = decide(Plan.load(tmp_path / "tune" / "plan.json"), tmp_path / "grid")
    print(f"grid {grid_s:.0f} s ({tune['grid_server_starts']} starts), tune {tune_s:.0f} s "
          f"({tune['server_starts']} starts); grid best {grid['best']}; tune best {tune['best']}")
    assert tune["server_starts"] < tune["grid_server_starts"] == 3
    c = str(CONCURRENCY)
    g, t = grid["best"][c], tune["best"][c]
    ties = {x["server"] for x in g.get("ties") or []}
    assert _setting(t) == _setting(g) or _setting(t) in ties, (g, t)
