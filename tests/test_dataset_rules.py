"""Bad dataset and sample-size input is an exit-2 diagnostic at compile time (issue 10)."""

from __future__ import annotations

import json

from conftest import run_specc
from specc.compile.pipeline import compile_config

LLAMA = ["model_pair.context_length=2048"]


def _errors(compose, *overrides):
    c = compile_config(compose(LLAMA + list(overrides)))
    plan, diags = c.plan, c.diagnostics
    errs = [d for d in diags if d.severity == "error"]
    assert (plan is None) == bool(errs)
    return errs


def test_default_is_the_shipped_prompt_set_and_compiles(compose):
    cfg = compose(LLAMA)
    assert cfg["benchmark"]["dataset"] == "specc"
    plan = compile_config(cfg).plan
    assert plan is not None
    b = plan.benchmarks[0].params
    assert b.dataset == "specc" and b.num_prompts == 80
    assert (b.temperature, b.ignore_eos, b.repeats) == (0.0, True, 1)


def test_num_prompts_from_min_requests_tokens_and_concurrency(compose):
    def n(*ov):
        plan = compile_config(compose(LLAMA + list(ov))).plan
        return plan.benchmarks[0].params.num_prompts
    assert n("benchmark.min_requests=16") == 16
    assert n("benchmark.min_requests=16", "benchmark.concurrency=32") == 32
    assert n("benchmark.min_requests=16", "benchmark.min_output_tokens=10000") == 40  # /256
    assert n("benchmark.num_prompts=7") == 7


def test_missing_file(compose):
    (d,) = _errors(compose, "benchmark.dataset=mt_bench",
                   "benchmark.dataset_path=/nonexistent/question.jsonl")
    assert (d.code, d.path) == ("BENCH_DATASET_MISSING", "benchmark.dataset_path")
    (d,) = _errors(compose, "benchmark.dataset=spec_bench")
    assert d.code == "BENCH_DATASET_MISSING" and d.hint


def test_not_the_named_format(compose, tmp_path):
    f = tmp_path / "share.json"
    f.write_text(json.dumps([{"conversations": []}]))
    (d,) = _errors(compose, "benchmark.dataset=mt_bench", f"benchmark.dataset_path={f}")
    assert (d.code, d.path) == ("BENCH_DATASET_FORMAT", "benchmark.dataset_path")
    assert "ShareGPT" in d.message and "benchmark.dataset" in d.hint


def test_no_prompts_in_a_requested_category(compose):
    (d,) = _errors(compose, "benchmark.categories=[coding,poetry]")
    assert (d.code, d.path) == ("BENCH_DATASET_CATEGORY", "benchmark.categories")
    assert "'poetry'" in d.message and "coding" in d.message
    (d,) = _errors(compose, "benchmark.dataset=random", "benchmark.categories=[coding]")
    assert d.code == "BENCH_DATASET_CATEGORY"
    assert _errors(compose, "benchmark.categories=[coding,math]") == []


def test_target_ci_must_be_positive_and_below_max(compose):
    for bad in ("0", "-0.1"):
        (d,) = _errors(compose, f"benchmark.target_ci={bad}")
        assert (d.code, d.path) == ("BENCH_TARGET_CI", "benchmark.target_ci")
        assert "0.02" in d.hint
    (d,) = _errors(compose, "benchmark.target_ci=0.02", "benchmark.max_requests=10")
    assert d.code == "BENCH_MAX_REQUESTS"
    assert _errors(compose, "benchmark.target_ci=0.02") == []


def test_hf_needs_an_id_and_the_hub(compose, monkeypatch):
    (d,) = _errors(compose, "benchmark.dataset=hf")
    assert (d.code, d.path) == ("BENCH_DATASET_MISSING", "benchmark.hf_dataset")
    import sys
    monkeypatch.setitem(sys.modules, "datasets", None)
    (d,) = _errors(compose, "benchmark.dataset=hf", "benchmark.hf_dataset=nvidia/SPEED-Bench")
    assert (d.code, d.path) == ("BENCH_DATASET_HUB", "benchmark.hf_dataset")
    assert "benchmark.dataset_path=<file>" in d.hint


def test_bench_serving_cannot_send_a_prompt_set(compose):
    (d,) = _errors(compose, "benchmark.driver=bench_serving")
    assert (d.code, d.path) == ("BENCH_DRIVER_DATASET", "benchmark.driver")
    assert _errors(compose, "benchmark.driver=bench_serving", "benchmark.dataset=random") == []


def test_cli_exit_2_one_line_per_problem(tmp_path):
    code, out, err = run_specc(LLAMA + ["benchmark.categories=[poetry]", "benchmark.target_ci=0"],
                               tmp_path)
    assert code == 2
    text = out + err
    assert "Traceback" not in text
    lines = [ln for ln in text.splitlines() if ln.startswith("error ")]
    assert len(lines) == 2, text
    assert any("BENCH_DATASET_CATEGORY at benchmark.categories" in ln and "(fix:" in ln
               for ln in lines)
    assert any("BENCH_TARGET_CI at benchmark.target_ci" in ln for ln in lines)
    assert not (tmp_path / "run" / "plan.json").exists()
