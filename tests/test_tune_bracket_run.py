"""The SLO bracket through the real CLI: its bad input (one line, exit 2), the review's
most extra points, and a whole search=tune run on the simulator that brackets the
capacity on each running server (real servers, HTTP, files), then a resume that starts
nothing and reads the probes back."""

from __future__ import annotations

import json
import re

import pytest

from conftest import run_specc
from specc.tune import bracket as B

TUNE = ["+experiment=llama3_tune", "engine=sim"]
SMALL = ["sweep={speculation:[{num_steps:1,topk:1,num_draft_tokens:2},"
         "{num_steps:3,topk:4,num_draft_tokens:8}],benchmark.concurrency:[1,8]}",
         "benchmark.min_requests=8", "benchmark.output_len=32", "search.max_starts=2",
         "+search.slo.p90_ttft_ms=60", "search.precision=0.25"]


@pytest.mark.parametrize("args,code,where", [
    (["+search.slo.p99_ttft_ms=0"], "SCHEMA_EXCLUSIVEMINIMUM", "search.slo.p99_ttft_ms"),
    (["+search.slo.p99_ttft_ms=-5"], "SCHEMA_EXCLUSIVEMINIMUM", "search.slo.p99_ttft_ms"),
    (["search.precision=0.9"], "SCHEMA_MAXIMUM", "search.precision"),
    (["search.precision=0.001"], "SCHEMA_MINIMUM", "search.precision"),
])
def test_bad_slo_input_is_one_line_and_exit_2(tmp_path, args, code, where):
    rc, out, err = run_specc(TUNE + args, tmp_path)
    assert rc == 2, (out, err)
    assert "Traceback" not in out + err
    errors = [line for line in err.splitlines() if line.startswith("error ")]
    assert len(errors) == 1 and code in errors[0] and where in errors[0], err
    assert not (tmp_path / "run" / "plan.json").exists()


def test_the_review_states_the_most_extra_points(tmp_path):
    rc, out, err = run_specc(TUNE + ["+search.slo.p99_ttft_ms=200", "search.precision=0.2"],
                             tmp_path)
    assert rc == 0, err
    review = (tmp_path / "run" / "review.md").read_text()
    most = B.most_probes([1, 8, 32, 128], 0.2)
    assert f"At most **{most}** extra points per key and server, **{most * 4}** in all" \
        in review
    assert "within 20%" in review and "undecided" in review
    assert json.loads((tmp_path / "run" / "plan.json").read_text())["search"]["precision"] \
        == 0.2


@pytest.mark.slow
def test_the_capacity_is_bracketed_on_running_servers_and_resumes(tmp_path, guard):
    code, out, err = run_specc(TUNE + SMALL + ["execute=true",
                                              f"engine.base_port={guard.port()}"],
                               tmp_path, timeout=600)
    run_dir = tmp_path / "run"
    assert code in (0, 3), err[-3000:]   # 3: a point the busy simulator flagged
    tune = json.loads((run_dir / "tune.json").read_text())
    plan = json.loads((run_dir / "plan.json").read_text())
    started = [s["server"] for s in tune["starts"]]
    base = plan["search"]["baseline"]
    br = tune["slo"]["p90_ttft_ms"]["bracket"]
    assert br["baseline"]["status"] in ("precise", "undecided", "never meets",
                                        "meets at the most probed")
    probes = [json.loads(x) for x in (run_dir / "bracket.jsonl").read_text().splitlines()]
    # extra points ran on the servers that were up, never more than the review's bound
    assert probes and {p["server"] for p in probes} <= set(started)
    most = B.most_probes([1, 8], 0.25)
    for sid in started:
        mine = [p for p in probes if p["server"] == sid]
        assert len(mine) <= most
        assert all((run_dir / "requests" / f"{p['benchmark']}.jsonl").exists() for p in mine)
    assert any(p["server"] == base for p in probes)
    # the plan's points stay the plan's: no probe in results.jsonl
    rows = [json.loads(x) for x in (run_dir / "results.jsonl").read_text().splitlines()]
    assert {r["benchmark"] for r in rows} <= {b["id"] for b in plan["benchmarks"]}
    # what the bracket found agrees with its own points: nothing above the capacity meets
    # below the first failing load; the gap to it is within the precision
    for res in [br["baseline"], br.get("speculative")]:
        if not res or res.get("capacity") is None:
            continue
        meets = [p["at"] for p in res["points"] if p["verdict"] == "meets"]
        assert res["capacity"] == max(a for a in meets
                                      if res["fails"] is None or a < res["fails"])
        if res["status"] == "precise":
            assert (res["fails"] - res["capacity"]) / res["capacity"] <= 0.25 \
                or res["fails"] - res["capacity"] == 1
            lo, hi = res["statistic"]["interval"]
            assert hi <= 60   # shown to meet at 95%, not only by its value
    assert re.search(r"speculation (adds|costs) |no capacity figure", br["text"])
    report = (run_dir / "report.md").read_text()
    assert "SLO p90_ttft_ms, bracketed:" in report
    assert json.loads((run_dir / "report.json").read_text())["decision"]["slo"] == tune["slo"]
    # a rerun starts nothing and reads the probes back: the same capacities
    again = run_specc(["run", "--plan", str(run_dir / "plan.json")], tmp_path, run_dir=False,
                      timeout=300)
    assert again[0] in (0, 3), again[2][-3000:]
    br2 = json.loads((run_dir / "tune.json").read_text())["slo"]["p90_ttft_ms"]["bracket"]
    assert br2["baseline"]["capacity"] == br["baseline"]["capacity"]
    assert len((run_dir / "bracket.jsonl").read_text().splitlines()) == len(probes)
