"""cluster=slurm without a cluster: job sizing and rules, the batch scripts (bash -n, quoting
checked by running them against stand-in commands), the node entry's result files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import compose_config
from specc.compile.cluster import (CLUSTER_RULES, format_time_limit,
                                   parse_time_limit)
from specc.compile.emit import write_outputs
from specc.compile.pipeline import compile_config
from specc.compile.sbatch import read_cluster, script
from specc.config import schema
from specc.plan import Plan
from specc.run.node import JobResults, on_node, read_rows, results_path

SLURM = ["+experiment=eagle3_sweep", "cluster=slurm"]
REPO = Path(__file__).resolve().parent.parent


def _compiled(overrides=()):
    return compile_config(compose_config(SLURM + list(overrides)))


@pytest.fixture(scope="module")
def sweep():
    result = _compiled()
    assert result.ok, [d.line() for d in result.diagnostics]
    return result


def _codes(result):
    return [d.code for d in result.diagnostics if d.severity == "error"]


# ----------------------------------------------------------------------------- compile
def test_a_local_plan_has_no_cluster_section():
    result = compile_config(compose_config(["+experiment=eagle3_sweep"]))
    assert result.cluster is None
    assert len({s.port for s in result.plan.servers}) == 1   # one server a wave, one port


def test_each_server_is_one_job_with_its_own_port(sweep):
    c = sweep.cluster
    assert [j["servers"] for j in c["jobs"]] == [[s.id] for s in sweep.plan.servers]
    assert all(j["nodes"] == 1 and j["gpus_per_node"] == 8 for j in c["jobs"])
    ports = [s.port for s in sweep.plan.servers]
    assert len(set(ports)) == len(ports)   # jobs of different waves can share a node
    for j in c["jobs"]:   # automatic limit: deadline + 2 x points + margin, whole minutes
        assert j["time_limit_s"] >= j["deadline_s"] + 2 * j["points_s"] + 300
        assert j["time_limit_s"] % 60 == 0


def test_pack_makes_one_job_per_wave():
    result = compile_config(compose_config(["+experiment=llama3_eagle3_pack", "cluster=slurm",
                                            "cluster.pack=true"]))
    assert result.ok
    waves = result.plan.waves
    assert [j["servers"] for j in result.cluster["jobs"]] == [[s.id for s in w] for w in waves]
    assert result.cluster["jobs"][0]["gpus_per_node"] == sum(len(s.gpus) for s in waves[0])


@pytest.mark.parametrize("value,seconds", [(90, 5400), ("90", 5400), ("10:30", 630),
                                           ("01:30:00", 5400), ("2-00", 172800),
                                           ("1-02:03", 93780), ("1-02:03:04", 93784)])
def test_time_limits_read_as_sbatch_reads_them(value, seconds):
    assert parse_time_limit(value) == seconds


def test_time_limits_are_written_in_whole_minutes():
    assert format_time_limit(61) == "00:02:00"
    assert format_time_limit(86400 + 3600) == "1-01:00:00"


def test_a_time_limit_shorter_than_deadline_plus_points_is_one_error():
    result = _compiled(["cluster.time_limit=10"])
    assert _codes(result) == ["SLURM_TIME_LIMIT"]
    line = next(d for d in result.diagnostics if d.code == "SLURM_TIME_LIMIT").line()
    assert "cluster.time_limit" in line and "readiness deadline" in line and "(fix: set" in line


def test_a_long_enough_time_limit_passes():
    assert _compiled(["cluster.time_limit='2:00:00'"]).ok


def test_a_server_larger_than_the_allowed_nodes_is_refused():
    result = _compiled(["cluster.gpus_per_node=4"])
    assert _codes(result) == ["SLURM_NODES"]
    assert "cluster.nodes_per_server=2" in result.diagnostics[-1].hint


def test_gpus_that_do_not_split_evenly_over_nodes_are_refused(sweep):
    cluster = {**sweep.config["cluster"], "gpus_per_node": 8, "nodes_per_server": 4}
    job = {**sweep.cluster["jobs"][0], "gpus": 20, "nodes": 3, "servers": ["s"]}
    found = [d for rule in CLUSTER_RULES for d in rule(cluster, [job], sweep.plan)]
    assert [d.code for d in found] == ["SLURM_GPUS_PER_NODE"]


@pytest.mark.parametrize("override,path", [
    ("cluster.sbatch_args=['--qos=a b']", "cluster.sbatch_args.0"),
    ("cluster.sbatch_args=[qos]", "cluster.sbatch_args.0"),
    ("cluster.partition='a#b'", "cluster.partition"),
    ("cluster.time_limit='1:2:3:4'", "cluster.time_limit"),
    ("cluster.name=k8s", "cluster.name"),
])
def test_bad_cluster_settings_are_schema_errors_with_a_fix(override, path):
    found = schema.validate(compose_config(SLURM + [override]))
    assert [d.path for d in found] == [path]
    assert found[0].hint and found[0].hint != "give a value of the right type" \
        or path == "cluster.name"


def test_the_review_shows_each_job(sweep, tmp_path):
    text = write_outputs(tmp_path, sweep.plan, sweep.diagnostics, title="t", cluster=sweep.cluster)
    assert "## Slurm jobs" in text
    for job in sweep.cluster["jobs"]:
        assert job["name"] in text.split("## Slurm jobs")[1] and job["time_limit"] in text
    assert read_cluster(tmp_path / "plan.json")["jobs"] == sweep.cluster["jobs"]
    assert Plan.load(tmp_path / "plan.json") == sweep.plan   # plan.json is the plan, unchanged


def test_a_cluster_file_of_another_plan_is_refused(sweep, tmp_path):
    write_outputs(tmp_path, sweep.plan, sweep.diagnostics, title="t", cluster=sweep.cluster)
    other = compile_config(compose_config(SLURM + ["benchmark.output_len=64"]))
    (tmp_path / "plan.json").write_text(other.plan.dumps())
    with pytest.raises(ValueError, match="another plan.json"):
        read_cluster(tmp_path / "plan.json")


def test_a_local_plan_compiled_over_a_slurm_run_dir_runs_locally(sweep, tmp_path):
    write_outputs(tmp_path, sweep.plan, sweep.diagnostics, title="t", cluster=sweep.cluster)
    local = compile_config(compose_config(["+experiment=eagle3_sweep"]))
    write_outputs(tmp_path, local.plan, local.diagnostics, title="t", cluster=local.cluster)
    assert read_cluster(tmp_path / "plan.json") is None


# ----------------------------------------------------------------------------- scripts
def test_every_script_is_bash_n_clean_and_runs_the_node_entry(sweep, tmp_path):
    write_outputs(tmp_path, sweep.plan, sweep.diagnostics, title="t", cluster=sweep.cluster)
    for job in sweep.cluster["jobs"]:
        path = tmp_path / job["script"]
        assert subprocess.run(["bash", "-n", str(path)]).returncode == 0
        text = path.read_text()
        assert f"#SBATCH --job-name={job['name']}" in text
        assert f"#SBATCH --time={job['time_limit']}" in text
        assert "#SBATCH --no-requeue" in text
        assert f"--server {job['servers'][0]}" in text


def _record_argv(tmp_path: Path, name: str) -> Path:
    """A stand-in command that writes the argv it received as JSON."""
    out = tmp_path / f"{name}.argv.json"
    tool = tmp_path / "bin" / name
    tool.parent.mkdir(exist_ok=True)
    tool.write_text(f"#!{sys.executable}\nimport json, sys\n"
                    f"json.dump(sys.argv[1:], open({str(out)!r}, 'w'))\n")
    tool.chmod(0o755)
    return out


@pytest.mark.parametrize("image", [None, "nvcr.io/nvidia/sglang:0.5;$(touch${IFS}PWNED)`x`&"])
def test_the_script_hands_every_value_over_exactly(tmp_path, image):
    """Run the script itself (from the run dir, as sbatch would) against stand-ins for python
    and srun: the node entry gets exactly the plan's arguments, nothing is executed from a value."""
    mounts = ["/data:/data", "/a$(touch${IFS}PWNED):/b"]
    result = _compiled()
    cluster = {**result.cluster, "container_image": image, "container_mounts": mounts,
               "sbatch_args": ["--comment=$(touch${IFS}PWNED)"]}
    job = cluster["jobs"][1]
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "run.sbatch").write_text(script(result.plan, cluster, job))
    python, srun = _record_argv(tmp_path, "python"), _record_argv(tmp_path, "srun")
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}",
           "SPECC_PYTHON": str(tmp_path / "bin" / "python")}
    done = subprocess.run(["bash", "run.sbatch"], cwd=run_dir, env=env, capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr
    node = ["-m", "specc.run.node", "--plan", "plan.json", "--job", job["name"],
            "--server", job["servers"][0]]
    if image is None:
        assert json.loads(python.read_text()) == node
    else:
        argv = json.loads(srun.read_text())
        assert f"--container-image={image}" in argv
        assert f"--container-mounts={run_dir}:{run_dir},{','.join(mounts)}" in argv
        assert argv[-len(node) - 1:] == ["python3", *node]
    assert not list(tmp_path.rglob("PWNED"))


# ----------------------------------------------------------------------------- node entry
def _row(bid, sid, status="ok"):
    return {"benchmark": bid, "server": sid, "status": status, "reason": None, "metrics": {}}


def test_job_results_never_write_the_runs_results_file(tmp_path):
    """Inside a job: the run's results.jsonl is read (its partial last line ignored, not cut),
    rows go to the server's own file, fsynced, one writer."""
    main = tmp_path / "results.jsonl"
    partial = json.dumps(_row("b0", "s1")) + "\n" + '{"benchmark": "b9", "ser'
    main.write_text(partial)
    log = JobResults(tmp_path, ["s1"])
    assert log.finished("b0") and not log.finished("b9")
    log.append(_row("b1", "s1"))
    assert main.read_text() == partial
    assert set(read_rows(results_path(tmp_path, "s1"))) == {"b1"}
    assert set(JobResults(tmp_path, ["s1"]).rows) == {"b0", "b1"}   # a resubmitted job resumes


def test_a_failed_row_while_the_job_is_stopped_is_left_to_the_driver(tmp_path):
    stopping = []
    log = JobResults(tmp_path, ["s1"], lambda: bool(stopping))
    log.append(_row("b1", "s1", "failed"))
    stopping.append(1)
    log.append(_row("b2", "s1", "failed"))   # cut by the stop: no row
    log.append(_row("b3", "s1"))
    assert set(read_rows(results_path(tmp_path, "s1"))) == {"b1", "b3"}


def test_a_job_uses_the_gpus_slurm_gave_it(sweep):
    servers = list(sweep.plan.servers[:1])
    got = on_node(servers, {"SLURM_JOB_ID": "7", "CUDA_VISIBLE_DEVICES": "8,9,10,11,12,13,14,15"})
    assert got[0].gpus == tuple(range(8, 16))
    assert got[0].env["CUDA_VISIBLE_DEVICES"] == "8,9,10,11,12,13,14,15"
    assert on_node(servers, {"CUDA_VISIBLE_DEVICES": "3"}) == servers   # not in a job


def test_a_slurm_plan_off_a_login_node_says_so(sweep, tmp_path):
    write_outputs(tmp_path, sweep.plan, sweep.diagnostics, title="t", cluster=sweep.cluster)
    env = {**os.environ, "PATH": str(Path(sys.executable).parent)}
    res = subprocess.run([sys.executable, "-m", "invoke", "run", "--plan",
                          str(tmp_path / "plan.json")], cwd=REPO, env=env, capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 2
    assert "error SLURM_UNAVAILABLE" in res.stderr and "cluster=local" in res.stderr
    assert not (tmp_path / "results.jsonl").exists()


def test_a_jobs_plan_is_a_valid_plan_of_its_servers_alone(sweep):
    """Plan v2 refuses a point whose baseline is not in the plan: a job's cut-down plan
    drops links to baselines that run in other jobs (the driver computes those speedups)."""
    from specc.run.node import job_plan

    spec = next(s for s in sweep.plan.servers if not s.baseline)
    cut = job_plan(sweep.plan, [spec.id], {})
    assert [s.id for s in cut.servers] == [spec.id]
    assert [b.id for b in cut.benchmarks] == [b.id for b in sweep.plan.benchmarks_of(spec.id)]
    assert all(b.baseline is None for b in cut.benchmarks)
    assert Plan.from_json(cut.to_json()) == cut


def test_a_job_slurm_no_longer_knows_is_judged_by_its_node_record(sweep, tmp_path, monkeypatch):
    """Neither squeue nor sacct knows the job: a node entry that never wrote its end is a
    lost job (its points fail, saying so); one that ended on its own completed."""
    import io

    from specc.run.node import state_path
    from specc.run.progress import SweepProgress
    from specc.run.slurm import Driver

    write_outputs(tmp_path, sweep.plan, sweep.diagnostics, title="t", cluster=sweep.cluster)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sacct").write_text("#!/bin/sh\nexit 1\n")   # no accounting here
    (bin_dir / "sacct").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    progress = SweepProgress(len(sweep.plan.benchmarks), stream=io.StringIO(), live=False)
    driver = Driver(sweep.plan, tmp_path, sweep.cluster, progress)
    lost, done = driver.jobs[0], driver.jobs[1]
    for job, jid in ((lost, "41"), (done, "42")):
        job.id, job.state = jid, "RUNNING"
    ended = state_path(tmp_path, done.name)
    ended.parent.mkdir(parents=True, exist_ok=True)
    ended.write_text(json.dumps({"executor": {"job_id": "42", "finished_at": 1.0,
                                              "stopped_by": None}, "servers": {}}))
    for b in sweep.plan.benchmarks_of(done.servers[0]):   # it wrote every row
        JobResults(tmp_path, done.servers).append(_row(b.id, b.server))
    driver.poll({})
    rows = {r["benchmark"]: r for r in
            (json.loads(ln) for ln in (tmp_path / "results.jsonl").read_text().splitlines())}
    for b in sweep.plan.benchmarks_of(lost.servers[0]):
        assert rows[b.id]["status"] == "failed"
        assert "slurm job 41 is gone from squeue" in rows[b.id]["reason"]
    assert all(rows[b.id]["status"] == "ok" for b in sweep.plan.benchmarks_of(done.servers[0]))
    assert (lost.state, done.state) == ("GONE", "COMPLETED") and lost.done and done.done


# ----------------------------------------------------------------------------- multi-node
TWO_NODES = ["hardware.gpus_per_node=4", "hardware.nodes=2", "hardware.tp=8",
             "cluster.nodes_per_server=2"]


def test_a_server_larger_than_a_node_spans_nodes_on_slurm(tmp_path):
    result = _compiled(TWO_NODES)
    assert result.ok, [d.line() for d in result.diagnostics if d.severity == "error"]
    server = result.plan.servers[0]
    assert server.nodes == 2 and server.gpus == (0, 1, 2, 3)   # each node's GPUs
    argv = list(server.argv)
    i = argv.index("--nnodes")
    assert argv[i:i + 6] == ["--nnodes", "2", "--node-rank", "{node_rank}", "--dist-init-addr",
                             f"{{head}}:{server.port + 1000}"]
    assert [p.name for p in server.readiness.phases][:3] == ["launch", "join", "load_weights"]
    job = result.cluster["jobs"][0]
    assert (job["nodes"], job["gpus"], job["gpus_per_node"]) == (2, 8, 4)
    text = script(result.plan, result.cluster, job)
    assert "#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=1\n#SBATCH --gpus-per-node=4" in text
    assert Plan.from_json(json.loads(json.dumps(result.plan.to_json()))).servers[0].nodes == 2
    # a one-node server's plan.json has no "nodes" (plans written before read the same)
    assert "nodes" not in compile_config(compose_config(SLURM)).plan.servers[0].to_json()


def test_multinode_is_refused_locally_and_for_an_engine_that_cannot_span_nodes():
    local = compile_config(compose_config(["+experiment=eagle3_sweep"] + TWO_NODES[:3]))
    found = [d for d in local.diagnostics if d.code == "TOPOLOGY_MULTINODE"]
    assert {d.path for d in found} == {"hardware.tp", "hardware.nodes"}
    assert any("cluster=slurm" in d.hint for d in found)
    vllm = compile_config(compose_config(["cluster=slurm", "engine=vllm"] + TWO_NODES))
    (d,) = [d for d in vllm.diagnostics if d.code == "TOPOLOGY_MULTINODE"]
    assert "cannot run a vllm server across nodes" in d.message


def test_each_node_fills_in_its_own_rank_and_the_heads_address(monkeypatch):
    from specc.run import rank
    from specc.run.node import head_address, job_plan

    assert rank.fill(["--node-rank", "{node_rank}", "--dist-init-addr", "{head}:31000"],
                     rank="1", head="10.0.0.5") == ["--node-rank", "1", "--dist-init-addr",
                                                    "10.0.0.5:31000"]
    env = {"SLURM_JOB_ID": "7", "SLURMD_NODENAME": "n3"}
    assert head_address(env, lookup=lambda node: {"n3": "127.0.0.13"}[node]) == "127.0.0.13"
    assert head_address(env, lookup=lambda node: None) == "n3"
    assert head_address({**env, "SPECC_HEAD_ADDR": "h"}, lookup=lambda node: 1 / 0) == "h"
    plan = _compiled(TWO_NODES).plan
    sub = job_plan(plan, [plan.servers[0].id], {**env, "SPECC_HEAD_ADDR": "127.0.0.13"})
    argv = list(sub.servers[0].argv)
    rank_py = [sys.executable, "-m", "specc.run.rank"]
    assert argv[:11] == rank_py + ["--group", "--", "srun", "--overlap", "--nodes=2",
                                   "--ntasks=2", "--ntasks-per-node=1", "--kill-on-bad-exit=1"]
    assert argv[11:16] == rank_py + ["--head", "127.0.0.13"]
    assert argv[16:19] == ["--", sys.executable, "-m"]   # the engine, "python" resolved
    # a rank is read from the task's own environment, never assumed
    monkeypatch.delenv("SLURM_NODEID", raising=False)
    monkeypatch.delenv("SLURM_PROCID", raising=False)
    assert rank.main(["--head", "h", "--", "true"]) == 2


def test_plan_sh_does_not_launch_a_multi_node_server_on_this_machine(tmp_path):
    from specc.compile.emit import plan_sh

    plan = _compiled(TWO_NODES).plan
    text = plan_sh(plan)
    assert "{node_rank}" not in text   # never launched with its placeholders
    assert f"plan.sh: {plan.servers[0].id} spans 2 nodes: run the plan on Slurm" in text
    (tmp_path / "plan.sh").write_text(text)
    assert subprocess.run(["bash", "-n", str(tmp_path / "plan.sh")]).returncode == 0


# ----------------------------------------------------------------------------- driver timing
def test_the_report_warm_up_imports_plotting_at_lowest_priority_in_its_own_thread():
    """The driver warms the report's imports while Slurm schedules: in its own thread, at
    nice 19 for that thread alone (the driver's main thread keeps its priority)."""
    code = """
import os, sys, threading
calls = []
real = os.setpriority
os.setpriority = lambda which, who, prio: (calls.append((which, who, prio)), real(which, who, prio))
before = os.getpriority(os.PRIO_PROCESS, 0)
from specc.run.slurm import warm_report
assert "matplotlib.figure" not in sys.modules and "specc.report" not in sys.modules
t = warm_report()
t.join(60)
assert "matplotlib.figure" in sys.modules and "specc.report" in sys.modules, "not imported"
assert calls == [(os.PRIO_PROCESS, t.native_id, 19)], (calls, t.native_id)
assert t.native_id != threading.get_native_id()
assert os.getpriority(os.PRIO_PROCESS, 0) == before, "the driver itself was niced"
print("ok")
"""
    if not sys.platform.startswith("linux"):
        pytest.skip("per-thread nice values are Linux's")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                       timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
