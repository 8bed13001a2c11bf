"""Per-request records (requests/<id>.jsonl) and adaptive stopping (issue 10)."""

from __future__ import annotations

import random

from specc import requestlog as reqlog
from specc.prompts.datasets import load_prompts
from specc.run.loadgen.records import RequestRecord


def _rec(i, lat, start=None, ok=True, tokens=100):
    start = i * 0.01 if start is None else start
    return RequestRecord(ok=ok, output_tokens=tokens, e2e_latency=lat, start=start,
                         end=start + lat, index=i, ttft=0.01)


def test_stopper_stops_at_target_after_the_minimum():
    s = reqlog.Stopper(target_ci=0.05, min_requests=8, max_requests=100, batch=4)
    for i in range(7):
        assert s.keep_sending()
        s.on_done(_rec(i, 1.0 + 0.001 * (i % 3)))
    assert s.reason is None                  # below the minimum: no decision
    s.keep_sending()
    s.on_done(_rec(7, 1.0))
    assert s.reason == "target" and s.interval.half_width <= 0.05
    assert not s.keep_sending()              # nothing more is sent


def test_stopper_checks_once_per_batch_and_stops_at_max():
    rng = random.Random(0)
    s = reqlog.Stopper(target_ci=0.001, min_requests=4, max_requests=12, batch=4)
    reasons = []
    for i in range(12):
        s.keep_sending()
        s.on_done(_rec(i, rng.uniform(0.5, 3.0)))
        reasons.append(s.reason)
    assert reasons[:11] == [None] * 11 and reasons[11] == "max"


def test_fixed_sample_never_decides():
    s = reqlog.Stopper(target_ci=None, min_requests=4, max_requests=4, batch=1)
    for i in range(4):
        assert s.keep_sending()
        s.on_done(_rec(i, 1.0))
    assert s.reason is None


def test_lines_and_latest_attempt(tmp_path):
    prompts = load_prompts("specc", num=3, input_len=1, output_len=8)
    recs = [_rec(0, 1.0), _rec(2, 1.5, ok=False)]
    recs[1].error = "boom"
    first = reqlog.lines_for(recs, prompts, repeat=0, attempt=1.0)
    assert [(x["i"], x["id"], x["category"], x["ok"]) for x in first] == [
        (0, "writing-01", "writing", True), (2, "reasoning-01", "reasoning", False)]
    reqlog.append(tmp_path, "b1", first)
    second = reqlog.lines_for([_rec(0, 0.9)], prompts, repeat=0, attempt=2.0)
    reqlog.append(tmp_path, "b1", second)
    with open(reqlog.path_for(tmp_path, "b1"), "a") as f:
        f.write("not json\n")
    assert reqlog.read(tmp_path, "b1") == second      # a retried point: its latest attempt
    assert reqlog.read(tmp_path, "nope") == []
