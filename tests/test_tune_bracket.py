"""The SLO bracket as a pure state machine (specc/tune/bracket.py): fed fake probe
verdicts, it doubles, bisects, stops at the stated precision, retries an undecided
probe and then reports it undecided, and says so at both ends of the load range."""

from __future__ import annotations

import random

import pytest

from specc import stats
from specc.tune import bracket as B

LADDER = [1, 8, 32, 128]


def run(capacity, *, ladder=LADDER, precision=0.1, undecided=lambda at, tries: False,
        short=(), **kw):
    """Drive a bracket against a server whose statistic meets the limit up to `capacity`
    (`undecided(at, tries)`: that probe straddles); returns (result, probes asked)."""
    b = B.Bracket("p99_ttft_ms", 200.0, precision=precision, **kw)
    for a in ladder:   # `short`: ladder points too short to decide
        b.observe(B.Probe(float(a), B.UNDECIDED if a in short else
                          B.MEETS if a <= capacity else B.FAILS, n=16, extra=False,
                          short=a in short))
    asked = []
    while isinstance(step := b.next(), B.Next):
        asked.append((step.at, step.requests))
        tries = sum(p.at == step.at for p in b.probes)
        verdict = (B.UNDECIDED if undecided(step.at, tries) else
                   B.MEETS if step.at <= capacity else B.FAILS)
        b.observe(B.Probe(step.at, verdict, n=max(step.requests, 600),
                          why="straddles" if verdict == B.UNDECIDED else ""))
        assert len(asked) < 100
    return step.result, asked


def test_bisects_between_ladder_points_to_the_stated_precision():
    res, asked = run(45)
    assert res["status"] == "precise"
    cap, fails = res["capacity"], res["fails"]
    assert cap <= 45 < fails and (fails - cap) / cap <= 0.1
    assert all(32 < at < 128 for at, _ in asked)   # only inside the ladder gap
    assert len(asked) <= B.most_probes(LADDER, 0.1)


def test_a_looser_precision_stops_sooner():
    tight, asked_tight = run(45, precision=0.02)
    loose, asked_loose = run(45, precision=0.5)
    assert len(asked_loose) < len(asked_tight)
    # exact to one request of concurrency where 2% is less than one
    assert tight["fails"] - tight["capacity"] == 1 and tight["capacity"] == 45
    assert (loose["fails"] - loose["capacity"]) / loose["capacity"] <= 0.5


def test_doubles_past_the_top_of_the_ladder_then_bisects():
    res, asked = run(300)
    assert [at for at, _ in asked][:2] == [256.0, 512.0]
    assert res["status"] == "precise" and res["capacity"] <= 300 < res["fails"]


def test_meets_at_the_most_it_may_probe():
    res, asked = run(10 ** 6)
    assert [at for at, _ in asked] == [256.0, 512.0, 1024.0]   # 2**MAX_DOUBLINGS x the top
    assert res["status"] == "meets at the most probed" and res["capacity"] == 1024
    assert res["fails"] is None and "at least" in res["text"]


def test_never_meets_at_concurrency_one():
    res, asked = run(0, ladder=[8, 32])
    assert [at for at, _ in asked] == [4.0, 2.0, 1.0]   # halving below the ladder
    assert res["status"] == "never meets" and res["capacity"] is None
    assert res["fails"] == 1


def test_halving_below_the_ladder_then_bisecting():
    res, _ = run(5, ladder=[8, 32])
    assert res["capacity"] == 5 and res["fails"] == 6


def test_an_undecided_probe_is_retried_with_more_requests_then_reported_undecided():
    # at 80 the interval straddles the limit however many requests: never a pass
    res, asked = run(100, undecided=lambda at, tries: at == 80.0)
    assert (80.0, 0) in asked and (80.0, 1200) in asked   # again, with twice the requests
    assert res["status"] == "undecided" and res["capacity"] < 80
    assert res["upper"] == 80 and res["fails"] == 128   # 80 was not shown to fail
    assert 80 in res["undecided"] and "undecided after 2 probes" in res["text"]


def test_an_undecided_probe_that_decides_on_retry_counts():
    res, asked = run(100, undecided=lambda at, tries: at == 80.0 and tries == 0)
    assert asked.count((80.0, 1200)) == 1
    assert res["status"] == "precise" and res["capacity"] <= 100 < res["fails"]


def test_an_undecided_ladder_point_is_measured_again_first():
    b = B.Bracket("p99_ttft_ms", 200.0)
    b.observe(B.Probe(8.0, B.UNDECIDED, n=600, why="straddles", extra=False))
    b.observe(B.Probe(32.0, B.FAILS, n=16, extra=False))
    step = b.next()
    assert isinstance(step, B.Next) and (step.at, step.requests) == (8.0, 1200)


def test_ladder_points_too_short_for_the_percentile_are_not_a_try():
    # the ladder's 16 requests say nothing about a p99 meeting: each is measured with the
    # usual probe, the middle one first; a failure there makes those above it moot
    res, asked = run(20, short={1, 8, 32, 128})
    assert asked[0] == (32.0, 0) and 128.0 not in [at for at, _ in asked]
    assert res["status"] == "precise" and res["capacity"] <= 20 < res["fails"]


def test_the_most_probes_bound_holds_against_an_adversary():
    rng = random.Random(7)
    for precision in (0.05, 0.1, 0.3):
        most = B.most_probes(LADDER, precision)
        for _ in range(300):
            cap = rng.choice([0, 1, 2, 5, 9, 31, 33, 45, 100, 127, 129, 300, 900, 5000])
            bad = {float(x) for x in rng.sample(range(1, 1100), 40)}
            res, asked = run(cap, precision=precision,
                             undecided=lambda at, tries, bad=bad: at in bad
                             and rng.random() < 0.8,
                             short=set(rng.sample(LADDER, rng.randint(0, 4))))
            assert len(asked) <= most, (precision, cap, asked)


