"""The simulator's acceptance by category: read from the request's rid, deterministic per
prompt and seed, higher for code and maths than for writing (issue 10)."""

from __future__ import annotations

import asyncio

import httpx

from specc.sim import categories

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
    from tests.sim.conftest import SPEC_ARGS

    sim = start_sim(*SPEC_ARGS)
    sim.wait_ready()
    coding = asyncio.run(_verify_counts(sim.url, "coding"))
    writing = asyncio.run(_verify_counts(sim.url, "writing"))
    again = asyncio.run(_verify_counts(sim.url, "coding"))
    length = lambda xs: sum(t for t, _ in xs) / sum(v for _, v in xs)   # noqa: E731
    assert length(coding) > length(writing) * 1.1
    assert again == coding                  # deterministic per prompt and seed
