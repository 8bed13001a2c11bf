"""`search=tune`'s deployed command, started and measured on the real engine.

vLLM's CPU build, the tiny pair, EAGLE-3 with 1 and 3 speculative tokens against the
baseline at concurrency 1 and 4, --enforce-eager: the search starts the baseline and its
probe (its budget: 2 starts), writes deploy.json and starts its command once more to
verify it at every concurrency: 3 server starts. `search.deploy=schedule` asks for vLLM
0.32's batch-size schedule (`num_speculative_tokens_per_batch_size` in
--speculative-config): no vLLM band runs without speculation (a K=0 band still runs the
draft model), so whatever this minute's measurements say, a speculative command is
deployed and verified -- with `auto`, on this busy machine, the baseline often is, and then
there is nothing to start. Its bands are the engine's measurement (docs/real-engine.md);
the test checks what the user gets, and that vLLM drafted the K the command names at
batch size 1 (the tiny draft is built to accept every token: the accept length there is
exactly 1 + K).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.real_engine, pytest.mark.timeout(1800)]

REPO = Path(__file__).resolve().parents[2]
LADDER = (1, 4)
#: 16 prompts (the experiment's 8 make ~1 s points, where one 50 ms stall of specc's own
#: client on the busy machine fails the point: "load generator fell behind")
PROMPTS = 16
CANDIDATES = ("+sweep={speculation:[{algorithm:EAGLE3,num_steps:1,topk:1,num_draft_tokens:2},"
              "{algorithm:EAGLE3,num_steps:3,topk:1,num_draft_tokens:4}],"
              f"benchmark.concurrency:[{','.join(map(str, LADDER))}]}}")


@pytest.fixture(scope="module")
def tuned(tmp_path_factory) -> dict:
    """One `search=tune` run on the real engine, its deployed command verified."""
    from specc.cpu import engine_venv, models

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    try:
        from agreement import free_port
    finally:
        sys.path.pop(0)
    py = engine_venv.ensure(log=lambda m: print(m, file=sys.stderr))
    models.ensure(py)
    run_dir = tmp_path_factory.mktemp("deploy") / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "specc", "+experiment=tiny_cpu", "~sweep", CANDIDATES,
         "search=tune", "search.deploy=schedule", f"benchmark.num_prompts={PROMPTS}",
         f"engine.base_port={free_port()}", "execute=true", f"hydra.run.dir={run_dir}"],
        cwd=REPO, capture_output=True, text=True, timeout=1700,
        env={**os.environ, "PYTHONUNBUFFERED": "1"})
    out = proc.stdout + proc.stderr
    print(out[-6000:])
    assert proc.returncode == 0, out[-3000:]
    deploy = json.loads((run_dir / "deploy.json").read_text())
    print(json.dumps({k: deploy.get(k) for k in ("bands", "why", "expressible",
                                                  "predicted_loss", "verify")}, indent=1))
    return {"run_dir": run_dir, "deploy": deploy, "engine_python": py,
            "tune": json.loads((run_dir / "tune.json").read_text())}


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _deployed_speculation(t: dict) -> dict:
    """The speculative config the deployed command passes vLLM."""
    argv = t["deploy"]["argv"]
    assert "--speculative-config" in argv, (t["deploy"]["why"], t["tune"]["best"])
    return json.loads(argv[argv.index("--speculative-config") + 1])


def test_the_deployed_command_starts_and_is_verified_at_every_concurrency(tuned):
    run_dir, deploy = tuned["run_dir"], tuned["deploy"]
    assert all(r["status"] == "ok" for r in _rows(run_dir / "results.jsonl"))
    assert set(tuned["tune"]["best"]) == {str(c) for c in LADDER}
    assert not any("no_decision" in b for b in tuned["tune"]["best"].values())
    cfg = _deployed_speculation(tuned)
    # the command is the engine venv's vllm, with the schedule vLLM 0.32 takes where the
    # setting changes along the ladder; where the baseline won, a speculative band runs
    # and deploy.json says why and what it is predicted to cost
    assert Path(deploy["argv"][0]) == Path(tuned["engine_python"]).parent / "vllm"
    assert deploy["argv"][1] == "serve"
    if not deploy["static"]:
        ranges = cfg["num_speculative_tokens_per_batch_size"]
        assert ranges[0][0] == 1 and len(ranges) == len(deploy["bands"]) >= 2
        assert cfg["num_speculative_tokens"] == max(k for _, _, k in ranges)
        assert all(k > 0 for _, _, k in ranges)
    assert not any(b["setting"].get("baseline") for b in deploy["bands"])
    baseline_won = [c for c, b in tuned["tune"]["best"].items() if b.get("baseline")]
    if baseline_won:
        assert deploy["expressible"] is False and "K=0 band is not the baseline" in deploy["why"]
        assert set(deploy["predicted_loss"]) == {str(c) for c in LADDER}
    # started once more: 3 starts in all (baseline, probe, the deployed command), the last
    # ready and stopped, its log vLLM's own taking that speculative config
    state = json.loads((run_dir / "state.json").read_text())["servers"]
    vid = deploy["verify_server"]
    assert len(state) == 3 and vid in state
    assert state[vid]["ready_at"] and state[vid]["status"] == "stopped"
    log = (run_dir / state[vid]["log"]).read_text(errors="replace")
    assert "non-default args" in log and "Application startup complete" in log
    if not deploy["static"]:
        assert "'num_speculative_tokens_per_batch_size': [[1, " in log
    # measured at every ladder concurrency, each paired with the baseline's point
    rows = {r["params"]["concurrency"]: r for r in _rows(run_dir / "verify" / "results.jsonl")}
    assert sorted(rows) == list(LADDER)
    assert all(r["status"] == "ok" and r["server"] == vid for r in rows.values())
    assert set(deploy["verify"]) == {str(c) for c in LADDER}
    for c, v in deploy["verify"].items():
        lo, hi = v["interval"]
        assert lo <= v["speedup"] <= hi, (c, v)
        assert v["gap"] == pytest.approx(1 - v["speedup"] / deploy["envelope"][c], abs=2e-3)
        glo, ghi = v["gap_interval"]
        assert glo <= v["gap"] <= ghi, (c, v)
    report = json.loads((run_dir / "report.json").read_text())
    assert report["deploy"]["verify"] == deploy["verify"]


def test_the_engine_drafts_the_k_the_deployed_command_names_at_batch_size_one(tuned):
    """At concurrency 1 the running batch is 1: the band there is the one vLLM looks up
    (the static K, or the first range's), and the tiny draft is accepted in full, so the
    verified point's accept length (vLLM's counters) is 1 + that K."""
    from specc.tune.schedule import setting_at

    deploy = tuned["deploy"]
    cfg = _deployed_speculation(tuned)
    k = int(setting_at(deploy, 1)["num_steps"])
    if deploy["static"]:
        assert cfg["num_speculative_tokens"] == k
    else:
        assert cfg["num_speculative_tokens_per_batch_size"][0][2] == k
    rows = {r["params"]["concurrency"]: r
            for r in _rows(tuned["run_dir"] / "verify" / "results.jsonl")}
    got = rows[1]["metrics"].get("accept_length")
    assert got == pytest.approx(1 + k), (k, rows[1]["metrics"])
