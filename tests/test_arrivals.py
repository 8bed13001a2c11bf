"""Arrivals: the schedule (burstiness, ramp), trace replay, and the send times each request
records; the bad input refused at compile time; both shown on the simulator."""

from __future__ import annotations

import json
import random
import statistics

import pytest

from specc.compile.pipeline import compile_config
from specc.prompts import DatasetError
from specc.prompts import trace
from specc.run.loadgen.schedule import arrival_offsets

from executor_helpers import SMALL

ONE_SERVER = [*SMALL, "speculation=none", "benchmark.dataset=random"]


def _gaps(t):
    return [b - a for a, b in zip(t, t[1:])]


def _cv(t):
    g = _gaps(t)
    return statistics.pstdev(g) / statistics.mean(g)


# =========================================================================== the schedule

def test_the_schedule_is_seeded():
    a = arrival_offsets(50, 20, burstiness=0.25, ramp_s=2, seed=7)
    assert a == arrival_offsets(50, 20, burstiness=0.25, ramp_s=2, seed=7)
    assert a != arrival_offsets(50, 20, burstiness=0.25, ramp_s=2, seed=8)
    assert a[0] == 0.0 and a == sorted(a)


def test_burstiness_1_is_the_poisson_stream_specc_always_sent():
    rng = random.Random(3)
    expected, t = [], 0.0
    for _ in range(20):
        expected.append(t)
        t += rng.expovariate(40.0)
    assert arrival_offsets(20, 40.0, seed=3) == pytest.approx(expected)


@pytest.mark.parametrize("shape", [0.25, 1.0, 4.0])
def test_burstiness_sets_the_spread_and_keeps_the_rate(shape):
    t = arrival_offsets(20000, 20.0, burstiness=shape, seed=0)
    assert statistics.mean(_gaps(t)) == pytest.approx(1 / 20.0, rel=0.04)
    assert _cv(t) == pytest.approx(1 / shape ** 0.5, rel=0.05)


def test_a_ramp_rises_linearly_then_leaves_the_schedule_alone():
    rate, ramp = 200.0, 10.0
    flat = arrival_offsets(4000, rate, seed=1)
    ramped = arrival_offsets(4000, rate, ramp_s=ramp, seed=1)
    # expected arrivals by t: rate * t^2 / (2 ramp) during the ramp
    for t in (5.0, 10.0):
        n = sum(1 for x in ramped if x < t)
        assert n == pytest.approx(rate * t * t / (2 * ramp), rel=0.1), t
    # the first half-second at full rate is spread over the first 3.2 s
    assert sum(1 for x in ramped if x < 1.0) < sum(1 for x in flat if x < 1.0) / 5
    # after the ramp: the same gaps as without it, shifted by ramp/2
    tail = [(f, r) for f, r in zip(flat, ramped) if f >= ramp / 2]
    assert len(tail) > 3000 and all(r == pytest.approx(f + ramp / 2) for f, r in tail)


@pytest.mark.parametrize("kw", [{"burstiness": 0}, {"burstiness": -1}, {"ramp_s": -1}])
def test_the_schedule_refuses_what_compile_refuses(kw):
    with pytest.raises(ValueError):
        arrival_offsets(3, 10.0, **kw)


def test_closed_loop_has_everything_due_at_once():
    assert arrival_offsets(3, float("inf")) == [0.0, 0.0, 0.0]


# =========================================================================== bad input

def _errors(compose, *overrides):
    result = compile_config(compose([*ONE_SERVER, *overrides]))
    return [d for d in result.diagnostics if d.severity == "error"]


@pytest.mark.parametrize("overrides, code, path, says", [
    (["benchmark.request_rate=20", "benchmark.burstiness=0"], "BENCH_BURSTINESS",
     "benchmark.burstiness", "gamma shape"),
    (["benchmark.request_rate=20", "benchmark.burstiness=-0.5"], "BENCH_BURSTINESS",
     "benchmark.burstiness", "gamma shape"),
    (["benchmark.burstiness=0.25"], "BENCH_ARRIVALS", "benchmark.burstiness",
     "request_rate, which is null"),
    (["benchmark.ramp_s=30"], "BENCH_ARRIVALS", "benchmark.ramp_s", "request_rate, which is null"),
    (["benchmark.request_rate=20", "benchmark.ramp_s=-1"], "BENCH_RAMP", "benchmark.ramp_s",
     "negative"),
    (["benchmark.request_rate=20", "benchmark.concurrency=0"], "SCHEMA_MINIMUM",
     "benchmark.concurrency", "0 would send nothing, whatever benchmark.request_rate says"),
    (["benchmark.request_rate=20", "benchmark.burstiness=0.5", "benchmark.driver=bench_serving"],
     "BENCH_DRIVER_ARRIVALS", "benchmark.driver", "no burstiness or ramp"),
])
def test_bad_arrivals_are_one_error_each_with_a_fix(compose, overrides, code, path, says):
    (d,) = _errors(compose, *overrides)
    assert (d.code, d.path) == (code, path) and says in d.message and d.hint


