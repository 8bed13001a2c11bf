"""The crossover refined between ladder points (specc/tune/crossover.py): fed fake paired
speedups, it bisects to the stated precision, retries a pair whose interval straddles 1.0
with twice the requests, then reports it undecided and never counts it either way."""

from __future__ import annotations

from specc.tune import crossover as X
from specc.tune.bracket import Done, Next


def run(true_crossover, *, lo=32, hi=128, precision=0.1, straddle=lambda at, tries: False):
    """Drive a refinement against a deployed command that pays below `true_crossover`
    (`straddle(at, tries)`: that pair's interval straddles 1.0); (result, loads asked)."""
    cx = X.Crossover(lo, hi, precision)
    asked = []
    while isinstance(step := cx.next(), Next):
        at = int(step.at)
        asked.append((at, step.requests))
        tries = sum(p.at == at for p in cx.pairs)
        n = step.requests or 64
        if straddle(at, tries):
            cx.observe(X.judge(at, 1.0, 0.97, 1.03, n))
        elif at < true_crossover:
            cx.observe(X.judge(at, 1.2, 1.1, 1.3, n))
        else:
            cx.observe(X.judge(at, 0.9, 0.85, 0.95, n))
        assert len(asked) < 50
    assert isinstance(step, Done)
    return step.result, asked


def test_judge_pays_only_above_one_at_95_percent():
    assert X.judge(8, 1.1, 1.01, 1.2, 64).verdict == X.PAYS
    assert X.judge(8, 0.9, 0.8, 0.99, 64).verdict == X.DOES_NOT_PAY
    straddles = X.judge(8, 1.05, 0.98, 1.12, 64)
    assert straddles.verdict == X.UNDECIDED and "straddles 1.0" in straddles.why
    assert X.judge(8, 1.5, 1.4, 1.6, 64, failed="server died").verdict == X.UNDECIDED
    assert X.judge(8, None, None, None, 0).verdict == X.UNDECIDED


def test_bisects_between_the_ladder_points_to_the_precision():
    res, asked = run(45)
    assert res["status"] == "precise"
    p, u = res["between"]
    assert p < 45 <= u and (u - p) / p <= 0.1 and res["concurrency"] == u
    assert all(32 < at < 128 for at, _ in asked)
    assert res["ladder"] == [32, 128] and res["pairs"] == len(asked)
    assert len(asked) <= X.most_pairs(32, 128, 0.1)
    assert "pays up to concurrency" in res["text"] and f"not at {u}" in res["text"]


def test_a_looser_precision_takes_fewer_pairs():
    _, tight = run(45, precision=0.02)
    _, loose = run(45, precision=0.5)
    assert len(loose) < len(tight)


def test_a_straddling_pair_is_measured_again_with_twice_the_requests():
    res, asked = run(45, straddle=lambda at, tries: at == 80 and tries == 0)
    assert asked[:2] == [(80, 0), (80, 128)]   # 64 requests the first time
    assert res["status"] == "precise"   # the retry decided it


def test_undecided_twice_bounds_from_above_and_is_never_counted():
    res, asked = run(45, straddle=lambda at, tries: at == 47)   # 80, 56, 44, 50, 47
    assert res["status"] == "undecided" and 47 in res["undecided"]
    assert res["between"] == [44, 47]
    assert "not shown to pay at 47" in res["text"]
    assert [a for a, _ in asked].count(47) == 2   # once, then once more, then no more
    # never counted as "does not pay": the crossover's upper bound is not a failing pair
    verdicts = {p["at"]: p["verdict"] for p in res["points"]}
    assert verdicts[47] == X.UNDECIDED


def test_the_worst_case_bound_covers_every_path():
    for true in range(33, 129, 7):
        _, asked = run(true, straddle=lambda at, tries: at % 3 == 0)
        assert len(asked) <= X.most_pairs(32, 128, 0.1)


def test_refinable_only_between_two_ladder_points_wider_than_the_precision():
    assert X.refinable({"concurrency": 128, "between": [32, 128]}, 0.1) == (32, 128)
    assert X.refinable({"concurrency": 1, "between": [None, 1]}, 0.1) is None
    assert X.refinable({"concurrency": None, "between": [128, None]}, 0.1) is None
    assert X.refinable({"concurrency": 9, "between": [8, 9]}, 0.1) is None   # one apart
    assert X.refinable(None, 0.1) is None


def test_unfinished_says_what_it_knew():
    cx = X.Crossover(8, 32, 0.1)
    step = cx.next()
    assert isinstance(step, Next) and step.at == 20
    cx.observe(X.judge(20, 1.2, 1.1, 1.3, 32))
    res = cx.result(unfinished="the server stopped")
    assert res["status"] == "unfinished" and res["between"] == [20, 32]
    assert "unfinished (the server stopped)" in res["text"]
