"""The simulator's acceptance by category: read from the request's rid, deterministic per
prompt and seed, higher for code and maths than for writing (issue 10)."""

from __future__ import annotations

import asyncio

import httpx

from specc.sim import categories

from .conftest import SPEC_ARGS

PROMPTS = [f"prompt number {i} about something" for i in range(12)]


def test_category_of_rid():
    assert categories.category_of("ab12/coding/coding-01") == "coding"
    assert categories.category_of("ab12/-/7") is None
    assert categories.category_of("plain-rid") is None
    assert categories.category_of(None) is None


def test_acceptance_by_category_is_deterministic_and_ordered():
    a = categories.acceptance(0.7, "coding", "p", 0)
    assert a == categories.acceptance(0.7, "coding", "p", 0)
    assert a != categories.acceptance(0.7, "coding", "p", 1)     # the seed matters
    assert categories.acceptance(0.7, None, "p", 0) is None      # no category: unchanged
    # the same prompt: code above writing, by the factors' ratio
    assert categories.acceptance(0.7, "coding", "p", 0) > categories.acceptance(
        0.7, "math", "p", 0) > categories.acceptance(0.7, "writing", "p", 0)
    assert categories.acceptance(0.99, "coding", "p", 0) <= categories.HIGH


async def _verify_counts(url: str, category: str | None) -> list[tuple[int, int]]:
    async with httpx.AsyncClient(timeout=30) as c:
        async def one(i, text):
            body = {"text": text, "sampling_params": {"max_new_tokens": 48, "ignore_eos": True}}
            if category:
                body["rid"] = f"t{i}{category}/{category}/{i}"
            r = await c.post(url + "/generate", json=body)
            m = r.json()["meta_info"]
            if category:
                assert m["id"] == body["rid"]          # SGLang echoes the rid as the id
            return m["completion_tokens"], m["spec_verify_ct"]
        return await asyncio.gather(*(one(i, t) for i, t in enumerate(PROMPTS)))


def test_sim_accepts_more_for_coding_than_writing(start_sim):

    sim = start_sim(*SPEC_ARGS)
    sim.wait_ready()
    coding = asyncio.run(_verify_counts(sim.url, "coding"))
    writing = asyncio.run(_verify_counts(sim.url, "writing"))
    again = asyncio.run(_verify_counts(sim.url, "coding"))
    length = lambda xs: sum(t for t, _ in xs) / sum(v for _, v in xs)   # noqa: E731
    assert length(coding) > length(writing) * 1.1
    assert again == coding                  # deterministic per prompt and seed


def test_adaptive_stopping_against_the_simulator_adds_at_most_one_batch(start_sim):
    """A loose target is met at the first check: the point stops at min_requests plus at most
    the batch in flight (concurrency 4), not at max_requests."""
    from specc import requestlog as reqlog
    from specc.prompts.datasets import Prompt
    from specc.run.loadgen import run_load

    sim = start_sim(*SPEC_ARGS)
    sim.wait_ready()
    prompts = [Prompt(f"p {i} " * 5, 10, 16, "coding", f"c{i}") for i in range(64)]
    stop = reqlog.Stopper(target_ci=0.5, min_requests=8, max_requests=64, batch=4)
    res = asyncio.run(run_load(sim.url, prompts, api="generate", model="m", concurrency=4,
                               warmup=0, keep_sending=stop.keep_sending,
                               on_request_done=stop.on_done))
    assert stop.reason == "target"
    assert 8 <= len(res.records) <= 8 + 4 - 1
    assert all(r.ok for r in res.records)
    assert res.metrics["completed"] == len(res.records)
    assert all(r.verify_ct for r in res.records)      # /generate reports verify passes
