"""plan.json as the whole runtime contract: one strict schema, and a runtime that needs nothing else."""

from __future__ import annotations

import copy
import json
import subprocess
import sys

import pytest

from specc.compile.pipeline import compile_config
from specc.plan import (PLAN_VERSION, Acceptance, CacheFlush, CounterRatio, Plan, PlanError,
                        ServerField)


@pytest.fixture(scope="module")
def plan_dict():
    from conftest import compose_config

    result = compile_config(compose_config(["+experiment=eagle3_sweep", "engine=sglang"]))
    assert result.ok
    return result.plan.to_json()


def _error(d) -> str:
    with pytest.raises(PlanError) as e:
        Plan.from_json(d)
    return str(e.value)


def test_round_trip_is_exact(plan_dict):
    plan = Plan.from_json(copy.deepcopy(plan_dict))
    assert plan.to_json() == plan_dict
    assert Plan.from_json(json.loads(plan.dumps())) == plan


def test_the_runtime_contract_is_typed(plan_dict):
    plan = Plan.from_json(plan_dict)
    spec = next(s for s in plan.servers if not s.baseline)
    base = next(s for s in plan.servers if s.baseline)
    assert spec.readiness.probe.path == "/health_generate"
    assert spec.cache_flush == CacheFlush(method="POST", path="/flush_cache")
    assert spec.acceptance == Acceptance(
        run=CounterRatio(path="/metrics", numerator="sglang:generation_tokens_total",
                         denominator="sglang:spec_verify_calls_total", offset=0.0),
        cumulative=ServerField(paths=("/server_info", "/get_server_info"),
                               field="internal_states.0.avg_spec_accept_length"))
    assert base.acceptance is None


@pytest.mark.parametrize("edit, message", [
    (lambda d: d["servers"][0]["readiness"]["probe"].pop("path"),
     "plan.servers[0].readiness.probe.path: missing"),
    (lambda d: d["servers"][0]["readiness"]["phases"][1].update(budget_s="ten"),
     "plan.servers[0].readiness.phases[1].budget_s: expected a number, got str"),
    (lambda d: d["servers"][0]["readiness"].update(ready_log="The server is fired up"),
     "plan.servers[0].readiness.ready_log: expected a list, got str"),
    (lambda d: d["servers"][0]["readiness"]["phases"][1].update(begin=["Load (weight"]),
     "plan.servers[0].readiness.phases[1]: phase load_weights begin: 'Load (weight' is not a "
     "valid regular expression"),
    (lambda d: d["servers"][0]["readiness"]["answers"].update({"503": "busy"}),
     "plan.servers[0].readiness: answers.503: 'busy' is not one of starting, warming, ready, dead"),
    (lambda d: d["servers"][0].update(cache_flsh=None), "plan.servers[0]: unknown key 'cache_flsh'"),
    (lambda d: d["servers"][0].update(cache_flush={"method": "POST", "path": None,
                                                   "unavailable": None}),
     "plan.servers[0].cache_flush: method and path go together"),
    (lambda d: d["servers"][1].update(acceptance={"run": None, "cumulative": None}),
     "plan.servers[1].acceptance: a run or a cumulative source"),
    (lambda d: d["servers"][0].update(port="30000"),
     "plan.servers[0].port: expected an integer, got str"),
    (lambda d: d["benchmarks"][0].update(server="nope"), "plan: benchmark kimi-k2.5-baseline"),
    (lambda d: d.update(servers={}), "plan.servers: expected a list, got dict"),
    # the params records: every key required, none unknown, each of its type
    (lambda d: d["benchmarks"][2]["params"].update(concurrency="16"),
     "plan.benchmarks[2].params.concurrency: expected an integer, got str"),
    (lambda d: d["benchmarks"][2]["params"].update(flush_cache=1),
     "plan.benchmarks[2].params.flush_cache: expected true or false, got int"),
    (lambda d: d["benchmarks"][0]["params"].update(categories=["math", 3]),
     "plan.benchmarks[0].params.categories: expected a list of strings"),
    (lambda d: d["benchmarks"][0]["params"].pop("seed"), "plan.benchmarks[0].params.seed: missing"),
    (lambda d: d["benchmarks"][0]["params"].update(concurency=4),
     "plan.benchmarks[0].params.concurency: unknown key"),
    (lambda d: d["benchmarks"][0]["params"].update(accept_positions={"path": "/metrics"}),
     "plan.benchmarks[0].params.accept_positions.label: missing"),
    (lambda d: d["benchmarks"][0]["params"].update(concurrency=0),
     "plan.benchmarks[0].params: concurrency must be >= 1"),
    (lambda d: d["servers"][1]["params"].update(num_steps=1.5),
     "plan.servers[1].params.num_steps: expected an integer or null, got float"),
    (lambda d: d["servers"][1]["params"].update(tpp=8), "plan.servers[1].params.tpp: unknown key"),
    (lambda d: d["servers"][1]["params"].pop("target"), "plan.servers[1].params.target: missing"),
])
def test_a_wrong_plan_is_one_clear_error_naming_its_path(plan_dict, edit, message):
    d = copy.deepcopy(plan_dict)
    edit(d)
    assert _error(d).startswith(message)


