"""The crossover refined on real simulator servers: the baseline started a second time
beside the deployed command's verification start (its own port), the two measured
alternately at each bisected concurrency with the same prompts, each pair's paired
speedup judged, rows in crossover.jsonl, both servers torn down."""

from __future__ import annotations

import asyncio
import json

import pytest

from executor_helpers import compile_plan

SPEC = ("+sweep={speculation:[{num_steps:1,topk:1,num_draft_tokens:2},"
        "{num_steps:3,topk:1,num_draft_tokens:4}],benchmark.concurrency:[1,16]}")


def _decision(plan, between=(1, 16), starts=1) -> dict:
    return {"crossover": {"concurrency": between[1], "between": list(between)},
            "starts": [{"server": plan.search.baseline}] * starts, "best": {}}


@pytest.mark.slow
def test_refined_side_by_side_on_the_simulator(tmp_path, guard):
    from specc.run import deploy
    from specc.run.crossover import CROSSOVER_JSONL, Refinement
    from specc.run.executor import Executor
    from specc.tune import crossover as X

    plan = compile_plan(tmp_path, ["+experiment=llama3_tune", SPEC, "search=tune"],
                        port=guard.port(3))
    tpl = plan.search.candidates[0].server
    server, benches = deploy._server(plan, tpl, plan.server(tpl).argv, "deploy")
    refine = Refinement(plan, _decision(plan))
    assert refine.planned()

    async def go():
        ex = Executor(plan, tmp_path)
        await deploy.verify(ex, server, benches, after_points=refine.hook(ex))

    asyncio.run(go())
    res = refine.result
    assert res is not None and res["status"] in ("precise", "undecided"), res
    p, u = res["between"]
    assert 1 <= p < u <= 16 and res["ladder"] == [1, 16]
    assert u - p <= max(1, 0.1 * p) or res["status"] == "undecided"
    lines = [json.loads(x) for x in (tmp_path / CROSSOVER_JSONL).read_text().splitlines()]
    assert len(lines) == res["pairs"] >= 1 and len(lines) <= X.most_pairs(1, 16, 0.1)
    state = json.loads((tmp_path / "state.json").read_text())["servers"]
    base = state[res["baseline_server"]]
    dep = state[res["server"]]
    # side by side: the baseline came up after the deployed command and went first
    assert base["port"] != dep["port"]
    assert dep["started_at"] < base["started_at"] <= base["stopped_at"] <= dep["stopped_at"]
    assert base["status"] == dep["status"] == "stopped"
    for line in lines:
        assert 1 < line["at"] < 16
        assert line["verdict"] in (X.PAYS, X.DOES_NOT_PAY, X.UNDECIDED)
        if line["verdict"] != X.UNDECIDED:   # a decided pair: its interval clears 1.0
            lo, hi = line["interval"]
            assert (lo > 1.0) if line["verdict"] == X.PAYS else (hi < 1.0)
        reqs = {}
        for who in ("baseline", "deployed"):
            path = tmp_path / "requests" / f"{line[who]}.jsonl"
            reqs[who] = [json.loads(x) for x in path.read_text().splitlines()]
        assert len(reqs["baseline"]) == len(reqs["deployed"]) == line["requests"]
        # the same prompts, so the speedup pairs; the baseline's point ran first
        assert [r["id"] for r in reqs["baseline"]] == \
            [r["id"] for r in reqs["deployed"]]
        assert (tmp_path / "requests" / f"{line['baseline']}.jsonl").stat().st_mtime <= \
            (tmp_path / "requests" / f"{line['deployed']}.jsonl").stat().st_mtime


def test_skipped_with_its_reason_never_silently(tmp_path):
    from specc.run.crossover import Refinement

    plan = compile_plan(tmp_path, ["+experiment=llama3_tune", SPEC, "search=tune"])
    spent = Refinement(plan, _decision(plan, starts=plan.search.max_starts))
    assert not spent.planned() and spent.result is not None
    assert spent.result["status"] == "not refined" and "budget" in spent.result["why"]
    assert Refinement(plan, _decision(plan, between=(None, 1))).result is None   # nothing to refine
    ok = Refinement(plan, _decision(plan))
    base = plan.server(plan.search.baseline)
    moved, why = ok.side_by_side(plan.server(plan.search.candidates[0].server))
    assert why is None and moved.port != base.port and str(moved.port) in moved.argv
