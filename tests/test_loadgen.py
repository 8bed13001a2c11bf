"""Load generator: metrics (pure) and end-to-end runs against ``python -m specc.sim``."""

import asyncio
import json
import math
import os
import socket
import subprocess
import sys
import time

import httpx
import pytest

from specc.prompts.datasets import load_prompts
from specc.run.loadgen import METRIC_KEYS, RequestRecord, percentile, run_load, summarize
from specc.run.loadgen import run as run_module
from specc.run.loadgen.metrics import per_token_itls, spread_itls
from specc.run.loadgen.sse import finish

# =========================================================================== summarize


def _rec(start, ttft, chunk_gaps, out_tokens, inp=10, ok=True, tokens_per_chunk=1):
    """A record whose chunks after the first each bring ``tokens_per_chunk`` tokens."""
    times = [start + ttft]
    for g in chunk_gaps:
        times.append(times[-1] + g)
    n = tokens_per_chunk
    return RequestRecord(ok=ok, error=None if ok else "x", input_tokens=inp,
                         output_tokens=out_tokens, requested_output_tokens=out_tokens,
                         ttft=ttft, itls=[g / n for g in chunk_gaps for _ in range(n)],
                         chunk_gaps=list(chunk_gaps), e2e_latency=times[-1] - start,
                         start=start, first_token_t=times[0], end=times[-1],
                         chunk_times=times, chunk_count=len(times),
                         chunk_tokens=[1] + [n] * len(chunk_gaps))


def test_percentile_matches_numpy_linear():
    np = pytest.importorskip("numpy")
    vals = sorted([3.0, 1.0, 4.0, 1.5, 9.0, 2.6, 5.0])
    for p in (0, 10, 50, 90, 95, 99, 100):
        assert percentile(vals, p) == pytest.approx(float(np.percentile(vals, p)))
    assert percentile([], 50) == 0.0
    assert percentile([7.0], 99) == 7.0


def test_summarize_known_answers():
    # two requests: ttft 0.1 and 0.3 s; chunk gaps 0.01 s and 0.02 s
    a = _rec(100.0, 0.1, [0.01] * 9, 10, inp=20)    # e2e 0.19; tpot 0.01; 9/0.09=100 tok/s
    b = _rec(100.0, 0.3, [0.02] * 4, 5, inp=30)     # e2e 0.38; tpot 0.02; 4/0.08=50 tok/s
    bad = _rec(100.0, 0.2, [0.5], 2, inp=1000, ok=False)
    m = summarize([a, b, bad], 2.0, concurrency=4, max_in_flight=3)
    assert set(m) == set(METRIC_KEYS)
    assert m["completed"] == 2 and m["failed"] == 1
    assert m["duration"] == 2.0
    assert m["total_input_tokens"] == 50 and m["total_output_tokens"] == 15
    assert m["request_throughput"] == pytest.approx(1.0)
    assert m["input_throughput"] == pytest.approx(25.0)
    assert m["output_throughput"] == pytest.approx(7.5)
    assert m["total_throughput"] == pytest.approx(32.5)
    assert m["mean_ttft_ms"] == pytest.approx(200.0)
    assert m["median_ttft_ms"] == pytest.approx(200.0)
    assert m["std_ttft_ms"] == pytest.approx(100.0)          # population std, as numpy
    assert m["p90_ttft_ms"] == pytest.approx(280.0)          # 100 + 0.9 * 200
    assert m["p99_ttft_ms"] == pytest.approx(298.0)
    # ITL: 9 x 10 ms and 4 x 20 ms, flattened over requests (bench_serving)
    assert m["mean_itl_ms"] == pytest.approx((9 * 10 + 4 * 20) / 13)
    assert m["median_itl_ms"] == pytest.approx(10.0)
    assert m["p90_itl_ms"] == pytest.approx(20.0)
    # one token per chunk: the chunk gaps are the same figures
    assert m["mean_chunk_gap_ms"] == pytest.approx(m["mean_itl_ms"])
    assert m["p90_chunk_gap_ms"] == pytest.approx(20.0)
    assert m["mean_tpot_ms"] == pytest.approx(15.0)
    assert m["median_e2e_latency_ms"] == pytest.approx(285.0)
    assert m["per_stream_output_throughput"] == pytest.approx(75.0)
    assert m["median_per_stream_output_throughput"] == pytest.approx(75.0)
    assert m["mean_concurrency"] == pytest.approx((0.19 + 0.38) / 2.0)
    assert m["concurrency"] == 4
    assert m["max_concurrent_requests"] == 3


