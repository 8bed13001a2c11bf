"""The simulator's --speculative-adaptive (SGLang 0.5.23's flags and semantics): the
running batch, not the client's concurrency, picks the band's num_steps; a bad config or
starting num_steps is refused as SGLang refuses it. The real scheduler on a fake clock."""

from __future__ import annotations

import asyncio
import json

import pytest

from specc.sim.args import Sim, UsageError, build_parser
from specc.sim.scheduler import Scheduler

from .test_schedule import FakeClock

ARGS = ["--model-path", "m", "--sim-seed", "3", "--speculative-algorithm", "EAGLE3",
        "--speculative-draft-model-path", "d", "--speculative-adaptive",
        "--sim-acceptance", "0.8"]


def sim_with(tmp_path, config: dict | None, *extra: str) -> Sim:
    args = list(ARGS) + list(extra)
    if config is not None:
        path = tmp_path / "adaptive.json"
        path.write_text(json.dumps(config))
        args += ["--speculative-adaptive-config", str(path)]
    return Sim(build_parser().parse_args(args), None)


async def _run(sim: Sim, n: int):
    sched = Scheduler(sim)
    clock = FakeClock()
    reqs = [sched.submit(f"p{i}", 16, 60, True, False) for i in range(n)]
    task = asyncio.ensure_future(sched.run(clock=clock, sleep=clock.sleep))
    await asyncio.wait_for(asyncio.gather(*(r.done for r in reqs)), 10)
    task.cancel()
    return sched, reqs


def test_the_running_batch_picks_the_bands_num_steps(tmp_path):
    cfg = {"1": {"candidate_steps": [5]}, "4": {"candidate_steps": [0]}}
    sim = sim_with(tmp_path, cfg, "--speculative-num-steps", "5")
    # resolved as 0.5.23 does: topk 1, num_draft_tokens = num_steps + 1
    assert (sim.args.speculative_eagle_topk, sim.args.speculative_num_draft_tokens) == (1, 6)
    one, reqs = asyncio.run(_run(sim, 1))
    assert set(one.adaptive.seen) == {1}
    r = reqs[0]
    assert r.verify_ct and len(r.tokens) / r.verify_ct > 2.0   # 5-step chain at a=0.8
    many, reqs = asyncio.run(_run(sim_with(tmp_path, cfg, "--speculative-num-steps", "5"), 6))
    # six running: the 4 band (0 steps, no drafting) until requests finish below 4
    big = {b: s for b, s in many.adaptive.seen.items() if b >= 4}
    assert big and all(total == 0 for _, total in big.values())
    assert all(len(r.tokens) == 60 for r in reqs)


def test_the_engines_default_config_starts_at_its_middle_candidate(tmp_path):
    sim = sim_with(tmp_path, None)
    assert sim.adaptive_config == "default"
    assert sim.args.speculative_num_steps == 3   # candidates 0, 1, 3, 5, 7


@pytest.mark.parametrize("config, extra, text", [
    ({"1": {"candidate_steps": [1, 3]}}, ["--speculative-num-steps", "2"],
     "is not in the adaptive config candidate_steps [1, 3]"),
    ({"one": {"candidate_steps": [1]}}, [], "at least one integer-string BS key"),
])
def test_a_config_sglang_refuses_is_refused(tmp_path, config, extra, text):
    with pytest.raises(UsageError, match=text.replace("[", r"\[").replace("]", r"\]")):
        sim_with(tmp_path, config, *extra)


def test_a_tree_falls_back_to_static_params_as_sglang_does(tmp_path):
    sim = sim_with(tmp_path, {"1": {"candidate_steps": [3]}}, "--speculative-num-steps", "3",
                   "--speculative-eagle-topk", "4", "--speculative-num-draft-tokens", "8")
    assert sim.adaptive_config is None and Scheduler(sim).adaptive is None
    assert any("speculative_adaptive disabled" in w for w in sim.warnings)