@pytest.fixture(scope="module")
def slurm_plan_dict():
    from conftest import compose_config

    result = compile_config(compose_config(["+experiment=eagle3_sweep", "cluster=slurm"]))
    assert result.ok
    return result.plan.to_json()


def test_a_slurm_plan_holds_its_jobs_and_a_local_plan_has_no_cluster_key(plan_dict,
                                                                         slurm_plan_dict):
    from specc.compile.emit import plan_json

    assert "cluster" not in plan_dict   # local plans read and write as before
    plan = Plan.from_json(copy.deepcopy(slurm_plan_dict))
    assert plan.to_json() == slurm_plan_dict
    assert Plan.from_json(json.loads(plan_json(plan))) == plan
    assert [j.servers for j in plan.cluster.jobs] == [(s.id,) for s in plan.servers]
    job = plan.cluster.jobs[0]
    assert job.script == f"slurm/{job.name}.sbatch" and job.time_limit_s >= job.need_s


@pytest.mark.parametrize("edit, message", [
    (lambda c: c["jobs"][0].update(gpu=8), "plan.cluster.jobs[0]: unknown key 'gpu'"),
    (lambda c: c["jobs"][0].update(nodes="2"),
     "plan.cluster.jobs[0].nodes: expected an integer, got str"),
    (lambda c: c.update(sbatch_args="--qos=high"),
     "plan.cluster.sbatch_args: expected a list, got str"),
    (lambda c: c.update(name="k8s"), "plan.cluster: name 'k8s': only 'slurm' is submitted to"),
    (lambda c: c["jobs"][1].update(name=c["jobs"][0]["name"]),
     "plan.cluster: job 'kimi-k2.5-baseline-tp8-890044' appears 2 times"),
    (lambda c: c["jobs"][0].update(servers=["nope"]),
     "plan: cluster job kimi-k2.5-baseline-tp8-890044: no server 'nope'; cluster: server "
     "kimi-k2.5-baseline-tp8-890044 is in no job"),
    (lambda c: c["jobs"].pop(), "plan: cluster: server kimi-k2.5-eagle3-s3-k4-d8-tp8-a4d646 is "
     "in no job"),
])
def test_a_wrong_cluster_record_is_one_clear_error_naming_its_path(slurm_plan_dict, edit,
                                                                    message):
    d = copy.deepcopy(slurm_plan_dict)
    edit(d["cluster"])
    assert _error(d) == message


def test_params_are_typed_records_and_a_swept_value_keeps_its_config_path():
    """A number stays as written (600 is not 600.0: plan.json's bytes do not change), a
    list is a tuple, and a swept value outside speculation is a (config path, value) pair
    written back as its own key, after the fields."""
    from conftest import bench_params, server_params
    from specc.plan import BenchParams, ServerParams

    raw = bench_params(timeout_s=600, categories=["math", "coding"])
    b = BenchParams.read(raw, "p")
    assert b.timeout_s == 600 and type(b.timeout_s) is int and b.categories == ("math", "coding")
    assert b.to_json() == raw and list(b.to_json()) == list(raw)
    raw = server_params(**{"server.max_running_requests": 512})
    s = ServerParams.read(raw, "p")
    assert s.axes == (("server.max_running_requests", 512),) and s.to_json() == raw
    with pytest.raises(AttributeError):   # frozen
        b.concurrency = 2


def test_a_plan_of_another_version_says_to_compile_again(plan_dict):
    d = dict(plan_dict, version=1)
    assert _error(d) == (f"plan version 1 is not {PLAN_VERSION}: it was written by another "
                         "specc; compile the experiment again")


def test_a_wrong_plan_is_refused_with_one_line_and_exit_2(plan_dict, tmp_path):
    d = copy.deepcopy(plan_dict)
    del d["servers"][0]["readiness"]["phases"][0]["budget_s"]
    (tmp_path / "plan.json").write_text(json.dumps(d))
    res = subprocess.run([sys.executable, "-m", "specc.run.point", "--plan",
                          str(tmp_path / "plan.json"), "--benchmark", "x"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2
    assert res.stderr.strip() == (f"error PLAN_UNREADABLE at {tmp_path / 'plan.json'}: "
                                  "plan.servers[0].readiness.phases[0].budget_s: missing")


def test_the_runtime_never_imports_an_engine_adapter_or_the_compiler():
    """What lets a Slurm node or a remote host run a plan with nothing but the plan."""
    code = ("import sys, specc.run.executor, specc.run.point, specc.run.readiness, "
            "specc.run.acceptance, specc.run.lifecycle, specc.state, specc.run.node, "
            "specc.run.slurm\n"
            "print(sorted(m for m in sys.modules if m.startswith(('specc.engines', "
            "'specc.compile', 'specc.config'))))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "[]"
