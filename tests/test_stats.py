"""specc.stats: intervals that cover, paired speedups, ties, adaptive stopping."""

import math
import random

import pytest

from specc import stats
from specc.stats import Interval


def test_throughput_value_is_exactly_tokens_over_duration():
    tok = [128, 128, 64, 256]
    lat = [1.5, 1.4, 0.7, 3.0]
    iv = stats.throughput_interval(tok, lat, duration=2.2)
    assert iv.value == pytest.approx(sum(tok) / 2.2, rel=1e-12)
    assert iv.lo < iv.value < iv.hi and iv.n == 4


def test_speedup_value_is_the_throughput_ratio():
    rng = random.Random(1)
    base_lat = [rng.uniform(1.0, 2.0) for _ in range(50)]
    spec_lat = [x / rng.uniform(1.5, 2.5) for x in base_lat]
    tok = [128] * 50
    iv = stats.speedup_interval(tok, spec_lat, 40.0, tok, base_lat, 75.0)
    assert iv.value == pytest.approx((6400 / 40.0) / (6400 / 75.0), rel=1e-12)
    assert iv.unit == "pair" and iv.n == 50


def _coverage(make_interval, truth, trials=300, seed=0):
    rng = random.Random(seed)
    hits = sum(make_interval(rng).covers(truth) for _ in range(trials))
    return hits / trials


def test_mean_interval_covers_the_truth_about_95_percent():
    # exponential(1): skewed, like latencies; 60 requests
    cov = _coverage(lambda r: stats.mean_interval([r.expovariate(1.0) for _ in range(60)],
                                                  seed=r.randrange(10**6), resamples=1000), 1.0)
    assert 0.89 <= cov <= 0.99, cov


def test_paired_speedup_interval_covers_and_is_narrower_than_unpaired():
    """Prompt difficulty varies a lot; the speculative server is exactly 1.5x on every prompt
    with small noise: pairing removes the prompt variation."""
    def make(r):
        work = [r.uniform(0.5, 4.0) for _ in range(40)]           # per-prompt base latency
        base = [w * r.uniform(0.97, 1.03) for w in work]
        spec = [w / 1.5 * r.uniform(0.97, 1.03) for w in work]
        tok = [100.0] * 40
        return stats.speedup_interval(tok, spec, sum(spec), tok, base, sum(base),
                                      seed=r.randrange(10**6), resamples=500), tok, spec, base
    cov = _coverage(lambda r: make(r)[0], 1.5, trials=200)
    assert cov >= 0.9, cov
    iv, tok, spec, base = make(random.Random(5))
    # unpaired: the two throughputs' intervals combined as independent
    a = stats.throughput_interval(tok, spec, sum(spec))
    b = stats.throughput_interval(tok, base, sum(base))
    unpaired_hw = math.hypot(a.half_width, b.half_width)
    assert iv.half_width < unpaired_hw / 4


def test_quantile_interval_covers_the_median():
    cov = _coverage(lambda r: stats.quantile_interval([r.gauss(10, 2) for _ in range(80)], 0.5),
                    10.0)
    assert 0.9 <= cov <= 1.0, cov


def test_quantile_interval_order_statistics_for_n_100():
    iv = stats.quantile_interval(list(range(1, 101)), 0.5)
    # the textbook 95% ranks for the median of 100 values are 40 and 61
    assert (iv.lo, iv.hi) == (40.0, 61.0)
    assert iv.value == 50.5


def test_fewer_than_two_units_has_no_interval():
    iv = stats.mean_interval([3.0])
    assert (iv.value, iv.lo, iv.hi, iv.half_width) == (3.0, None, None, None)
    assert stats.significance(iv) == "no interval"
    assert stats.fmt_speedup(Interval(1.3, None, None, 1)) == "1.30x"


def test_same_data_same_interval():
    rng = random.Random(3)
    v = [rng.random() for _ in range(30)]
    assert stats.mean_interval(v) == stats.mean_interval(v)
    assert stats.mean_interval(v, seed=1) != stats.mean_interval(v, seed=2)


def test_blocked_bootstrap_above_max_units_agrees_with_the_normal_interval():
    rng = random.Random(7)
    v = [rng.expovariate(1.0) for _ in range(20000)]
    iv = stats.mean_interval(v)
    assert iv.value == pytest.approx(sum(v) / len(v), rel=1e-12)
    mean = sum(v) / len(v)
    se = math.sqrt(sum((x - mean) ** 2 for x in v) / (len(v) - 1) / len(v))
    assert (iv.hi - iv.lo) / 2 == pytest.approx(1.96 * se, rel=0.15)
    assert iv.n == 20000


def test_significance_and_format():
    assert stats.significance(Interval(1.3, 1.24, 1.37, 80)) == "faster"
    assert stats.significance(Interval(0.9, 0.85, 0.95, 80)) == "slower"
    assert stats.significance(Interval(1.02, 0.98, 1.05, 80)) == "no significant difference"
    assert stats.fmt_speedup(Interval(1.3, 1.24, 1.37, 80)) == "1.30x [1.24, 1.37]"
    assert stats.fmt_speedup(Interval(1.02, 0.98, 1.05, 80)) == "1.02x [0.98, 1.05] n.s."