def test_summarize_single_token_outputs_have_no_tpot():
    r = _rec(0.0, 0.05, [], 1)
    m = summarize([r], 1.0)
    # no time between tokens was measured: left out, not written as 0.0
    assert m["completed"] == 1 and m["mean_ttft_ms"] == pytest.approx(50.0)
    for name in ("tpot", "itl", "chunk_gap"):
        assert not [k for k in m if name in k], name
    assert "per_stream_output_throughput" not in m
    assert "median_per_stream_output_throughput" not in m
    assert m["concurrency"] == pytest.approx(0.05)  # no cap: the measured mean in flight


def test_summarize_zero_completed():
    m = summarize([_rec(0, 0.1, [0.1], 2, ok=False)], 0.0)
    assert m["completed"] == 0 and m["failed"] == 1
    assert all(math.isfinite(v) for v in m.values())
    assert "mean_ttft_ms" not in m and "mean_e2e_latency_ms" not in m
    assert summarize([], 0.0)["completed"] == 0


def test_per_token_itls_as_bench_serving():
    """sglang 0.5.23 bench_serving (generate backend): a chunk's gap spread over its new
    tokens; a chunk with none is skipped and its gap rolls into the next."""
    # chunk 0: TTFT; chunk 1: 3 new tokens 1 s later; chunk 2: none; chunk 3: 2 new, 2 s after 1
    assert per_token_itls([0.0, 1.0, 1.5, 3.0], [1, 4, 4, 6]) == [1 / 3] * 3 + [1.0, 1.0]
    assert per_token_itls([5.0], [3]) == [] and per_token_itls([], []) == []


def test_spread_itls_without_per_chunk_counts():
    assert spread_itls([0.3, 0.6], 7) == pytest.approx([0.1, 0.2])   # (7 - 1) / 2 = 3 per chunk
    assert spread_itls([0.3, 0.6], 2) == [0.3, 0.6]                  # never below one token
    assert spread_itls([], 5) == []


def test_summarize_two_itl_views_on_multi_token_chunks():
    """3 tokens per chunk: per-token ITL is a third of the chunk gap, under bench_serving's name."""
    a = _rec(0.0, 0.1, [0.03] * 4, 13, tokens_per_chunk=3)
    m = summarize([a], 1.0)
    assert m["mean_chunk_gap_ms"] == pytest.approx(30.0)
    assert m["mean_itl_ms"] == pytest.approx(10.0) and m["p99_itl_ms"] == pytest.approx(10.0)
    assert m["mean_tpot_ms"] == pytest.approx(10.0)   # (e2e - ttft) / (13 - 1)


# =========================================================================== stream parsing


def _chunked_times(body: bytes, cut_every: int, t0=1000.0):
    ts, offs = [], []
    for i in range(cut_every, len(body) + cut_every, cut_every):
        ts.append(t0 + len(ts) * 0.01)
        offs.append(min(i, len(body)))
    return ts, offs


def _sse(objs, done=True):
    s = "".join("data: " + json.dumps(o) + "\n\n" for o in objs)
    return (s + ("data: [DONE]\n\n" if done else "")).encode()


def test_finish_chat_times_and_usage():
    objs = [{"id": "r1", "choices": [{"delta": {"role": "assistant", "content": ""}}]}]
    objs += [{"id": "r1", "choices": [{"delta": {"content": "w "}}]} for _ in range(3)]
    objs += [{"id": "r1", "choices": [], "usage": {"completion_tokens": 6}}]
    body = _sse(objs)
    # one read per event: event i is complete at read i
    ts, offs, pos = [], [], 0
    for i, ev in enumerate(body.split(b"\n\n")[:-1]):
        pos += len(ev) + 2
        ts.append(1000.0 + i)
        offs.append(pos)
    rec = RequestRecord(start=999.5, requested_output_tokens=6)
    finish(rec, "chat", 200, body, ts, offs, None)
    assert rec.ok and rec.rid == "r1"
    assert rec.output_tokens == 6 and rec.chunk_count == 3
    assert rec.chunk_times == [1001.0, 1002.0, 1003.0]
    assert rec.ttft == pytest.approx(1.5) and rec.chunk_gaps == [1.0, 1.0]
    assert rec.e2e_latency == pytest.approx(1005.0 - 999.5)


