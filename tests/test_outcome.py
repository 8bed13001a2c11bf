"""The end of a sweep, one path for the local executor and the Slurm driver: each point's
summary line, speedups backfilled once baselines finish, the exit code."""

from __future__ import annotations

import pytest

from specc import exits
from specc.compile.pipeline import compile_config
from specc.results import ResultLog
from specc.run import executor, slurm
from specc.run.outcome import backfill_speedups, exit_code, point_summary

SWEEP = ["model_pair.context_length=2048",
         "+sweep={speculation:[{num_steps:3,topk:1,num_draft_tokens:4}],"
         "benchmark.concurrency:[1,2]}"]


@pytest.fixture
def plan(compose):
    result = compile_config(compose(SWEEP))
    assert result.ok
    return result.plan


def row(bench, status="ok", out=100.0):
    return {"benchmark": bench.id, "server": bench.server, "status": status,
            "reason": None if status == "ok" else "server failed: boom",
            "metrics": {"output_throughput": out} if status == "ok" else {},
            "params": bench.params.to_json()}


def test_speculative_points_that_finished_before_their_baseline_get_their_speedup(plan, tmp_path):
    spec = [b for b in plan.benchmarks if b.baseline]
    base = {b.id: b for b in plan.benchmarks if not b.baseline}
    log = ResultLog(tmp_path / "results.jsonl")
    for b in spec:   # packed servers / other Slurm jobs: the speculative rows come first
        log.append(row(b, out=150.0))
    for b in base.values():
        log.append(row(b, out=100.0))
    assert backfill_speedups(plan, log) is None
    again = ResultLog(tmp_path / "results.jsonl")   # on disk, not only in memory
    assert [again.get(b.id)["metrics"]["speedup"] for b in spec] == [1.5] * len(spec)
    assert exit_code(plan, again) == exits.OK
    assert "1.50x" in point_summary(again.get(spec[0].id))


def test_a_results_file_that_cannot_be_rewritten_is_reported_not_raised(plan, tmp_path):
    import shutil

    (tmp_path / "run").mkdir()
    log = ResultLog(tmp_path / "run" / "results.jsonl")
    for b in sorted(plan.benchmarks, key=lambda b: b.baseline is None):
        log.append(row(b))
    shutil.rmtree(tmp_path / "run")   # the run dir gone, a file in its place: no rewrite
    (tmp_path / "run").write_text("")
    why = backfill_speedups(plan, log)
    assert why and why.startswith(f"cannot rewrite {tmp_path / 'run' / 'results.jsonl'}: ")
    assert exit_code(plan, log, write_error=why) == exits.FAILED


def test_exit_code_fails_a_failed_point_a_point_without_a_row_and_a_lost_record(plan, tmp_path):
    log = ResultLog(tmp_path / "results.jsonl")
    *first, last = plan.benchmarks
    for b in first:
        log.append(row(b))
    assert exit_code(plan, log) == exits.FAILED          # one point never ran
    log.append(row(last, status="failed"))
    assert exit_code(plan, log) == exits.FAILED          # one point failed
    assert point_summary(log.get(last.id)) == "server failed: boom"
    log.drop_failed()
    log.append(row(last))
    assert exit_code(plan, log) == exits.OK
    assert exit_code(plan, log, write_error="cannot write state.json") == exits.FAILED


def test_executor_and_slurm_driver_share_the_one_path():
    """No private copy left to drift: both modules end a sweep through specc.run.outcome."""
    for module in (executor, slurm):
        assert module.point_summary is point_summary
        assert module.exit_code is exit_code and module.backfill_speedups is backfill_speedups
        assert not hasattr(module, "_summary")
