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

from specc.run.datasets import Prompt, load_prompts
from specc.run.loadgen import (METRIC_KEYS, RequestRecord, _finish, percentile, run_load, 
                           summarize)

# =========================================================================== summarize


def _rec(start, ttft, chunk_gaps, out_tokens, inp=10, ok=True):
    times = [start + ttft]
    for g in chunk_gaps:
        times.append(times[-1] + g)
    return RequestRecord(ok=ok, error=None if ok else "x", input_tokens=inp,
                         output_tokens=out_tokens, requested_output_tokens=out_tokens,
                         ttft=ttft, itls=list(chunk_gaps), e2e_latency=times[-1] - start,
                         start=start, first_token_t=times[0], end=times[-1],
                         chunk_times=times, chunk_count=len(times))


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
    assert m["completed"] == 1 and m["mean_tpot_ms"] == 0.0 and m["mean_itl_ms"] == 0.0
    assert m["per_stream_output_throughput"] == 0.0
    assert m["concurrency"] == pytest.approx(0.05)  # no cap: the measured mean in flight


def test_summarize_zero_completed():
    m = summarize([_rec(0, 0.1, [0.1], 2, ok=False)], 0.0)
    assert m["completed"] == 0 and m["failed"] == 1
    assert all(math.isfinite(v) for v in m.values())
    assert summarize([], 0.0)["completed"] == 0


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
    _finish(rec, "chat", 200, body, ts, offs, None)
    assert rec.ok and rec.rid == "r1"
    assert rec.output_tokens == 6 and rec.chunk_count == 3
    assert rec.chunk_times == [1001.0, 1002.0, 1003.0]
    assert rec.ttft == pytest.approx(1.5) and rec.itls == [1.0, 1.0]
    assert rec.e2e_latency == pytest.approx(1005.0 - 999.5)


def test_finish_generate_cumulative_text_and_split_reads():
    objs = [{"text": "a" * (i + 1), "meta_info": {"id": "g", "completion_tokens": i + 1}}
            for i in range(4)]
    body = _sse(objs)
    ts, offs = _chunked_times(body, 7)
    rec = RequestRecord(start=999.0, requested_output_tokens=4)
    _finish(rec, "generate", 200, body, ts, offs, None)
    assert rec.ok and rec.output_tokens == 4 and rec.chunk_count == 4 and rec.rid == "g"
    assert rec.chunk_times == sorted(rec.chunk_times)


def test_finish_failures():
    good = [{"id": "c", "choices": [{"text": "x"}]}]
    body = _sse(good, done=False)
    rec = RequestRecord(start=0.0, requested_output_tokens=1)
    _finish(rec, "completions", 200, body, [1.0], [len(body)], None)
    assert not rec.ok and "[DONE]" in rec.error
    body = _sse(good)
    rec = RequestRecord(start=0.0, requested_output_tokens=5)
    _finish(rec, "completions", 200, body, [1.0], [len(body)], None)
    assert not rec.ok and "short output" in rec.error
    rec = RequestRecord(start=0.0, requested_output_tokens=1)
    _finish(rec, "completions", 503, b'{"error": "busy"}', [1.0], [17], None)
    assert not rec.ok and rec.error.startswith("HTTP 503")
    body = _sse([{"error": {"message": "boom"}}])
    rec = RequestRecord(start=0.0, requested_output_tokens=1)
    _finish(rec, "chat", 200, body, [1.0], [len(body)], None)
    assert not rec.ok and "boom" in rec.error


# =========================================================================== against the simulator

LLAMA_FACTS = json.dumps({
    "architectures": ["LlamaForCausalLM"], "max_position_embeddings": 131072,
    "vocab_size": 128256, "hidden_size": 4096, "num_attention_heads": 32,
    "num_key_value_heads": 8, "num_hidden_layers": 32, "weight_gb": 16, "active_params_b": 8})


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
    s = Sim(tmp_path_factory.mktemp("sim"))
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
    assert m["median_ttft_ms"] > 0 and m["median_itl_ms"] > 0 and m["mean_tpot_ms"] > 0
    assert m["per_stream_output_throughput"] > 0
    assert all(r.rid for r in res.records)


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
def test_poisson_rate_roughly_honored(sim):
    rate, n = 40.0, 40
    res = asyncio.run(run_load(sim.url, _prompts(n, out=4), model="m", concurrency=None,
                               request_rate=rate, warmup=0, seed=5))
    starts = sorted(r.start for r in res.records)
    span = starts[-1] - starts[0]
    # n-1 exponential gaps of mean 1/rate: expect ~0.975 s; generous bounds
    assert 0.4 < span < 2.5
    gaps = [b - a for a, b in zip(starts, starts[1:])]
    assert min(gaps) < 0.5 / rate < max(gaps)     # irregular, not a fixed interval
    res2 = asyncio.run(run_load(sim.url, _prompts(n, out=4), model="m", concurrency=None,
                                request_rate=rate, warmup=0, seed=5))
    starts2 = sorted(r.start for r in res2.records)
    assert abs((starts2[-1] - starts2[0]) - span) < 0.3   # same seed, same schedule


@pytest.mark.timeout(60)
def test_httpx_transport(sim):
    res = asyncio.run(run_load(sim.url, _prompts(6), model="m", concurrency=3,
                               transport="httpx"))
    assert res.metrics["completed"] == 6, [r.error for r in res.records]


@pytest.mark.timeout(60)
def test_timing_against_truth(sim):
    """Chunk times within a few ms of the simulator's emit times (light load)."""
    res = asyncio.run(run_load(sim.url, _prompts(8, out=16), model="m", concurrency=8,
                               warmup=0))
    time.sleep(0.3)   # the simulator flushes its truth file every 100 ms
    truth = {}
    for line in sim.truth.read_text().splitlines():
        ev = json.loads(line)
        if ev.get("event") == "token":
            truth.setdefault(ev["rid"], []).append(ev["t"])
    errs = []
    for r in res.records:
        tt = truth.get(r.rid.split("-", 1)[-1])   # "chatcmpl-<rid>"
        assert tt is not None and len(tt) == len(r.chunk_times)
        errs += [abs(a - b) for a, b in zip(r.chunk_times, tt)]
    errs.sort()
    assert errs[len(errs) // 2] < 0.005


@pytest.mark.timeout(60)
def test_connection_refused_stops_quickly():
    port = _free_port()
    t0 = time.time()
    res = asyncio.run(run_load(f"http://127.0.0.1:{port}", _prompts(50), model="m",
                               concurrency=4, warmup=1))
    assert time.time() - t0 < 5
    assert res.server_gone and res.metrics["completed"] == 0 and res.metrics["failed"] == 50
    assert all(not r.ok and r.error for r in res.records)


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