def test_finish_generate_cumulative_text_and_split_reads():
    objs = [{"text": "a" * (i + 1), "meta_info": {"id": "g", "completion_tokens": i + 1}}
            for i in range(4)]
    body = _sse(objs)
    ts, offs = _chunked_times(body, 7)
    rec = RequestRecord(start=999.0, requested_output_tokens=4)
    finish(rec, "generate", 200, body, ts, offs, None)
    assert rec.ok and rec.output_tokens == 4 and rec.chunk_count == 4 and rec.rid == "g"
    assert rec.chunk_times == sorted(rec.chunk_times)


def _one_read_per_event(body, t0=1000.0):
    ts, offs, pos = [], [], 0
    for i, ev in enumerate(body.split(b"\n\n")[:-1]):
        pos += len(ev) + 2
        ts.append(t0 + i)
        offs.append(pos)
    return ts, offs


def test_finish_generate_counts_tokens_per_chunk():
    """/generate's cumulative completion_tokens: per-token ITL exactly as bench_serving's."""
    counts = [1, 4, 4, 6, 9]           # chunk 2 brings no token (and no text): skipped
    texts = ["a", "abcd", "abcd", "abcdef", "abcdefghi"]
    objs = [{"text": t, "meta_info": {"id": "g", "completion_tokens": c}}
            for t, c in zip(texts, counts)]
    body = _sse(objs)
    ts, offs = _one_read_per_event(body)
    rec = RequestRecord(start=999.0, requested_output_tokens=9)
    finish(rec, "generate", 200, body, ts, offs, None)
    assert rec.ok and rec.output_tokens == 9
    assert rec.chunk_times == [1000.0, 1001.0, 1003.0, 1004.0]
    assert rec.chunk_tokens == [1, 3, 2, 3] and rec.chunk_gaps == [1.0, 2.0, 1.0]
    assert rec.itls == pytest.approx([1 / 3] * 3 + [1.0] * 2 + [1 / 3] * 3)


def test_finish_chat_continuous_usage_counts_tokens_per_chunk():
    """OpenAI streams with continuous_usage_stats (SGLang 0.5.23, vLLM) carry per-chunk usage."""
    objs = [{"id": "c", "choices": [{"delta": {"role": "assistant", "content": ""}}],
             "usage": {"completion_tokens": 0}}]
    objs += [{"id": "c", "choices": [{"delta": {"content": "x" * n}}],
              "usage": {"completion_tokens": c}} for n, c in ((1, 1), (4, 5), (2, 7))]
    objs += [{"id": "c", "choices": [], "usage": {"completion_tokens": 7}}]
    body = _sse(objs)
    ts, offs = _one_read_per_event(body)
    rec = RequestRecord(start=999.0, requested_output_tokens=7)
    finish(rec, "chat", 200, body, ts, offs, None)
    assert rec.ok and rec.chunk_tokens == [1, 4, 2] and rec.chunk_gaps == [1.0, 1.0]
    assert rec.itls == pytest.approx([0.25] * 4 + [0.5] * 2)


def test_request_body_asks_for_per_chunk_usage():
    from specc.run.loadgen.sse import request_body
    for api in ("chat", "completions"):
        body = json.loads(request_body(api, "m", "hi", 8))
        assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}


def test_finish_failures():
    good = [{"id": "c", "choices": [{"text": "x"}]}]
    body = _sse(good, done=False)
    rec = RequestRecord(start=0.0, requested_output_tokens=1)
    finish(rec, "completions", 200, body, [1.0], [len(body)], None)
    assert not rec.ok and "[DONE]" in rec.error
    body = _sse(good)
    rec = RequestRecord(start=0.0, requested_output_tokens=5)
    finish(rec, "completions", 200, body, [1.0], [len(body)], None)
    assert not rec.ok and "short output" in rec.error
    rec = RequestRecord(start=0.0, requested_output_tokens=1)
    finish(rec, "completions", 503, b'{"error": "busy"}', [1.0], [17], None)
    assert not rec.ok and rec.error.startswith("HTTP 503")
    body = _sse([{"error": {"message": "boom"}}])
    rec = RequestRecord(start=0.0, requested_output_tokens=1)
    finish(rec, "chat", 200, body, [1.0], [len(body)], None)
    assert not rec.ok and "boom" in rec.error


