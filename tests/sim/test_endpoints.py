"""Endpoint shapes against SGLang's (and the shapes sglang.bench_serving relies on)."""

import json

import httpx


def sse_events(resp: httpx.Response) -> list:
    out = []
    for line in resp.iter_lines():
        if line.startswith("data: "):
            payload = line[6:]
            out.append(payload if payload == "[DONE]" else json.loads(payload))
    return out


def test_models_and_model_info(shared_sim):
    r = httpx.get(shared_sim.url + "/v1/models")
    assert r.status_code == 200
    body = r.json()
    assert body["object"] == "list"
    m = body["data"][0]
    assert m["id"] == "sim/kimi" and m["object"] == "model" and m["owned_by"] == "sglang"
    assert m["root"] == "sim/kimi" and isinstance(m["max_model_len"], int)
    for path in ("/get_model_info", "/model_info"):
        info = httpx.get(shared_sim.url + path).json()
        assert info["model_path"] == "sim/kimi" and info["is_generation"] is True
        assert "tokenizer_path" in info


def test_server_info(shared_sim):
    for path in ("/get_server_info", "/server_info"):
        info = httpx.get(shared_sim.url + path).json()
        assert info["model_path"] == "sim/kimi"
        assert info["tp_size"] == 2 and info["port"] == shared_sim.port
        assert info["speculative_algorithm"] == "EAGLE3"
        assert info["speculative_num_steps"] == 3
        assert info["speculative_num_draft_tokens"] == 4
        assert info["max_running_requests"] == 48      # SGLang's default with speculation
        assert info["version"] == "0.5.23"              # the emulated version
        st = info["internal_states"][0]
        assert "last_gen_throughput" in st
    assert "--sim" not in json.dumps(info)


def test_generate_non_stream(shared_sim):
    r = httpx.post(shared_sim.url + "/generate", json={
        "text": "one two three four", "sampling_params": {"max_new_tokens": 12, "ignore_eos": True}})
    assert r.status_code == 200
    body = r.json()
    assert len(body["text"].split()) == 12
    mi = body["meta_info"]
    assert mi["prompt_tokens"] == 4 and mi["completion_tokens"] == 12
    assert mi["finish_reason"] == {"type": "length", "length": 12}
    assert 1 <= mi["spec_verify_ct"] <= 11 and isinstance(mi["id"], str)
    # 0.5.23 tokenizer_manager: completion tokens (incl. the prefill's) / verify calls
    assert mi["spec_accept_length"] == 12 / mi["spec_verify_ct"]
    assert mi["spec_num_proposed_drafts"] == 3 * mi["spec_verify_ct"]
    assert mi["spec_accept_rate"] == mi["spec_num_correct_drafts"] / mi["spec_num_proposed_drafts"]


def test_generate_stream_bench_serving_shape(shared_sim):
    # sglang.bench_serving backend "sglang": POST /generate, stream, cumulative text,
    # meta_info.completion_tokens, ends with [DONE]
    payload = {"text": "a b c", "sampling_params": {"temperature": 0.0, "max_new_tokens": 20,
                                                    "ignore_eos": True},
               "stream": True, "lora_path": None, "return_logprob": False,
               "logprob_start_len": -1}
    with httpx.stream("POST", shared_sim.url + "/generate", json=payload) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        ev = sse_events(r)
    assert ev[-1] == "[DONE]"
    chunks = ev[:-1]
    counts = [c["meta_info"]["completion_tokens"] for c in chunks]
    assert counts == sorted(counts) and counts[-1] == 20
    assert chunks[0]["meta_info"]["completion_tokens"] == 1     # prefill emits the first token
    assert len(chunks[-1]["text"].split()) == 20                # cumulative text
    assert chunks[-1]["meta_info"]["finish_reason"]["type"] == "length"
    assert all(c["meta_info"]["finish_reason"] is None for c in chunks[:-1])
    # with speculation a chunk carries several tokens
    assert max(b - a for a, b in zip(counts, counts[1:])) > 1