def test_concurrency_0_in_a_sweep_says_the_same(compose):
    (d,) = _errors(compose, "benchmark.request_rate=20", "+sweep={benchmark.concurrency:[0,4]}")
    assert d.path == "sweep.benchmark.concurrency[0]" and "send nothing" in d.message


def test_a_rate_the_concurrency_cap_would_hold_back_is_a_warning(compose):
    result = compile_config(compose([*ONE_SERVER, "benchmark.request_rate=20"]))  # concurrency 1
    assert result.ok
    (d,) = [d for d in result.diagnostics if d.code == "BENCH_RATE_CAPPED"]
    assert (d.severity, d.path) == ("warning", "benchmark.concurrency")
    assert "1 in flight are reached as soon as requests take 0.05 s" in d.message
    assert "e.g. 200" in d.hint


def test_a_rate_with_its_shape_compiles(compose):
    assert _errors(compose, "benchmark.request_rate=20", "benchmark.burstiness=0.25",
                   "benchmark.ramp_s=5", "benchmark.concurrency=64") == []


def test_burstiness_0_exits_2_in_one_line_and_writes_no_plan(run_specc, tmp_path):
    code, out, err = run_specc([*ONE_SERVER, "benchmark.request_rate=20",
                                "benchmark.burstiness=0"], tmp_path)
    assert code == 2
    errors = [ln for ln in (out + err).splitlines() if ln.startswith("error ")]
    assert len(errors) == 1 and "BENCH_BURSTINESS at benchmark.burstiness" in errors[0]
    assert "fix: set benchmark.burstiness=1" in errors[0] and "Traceback" not in err
    assert not (tmp_path / "run" / "plan.json").exists()


# =========================================================================== traces

def _write(tmp_path, name, lines):
    path = tmp_path / name
    path.write_text("".join((json.dumps(x) if isinstance(x, dict) else x) + "\n"
                            for x in lines))
    return path


MOONCAKE = [{"timestamp": 0, "input_length": 700, "output_length": 12, "hash_ids": [1, 2]},
            {"timestamp": 250, "input_length": 600, "output_length": 9, "hash_ids": [1, 3]},
            {"timestamp": 250, "input_length": 40, "output_length": 5, "hash_ids": [4]},
            {"timestamp": 1500, "input_length": 30, "output_length": 7}]


def test_a_mooncake_trace_is_replayed_on_its_times_with_its_shared_blocks(tmp_path):
    prompts, due = trace.load(str(_write(tmp_path, "t.jsonl", MOONCAKE)), num=10)
    assert due == [0.0, 0.25, 0.25, 1.5]            # ms from the first row, in seconds
    assert [p.input_tokens for p in prompts] == [700, 600, 40, 30]
    assert [len(p.text.split()) for p in prompts] == [700, 600, 40, 30]
    assert [p.output_tokens for p in prompts] == [12, 9, 5, 7]
    words = [p.text.split() for p in prompts]
    assert words[0][:512] == words[1][:512]          # hash id 1: the same first block
    assert words[0][512:600] != words[1][512:600]    # then 2 and 3: different ones
    assert words[2][:40] != words[0][:40]


def test_num_prompts_takes_the_first_rows_and_never_replays_twice(tmp_path):
    path = str(_write(tmp_path, "t.jsonl", MOONCAKE))
    assert trace.load(path, num=2)[1] == [0.0, 0.25]
    assert len(trace.load(path, num=100)[0]) == 4 == trace.count(path)


def test_a_csv_trace_with_prompts(tmp_path):
    path = _write(tmp_path, "t.csv", ["timestamp,prompt,output_length",
                                      '1000,"hello, world",4', "1600,a b c,3"])
    prompts, due = trace.load(str(path), num=5)
    assert due == [0.0, 0.6] and prompts[0].text == "hello, world"
    assert [p.input_tokens for p in prompts] == [2, 3]


@pytest.mark.parametrize("lines, says", [
    ([MOONCAKE[1], MOONCAKE[0]], "t.jsonl:2: timestamp 0 ms is before line 1's (250 ms)"),
    ([{"timestamp": -5, "input_length": 3, "output_length": 2}], "t.jsonl:1: timestamp -5 is "
     "negative"),
    ([{"timestamp": 0, "output_length": 2}], "t.jsonl:1: 'input_length' must be a positive"),
    ([{"timestamp": "soon", "input_length": 3, "output_length": 2}], "t.jsonl:1: needs a numeric"),
    (["{not json"], "t.jsonl:1: bad JSON"),
    ([], "the trace has no requests"),
])
def test_a_bad_trace_names_its_line(tmp_path, lines, says):
    path = str(_write(tmp_path, "t.jsonl", lines))
    problems = trace.check(path)
    assert len(problems) == 1 and says in problems[0], problems
    with pytest.raises(DatasetError, match="t.jsonl"):
        trace.load(path, num=10)


def test_every_bad_line_is_listed_not_only_the_first(tmp_path):
    rows = [{"timestamp": t, "input_length": 3, "output_length": 2} for t in (5, 3, 4, 1, -1)]
    problems = trace.check(str(_write(tmp_path, "t.jsonl", rows)))
    # each against the last good one (5 ms): 3, 4 and 1 are before it, -1 negative
    assert [p.split(": ")[0].rsplit(":", 1)[1] for p in problems] == ["2", "3", "4", "5"]