def _counted(counts, final, *, api="chat", requested=None):
    """A stream with a running count per content chunk and a final usage."""
    if api == "generate":
        objs = [{"text": "t" * (i + 1), "meta_info": {"completion_tokens": c}}
                for i, c in enumerate(counts)]
        objs.append({"text": "t" * len(counts), "meta_info": {"completion_tokens": final}})
    else:
        objs = [{"choices": [{"delta": {"content": "t"}}], "usage": {"completion_tokens": c}}
                for c in counts]
        objs.append({"choices": [], "usage": {"completion_tokens": final}})
    body = _sse(objs)
    ts, offs = _one_read_per_event(body)
    rec = RequestRecord(start=999.0, requested_output_tokens=requested or final,
                        ignore_eos=False)
    finish(rec, api, 200, body, ts, offs, None)
    return rec


@pytest.mark.parametrize("api", ["chat", "generate"])
def test_finish_token_count_policy(api):
    # tokens without text after the last text (an end of sequence, a character cut by
    # max_tokens): what was streamed is a lower bound, the final count may exceed it
    assert _counted([1, 2, 3], 4, api=api, requested=8).ok
    rec = _counted([1, 2, 3], 12, api=api, requested=16)
    assert rec.ok and rec.output_tokens == 12
    # speculative chunks of several tokens each: fine while they add up
    assert _counted([3, 6, 9], 9, api=api, requested=16).ok
    rec = _counted([1, 2, 3], 3, api=api, requested=2)
    assert rec.error == "server reported 3 completion tokens for 2 requested and 3 streamed"
    assert rec.output_tokens == 3         # the stream is the truth
    rec = _counted([1, 5, 3], 3, api=api, requested=8)
    assert rec.error == "server's running completion_tokens went back from 5 to 3"
    rec = _counted([1, 2, 3], 2, api=api, requested=8)
    assert rec.error == "server's running completion_tokens went back from 3 to 2"
    rec = _counted([1, 2, 3], -1, api=api, requested=8)
    assert rec.error == "server sent completion_tokens -1, not a token count"


def test_finish_without_counts_checks_chunks_against_what_was_asked():
    objs = [{"choices": [{"delta": {"content": "t"}}]} for _ in range(5)]
    body = _sse(objs)
    ts, offs = _one_read_per_event(body)
    rec = RequestRecord(start=999.0, requested_output_tokens=4, ignore_eos=False)
    finish(rec, "chat", 200, body, ts, offs, None)
    assert rec.error == "server streamed 5 chunks for 4 requested tokens"
    # a final count below the chunks received
    body = _sse(objs + [{"choices": [], "usage": {"completion_tokens": 2}}])
    ts, offs = _one_read_per_event(body)
    rec = RequestRecord(start=999.0, requested_output_tokens=8, ignore_eos=False)
    finish(rec, "chat", 200, body, ts, offs, None)
    assert rec.error == "server reported 2 completion tokens for 8 requested and 5 streamed"


# =========================================================================== against the simulator

LLAMA_FACTS = json.dumps({
    "architectures": ["LlamaForCausalLM"], "max_position_embeddings": 131072,
    "vocab_size": 128256, "hidden_size": 4096, "num_attention_heads": 32,
    "num_key_value_heads": 8, "num_hidden_layers": 32, "weight_gb": 16, "active_params_b": 8})


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


NO_TEXTLESS = ["--sim-textless", "0"]