def test_generate_input_ids(shared_sim):
    r = httpx.post(shared_sim.url + "/generate", json={
        "input_ids": [1, 2, 3, 4, 5], "sampling_params": {"max_new_tokens": 3, "ignore_eos": True}})
    assert r.json()["meta_info"]["prompt_tokens"] == 5


def test_completions(shared_sim):
    r = httpx.post(shared_sim.url + "/v1/completions", json={
        "model": "sim/kimi", "prompt": "x y z", "max_tokens": 7, "ignore_eos": True})
    body = r.json()
    assert body["object"] == "text_completion" and body["id"].startswith("cmpl-")
    ch = body["choices"][0]
    assert ch["index"] == 0 and len(ch["text"].split()) == 7 and ch["finish_reason"] == "length"
    assert body["usage"] == {"prompt_tokens": 3, "completion_tokens": 7, "total_tokens": 10,
                             "prompt_tokens_details": None}


def test_completions_stream_sglang_oai_shape(shared_sim):
    payload = {"model": "sim/kimi", "prompt": "x y z", "best_of": 1, "max_tokens": 9,
               "stream": True, "temperature": 0.0, "ignore_eos": True,
               "stream_options": {"include_usage": True}}
    with httpx.stream("POST", shared_sim.url + "/v1/completions", json=payload) as r:
        ev = sse_events(r)
    assert ev[-1] == "[DONE]"
    usage = ev[-2]
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 9
    texts = [e["choices"][0]["text"] for e in ev[:-2]]
    assert all(texts) and len("".join(texts).split()) == 9
    assert ev[-3]["choices"][0]["finish_reason"] == "length"
    assert all(e["usage"] is None for e in ev[:-2])


def test_completions_stream_without_usage(shared_sim):
    payload = {"prompt": "x y z", "max_tokens": 4, "stream": True, "ignore_eos": True}
    with httpx.stream("POST", shared_sim.url + "/v1/completions", json=payload) as r:
        ev = sse_events(r)
    assert ev[-1] == "[DONE]" and all(e["choices"] for e in ev[:-1])


def test_chat(shared_sim):
    msgs = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi there"}]
    body = httpx.post(shared_sim.url + "/v1/chat/completions", json={
        "messages": msgs, "max_tokens": 5, "ignore_eos": True}).json()
    assert body["object"] == "chat.completion"
    msg = body["choices"][0]["message"]
    assert msg["role"] == "assistant" and len(msg["content"].split()) == 5
    assert body["usage"]["prompt_tokens"] == 4
    with httpx.stream("POST", shared_sim.url + "/v1/chat/completions", json={
            "messages": msgs, "max_tokens": 6, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}}) as r:
        ev = sse_events(r)
    assert ev[-1] == "[DONE]"
    assert ev[0]["object"] == "chat.completion.chunk"
    # serving_chat.py: a role-only first chunk, content chunks without a role, then the
    # finish reason in a chunk of its own; 0.5.23's msgspec chunks omit null fields
    # (StreamChunk/StreamDelta omit_defaults: no "usage", no null role or content) but
    # keep reasoning_content (required) and the choice's nulls
    assert ev[0]["choices"][0]["delta"] == {"reasoning_content": None, "role": "assistant",
                                            "content": ""}
    body = ev[1:-3]
    assert body and all(e["choices"][0]["delta"].keys() == {"reasoning_content", "content"}
                        and e["choices"][0]["delta"]["content"] for e in body)
    assert all("usage" not in e for e in ev[:-2])
    finish = ev[-3]["choices"][0]
    assert finish == {"index": 0, "delta": {"reasoning_content": None}, "logprobs": None,
                      "finish_reason": "length", "matched_stop": None}
    assert all(e["choices"][0]["finish_reason"] is None for e in ev[:-3])
    content = "".join(e["choices"][0]["delta"].get("content", "") for e in ev[:-2])
    assert len(content.split()) == 6 and ev[-2]["usage"]["total_tokens"] == 10