def test_a_rate_axis_bisects_in_real_numbers():
    b = B.Bracket("mean_ttft_ms", 200.0, integer=False, floor=0.25)
    for a in (2.0,):
        b.observe(B.Probe(a, B.MEETS, extra=False))
    steps = []
    while isinstance(step := b.next(), B.Next):
        steps.append(step.at)
        b.observe(B.Probe(step.at, B.MEETS if step.at <= 5.3 else B.FAILS))
    res = step.result
    assert res["load"] == "request_rate" and res["capacity"] <= 5.3 < res["fails"]
    assert (res["fails"] - res["capacity"]) / res["capacity"] <= 0.1
    assert len(steps) <= B.most_probes([2.0], 0.1, integer=False)


# -- a probe's verdict from its requests ----------------------------------------------
def test_too_few_requests_for_p99_is_undecided_never_a_pass():
    fast = [10.0] * 100   # far below the limit, but 100 requests cannot bound a p99
    p = B.judge("p99_ttft_ms", 200.0, 8, fast)
    assert p.verdict == B.UNDECIDED and "too few" in p.why
    assert B.judge("p99_ttft_ms", 200.0, 8, [10.0] * B.min_requests("p99_ttft_ms")).verdict \
        == B.MEETS
    assert not stats.quantile_upper_defined(B.min_requests("p99_ttft_ms") - 1, 0.99)
    # failing needs no upper bound: 100 slow requests decide it
    assert B.judge("p99_ttft_ms", 200.0, 8, [500.0] * 100).verdict == B.FAILS


def test_an_interval_straddling_the_limit_is_undecided():
    rng = random.Random(1)
    vals = [rng.uniform(150, 250) for _ in range(2000)]   # p99 ~249 with ~0.3 ms spread
    assert B.judge("p99_ttft_ms", 249.0, 8, vals).verdict == B.UNDECIDED
    assert B.judge("p99_ttft_ms", 300.0, 8, vals).verdict == B.MEETS
    assert B.judge("p99_ttft_ms", 240.0, 8, vals).verdict == B.FAILS
    m = B.judge("mean_ttft_ms", 200.0, 8, vals)   # the mean's bootstrap interval covers 200
    assert m.verdict == B.UNDECIDED and m.lo < 200.0 < m.hi


def test_a_failed_probe_is_undecided_with_its_reason():
    p = B.judge("p99_ttft_ms", 200.0, 8, [], failed="simulator fell behind its schedule")
    assert p.verdict == B.UNDECIDED and "fell behind" in p.why


# -- the figure --------------------------------------------------------------------------
def test_capacity_gain_has_an_interval_from_both_brackets():
    base = {"capacity": 40, "fails": 44, "load": "concurrency"}
    spec = {"capacity": 60, "fails": 64, "load": "concurrency"}
    g = B.capacity_gain(base, spec)
    assert g["adds_percent"] == 50.0
    assert g["interval"] == [round((60 / 43 - 1) * 100, 1), round((63 / 40 - 1) * 100, 1)]
    # an end not shown to fail is open
    assert B.capacity_gain(base, {**spec, "fails": None})["interval"][1] is None


def test_summary_says_what_speculation_adds():
    results = {"base": {"p99_ttft_ms": {"capacity": 40, "fails": 44, "text": "b",
                                        "load": "concurrency"}},
               "s1": {"p99_ttft_ms": {"capacity": 60, "fails": 64, "text": "s1"}},
               "s2": {"p99_ttft_ms": {"capacity": 50, "fails": 54, "text": "s2"}}}
    out = B.summary("p99_ttft_ms", 200.0, "base", results)
    assert out["speculative"]["server"] == "s1" and out["adds_percent"] == 50.0
    assert out["text"].startswith("speculation adds 50% [+39.5%, +57.5%] capacity")
    assert set(out["others"]) == {"s2"}
    none = B.summary("p99_ttft_ms", 200.0, "base",
                     {"base": {"p99_ttft_ms": {"capacity": None, "text": "b"}}})
    assert "no capacity figure" in none["text"] and "adds_percent" not in none


@pytest.mark.parametrize("key,q,metric", [("p99_ttft_ms", 0.99, "ttft"),
                                          ("median_tpot_ms", 0.5, "tpot"),
                                          ("mean_e2e_latency_ms", None, "e2e_latency")])
def test_key_parts(key, q, metric):
    assert B.quantile_of(key) == q and B.metric_of(key) == metric


def test_precision_bounds_match_the_schema():
    from specc.config.schema import SCHEMA

    prec = SCHEMA["properties"]["search"]["properties"]["precision"]
    assert (prec["minimum"], prec["maximum"]) == B.PRECISION_BOUNDS


def test_verdicts_that_are_not_monotone_are_said():
    # noise between probes: 128 meets on the ladder above the failing 32
    b = B.Bracket("p99_ttft_ms", 200.0)
    for a, v in ((1, B.MEETS), (8, B.MEETS), (32, B.FAILS), (128, B.MEETS)):
        b.observe(B.Probe(float(a), v, n=600, extra=False))
    while isinstance(step := b.next(), B.Next):
        b.observe(B.Probe(step.at, B.MEETS if step.at <= 20 else B.FAILS, n=600))
    res = step.result
    assert res["capacity"] <= 20 < res["fails"] <= 32   # the conservative reading
    assert res["not_monotone"] == [128] and "not monotone" in res["text"]