class Sim:
    def __init__(self, tmp_path, fault=None, extra=()):
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.truth = tmp_path / f"truth{self.port}.jsonl"
        self.log = open(tmp_path / f"sim{self.port}.log", "wb")
        env = dict(os.environ, SPECC_SIM_TRUTH=str(self.truth))
        env.pop("SPECC_SIM_FAULT", None)
        if fault:
            env["SPECC_SIM_FAULT"] = fault
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "specc.sim", "--model-path", "test-llama",
             "--port", str(self.port), "--sim-time-scale", "0.001",
             "--sim-target-facts", LLAMA_FACTS, *extra],
            env=env, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 60
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sim exited {self.proc.returncode}: "
                                   + (tmp_path / f"sim{self.port}.log").read_text()[-2000:])
            try:
                if httpx.get(self.url + "/health", timeout=5).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        self.close()
        raise RuntimeError("sim did not become healthy")

    def close(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    # every token shows its text: the exact chunk and ITL identities below hold
    # (tokens without text: tests/test_token_counts.py)
    s = Sim(tmp_path_factory.mktemp("sim"), extra=NO_TEXTLESS)
    yield s
    s.close()


def _prompts(n, out=12):
    return load_prompts("random", num=n, input_len=16, output_len=out, range_ratio=0.5, seed=1)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("api", ["chat", "completions", "generate"])
def test_run_load_each_api(sim, api):
    prompts = _prompts(12)
    done = []
    res = asyncio.run(run_load(sim.url, prompts, api=api, model="test-llama", concurrency=4,
                               warmup=2, on_request_done=done.append))
    m = res.metrics
    assert m["completed"] == 12 and m["failed"] == 0, [r.error for r in res.records]
    assert [r.output_tokens for r in res.records] == [p.output_tokens for p in prompts]
    assert m["total_output_tokens"] == sum(p.output_tokens for p in prompts)
    assert m["total_input_tokens"] == sum(p.input_tokens for p in prompts)
    assert len(res.warmup_records) == 2 and all(r.ok for r in res.warmup_records)
    assert all(r.output_tokens <= 8 for r in res.warmup_records)
    assert len(done) == 12 and all(r.index >= 0 for r in done)   # warm-up not reported
    assert res.max_in_flight <= 4 and m["max_concurrent_requests"] <= 4
    assert m["concurrency"] == 4
    # Time between tokens as the client saw it: a busy machine may read a stream's chunks
    # in one burst (gaps of 0), so assert what holds at any load: every request's decode
    # time, from its first to its last content chunk, is carried by its ITLs and gaps.
    assert m["median_ttft_ms"] > 0 and m["mean_e2e_latency_ms"] >= m["mean_ttft_ms"]
    for r in res.records:
        assert min(r.itls + r.chunk_gaps, default=0.0) >= 0.0
        assert sum(r.itls) == pytest.approx(sum(r.chunk_gaps), abs=1e-6)
        assert sum(r.chunk_gaps) <= r.e2e_latency - r.ttft + 1e-6
        assert len(r.itls) == r.output_tokens - r.chunk_tokens[0]
    assert m["mean_itl_ms"] == pytest.approx(
        1e3 * sum(x for r in res.records for x in r.itls) / sum(len(r.itls) for r in res.records))
    if api == "generate":   # no speculation: one token per chunk, the two views agree
        assert all(r.chunk_tokens == [1] * r.chunk_count for r in res.records)
        assert all(r.itls == pytest.approx(r.chunk_gaps) for r in res.records)
    assert m["per_stream_output_throughput"] > 0
    assert all(r.rid for r in res.records)


SPEC_ARGS = ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "sim/draft",
             "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
             "--speculative-num-draft-tokens", "4"]


@pytest.fixture(scope="module")
def spec_sim(tmp_path_factory):
    """A speculative server: each decode step streams the 1-4 tokens it accepted as one chunk."""
    s = Sim(tmp_path_factory.mktemp("spec"), extra=SPEC_ARGS + NO_TEXTLESS)
    yield s
    s.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("api", ["generate", "chat"])
def test_two_itl_views_on_a_speculative_stream(spec_sim, api):
    """Per-token ITL (bench_serving's itl) = each chunk's gap / the tokens it brought;
    the chunk gap a user sees is tokens-per-chunk times larger."""
    res = asyncio.run(run_load(spec_sim.url, _prompts(8, out=32), api=api, model="m",
                               concurrency=4, warmup=0))
    m = res.metrics
    assert m["completed"] == 8, [r.error for r in res.records]
    for r in res.records:
        # the server counts tokens per chunk (/generate's meta_info; OpenAI streams'
        # continuous_usage_stats, as SGLang 0.5.23 sends it): exact
        assert sum(r.chunk_tokens) == r.output_tokens and len(r.chunk_tokens) == r.chunk_count
        expected = [g / n for g, n in zip(r.chunk_gaps, r.chunk_tokens[1:]) for _ in range(n)]
        assert r.itls == pytest.approx(expected)
    decode_chunks = sum(r.chunk_count - 1 for r in res.records)
    tokens_per_chunk = (m["total_output_tokens"] - m["completed"]) / decode_chunks
    assert tokens_per_chunk > 1.5        # speculation: several tokens per chunk
    assert m["mean_chunk_gap_ms"] > 1.5 * m["mean_itl_ms"]
    assert max(n for r in res.records for n in r.chunk_tokens) > 1
    decode_tokens = sum(sum(r.chunk_tokens[1:]) for r in res.records)
    assert m["mean_itl_ms"] == pytest.approx(m["mean_chunk_gap_ms"] * decode_chunks / decode_tokens)


