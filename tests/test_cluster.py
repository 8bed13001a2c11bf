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
from specc.compile.sbatch import script
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
def test_a_local_plan_has_no_cluster_record():
    result = compile_config(compose_config(["+experiment=eagle3_sweep"]))
    assert result.plan.cluster is None and "cluster" not in result.plan.to_json()
    assert len({s.port for s in result.plan.servers}) == 1   # one server a wave, one port


def test_each_server_is_one_job_with_its_own_port(sweep):
    c = sweep.plan.cluster
    assert [j.servers for j in c.jobs] == [(s.id,) for s in sweep.plan.servers]
    assert all(j.nodes == 1 and j.gpus_per_node == 8 for j in c.jobs)
    ports = [s.port for s in sweep.plan.servers]
    assert len(set(ports)) == len(ports)   # jobs of different waves can share a node
    for j in c.jobs:   # automatic limit: deadline + 2 x points + margin, whole minutes
        assert j.time_limit_s >= j.deadline_s + 2 * j.points_s + 300
        assert j.time_limit_s % 60 == 0


def test_pack_makes_one_job_per_wave():
    result = compile_config(compose_config(["+experiment=llama3_eagle3_pack", "cluster=slurm",
                                            "cluster.pack=true"]))
    assert result.ok
    waves = result.plan.waves
    jobs = result.plan.cluster.jobs
    assert [list(j.servers) for j in jobs] == [[s.id for s in w] for w in waves]
    assert jobs[0].gpus_per_node == sum(len(s.gpus) for s in waves[0])


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
    job = {**sweep.plan.cluster.jobs[0].to_json(), "gpus": 20, "nodes": 3, "servers": ["s"]}
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


def test_the_review_shows_each_job_and_plan_json_holds_them(sweep, tmp_path):
    text = write_outputs(tmp_path, sweep.plan, sweep.diagnostics, title="t")
    assert "## Slurm jobs" in text
    for job in sweep.plan.cluster.jobs:
        assert job.name in text.split("## Slurm jobs")[1] and job.time_limit in text
    assert Plan.load(tmp_path / "plan.json") == sweep.plan   # the jobs too: nothing beside it
    assert sorted(p.name for p in (tmp_path / "slurm").iterdir()) == sorted(
        ["logs"] + [Path(j.script).name for j in sweep.plan.cluster.jobs])


def _hand_edited(tmp_path, sweep, edit) -> Path:
    """The sweep's run dir with plan.json's cluster record edited by hand."""
    write_outputs(tmp_path, sweep.plan, sweep.diagnostics, title="t")
    data = json.loads((tmp_path / "plan.json").read_text())
    edit(data["cluster"])
    (tmp_path / "plan.json").write_text(json.dumps(data))
    return tmp_path / "plan.json"