def test_ties_list_every_setting_whose_interval_overlaps_the_best():
    figs = {"s3k1": Interval(1.96, 1.90, 2.02, 80), "s1k4": Interval(1.90, 1.85, 1.95, 80),
            "s3k4": Interval(1.60, 1.55, 1.66, 80), "bad": None}
    best, tied = stats.ties(figs)
    assert best == "s3k1" and tied == ["s3k1", "s1k4"]
    best, tied = stats.ties(figs, higher_is_better=False)
    assert best == "s3k4" and tied == ["s3k4"]
    assert stats.ties({}) == (None, [])


def test_stop_decision():
    wide, tight = Interval(100, 90, 110, 32), Interval(100, 99, 101, 64)
    kw = dict(min_requests=16, max_requests=128)
    assert stats.stop_decision(tight, sent=8, target_ci=0.02, **kw) is None      # below min
    assert stats.stop_decision(wide, sent=16, target_ci=None, **kw) == "fixed"
    assert stats.stop_decision(wide, sent=32, target_ci=0.02, **kw) is None       # +-10%
    assert stats.stop_decision(tight, sent=64, target_ci=0.02, **kw) == "target"  # +-1%
    assert stats.stop_decision(wide, sent=128, target_ci=0.02, **kw) == "max"
    assert stats.stop_decision(None, sent=128, target_ci=0.02, **kw) == "max"


def test_requests_for():
    assert stats.requests_for(0.02, 0.2) == 385   # (1.96 * 0.2 / 0.02)^2
    with pytest.raises(ValueError):
        stats.requests_for(0, 0.2)


def test_bad_input():
    with pytest.raises(ValueError):
        stats.ratio_interval([1, 2], [1])
    with pytest.raises(ValueError):
        stats.mean_interval([])
    with pytest.raises(ValueError):
        stats.quantile_interval([1, 2], 1.5)


def _reqs(n, cats, lat_of, verify=None, id_of=None):
    return [{"i": i, "id": (id_of or (lambda i: f"p{i % 16}"))(i), "category": cats[i % len(cats)],
             "ok": True, "output_tokens": 100, "ttft": 0.05, "e2e_latency": lat_of(i),
             **({"verify_ct": verify(i)} if verify else {})} for i in range(n)]


def test_point_figures_speedup_categories_and_accept_length():
    cats = ["coding", "writing"]
    base = _reqs(64, cats, lambda i: 2.0 + 0.01 * (i % 7))
    # coding accepts more: 2.5x faster; writing 1.25x
    spec = _reqs(64, cats, lambda i: (2.0 + 0.01 * (i % 7)) / (2.5 if i % 2 == 0 else 1.25),
                 verify=lambda i: 25 if i % 2 == 0 else 60)
    b_dur = sum(r["e2e_latency"] for r in base) / 4
    s_dur = sum(r["e2e_latency"] for r in spec) / 4
    f = stats.point_figures(spec, s_dur, base=base, base_duration=b_dur)
    assert f["requests"] == 64 and f["output_tokens"] == 6400 and f["pairs"] == 64
    assert f["output_throughput"].value == pytest.approx(6400 / s_dur)
    assert f["speedup"].value == pytest.approx((6400 / s_dur) / (6400 / b_dur))
    assert f["accept_length"].value == pytest.approx(6400 / (32 * 25 + 32 * 60))
    c = f["categories"]
    assert c["coding"]["speedup"].value == pytest.approx(2.5)
    assert c["writing"]["speedup"].value == pytest.approx(1.25)
    assert c["coding"]["accept_length"].value == pytest.approx(4.0)
    assert c["coding"]["requests"] == 32 and c["coding"]["pairs"] == 32
    for name in ("mean_ttft_ms", "median_tpot_ms", "p99_e2e_latency_ms"):
        assert f[name].lo <= f[name].value <= f[name].hi


def test_pairs_need_the_same_prompt_at_the_same_position():
    base = _reqs(8, ["x"], lambda i: 1.0)
    other = _reqs(8, ["x"], lambda i: 0.5, id_of=lambda i: f"p{i}" if i < 4 else f"q{i}")
    f = stats.point_figures(other, 2.0, base=base, base_duration=4.0)
    assert f["pairs"] == 4
    # failed requests do not pair; a shuffled order pairs by position and prompt
    base[0]["ok"] = False
    shuffled = list(reversed(_reqs(8, ["x"], lambda i: 0.5)))
    assert stats.point_figures(shuffled, 2.0, base=base, base_duration=4.0)["pairs"] == 7


def test_repeats_are_the_units_when_more_than_one():
    reqs = [dict(r, repeat=k) for k in range(3) for r in _reqs(8, ["x"], lambda i: 1.0)]
    reps = [{"duration": d, "output_tokens": 800} for d in (2.0, 2.2, 1.9)]
    f = stats.point_figures(reqs, 6.1, repeats=reps)
    assert f["output_throughput"].unit == "repeat" and f["output_throughput"].n == 3
    assert f["output_throughput"].value == pytest.approx(2400 / 6.1)
