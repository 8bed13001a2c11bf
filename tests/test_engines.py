"""Engine adapters state, at compile time, how the runtime reads acceptance and flushes the cache."""

from __future__ import annotations

from specc.compile.pipeline import compile_config


def _servers(overrides):
    from conftest import compose_config

    result = compile_config(compose_config(overrides))
    assert result.ok, [d.line() for d in result.diagnostics if d.severity == "error"]
    return result.plan.servers


LLAMA = ["model_pair=llama3_8b_eagle3", "hardware=h200x1", "model_pair.context_length=2048"]


def test_sglang_reads_verify_calls_and_falls_back_to_the_cumulative_average():
    spec = next(s for s in _servers(["+experiment=eagle3_sweep", "engine=sglang"]) if not s.baseline)
    assert spec.acceptance.run.denominator == "sglang:spec_verify_calls_total"
    assert spec.acceptance.run.offset == 0.0
    assert spec.acceptance.cumulative.scope == "cumulative"


def test_sglang_without_metrics_has_only_the_cumulative_figure():
    spec = next(s for s in _servers(["+experiment=eagle3_sweep", "engine=sglang",
                                     "engine.enable_metrics=false"]) if not s.baseline)
    assert spec.acceptance.run is None and spec.acceptance.cumulative is not None


def test_vllm_acceptance_is_one_plus_accepted_per_draft():
    spec = next(s for s in _servers([*LLAMA, "engine=vllm", "speculation=eagle3"])
                if not s.baseline)
    assert (spec.acceptance.run.numerator, spec.acceptance.run.denominator,
            spec.acceptance.run.offset) == ("vllm:spec_decode_num_accepted_tokens_total",
                                            "vllm:spec_decode_num_drafts_total", 1.0)
    assert spec.acceptance.cumulative is None


def test_vllm_flushes_the_prefix_cache_only_in_dev_mode_and_says_so_otherwise():
    (server,) = _servers([*LLAMA, "engine=vllm", "speculation=none"])
    assert server.cache_flush.path is None
    assert "VLLM_SERVER_DEV_MODE=1" in server.cache_flush.unavailable
    (server,) = _servers([*LLAMA, "engine=vllm", "speculation=none",
                          "+engine.env.VLLM_SERVER_DEV_MODE=1"])
    assert (server.cache_flush.method, server.cache_flush.path) == ("POST", "/reset_prefix_cache")


def test_a_baseline_has_no_acceptance_to_read():
    base = next(s for s in _servers(["+experiment=eagle3_sweep", "engine=sglang"]) if s.baseline)
    assert base.acceptance is None
