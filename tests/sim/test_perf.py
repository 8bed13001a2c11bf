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
    """The scenario's figure: Kimi-K2.5, TP 8, H200, one stream, no speculation, ~82 tok/s."""
    kimi = perf.model_cost(perf.KIMI_FACTS, tp=8, gpu="H200")
    assert perf.tokens_per_s_per_stream(kimi, 1) == pytest.approx(82.0, rel=0.05)
    assert perf.decode_step_s(kimi, 1) == pytest.approx(0.0122, abs=0.0006)
    # the default calibration is the H200's
    assert perf.tokens_per_s_per_stream(perf.model_cost(perf.KIMI_FACTS, tp=8), 1) == \
        pytest.approx(perf.tokens_per_s_per_stream(kimi, 1))


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
    s1, s16, s128, s512 = (perf.speedup(kimi, b, spec, draft) for b in (1, 16, 128, 512))
    assert s1 > 1.5
    # not monotone on an MoE: the verify pass touches many more experts than the
    # baseline step at ~16 streams; past ~128 both touch all of them and the extra
    # tokens cost compute only, which catches up at large batches
    assert s1 > s16 and s1 > s128 > s512
    dense = perf.model_cost({"weight_gb": 16, "active_params_b": 8, "num_hidden_layers": 32}, tp=1)
    d1, d256 = (perf.speedup(dense, b, spec, draft) for b in (1, 256))
    assert d1 > d256


# --- calibration files ----------------------------------------------------------
from specc.perf import hardware  # noqa: E402

MEASURED = [k for k in hardware.available_kinds() if hardware.calibration(k).measurements]


def test_calibration_files_exist_for_the_hardware_configs():
    from pathlib import Path

    import yaml

    conf = Path(__file__).resolve().parents[2] / "conf" / "hardware"
    files = sorted(conf.glob("*.yaml"))
    assert files, f"no hardware configs in {conf}"
    for f in files:
        gpu = yaml.safe_load(f.read_text())["gpu"]
        hw = hardware.calibration(gpu)
        assert hw.fallback_for is None, f"{f.name}: no calibration file for {gpu}"
        assert hw.kind == hardware.kind_of(gpu)
    assert "h200" in MEASURED


@pytest.mark.parametrize("kind", hardware.available_kinds())
def test_every_constant_names_its_source(kind):
    hw = hardware.calibration(kind)
    assert hw.constants
    for key, c in hw.constants.items():
        src = c.get("source") or ""
        assert src.startswith(("measured on ", "datasheet", "calibrated to scenario", "derived")), \
            f"{kind}.{key}: source {src!r}"
        assert "unit" in c, f"{kind}.{key} has no unit"
        if src.startswith("measured on "):
            assert hw.date and hw.date in src, f"{kind}.{key}: measured without the file's date"


@pytest.mark.parametrize("kind", MEASURED)
def test_model_reproduces_the_measured_tables(kind):
    """Dense (1-1024 tokens per step), MoE layer and draft-layer tables within 15 %."""
    hw = hardware.calibration(kind)
    tables = perf.model_vs_measurement(hw)
    assert {"dense", "moe"} <= set(tables)
    assert [r["tokens"] for r in tables["dense"]] == [1, 8, 64, 128, 256, 512, 1024]
    for name, rows in tables.items():
        for r in rows:
            assert abs(r["error"]) <= 0.15, (
                f"{kind} {name} at {r['tokens']} tokens: model {r['model_s'] * 1e3:.3f} ms vs "
                f"measured {r['measured_s'] * 1e3:.3f} ms")


