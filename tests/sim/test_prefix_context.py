"""The simulator's prefix cache and its acceptance by context: what a client and the truth
log see (issue 21 item 6)."""

from __future__ import annotations

import json
import re

import httpx

from specc.perf.model import CONTEXT_ACCEPTANCE, context_acceptance_factor
from specc.sim.prefix import PrefixCache, chain
from .conftest import SPEC_ARGS


def test_prefix_cache_matches_the_longest_cached_prefix_and_stays_bounded():
    c = PrefixCache(capacity_tokens=8)
    a = chain("a b c d e".split())
    c.insert(a)
    assert c.match(chain("a b c x".split()), limit=10) == 3
    assert c.match(a, limit=4) == 4          # at most all but the last prompt token
    assert c.match(chain("z a b".split()), limit=10) == 0
    c.insert(chain("p q r s t u".split()))   # 11 prefixes > 8: the oldest longest go first
    assert len(c) == 8
    assert c.match(a, limit=10) == 2         # "a b" kept, "a b c" onwards evicted (leaves first)
    c.reset()
    assert c.match(a, limit=10) == 0
    assert PrefixCache(100, enabled=False).capacity == 0


def test_acceptance_factor_follows_the_published_curve():
    assert context_acceptance_factor(100) == context_acceptance_factor(2048) == 1.0
    xs = [1024 * k for k in range(1, 24)]
    fs = [context_acceptance_factor(x) for x in xs]
    assert all(a >= b for a, b in zip(fs, fs[1:]))        # never rises with context
    for x, f in CONTEXT_ACCEPTANCE:
        assert abs(context_acceptance_factor(x) - f) < 1e-9
    # speculators PR #684: (accept length - 1) at 8k over 2k's = 0.687 / 1.295
    assert abs(context_acceptance_factor(8192) - 0.687 / 1.295) < 0.005


def _gen(url: str, text: str, n: int = 16, **extra) -> dict:
    body = {"text": text, "sampling_params": {"max_new_tokens": n, "ignore_eos": True}, **extra}
    r = httpx.post(url + "/generate", json=body, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def _prefills(log: str) -> list[tuple[int, int]]:
    return [(int(a), int(b)) for a, b in
            re.findall(r"#new-token: (\d+), #cached-token: (\d+)", log)]


def test_a_repeated_prompt_is_not_prefilled_again_until_the_cache_is_flushed(start_sim):
    sim = start_sim("--model-path", "sim/llama")
    sim.wait_ready()
    text = " ".join(f"w{i}" for i in range(3000))
    out = _gen(sim.url, text)
    first = out["meta_info"]
    second = _gen(sim.url, text)["meta_info"]
    assert (first["cached_tokens"], second["cached_tokens"]) == (0, 2999)
    # the server's own log: the second prefill computed one token, not 3000
    assert _prefills(sim.log())[-2:] == [(3000, 0), (1, 2999)]
    longer = _gen(sim.url, text + out["text"] + " more words here")["meta_info"]
    assert longer["cached_tokens"] == 3000 + 16     # the prompt and its answer were cached
    assert httpx.post(sim.url + "/flush_cache").status_code == 200
    assert _gen(sim.url, text)["meta_info"]["cached_tokens"] == 0


def test_cache_report_in_openai_usage_only_when_enabled(start_sim):
    body = {"model": "m", "max_tokens": 4, "ignore_eos": True,
            "messages": [{"role": "user", "content": "one two three four five"}]}
    plain = start_sim("--model-path", "sim/llama")
    report = start_sim("--model-path", "sim/llama", "--enable-cache-report")
    off = start_sim("--model-path", "sim/llama", "--enable-cache-report", "--disable-radix-cache")
    for s in (plain, report, off):
        s.wait_ready()
    for _ in range(2):
        u_plain = httpx.post(plain.url + "/v1/chat/completions", json=body).json()["usage"]
        u_rep = httpx.post(report.url + "/v1/chat/completions", json=body).json()["usage"]
        u_off = httpx.post(off.url + "/v1/chat/completions", json=body).json()["usage"]
    assert u_plain["prompt_tokens_details"] is None
    assert u_rep["prompt_tokens_details"] == {"cached_tokens": 4}
    assert u_off["prompt_tokens_details"] == {"cached_tokens": 0}


def test_next_turn_hits_the_cache_with_the_first_turns_answer_and_truth_keeps_the_history(
        start_sim, tmp_path):
    truth = tmp_path / "truth.jsonl"
    sim = start_sim("--model-path", "sim/llama", env={"SPECC_SIM_TRUTH": str(truth)})
    sim.wait_ready()
    user1 = "tell me about the sea " * 20
    msgs = [{"role": "user", "content": user1}]
    r1 = httpx.post(sim.url + "/v1/chat/completions", json={
        "model": "m", "max_tokens": 12, "ignore_eos": True, "messages": msgs}).json()
    answer = r1["choices"][0]["message"]["content"]
    msgs2 = msgs + [{"role": "assistant", "content": answer},
                    {"role": "user", "content": "and the mountains?"}]
    body = {"model": "m", "max_tokens": 12, "ignore_eos": True, "messages": msgs2,
            "stream": True}
    with httpx.stream("POST", sim.url + "/v1/chat/completions", json=body) as r:
        assert r.status_code == 200
        r.read()
    httpx.post(sim.url + "/flush_cache")   # the truth log is flushed within 100 ms
    sim.wait_log("Cache flushed successfully!")
    import time
    deadline = time.monotonic() + 5
    events = []
    while time.monotonic() < deadline:
        events = [json.loads(x) for x in truth.read_text().splitlines()] if truth.exists() else []
        if sum(e["event"] == "admit" for e in events) >= 2:
            break
        time.sleep(0.05)
    reqs = [e for e in events if e["event"] == "request"]
    admits = [e for e in events if e["event"] == "admit"]
    assert reqs[1]["history"] == msgs2                       # the whole conversation so far
    assert reqs[1]["prompt_tokens"] == reqs[0]["prompt_tokens"] + 12 + 3
    assert reqs[0]["arrival"] <= reqs[0]["t"] and reqs[1]["arrival"] >= reqs[0]["t"]
    # turn 2 prefilled only its new words: turn 1's prompt and answer were cached
    assert admits[1]["cached_tokens"] == reqs[0]["prompt_tokens"] + 12


def test_a_draft_accepts_less_at_long_context(start_sim):
    sim = start_sim(*SPEC_ARGS, "--disable-radix-cache")
    sim.wait_ready()

    def accept(words: int, seed: int) -> float:
        text = " ".join(f"x{seed}_{i}" for i in range(words))
        m = _gen(sim.url, text, n=100)["meta_info"]
        return m["completion_tokens"], m["spec_verify_ct"]

    short = [accept(200, s) for s in range(2)]
    long = [accept(12000, s) for s in range(2)]
    length = lambda xs: sum(t for t, _ in xs) / sum(v for _, v in xs)   # noqa: E731
    # factor 0.22 at 12k tokens: a 3-step chain's 2.5 tokens a step falls to ~1.2
    assert length(short) > 2.0 and length(long) < 1.5