def test_a_trace_over_the_context_is_refused(tmp_path):
    path = str(_write(tmp_path, "t.jsonl", [{"timestamp": 0, "input_length": 2000,
                                              "output_length": 100}]))
    assert "2100 tokens (input + output) are over the context length 2048" in \
        trace.check(path, context_length=2048)[0]


def test_an_out_of_order_trace_exits_2_with_its_file_and_line(run_specc, tmp_path):
    path = _write(tmp_path, "t.jsonl", [MOONCAKE[0], MOONCAKE[3], MOONCAKE[1]])
    code, out, err = run_specc([*SMALL, "speculation=none", "benchmark.dataset=trace",
                                f"benchmark.dataset_path={path}"], tmp_path)
    assert code == 2, err
    errors = [ln for ln in (out + err).splitlines() if ln.startswith("error ")]
    assert len(errors) == 1 and "BENCH_TRACE at benchmark.dataset_path" in errors[0]
    assert f"{path}:3: timestamp 250 ms is before" in errors[0] and "Traceback" not in err
    assert not (tmp_path / "run" / "plan.json").exists()


def test_a_trace_with_a_second_schedule_is_refused(compose, tmp_path):
    path = _write(tmp_path, "t.jsonl", MOONCAKE)
    (d,) = _errors(compose, "benchmark.dataset=trace", f"benchmark.dataset_path={path}",
                   "benchmark.request_rate=5")
    assert (d.code, d.path) == ("BENCH_ARRIVALS", "benchmark.request_rate")
    assert "own timestamps" in d.message


def test_a_trace_sets_the_points_size(compose, tmp_path):
    path = _write(tmp_path, "t.jsonl", MOONCAKE)
    cfg = compose([*SMALL, "speculation=none", "benchmark.dataset=trace",
                   f"benchmark.dataset_path={path}", "benchmark.num_prompts=null"])
    result = compile_config(cfg)
    assert result.ok, [d.line() for d in result.diagnostics]
    assert {b.params.num_prompts for b in result.plan.benchmarks} == {4}


# =========================================================================== on the simulator

def _lines(run_dir):
    (path,) = (run_dir / "requests").glob("*.jsonl")
    return [json.loads(ln) for ln in path.read_text().splitlines()]


@pytest.mark.timeout(180)
def test_bursty_arrivals_on_the_simulator(run_specc, tmp_path, guard):
    """20 requests/s at burstiness 0.25: the gaps' coefficient of variation is within 20% of
    2 (1/sqrt(0.25)) in the schedule each request records; when each was actually sent is
    recorded next to it (and reported by benchmarks/send_lateness.py)."""
    code, out, err = run_specc([*ONE_SERVER, f"engine.base_port={guard.port(1)}",
                                "benchmark.num_prompts=200", "benchmark.request_rate=20",
                                "benchmark.burstiness=0.25", "benchmark.concurrency=256",
                                "execute=true"], tmp_path, timeout=170)
    assert code == 0, err[-2000:]
    lines = _lines(tmp_path / "run")
    assert len(lines) == 200 and all(ln["ok"] for ln in lines)
    due = sorted(ln["sent_at_s"] - ln["lateness_s"] for ln in lines)
    assert due[0] == pytest.approx(0.0, abs=1e-5)
    assert _cv(due) == pytest.approx(2.0, rel=0.2)
    assert due == pytest.approx(arrival_offsets(200, 20, burstiness=0.25, seed=0), abs=1e-5)
    # never sent before it was due; the actual spread, for the record
    assert min(ln["lateness_s"] for ln in lines) >= -1e-6
    print(f"CV of the gaps: scheduled {_cv(due):.3f}, as sent "
          f"{_cv(sorted(ln['sent_at_s'] for ln in lines)):.3f}")


@pytest.mark.timeout(180)
def test_a_trace_replayed_on_the_simulator(run_specc, tmp_path, guard):
    rows = [{"timestamp": t, "input_length": 20, "output_length": 6} for t in
            (0, 100, 100, 400, 900)]
    path = _write(tmp_path, "t.jsonl", rows)
    code, out, err = run_specc([*SMALL, "speculation=none", f"engine.base_port={guard.port(1)}",
                                "benchmark.dataset=trace", f"benchmark.dataset_path={path}",
                                "benchmark.num_prompts=null", "benchmark.concurrency=16",
                                "execute=true"], tmp_path, timeout=170)
    assert code == 0, err[-2000:]
    lines = sorted(_lines(tmp_path / "run"), key=lambda ln: ln["i"])
    assert [ln["output_tokens"] for ln in lines] == [6] * 5
    due = [ln["sent_at_s"] - ln["lateness_s"] for ln in lines]
    assert due == pytest.approx([0.0, 0.1, 0.1, 0.4, 0.9], abs=1e-5)
    assert all(ln["lateness_s"] >= -1e-6 for ln in lines)