@pytest.mark.timeout(60)
def test_concurrency_cap_is_reached_and_respected(sim):
    res = asyncio.run(run_load(sim.url, _prompts(24, out=16), model="m", concurrency=8,
                               warmup=0))
    assert res.metrics["completed"] == 24
    assert res.max_in_flight == 8
    # server side view: no more than 8 streams overlap in time
    events = sorted([(r.start, 1) for r in res.records] + [(r.end, -1) for r in res.records])
    live = peak = 0
    for _, d in events:
        live += d
        peak = max(peak, live)
    assert peak <= 8


@pytest.mark.timeout(60)
def test_unlimited_concurrency(sim):
    res = asyncio.run(run_load(sim.url, _prompts(16, out=8), model="m", concurrency=None,
                               warmup=0))
    assert res.metrics["completed"] == 16 and res.max_in_flight == 16


@pytest.mark.timeout(60)
def test_poisson_schedule_on_a_fake_clock(sim, monkeypatch):
    """Requests leave in order, each after the seed's exponential gap, and record when they
    were due and sent (a fake clock: the waits are asserted, not measured)."""
    import random
    import types

    clock = {"t": 1000.0}
    waits = []

    async def sleep(d):
        waits.append(d)
        clock["t"] += d
        await asyncio.sleep(0)

    monkeypatch.setattr(run_module, "time", types.SimpleNamespace(time=lambda: clock["t"]))
    monkeypatch.setattr(run_module, "asyncio", types.SimpleNamespace(
        **{k: getattr(asyncio, k) for k in ("Semaphore", "get_running_loop", "gather")},
        sleep=sleep))
    rate, n = 40.0, 12
    res = asyncio.run(run_load(sim.url, _prompts(n, out=4), model="m", concurrency=None,
                               request_rate=rate, warmup=0, seed=5))
    assert res.metrics["completed"] == n
    rng = random.Random(5)
    gaps = [rng.expovariate(rate) for _ in range(n - 1)]   # none after the last request
    assert waits == pytest.approx(gaps)
    starts = [r.start for r in res.records]
    assert starts == sorted(starts)      # sent in the schedule's order
    due = [sum(gaps[:i]) for i in range(n)]
    assert [r.scheduled_s for r in res.records] == pytest.approx(due)
    # (when each was sent is the client's real clock: tests/test_arrivals.py, on the simulator)


@pytest.mark.timeout(60)
def test_httpx_transport(sim):
    res = asyncio.run(run_load(sim.url, _prompts(6), model="m", concurrency=3,
                               transport="httpx"))
    assert res.metrics["completed"] == 6, [r.error for r in res.records]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("api", ["chat", "generate"])
def test_chunks_match_the_simulators_truth(sim, api):
    """One measured chunk per emitted one, in order, with the tokens the server says it
    sent (how close the times are is benchmarks/loadgen_accuracy.py's business)."""
    res = asyncio.run(run_load(sim.url, _prompts(8, out=16), api=api, model="m", concurrency=8,
                               warmup=0))
    rids = [r.rid.split("-", 1)[-1] for r in res.records]   # "chatcmpl-<rid>"
    deadline = time.monotonic() + 30   # the simulator flushes its truth file every 100 ms
    while True:
        truth = {}
        for line in sim.truth.read_text().splitlines():
            ev = json.loads(line)
            if ev.get("event") == "token":
                truth.setdefault(ev["rid"], []).append(ev)
        done = all(sum(ev["n"] for ev in truth.get(rid, [])) == r.output_tokens
                   for rid, r in zip(rids, res.records))
        if done or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    for rid, r in zip(rids, res.records):
        events = truth.get(rid)
        assert events is not None and len(events) == len(r.chunk_times) == r.chunk_count
        assert r.chunk_times == sorted(r.chunk_times)
        if api == "generate":
            assert r.chunk_tokens == [ev["n"] for ev in events]


