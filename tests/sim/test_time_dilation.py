"""Time dilation on the real simulator process: its route, and its truth log's deadlines.

`POST /specc_sim/time_dilation {"factor": s}` between points runs every modelled duration
s times slower (docs/simulator.md); the point runner divides what it measures by s. The
truth log's step deadlines say exactly what the schedule was: the same request's steps
are s times further apart, whatever the machine's load (deadlines are not delivery times).
"""

from __future__ import annotations

import json

import httpx
import pytest

PATH = "/specc_sim/time_dilation"


def _request(url: str, words: str) -> None:
    body = {"text": words, "sampling_params": {"max_new_tokens": 24, "ignore_eos": True}}
    r = httpx.post(url + "/generate", json=body, timeout=60)
    assert r.status_code == 200, r.text


def _decode_steps(truth: list[dict], since: float) -> list[float]:
    dues = [e["due"] for e in truth if e["event"] == "step" and e["t"] >= since
            and not e["prefill"]]
    return [b - a for a, b in zip(dues, dues[1:])]


def test_a_dilated_request_runs_its_steps_exactly_that_many_times_slower(start_sim, tmp_path):
    truth_path = tmp_path / "truth.jsonl"
    sim = start_sim("--model-path", "m", env={"SPECC_SIM_TRUTH": str(truth_path)})
    sim.wait_ready()
    assert httpx.get(sim.url + PATH).json() == {"factor": 1.0}
    _request(sim.url, "one two three four five six seven eight")
    r = httpx.post(sim.url + PATH, json={"factor": 3})
    assert r.status_code == 200 and r.json() == {"factor": 3.0}
    _request(sim.url, "alpha beta gamma delta epsilon zeta eta theta")   # same length
    for bad in ({"factor": 0.5}, {"factor": "3"}, {}):
        assert httpx.post(sim.url + PATH, json=bad).status_code == 400
    sim.stop()
    truth = [json.loads(x) for x in truth_path.read_text().splitlines()]
    (change,) = [e for e in truth if e["event"] == "time_dilation"]
    assert change["factor"] == 3.0
    before = [e for e in truth if e["event"] == "step" and e["t"] < change["t"]]
    real = _decode_steps(before, before[-23]["t"] - 1e-6)[-22:]
    slow = _decode_steps(truth, change["t"])
    assert len(slow) == len(real) == 22
    # the same modelled steps (same batch, same context), each exactly 3x on the clock
    # (epoch stamps in the log: ~1 us of float resolution)
    assert slow == pytest.approx([3 * d for d in real], abs=2e-6)
