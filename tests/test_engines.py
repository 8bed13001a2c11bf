"""Engine adapters: acceptance length from two snapshots, labelled with its scope."""

from __future__ import annotations

import pytest

from specc.engines import get_engine
from specc.engines.base import prometheus_values


def test_sglang_run_scoped_accept_length_from_cumulative_average_and_token_counter():
    # before: 1000 tokens over 400 verify steps (avg 2.5); the run adds 900 tokens in 300 steps
    before = {"avg_spec_accept_length": 2.5, "generation_tokens_total": 1000}
    after = {"avg_spec_accept_length": 1900 / 700, "generation_tokens_total": 1900}
    value, scope = get_engine("sglang").accept_length(before, after)
    assert scope == "run" and value == pytest.approx(3.0, abs=1e-3)


def test_sglang_without_the_counter_reports_the_cumulative_figure_as_such():
    value, scope = get_engine("sglang").accept_length({}, {"avg_spec_accept_length": 2.41})
    assert (value, scope) == (2.41, "cumulative")
    assert get_engine("sglang").accept_length({}, {}) == (None, None)


def test_vllm_accept_length_is_one_plus_accepted_per_draft_over_the_run():
    before = {"num_drafts": 100, "num_accepted_tokens": 150}
    after = {"num_drafts": 300, "num_accepted_tokens": 450}
    assert get_engine("vllm").accept_length(before, after) == (2.5, "run")
    assert get_engine("vllm").accept_length(before, before) == (None, None)


def test_prometheus_text_sums_label_sets_and_skips_comments():
    text = ("# HELP vllm:spec_decode_num_drafts drafts\n"
            'vllm:spec_decode_num_drafts_total{model="m",engine="0"} 10\n'
            'vllm:spec_decode_num_drafts_total{model="m",engine="1"} 5\n'
            "sglang:generation_tokens_total 42.0\n")
    v = prometheus_values(text)
    assert v["vllm:spec_decode_num_drafts_total"] == 15
    assert v["sglang:generation_tokens_total"] == 42.0


def test_vllm_snapshot_reads_the_total_suffixed_counters(tmp_path):
    import asyncio

    class FakeResponse:   # the shape of an httpx response, for vLLM's /metrics text
        status_code = 200
        text = ('vllm:spec_decode_num_drafts_total{model_name="m"} 300.0\n'
                'vllm:spec_decode_num_accepted_tokens_total{model_name="m"} 450.0\n')

    class FakeClient:
        async def get(self, url, timeout):
            assert url.endswith("/metrics")
            return FakeResponse()

    snap = asyncio.run(get_engine("vllm").accept_snapshot(FakeClient(), "http://x"))
    assert snap == {"num_drafts": 300.0, "num_accepted_tokens": 450.0}