@pytest.mark.timeout(60)
def test_connection_refused_stops_at_once():
    """The refused warm-up request is the only one tried: nothing else is sent."""
    port = _free_port()
    res = asyncio.run(run_load(f"http://127.0.0.1:{port}", _prompts(50), model="m",
                               concurrency=4, warmup=1))
    assert res.server_gone and res.metrics["completed"] == 0 and res.metrics["failed"] == 50
    assert [r.error for r in res.warmup_records] == ["connection refused"]
    assert all(r.error == "not sent: connection refused" for r in res.records)


@pytest.mark.timeout(90)
def test_server_dies_mid_run(tmp_path):
    s = Sim(tmp_path, fault="die_mid_run:150")
    try:
        res = asyncio.run(run_load(s.url, _prompts(40, out=16), model="m", concurrency=8,
                                   warmup=1, timeout_s=20))
    finally:
        s.close()
    m = res.metrics
    assert m["failed"] > 0 and m["completed"] + m["failed"] == 40
    assert res.server_gone
    assert all(r.error for r in res.records if not r.ok)


@pytest.mark.timeout(90)
def test_truncated_streams_fail(tmp_path):
    s = Sim(tmp_path, fault="truncate_stream")
    try:
        res = asyncio.run(run_load(s.url, _prompts(6, out=12), model="m", concurrency=3,
                                   warmup=0, timeout_s=20))
    finally:
        s.close()
    assert res.metrics["completed"] == 0 and res.metrics["failed"] == 6
    assert all(r.error for r in res.records)


@pytest.mark.timeout(60)
def test_user_space_timestamps_transport(sim):
    res = asyncio.run(run_load(sim.url, _prompts(6), api="generate", model="m", concurrency=3,
                               kernel_timestamps=False))
    assert res.metrics["completed"] == 6, [r.error for r in res.records]
    for r in res.records:
        assert r.start < r.first_token_t <= r.chunk_times[-1] <= r.end


def test_a_point_ends_at_its_last_answer_not_when_the_client_finished_decoding():
    """The client's own decoding after the last byte is not the server's time: a point's
    duration ends at its last answer's end (kernel receive time); with a request that has
    no end (failed, cut off), the wall clock."""
    from specc.run.loadgen.records import RequestRecord
    from specc.run.loadgen.run import last_answer

    done = [RequestRecord(input_tokens=1, requested_output_tokens=1) for _ in range(3)]
    for r, end in zip(done, (10.2, 10.9, 10.5)):
        r.end = end
    assert last_answer(done, now=11.6) == 10.9
    cut = done + [RequestRecord(input_tokens=1, requested_output_tokens=1)]
    assert last_answer(cut, now=11.6) == 11.6
    assert last_answer([], now=11.6) == 11.6


@pytest.mark.timeout(60)
def test_a_wave_goes_out_on_connections_opened_before_the_point(sim, monkeypatch):
    """A closed-loop point opens its connections before it starts: its first wave is one
    write per request, not a TCP handshake each in turn (on a busy machine those spread a
    wave of 128 over ~12 ms and split it into other prefill batches from run to run)."""
    from specc.run.loadgen import client as client_module

    events: list[str] = []
    connect, start = client_module.FastClient._connect, client_module._Conn.start

    async def logged_connect(self):
        events.append("connect")
        return await connect(self)

    def logged_start(self, data, waiter, cap):
        events.append("send")
        return start(self, data, waiter, cap)

    monkeypatch.setattr(client_module.FastClient, "_connect", logged_connect)
    monkeypatch.setattr(client_module._Conn, "start", logged_start)
    res = asyncio.run(run_load(sim.url, _prompts(16, out=8), model="m", concurrency=8,
                               warmup=1))
    assert res.metrics["completed"] == 16 and res.max_in_flight == 8
    measured = events[events.index("send") + 1:]   # after the warm-up's request
    assert measured.count("connect") == 7, events   # the warm-up's connection is reused
    assert "connect" not in measured[measured.index("send"):], events
