"""Traces are streamed, not built up front (issue 30 item 5): the load generator reads and
builds each request as the schedule reaches it. On a small real trace against the real
simulator, the streamed replay sends the same requests, in the same order, with the same
outcomes and request lines as the lists it replaced."""

from __future__ import annotations

import asyncio
import json

import pytest

from specc import requestlog
from specc.prompts import trace
from specc.run.loadgen import run_load
from test_loadgen import NO_TEXTLESS, Sim

ROWS = [{"timestamp": 0, "input_length": 700, "output_length": 12, "hash_ids": [1, 2]},
        {"timestamp": 20, "input_length": 600, "output_length": 9, "hash_ids": [1, 3]},
        {"timestamp": 20, "input_length": 40, "output_length": 5, "hash_ids": [4]},
        "",   # a blank line: ids are file lines, not row numbers
        {"timestamp": 60, "input_length": 30, "output_length": 7},
        {"timestamp": 90, "prompt": "say something short", "output_length": 4},
        {"timestamp": 95, "input_length": 520, "output_length": 6, "hash_ids": [2, 9]}]


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    s = Sim(tmp_path_factory.mktemp("sim"), extra=NO_TEXTLESS)
    yield s
    s.close()


def _trace(tmp_path) -> str:
    path = tmp_path / "t.jsonl"
    path.write_text("".join((json.dumps(x) if isinstance(x, dict) else x) + "\n" for x in ROWS))
    return str(path)


def _outcome(res, prompts) -> tuple[list, list]:
    recs = [(r.index, r.ok, r.error, r.input_tokens, r.requested_output_tokens,
             r.output_tokens, r.scheduled_s) for r in res.records]
    lines = [{k: v for k, v in ln.items() if k in ("i", "id", "turn", "category", "ok", "error",
                                                   "input_tokens", "output_tokens")}
             for ln in requestlog.lines_for(res.records, prompts, repeat=0, attempt=0.0)]
    return recs, lines


@pytest.mark.timeout(120)
@pytest.mark.parametrize("concurrency", [None, 2])
def test_a_streamed_trace_replays_as_the_lists_did(sim, tmp_path, concurrency):
    path = _trace(tmp_path)
    sent: dict[str, list] = {"lists": [], "stream": []}

    def ids(which):
        def rid(i, q):
            sent[which].append((i, q.id, q.text))
            return "rid", f"x{i:05d}/{q.id}"
        return rid

    prompts, due = trace.load(path, num=100)
    lists = asyncio.run(run_load(
        sim.url, prompts, api="generate", model="test-llama", concurrency=concurrency,
        warmup=2, send_at=due, request_ids=[ids("lists")(i, q) for i, q in enumerate(prompts)]))
    replay = trace.Replay(path, num=100)
    streamed = asyncio.run(run_load(
        sim.url, [], api="generate", model="test-llama", concurrency=concurrency, warmup=2,
        stream=replay, request_ids=ids("stream")))
    assert all(r.ok for r in lists.records + streamed.records)
    assert _outcome(streamed, replay) == _outcome(lists, prompts)
    assert [ln["id"] for ln in _outcome(streamed, replay)[1]] == ["1", "2", "3", "5", "6", "7"]
    assert sorted(sent["stream"]) == sorted(sent["lists"])   # the same texts, under the same ids
    assert len(streamed.warmup_records) == 2 and all(r.ok for r in streamed.warmup_records)
    assert [r.sent_at_s >= r.scheduled_s - 1e-6 for r in streamed.records] == [True] * 6


def test_a_small_block_cache_builds_the_same_prompts(tmp_path, monkeypatch):
    """Shared blocks are kept in a bounded cache; one dropped is rebuilt the same."""
    path = _trace(tmp_path)
    whole = [(p, d) for p, d in trace.Replay(path, num=100)]
    monkeypatch.setattr(trace.Replay, "BLOCKS", 1)
    assert [(p, d) for p, d in trace.Replay(path, num=100)] == whole
    assert [p.text for p, _ in whole][:2] != [None, None]
    assert whole[0][0].text.split()[:512] == whole[1][0].text.split()[:512]   # hash id 1


@pytest.mark.timeout(60)
def test_the_stream_stops_where_keep_sending_says_and_records_nothing_after(sim, tmp_path):
    """Adaptive stopping (keep_sending) on a stream: what was held back leaves no record,
    as with lists."""
    path = _trace(tmp_path)
    asked = []

    def keep_sending():
        asked.append(1)
        return len(asked) <= 3

    res = asyncio.run(run_load(sim.url, [], api="generate", model="test-llama",
                               concurrency=1, warmup=0, stream=trace.Replay(path, num=100),
                               keep_sending=keep_sending))
    assert [r.index for r in res.records] == [0] and all(r.ok for r in res.records)