def test_chat_stream_continuous_usage_counts_tokens_so_far(shared_sim):
    """stream_options.continuous_usage_stats (openai/utils.py should_include_usage): every
    content chunk carries the running usage, so a client can tell how many tokens a
    multi-token (speculative) chunk brought; without it, content chunks carry none."""
    msgs = [{"role": "user", "content": "count"}]
    with httpx.stream("POST", shared_sim.url + "/v1/chat/completions", json={
            "messages": msgs, "max_tokens": 12, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True}}) as r:
        ev = sse_events(r)
    content = [e for e in ev[1:-2] if e["choices"][0]["delta"].get("content")]
    counts = [e["usage"]["completion_tokens"] for e in content]
    assert counts == sorted(counts) and counts[-1] == 12
    words = [len(e["choices"][0]["delta"]["content"].split()) for e in content]
    assert [b - a for a, b in zip([0] + counts, counts)] == words
    with httpx.stream("POST", shared_sim.url + "/v1/chat/completions", json={
            "messages": msgs, "max_tokens": 4, "ignore_eos": True, "stream": True}) as r:
        plain = sse_events(r)
    assert all("usage" not in e for e in plain[:-1])


def test_flush_metrics_ping_health(shared_sim):
    r = httpx.post(shared_sim.url + "/flush_cache")
    assert r.status_code == 200 and r.text.startswith("Cache flushed")
    assert httpx.get(shared_sim.url + "/ping").status_code == 200
    assert httpx.get(shared_sim.url + "/health").status_code == 200
    assert httpx.get(shared_sim.url + "/health_generate").status_code == 200
    text = httpx.get(shared_sim.url + "/metrics").text
    for name in ("sglang:spec_accept_length", "sglang:spec_accept_rate", "sglang:num_running_reqs",
                 "sglang:gen_throughput", "sglang:prompt_tokens_total",
                 "sglang:generation_tokens_total", "sglang:spec_verify_calls_total"):
        assert f"\n{name}{{" in "\n" + text
    assert "spec_verify_steps_total" not in text and "spec_accepted_tokens_total" not in text


def test_metrics_404_without_flag(start_sim):
    p = start_sim("--model-path", "m")
    p.wait_ready()
    assert httpx.get(p.url + "/metrics").status_code == 404
    # no speculation: no avg_spec_accept_length, no spec_verify_ct
    info = httpx.get(p.url + "/server_info").json()
    assert "avg_spec_accept_length" not in info["internal_states"][0]
    assert info["max_running_requests"] != 48
    mi = httpx.post(p.url + "/generate", json={"text": "a", "sampling_params": {
        "max_new_tokens": 2}}).json()["meta_info"]
    assert "spec_verify_ct" not in mi


def test_decode_log_line(shared_sim):
    httpx.post(shared_sim.url + "/generate", json={
        "text": "long run", "sampling_params": {"max_new_tokens": 200, "ignore_eos": True}},
        timeout=30)
    log = shared_sim.log()
    assert "Decode batch, #running-req: 1, #token: " in log
    assert "accept len: " in log and "gen throughput (token/s): " in log and "#queue-req: 0" in log


def _counters(url: str) -> dict:
    from specc.run.acceptance import prometheus_values
    return prometheus_values(httpx.get(url + "/metrics").text)


def test_counters_move_when_a_request_finishes(shared_sim):
    """0.5.23 metrics_collector: generation tokens and verify calls are counted at finish,
    not while a request streams. The streaming request is far too long to finish while the
    test looks (minutes of simulated decode), however late a busy machine lets it look."""
    before = _counters(shared_sim.url)
    with httpx.stream("POST", shared_sim.url + "/generate", json={
            "text": "count me", "stream": True,
            "sampling_params": {"max_new_tokens": 60000, "ignore_eos": True}}) as r:
        first = next(ln for ln in r.iter_lines() if ln.startswith("data: "))
        assert json.loads(first[6:])["meta_info"]["completion_tokens"] >= 1
        mid = _counters(shared_sim.url)            # tokens streamed, request not finished
        assert mid.get("sglang:generation_tokens_total") == before.get(
            "sglang:generation_tokens_total")
    # the client went away: the request is aborted, never finished, so never counted
    before = _counters(shared_sim.url)
    meta = httpx.post(shared_sim.url + "/generate", json={
        "text": "count me", "sampling_params": {"max_new_tokens": 300, "ignore_eos": True}},
        timeout=60).json()["meta_info"]
    after = _counters(shared_sim.url)
    assert after["sglang:generation_tokens_total"] - before["sglang:generation_tokens_total"] == 300
    verify = after["sglang:spec_verify_calls_total"] - before.get(
        "sglang:spec_verify_calls_total", 0)
    assert verify == meta["spec_verify_ct"]


