import random

import pytest

from specc.perf import model as perf


def test_chain_closed_form():
    assert perf.chain_accept_length(0.5, 3) == pytest.approx(1.875)
    assert perf.expected_accept_length(0.5, 3, 1, 4) == pytest.approx(1.875)
    assert perf.chain_accept_length(0.0, 5) == 1.0
    assert perf.chain_accept_length(1.0, 5) == 6.0


def test_tree_approximation_bounds():
    a, k = 0.6, 3
    chain = perf.expected_accept_length(a, k, 1, k + 1)
    t2 = perf.expected_accept_length(a, k, 2, 8)
    t4 = perf.expected_accept_length(a, k, 4, 8)
    assert chain < t2 < t4 <= k + 1
    # more draft tokens never hurts, and the budget limits the depth
    assert perf.expected_accept_length(a, 5, 4, 3) < perf.expected_accept_length(a, 5, 4, 8)
    assert perf.expected_accept_length(0.99, 5, 8, 64) <= 6


def test_sampling_converges_to_formula():
    rng = random.Random(1)
    n = 40000
    mean = sum(perf.sample_accept(rng, 0.5, 3) for _ in range(n)) / n
    assert mean == pytest.approx(1.875, abs=0.02)


def test_kimi_tp8_calibration():
    kimi = perf.model_cost(perf.KIMI_FACTS, tp=8)
    assert perf.tokens_per_s_per_stream(kimi, 1) == pytest.approx(82.0, rel=0.02)
    assert perf.decode_step_s(kimi, 1) == pytest.approx(0.0122, abs=0.0003)


def test_step_time_grows_with_batch_memory_then_compute():
    kimi = perf.model_cost(perf.KIMI_FACTS, tp=8)
    times = [perf.decode_step_s(kimi, b) for b in (1, 2, 8, 32, 128, 512)]
    assert times == sorted(times)
    # small batch: memory-bound; large: compute-bound
    assert kimi.mem_s(1) > kimi.compute_s(1)
    assert kimi.compute_s(4096) > kimi.mem_s(4096)
    # aggregate throughput still grows with batch (that is what batching buys)
    assert 128 / perf.decode_step_s(kimi, 128) > 8 / perf.decode_step_s(kimi, 8)


def test_speculation_speedup_shrinks_with_concurrency():
    kimi = perf.model_cost(perf.KIMI_FACTS, tp=8)
    draft = perf.draft_cost({"weight_gb": 6, "active_params_b": 3, "num_hidden_layers": 1}, tp=8)
    spec = perf.SpecConfig(3, 1, 4, 0.7)
    s1, s16, s128 = (perf.speedup(kimi, b, spec, draft) for b in (1, 16, 128))
    assert s1 > 1.5
    assert s1 > s16 > s128
    dense = perf.model_cost({"weight_gb": 16, "active_params_b": 8, "num_hidden_layers": 32}, tp=1)
    d1, d256 = (perf.speedup(dense, b, spec, draft) for b in (1, 256))
    assert d1 > d256