def test_h100_is_derived_from_the_h200_by_datasheet_ratios():
    h200, h100 = hardware.calibration("H200"), hardware.calibration("NVIDIA H100 80GB HBM3")
    assert h100.kind == "h100" and h100.fallback_for is None
    ratio = h100.value("hbm_peak_Bps") / h200.value("hbm_peak_Bps")
    assert ratio == pytest.approx(3.35 / 4.8)
    for key in ("hbm_bw_dense_Bps", "hbm_bw_moe_Bps", "attn_kv_bw_Bps"):
        assert h100.value(key) == pytest.approx(h200.value(key) * ratio)
    assert h100.gemm_flops_table == h200.gemm_flops_table   # same bf16 peak
    assert h100.value("allreduce_latency_tp8_s") == h200.value("allreduce_latency_tp8_s")
    facts = {"weight_gb": 16.1, "active_params_b": 8, "num_hidden_layers": 32}
    l200, l100 = (perf.model_cost(facts, tp=1, gpu=g) for g in ("H200", "H100"))
    # memory-bound decode: slower by about the bandwidth ratio; compute-bound: the same
    assert l100.gemm_s(1) / l200.gemm_s(1) == pytest.approx(1 / ratio, rel=0.1)
    assert l100.gemm_s(1024) / l200.gemm_s(1024) < 1.1
    kimi200, kimi100 = (perf.model_cost(perf.KIMI_FACTS, tp=8, gpu=g) for g in ("H200", "H100"))
    assert perf.decode_step_s(kimi100, 1) > perf.decode_step_s(kimi200, 1)


def test_unknown_gpu_falls_back_to_the_default_calibration():
    hw = hardware.calibration("MI300X")
    assert hw.kind == hardware.DEFAULT_KIND and hw.fallback_for == "mi300x"
    assert hardware.kind_of("NVIDIA H200") == hardware.kind_of("h200") == "h200"


def test_allreduce_latency_by_tp():
    hw = hardware.calibration("H200")
    lat = [perf.allreduce_latency_s(hw, tp) for tp in (1, 2, 4, 8)]
    assert lat[0] == 0.0
    assert lat[1] == hw.value("allreduce_latency_tp2_s")        # measured
    assert lat[3] == hw.value("allreduce_latency_tp8_s")        # calibrated
    assert lat == sorted(lat)


def test_calibrate_tp8_reproduces_the_committed_constant():
    import json

    hw = hardware.calibration("H200")
    raw = json.loads(open(hw.path).read())
    solved = perf.calibrate_tp8(raw)["allreduce_latency_tp8_s"]
    assert solved["value"] == pytest.approx(hw.value("allreduce_latency_tp8_s"), rel=1e-6)
    assert solved["source"].startswith("calibrated to scenario 82 tok/s")


def test_attention_grows_with_context_and_sequences_not_draft_tokens():
    kimi = perf.model_cost(perf.KIMI_FACTS, tp=8)
    assert kimi.step_s(1, context=32768) > kimi.step_s(1, context=1024)
    # a verify pass of 4 tokens of one sequence reads the KV cache once
    assert kimi.step_s(4, seqs=1) < kimi.step_s(4, seqs=4)
    assert perf.decode_step_s(kimi, 1, context=100_000) > perf.decode_step_s(kimi, 1)


def test_committed_constants_are_derived_from_the_committed_tables():
    """No hand-set number: the benchmark's own derivation, rerun on the measured tables of
    each measured file (``gpu_calibrate.py --derive-only``), gives the committed constants."""
    import copy
    import importlib.util
    import json
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_calibrate.py"
    spec = importlib.util.spec_from_file_location("gpu_calibrate", script)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)     # imports no torch at module level
    for kind in MEASURED:
        hw = hardware.calibration(kind)
        raw = json.loads(Path(hw.path).read_text())
        derived = mod.derive(copy.deepcopy(raw))
        if "allreduce_latency_tp8_s" not in derived:     # not measured: calibrated
            derived.update(perf.calibrate_tp8({**raw, "constants": derived}))
        assert derived.keys() == raw["constants"].keys()
        for key, c in derived.items():
            want = raw["constants"][key]["value"]
            if isinstance(want, list):
                assert [x for row in c["value"] for x in row] == pytest.approx(
                    [x for row in want for x in row], rel=1e-9), key
            else:
                assert c["value"] == pytest.approx(want, rel=1e-9), key
            assert c["source"] == raw["constants"][key]["source"], key
        # and the H100 file is the H200 one scaled by the datasheet
        if kind == "h200":
            scaled = mod.scale_to(raw, "H100")
            committed = json.loads(Path(hardware.calibration("h100").path).read_text())
            assert scaled["constants"] == committed["constants"]