def test_avg_accept_length_folds_every_40_decode_iterations(start_sim):
    """internal_states[0].avg_spec_accept_length appears only once 40 decode iterations
    ran (warm-up: 7), and the gauge is that window's figure."""
    from .conftest import SPEC_ARGS
    p = start_sim(*SPEC_ARGS, "--enable-metrics")
    p.wait_ready()
    st = httpx.get(p.url + "/server_info").json()["internal_states"][0]
    assert "avg_spec_accept_length" not in st
    assert _counters(p.url)["sglang:spec_accept_length"] == 0.0
    httpx.post(p.url + "/generate", json={"text": "go", "sampling_params": {
        "max_new_tokens": 200, "ignore_eos": True}}, timeout=30)
    st = httpx.get(p.url + "/server_info").json()["internal_states"][0]
    avg = st["avg_spec_accept_length"]
    decode_lines = [ln for ln in p.log().splitlines() if "Decode batch, " in ln]
    assert decode_lines                         # at least one 40-iteration window logged
    windows = [float(ln.split("accept len: ")[1].split(",")[0]) for ln in decode_lines]
    assert abs(_counters(p.url)["sglang:spec_accept_length"] - windows[-1]) < 0.006
    assert 1.0 <= avg <= 4.0


def test_get_endpoints_deprecated_with_a_log_line_per_call(shared_sim):
    before = shared_sim.log().count("Endpoint '/get_server_info' is deprecated")
    for _ in range(2):
        assert httpx.get(shared_sim.url + "/get_server_info").status_code == 200
    assert httpx.get(shared_sim.url + "/server_info").status_code == 200
    httpx.get(shared_sim.url + "/get_model_info")
    log = shared_sim.log()
    assert log.count("Endpoint '/get_server_info' is deprecated and will be removed in a future "
                     "version. Please use '/server_info' instead.") == before + 2
    assert "Endpoint '/get_model_info' is deprecated" in log


def test_health_generate_runs_a_generation(shared_sim, tmp_path):
    """0.5.23: the check submits a 1-token request and polls once a second; the
    health request itself shows as a prefill batch, and counts in no counter."""
    before = _counters(shared_sim.url)
    n = shared_sim.log().count("Prefill batch, ")
    assert httpx.get(shared_sim.url + "/health_generate", timeout=30).status_code == 200
    assert shared_sim.log().count("Prefill batch, ") == n + 1
    assert _counters(shared_sim.url).get("sglang:num_requests_total") == before.get(
        "sglang:num_requests_total")


def test_the_health_poll_is_sglangs_second_unless_shortened(monkeypatch):
    """0.5.23 looks for the check's output once a second; $SPECC_SIM_HEALTH_POLL_S (set by
    tests/conftest.py for the suite's servers) looks more often, never less often, and a
    value that is not a number in (0, 1] leaves SGLang's second."""
    from specc.sim import http

    monkeypatch.delenv(http.HEALTH_POLL_ENV, raising=False)
    assert http.health_poll_s() == http.HEALTH_POLL_S == 1.0
    for value, want in [("0.02", 0.02), ("1", 1.0), ("5", 1.0), ("0", 1.0), ("-0.5", 1.0),
                        ("nan", 1.0), ("inf", 1.0), ("abc", 1.0), ("", 1.0)]:
        monkeypatch.setenv(http.HEALTH_POLL_ENV, value)
        assert http.health_poll_s() == want, value