@pytest.mark.parametrize("edit,says", [
    (lambda c: c["jobs"][1]["servers"].__setitem__(0, "nope"),
     "cluster job {job}: no server 'nope'; cluster: server {server} is in no job"),
    (lambda c: c["jobs"][1].pop("script"), "plan.cluster.jobs[1].script: missing"),
    (lambda c: c.__setitem__("poll_interval_s", "fast"),
     "plan.cluster.poll_interval_s: expected a number, got str"),
    (lambda c: c["jobs"][0].__setitem__("servers", c["jobs"][1]["servers"]),
     "cluster: server {server} is in 2 jobs; cluster: server {first} is in no job"),
])
def test_a_hand_edited_cluster_record_is_one_line_and_exit_2(sweep, tmp_path, edit, says):
    """The strict reader checks the jobs like every other record, before anything is submitted."""
    job, first = sweep.plan.cluster.jobs[1], sweep.plan.cluster.jobs[0]
    plan = _hand_edited(tmp_path, sweep, edit)
    res = subprocess.run([sys.executable, "-m", "specc", "run", "--plan", str(plan)], cwd=REPO,
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == [
        f"error PLAN_UNREADABLE at {plan}: "
        + ("plan: " if "cluster:" in says or "cluster job" in says else "")
        + says.format(job=job.name, server=job.servers[0], first=first.servers[0])]
    assert not (tmp_path / "results.jsonl").exists() and not (tmp_path / "slurm" / "jobs.json").exists()


def test_a_local_plan_compiled_over_a_slurm_run_dir_runs_locally(sweep, tmp_path):
    from specc.run.slurm import is_slurm_run

    write_outputs(tmp_path, sweep.plan, sweep.diagnostics, title="t")
    assert is_slurm_run(tmp_path)
    local = compile_config(compose_config(["+experiment=eagle3_sweep"]))
    write_outputs(tmp_path, local.plan, local.diagnostics, title="t")
    assert Plan.load(tmp_path / "plan.json").cluster is None and not is_slurm_run(tmp_path)


def test_a_slurm_plan_of_an_older_specc_is_never_run_on_this_machine(sweep, tmp_path):
    """Before the cluster record, the jobs were in slurm/cluster.json beside a plan.json that
    reads as a local plan: `specc run` refuses it (compile again), status/down still go to
    Slurm, and a new compile into the run dir removes the old file."""
    from specc.run.slurm import is_slurm_run

    local = compile_config(compose_config(["+experiment=eagle3_sweep"]))
    write_outputs(tmp_path, local.plan, local.diagnostics, title="t")
    (tmp_path / "slurm").mkdir()
    (tmp_path / "slurm" / "cluster.json").write_text("{}")
    res = subprocess.run([sys.executable, "-m", "specc", "run", "--plan",
                          str(tmp_path / "plan.json")], cwd=REPO, capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 2 and res.stderr.strip().splitlines() == [
        f"error PLAN_UNREADABLE at {tmp_path / 'plan.json'}: compiled for Slurm by an older "
        "specc (its jobs are in slurm/cluster.json, not in the plan); compile the experiment again"]
    assert is_slurm_run(tmp_path) and not (tmp_path / "state.json").exists()
    write_outputs(tmp_path, local.plan, local.diagnostics, title="t")
    assert not (tmp_path / "slurm" / "cluster.json").exists() and not is_slurm_run(tmp_path)


def test_down_still_knows_a_slurm_run_whose_plan_json_is_gone(sweep, tmp_path):
    """`specc down` must cancel submitted jobs even when plan.json was damaged: the driver's
    record (slurm/jobs.json) says the run went to Slurm."""
    from specc.run.slurm import is_slurm_run, jobs_path

    write_outputs(tmp_path, sweep.plan, sweep.diagnostics, title="t")
    (tmp_path / "plan.json").write_text("{")
    assert not is_slurm_run(tmp_path)
    jobs_path(tmp_path).write_text("{}")
    assert is_slurm_run(tmp_path)


def test_a_hydra_multirun_gives_each_run_dir_its_own_jobs(tmp_path):
    """`specc -m ... cluster=slurm`: every run dir's plan.json holds its own jobs (sized for
    its own points) and its scripts beside it; nothing is shared between run dirs."""
    sweep = tmp_path / "sweep"
    res = subprocess.run([sys.executable, "-m", "specc", "-m", *SLURM,
                          "benchmark.output_len=64,512", f"hydra.sweep.dir={sweep}"], cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    plans = [Plan.load(sweep / str(i) / "plan.json") for i in (0, 1)]
    assert [p.benchmarks[0].params.output_len for p in plans] == [64, 512]
    for i, plan in enumerate(plans):
        assert [j.servers for j in plan.cluster.jobs] == [(s.id,) for s in plan.servers]
        for job in plan.cluster.jobs:
            assert f"--job {job.name}" in (sweep / str(i) / job.script).read_text()
    assert plans[0].cluster.jobs[0].points_s < plans[1].cluster.jobs[0].points_s


# ----------------------------------------------------------------------------- scripts
def test_every_script_is_bash_n_clean_and_runs_the_node_entry(sweep, tmp_path):
    write_outputs(tmp_path, sweep.plan, sweep.diagnostics, title="t")
    for job in sweep.plan.cluster.jobs:
        path = tmp_path / job.script
        assert subprocess.run(["bash", "-n", str(path)]).returncode == 0
        text = path.read_text()
        assert f"#SBATCH --job-name={job.name}" in text
        assert f"#SBATCH --time={job.time_limit}" in text
        assert "#SBATCH --no-requeue" in text
        assert f"--plan plan.json --job {job.name}\n" in text


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
    from dataclasses import replace

    result = _compiled()
    plan = replace(result.plan, cluster=replace(
        result.plan.cluster, container_image=image, container_mounts=tuple(mounts),
        sbatch_args=("--comment=$(touch${IFS}PWNED)",)))
    job = plan.cluster.jobs[1]
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "run.sbatch").write_text(script(plan, job))
    python, srun = _record_argv(tmp_path, "python"), _record_argv(tmp_path, "srun")
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}",
           "SPECC_PYTHON": str(tmp_path / "bin" / "python")}
    done = subprocess.run(["bash", "run.sbatch"], cwd=run_dir, env=env, capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr
    node = ["-m", "specc.run.node", "--plan", "plan.json", "--job", job.name]
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


def test_the_node_entry_runs_the_servers_the_plan_gives_its_job(sweep, tmp_path, monkeypatch,
                                                                capsys):
    from specc.run import node

    write_outputs(tmp_path, sweep.plan, sweep.diagnostics, title="t")
    ran = []
    monkeypatch.setattr(node, "run_job", lambda plan, run_dir, servers, *, job: ran.append(
        (run_dir, servers, job)) or 0)
    job = sweep.plan.cluster.jobs[2]
    assert node.main(["--plan", str(tmp_path / "plan.json"), "--job", job.name]) == 0
    assert ran == [(tmp_path, list(job.servers), job.name)]
    assert node.main(["--plan", str(tmp_path / "plan.json"), "--job", "nope"]) == 2
    assert f"error: no Slurm job 'nope' in {tmp_path / 'plan.json'} (its jobs: " \
        f"{sweep.plan.cluster.jobs[0].name}, " in capsys.readouterr().err
    local = compile_config(compose_config(["+experiment=eagle3_sweep"]))
    write_outputs(tmp_path, local.plan, local.diagnostics, title="t")
    assert node.main(["--plan", str(tmp_path / "plan.json"), "--job", job.name]) == 2
    assert "(its jobs: none, it runs on one machine)" in capsys.readouterr().err
    assert len(ran) == 1


def test_the_node_entry_refuses_before_launching_when_the_engine_there_cannot_run_it(
        sweep, tmp_path):
    """The executor's preflight runs on the node too: this test venv has no SGLang, so the
    job exits 2 with the doctor's line (the driver's reason for its points: the job log's
    tail), and nothing was launched or written."""
    write_outputs(tmp_path, sweep.plan, sweep.diagnostics, title="t")
    job = sweep.plan.cluster.jobs[0]
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
    res = subprocess.run([sys.executable, "-m", "specc.run.node", "--plan",
                          str(tmp_path / "plan.json"), "--job", job.name], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2, res.stderr[-2000:]
    lines = res.stderr.strip().splitlines()
    assert lines[0].startswith("error DOCTOR_ENGINE_MISSING") and "Traceback" not in res.stderr
    assert lines[-1].startswith("nothing was launched on this node")
    assert not (tmp_path / "servers").exists() and not (tmp_path / "slurm" / "results").exists()
    assert not (tmp_path / "slurm" / "state").exists()


def test_a_slurm_plan_off_a_login_node_says_so(sweep, tmp_path):
    write_outputs(tmp_path, sweep.plan, sweep.diagnostics, title="t")
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

    write_outputs(tmp_path, sweep.plan, sweep.diagnostics, title="t")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sacct").write_text("#!/bin/sh\nexit 1\n")   # no accounting here
    (bin_dir / "sacct").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    progress = SweepProgress(len(sweep.plan.benchmarks), stream=io.StringIO(), live=False)
    driver = Driver(sweep.plan, tmp_path, progress)
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
                             f"{{head}}:{server.rendezvous_port}"]
    # the rendezvous port is planned above every server port of the plan, one per server
    ports = [s.port for s in result.plan.servers]
    meets = [s.rendezvous_port for s in result.plan.servers]
    assert min(meets) > max(ports) and len(set(meets)) == len(meets)
    assert server.follower_args == ()   # every SGLang rank runs the same command
    assert [p.name for p in server.readiness.phases][:3] == ["launch", "join", "load_weights"]
    job = result.plan.cluster.jobs[0]
    assert (job.nodes, job.gpus, job.gpus_per_node) == (2, 8, 4)
    text = script(result.plan, job)
    assert "#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=1\n#SBATCH --gpus-per-node=4" in text
    again = Plan.from_json(json.loads(json.dumps(result.plan.to_json()))).servers[0]
    assert (again.nodes, again.rendezvous_port) == (2, server.rendezvous_port)
    # a one-node server's plan.json has none of them (plans written before read the same)
    one = compile_config(compose_config(SLURM)).plan.servers[0].to_json()
    assert not {"nodes", "rendezvous_port", "follower_args"} & set(one)


def test_multinode_is_refused_locally():
    for engine in (["engine=sglang"], ["engine=vllm"]):
        local = compile_config(compose_config(["+experiment=eagle3_sweep"] + engine
                                              + TWO_NODES[:3]))
        found = [d for d in local.diagnostics if d.code == "TOPOLOGY_MULTINODE"]
        assert {d.path for d in found} == {"hardware.tp", "hardware.nodes"}
        assert any("cluster=slurm" in d.hint for d in found)


VLLM_TWO_NODES = ["+experiment=eagle3_sweep", "cluster=slurm", "engine=vllm"] + TWO_NODES


def test_a_vllm_server_spans_nodes_on_slurm_with_headless_followers():
    result = compile_config(compose_config(VLLM_TWO_NODES))
    assert result.ok, [d.line() for d in result.diagnostics if d.severity == "error"]
    server = result.plan.servers[0]
    argv = list(server.argv)
    i = argv.index("--nnodes")
    assert argv[i:i + 8] == ["--nnodes", "2", "--node-rank", "{node_rank}", "--master-addr",
                             "{head}", "--master-port", str(server.rendezvous_port)]
    assert "--headless" not in argv and server.follower_args == ("--headless",)
    assert server.rendezvous_port > max(s.port for s in result.plan.servers)
    assert [p.name for p in server.readiness.phases][:3] == ["launch", "join", "load_weights"]
    assert server.to_json()["follower_args"] == ["--headless"]


@pytest.mark.parametrize("overrides, path, says", [
    # 3 GPUs on nodes of 2: 2 nodes, and vLLM wants dp x pp x tp divisible by --nnodes
    (["hardware.gpus_per_node=2", "hardware.tp=1", "hardware.pp=3"], "hardware.tp",
     "must evenly divide the world size dp 1 x pp 3 x tp 1 = 3"),
    (["hardware.tp=4", "hardware.dp=2"], "hardware.dp", "--data-parallel-rpc-port"),
    (["engine.extra_args=[--data-parallel-backend,ray]"], "engine.extra_args[0]",
     "with --data-parallel-backend ray"),
    (["engine.extra_args=['--distributed-executor-backend=ray']"], "engine.extra_args[0]",
     "with --distributed-executor-backend ray"),
    (["engine.extra_args=[--max-num-batched-tokens,8192,--master-port,1234]"],
     "engine.extra_args[2]", "--master-port is specc's to set"),
])
def test_what_vllm_refuses_across_nodes_is_a_compile_error(overrides, path, says):
    result = compile_config(compose_config(VLLM_TWO_NODES + [
        "model_pair=llama3_8b_eagle3", "speculation=none", "sweep=null"] + overrides))
    found = [d for d in result.diagnostics if d.severity == "error"]
    assert [(d.code, d.path) for d in found] == [("TOPOLOGY_MULTINODE", path)], \
        [d.line() for d in found]
    assert says in found[0].message and found[0].hint


def test_a_rendezvous_port_past_the_last_port_fails_the_compile(monkeypatch):
    """The schema caps engine.base_port at 65000, so only a sweep of hundreds of servers
    runs out of ports: the top is lowered here to reach the check with a small plan."""
    from specc.compile import placement

    plan = _compiled(TWO_NODES).plan
    top = max(s.rendezvous_port for s in plan.servers)
    monkeypatch.setattr(placement, "MAX_PORT", top - 1)
    result = _compiled(TWO_NODES)
    assert result.plan is None
    (d,) = [d for d in result.diagnostics if d.severity == "error"]
    assert (d.code, d.path) == ("PLACEMENT_PORTS", "engine.base_port")
    assert d.hint == f"set engine.base_port <= {plan.servers[0].port - 1}"


def test_each_node_fills_in_its_own_rank_and_the_heads_address(monkeypatch):
    from specc.run import rank
    from specc.run.node import head_address, job_plan

    assert rank.fill(["--node-rank", "{node_rank}", "--dist-init-addr", "{head}:31000"],
                     rank="1", head="10.0.0.5") == ["--node-rank", "1", "--dist-init-addr",
                                                    "10.0.0.5:31000"]
    # follower args go to every rank but 0
    assert rank.fill(["serve", "{node_rank}"], rank="0", head="h", follower=["--headless"]) \
        == ["serve", "0"]
    assert rank.fill(["serve", "{node_rank}"], rank="2", head="h", follower=["--headless"]) \
        == ["serve", "2", "--headless"]
    assert rank.parse(["--head", "h", "--follower", "--headless", "--", "vllm", "--", "x"]) \
        == ("h", ["--headless"], ["vllm", "--", "x"])
    assert rank.parse(["--head", "h", "--follower", "--"]) is None
    assert rank.parse(["--follower", "x", "--", "vllm"]) is None   # no head
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
    # a vLLM server's follower args travel to each rank, which adds them on ranks > 0
    vplan = compile_config(compose_config(VLLM_TWO_NODES)).plan
    vsub = job_plan(vplan, [vplan.servers[0].id], {**env, "SPECC_HEAD_ADDR": "127.0.0.13"})
    assert list(vsub.servers[0].argv[11:20]) == rank_py + [
        "--head", "127.0.0.13", "--follower", "--headless", "--", "vllm"]
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
def test_the_report_warm_up_imports_plotting_in_its_own_thread_at_the_drivers_priority():
    """The driver warms the report's imports while Slurm schedules, in its own thread, never
    niced: a niced thread holding the import lock and the GIL starved on a busy machine
    and the driver hung after its last point."""
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
assert calls == [], calls
assert t.native_id != threading.get_native_id()
assert os.getpriority(os.PRIO_PROCESS, 0) == before, "the driver itself was niced"
print("ok")
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                       timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
