"""specc on a real Slurm (fake nodes and GPUs on this host), with the simulator as the engine.

Each test compiles a small plan with cluster=slurm, runs the driver as a user
would (`inv run --plan`), disturbs it the way a cluster does (scancel from
outside, a node dying, a job that cannot start, Ctrl-C, SIGKILL of the driver)
and checks what reaches the run dir: every point exactly once, failures with
Slurm's verdict, nothing left in squeue, no process left.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import psutil
import pytest

from conftest import compose_config
from executor_helpers import PY, REPO, free_port_block, wait_for
from slurm_cluster import cluster, slurm_cluster  # noqa: F401 (fixtures)

#: One module: under pytest-xdist (`--dist loadfile`, pyproject.toml) its tests share one worker,
#: since this machine runs one throw-away cluster at a time.

#: The simulator fast: startup scaled down, tiny prompts, four requests per point.
SMALL = ["engine=sim", "engine.sim.time_scale=0.002", "benchmark.output_len=16",
         "benchmark.input_len=32", "benchmark.num_prompts=4", "model_pair.context_length=2048",
         "cluster=slurm", "cluster.poll_interval_s=0.5"]
#: Two servers (baseline + one EAGLE-3 setting), two points each.
TWO = ["model_pair=kimi_k25_eagle3",
       "+sweep={speculation:[{num_steps:3,topk:1,num_draft_tokens:4}],benchmark.concurrency:[1,2]}"]
#: Three servers: the baseline and two EAGLE-3 settings.
THREE = ["model_pair=kimi_k25_eagle3",
         "+sweep={speculation:[{num_steps:3,topk:1,num_draft_tokens:4},"
         "{num_steps:1,topk:1,num_draft_tokens:2}],benchmark.concurrency:[1,2]}"]
#: Points long enough to be cut in the middle (tokens come in real time: 1-2 s a point).
LONG = ["benchmark.output_len=160", "benchmark.num_prompts=1"]


# ----------------------------------------------------------------------------- helpers
def compile_slurm(run_dir: Path, overrides=()) -> dict:
    """Compile into run_dir as `python -m specc` does; returns plan.json (its Slurm jobs
    under "cluster")."""
    from specc.compile.emit import write_outputs
    from specc.compile.pipeline import compile_config

    config = compose_config(list(SMALL) + list(overrides))
    config["engine"]["base_port"] = free_port_block(8)
    result = compile_config(config)
    assert result.ok, [d.line() for d in result.diagnostics if d.severity == "error"]
    write_outputs(run_dir, result.plan, result.diagnostics, title="slurm test")
    return json.loads((run_dir / "plan.json").read_text())


def _inv(*args) -> list[str]:
    return [PY, "-m", "invoke", *map(str, args)]


def start_driver(run_dir: Path, *extra, env=None) -> subprocess.Popen:
    return subprocess.Popen(_inv("run", "--plan", run_dir / "plan.json", *extra), cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, **(env or {})})


def finish(proc: subprocess.Popen, timeout: float = 180) -> str:
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        raise AssertionError(f"driver still running after {timeout} s:\n{out[-4000:]}") from None
    return out


def run_driver(run_dir: Path, *extra, timeout: float = 180, env=None) -> tuple[int, str]:
    proc = start_driver(run_dir, *extra, env=env)
    out = finish(proc, timeout)
    return proc.returncode, out


def inv(*args, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(_inv(*args), cwd=REPO, capture_output=True, text=True, timeout=timeout)


def rows(run_dir: Path) -> list[dict]:
    path = run_dir / "results.jsonl"
    return [json.loads(ln) for ln in path.read_text().splitlines()] if path.exists() else []


def assert_each_point_once(run_dir: Path, plan: dict, *, all_of_them: bool = True) -> dict:
    counts = Counter(r["benchmark"] for r in rows(run_dir))
    assert all(n == 1 for n in counts.values()), f"duplicated rows: {counts}"
    if all_of_them:
        assert set(counts) == {b["id"] for b in plan["benchmarks"]}
    return {r["benchmark"]: r for r in rows(run_dir)}


def jobs(run_dir: Path) -> dict:
    return json.loads((run_dir / "slurm" / "jobs.json").read_text())["jobs"]


def node_state(run_dir: Path, server_id: str) -> dict:
    """The node entry's own state of a server (slurm/state/<job>.json)."""
    try:
        data = json.loads((run_dir / "slurm" / "state" / f"{server_id}.json").read_text())
    except (OSError, ValueError):
        return {}
    return (data.get("servers") or {}).get(server_id) or {}


def servers(plan: dict) -> tuple[str, str]:
    """(baseline id, the speculative server's id)."""
    base = next(s["id"] for s in plan["servers"] if s["baseline"])
    spec = next(s["id"] for s in plan["servers"] if not s["baseline"])
    return base, spec


def processes(run_dir: Path) -> list[psutil.Process]:
    """Live processes working in the run dir: node entries, simulators, clients."""
    found = []
    for p in psutil.process_iter(["pid", "status"]):
        try:
            if p.pid != os.getpid() and p.info["status"] != psutil.STATUS_ZOMBIE \
                    and Path(p.cwd()) == run_dir:
                found.append(p)
        except (psutil.Error, OSError):
            continue
    return found


def assert_no_process_left(run_dir: Path) -> None:
    left = wait_for(lambda: not processes(run_dir), timeout=15) or processes(run_dir)
    if left is not True:
        for p in left:
            try:
                p.kill()
            except psutil.Error:
                pass
        raise AssertionError(f"processes left: {[(p.pid, p.cmdline()[:4]) for p in left]}")


def ours_in_squeue(cluster, run_dir: Path) -> list[str]:
    ids = {j["id"] for j in jobs(run_dir).values() if j.get("id")}
    return [ln for ln in cluster.active_jobs() if ln.split("|")[0] in ids]


def hold_mid_sweep(cluster, run_dir: Path, plan: dict, server_ids, timeout: float = 120) -> dict:
    """Each server's job suspended (`scontrol suspend`) the moment it runs a point that is not
    its last: whatever the test does next lands with points still to run, however slow this
    machine is. Returns {server id: job id}."""
    last = {}
    for b in plan["benchmarks"]:
        last[b["server"]] = b["id"]
    held: dict[str, str] = {}

    def catch():
        for sid in server_ids:
            node = node_state(run_dir, sid)
            if sid not in held and node.get("status") == "benchmarking" \
                    and node.get("point") not in (None, last[sid]):
                held[sid] = jobs(run_dir)[sid]["id"]
                cluster.run("scontrol", "suspend", held[sid])
        return len(held) == len(server_ids)

    assert wait_for(catch, timeout=timeout, interval=0.02), \
        f"never caught mid-sweep: held {held}, node states " \
        f"{ {sid: node_state(run_dir, sid) for sid in server_ids} }"
    return held


class Output:
    """A process's output read as it comes (a thread), so a test can wait for one line."""

    def __init__(self, proc: subprocess.Popen):
        import threading

        self.proc, self.lines = proc, []
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line)

    def text(self) -> str:
        return "".join(self.lines)

    def wait_for(self, needle: str, timeout: float = 120) -> bool:
        return bool(wait_for(lambda: needle in self.text() or self.proc.poll() is not None,
                             timeout=timeout)) and needle in self.text()

    def finish(self, timeout: float = 180) -> str:
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            self.thread.join(10)
            raise AssertionError(f"driver still running after {timeout} s:\n{self.text()[-4000:]}") from None
        self.thread.join(30)
        return self.text()


def kill_job_on_node(job_id: str) -> None:
    """What a dead node does to the job's processes: gone at once, no teardown, nothing
    reported. The job's slurmstepd dies first: killed after its children, it had a moment to
    tell slurmctld the batch script died (a FAILED verdict instead of NODE_FAIL, under load)."""
    for p in psutil.process_iter(["cmdline"]):
        if f"[{job_id}.batch]" in " ".join(p.info["cmdline"] or []):
            tree = [p] + p.children(recursive=True)
            for q in tree:
                try:
                    q.kill()
                except psutil.Error:
                    pass


# ----------------------------------------------------------------------------- tests
def test_the_sweep_runs_its_servers_on_different_nodes_at_once(cluster, tmp_path):
    run_dir = tmp_path / "run"
    plan = compile_slurm(run_dir, ["+experiment=eagle3_sweep"])
    code, out = run_driver(run_dir)
    assert code == 0, out[-4000:]
    got = assert_each_point_once(run_dir, plan)
    assert all(r["status"] == "ok" for r in got.values())
    nodes = {j["nodes"] for j in jobs(run_dir).values()}
    assert len(nodes) >= 2, nodes
    spans = sorted((s["started_at"], s["stopped_at"])
                   for s in json.loads((run_dir / "state.json").read_text())["servers"].values())
    assert any(a[1] > b[0] for a, b in zip(spans, spans[1:])), f"no two servers at once: {spans}"
    assert "pending (job" in out and "running on n" in out and "completed" in out
    spec = [r for r in got.values() if r["benchmark"] not in
            {b["id"] for b in plan["benchmarks"] if b["baseline"] is None}]
    assert spec and all("speedup" in r["metrics"] for r in spec)   # baselines in other jobs
    assert (run_dir / "report.md").exists()
    assert not ours_in_squeue(cluster, run_dir)
    assert_no_process_left(run_dir)


def test_a_job_cancelled_from_outside_and_a_node_that_fails_fail_their_unfinished_points(
        cluster, tmp_path):
    """Three jobs at once: the baseline's runs to the end, one is scancelled from outside
    mid-point, the third's node dies (its slurmd and its processes) mid-point."""
    run_dir = tmp_path / "run"
    plan = compile_slurm(run_dir, THREE + LONG)
    base = next(s["id"] for s in plan["servers"] if s["baseline"])
    cancelled, lost = [s["id"] for s in plan["servers"] if not s["baseline"]]
    proc = start_driver(run_dir)
    node = None
    try:
        hold_mid_sweep(cluster, run_dir, plan, [cancelled, lost])
        cancelled_job, lost_job = jobs(run_dir)[cancelled]["id"], jobs(run_dir)[lost]
        node = lost_job["nodes"]
        cluster.run("scancel", cancelled_job)
        cluster.stop_slurmd(node)
        kill_job_on_node(lost_job["id"])
        out = finish(proc)
    finally:
        proc.kill()
        if node:
            cluster.start_slurmd(node)   # it has slurmctld's orphan of the lost job killed
    assert proc.returncode == 3, out[-3000:]
    got = assert_each_point_once(run_dir, plan)
    for sid, why in ((cancelled, f"slurm job {cancelled_job} CANCELLED"),
                     (lost, f"slurm job {lost_job['id']} NODE_FAIL on {node}: its node failed")):
        mine = [r for r in got.values() if r["server"] == sid]
        assert mine and all(r["status"] == "failed" and why in r["reason"] for r in mine), mine
    assert all(r["status"] == "ok" for r in got.values() if r["server"] == base)
    assert "CANCELLED" in out and "NODE_FAIL" in out
    assert not ours_in_squeue(cluster, run_dir)
    assert_no_process_left(run_dir)


def test_a_job_that_cannot_start_shows_why_then_fails_at_its_pending_deadline(cluster, tmp_path):
    run_dir = tmp_path / "run"
    plan = compile_slurm(run_dir, TWO + ["cluster.sbatch_args=['--begin=now+3600']",
                                         "cluster.pending_timeout_s=3"])
    code, out = run_driver(run_dir)
    assert code == 3, out[-3000:]
    assert "pending (BeginTime)" in out
    got = assert_each_point_once(run_dir, plan)
    assert all(r["status"] == "failed" and "still pending after 3 s (BeginTime)" in r["reason"]
               for r in got.values()), got
    assert not ours_in_squeue(cluster, run_dir)


def test_ctrl_c_cancels_every_job_and_the_rerun_submits_only_unfinished_points(cluster, tmp_path):
    run_dir = tmp_path / "run"
    plan = compile_slurm(run_dir, TWO + LONG)
    base, spec = servers(plan)
    proc = start_driver(run_dir)
    try:
        # both held mid-sweep (suspended: Slurm delivers no SIGTERM to them, so the driver
        # scancels them after its grace): points are left to rerun however slow this machine
        hold_mid_sweep(cluster, run_dir, plan, [base, spec])
        first = {name: j["id"] for name, j in jobs(run_dir).items()}
        proc.send_signal(signal.SIGINT)
        out = finish(proc)
    finally:
        proc.kill()
    assert proc.returncode == 130, out[-3000:]
    assert "cancelling 2 job(s)" in out and "none left in squeue" in out
    assert not ours_in_squeue(cluster, run_dir)
    assert_no_process_left(run_dir)
    done = assert_each_point_once(run_dir, plan, all_of_them=False)
    assert all(r["status"] == "ok" for r in done.values()), "a cut point got a row"
    unfinished = {b["server"] for b in plan["benchmarks"] if b["id"] not in done}
    assert unfinished

    code, out = run_driver(run_dir)
    assert code == 0, out[-3000:]
    got = assert_each_point_once(run_dir, plan)
    assert all(r["status"] == "ok" for r in got.values())
    resubmitted = {name for name, j in jobs(run_dir).items() if j["id"] != first[name]}
    assert resubmitted == unfinished
    assert_no_process_left(run_dir)


def test_sigkill_of_the_driver_then_rerun_follows_the_jobs_it_left(cluster, tmp_path):
    run_dir = tmp_path / "run"
    plan = compile_slurm(run_dir, TWO + LONG)
    base, spec = servers(plan)
    proc = start_driver(run_dir)
    held = {}
    try:
        held = hold_mid_sweep(cluster, run_dir, plan, [spec])   # alive until the rerun follows it
        first = {name: j["id"] for name, j in jobs(run_dir).items()}
    finally:
        proc.kill()
        proc.wait()
    try:
        status = inv("status", "--run", run_dir)
        assert status.returncode == 0, status.stderr
        line = next((ln for ln in status.stdout.splitlines() if ln.split()[:1] == [first[spec]]),
                    "")
        assert "SUSPENDED" in line, status.stdout
        rerun = Output(start_driver(run_dir))
        assert rerun.wait_for(f"following job {first[spec]}"), rerun.text()[-3000:]
    finally:
        for job_id in held.values():
            cluster.run("scontrol", "resume", job_id, check=False)
    out = rerun.finish()
    assert rerun.proc.returncode == 0, out[-3000:]
    got = assert_each_point_once(run_dir, plan)
    assert all(r["status"] == "ok" for r in got.values())
    assert jobs(run_dir)[spec]["id"] == first[spec]   # followed, not submitted twice
    assert not ours_in_squeue(cluster, run_dir)
    assert_no_process_left(run_dir)


def test_inv_down_cancels_a_run_left_without_its_driver_and_verifies(cluster, tmp_path):
    run_dir = tmp_path / "run"
    plan = compile_slurm(run_dir, TWO + LONG)
    base, spec = servers(plan)
    proc = start_driver(run_dir)
    try:
        hold_mid_sweep(cluster, run_dir, plan, [spec])   # still in squeue for `down`
    finally:
        proc.kill()
        proc.wait()
    logs = inv("logs", "--run", run_dir, "--server", spec)
    assert logs.returncode == 0 and f"{spec}-" in logs.stdout and ".out <==" in logs.stdout
    down = inv("down", "--run", run_dir)
    assert down.returncode == 0, down.stdout + down.stderr
    assert "verified gone from squeue" in down.stdout
    assert not ours_in_squeue(cluster, run_dir)
    assert_no_process_left(run_dir)
    again = inv("down", "--run", run_dir)
    assert again.returncode == 0 and "no Slurm job running" in again.stdout
    assert not any(r["status"] == "failed" for r in rows(run_dir))
    assert plan


def test_pack_runs_a_waves_servers_side_by_side_in_one_job(cluster, tmp_path):
    run_dir = tmp_path / "run"
    llama = ["model_pair=llama3_8b_eagle3"] + THREE[1:]
    plan = compile_slurm(run_dir, llama + ["hardware.tp=1", "cluster.pack=true"])
    assert len(plan["cluster"]["jobs"]) == 1 and len(plan["cluster"]["jobs"][0]["servers"]) == 3
    code, out = run_driver(run_dir)
    assert code == 0, out[-3000:]
    got = assert_each_point_once(run_dir, plan)
    assert all(r["status"] == "ok" for r in got.values())
    (name, job), = jobs(run_dir).items()
    node = json.loads((run_dir / "slurm" / "state" / f"{name}.json").read_text())["servers"]
    gpus = [tuple(s["gpus"]) for s in node.values()]
    assert len(gpus) == 3 and len(set(gpus)) == 3   # each its own GPU of the job's three
    spans = sorted((s["started_at"], s["stopped_at"]) for s in node.values())
    assert all(a[1] > b[0] for a, b in zip(spans, spans[1:]))   # side by side
    assert_no_process_left(run_dir)


#: Servers of 8 GPUs on nodes of 4: each spans 2 nodes (SGLang's --nnodes 2).
TWO_NODES = ["model_pair=llama3_8b_eagle3", "hardware.gpus_per_node=4", "hardware.nodes=2",
             "hardware.tp=8", "cluster.nodes_per_server=2"] + TWO[1:]


def test_a_two_node_server_runs_its_points_with_a_rank_on_each_node(cluster, tmp_path):
    run_dir = tmp_path / "run"
    plan = compile_slurm(run_dir, TWO_NODES)
    assert [j["nodes"] for j in plan["cluster"]["jobs"]] == [2, 2]
    code, out = run_driver(run_dir)
    assert code == 0, out[-3000:]
    got = assert_each_point_once(run_dir, plan)
    assert all(r["status"] == "ok" for r in got.values())
    for server in plan["servers"]:
        log = (run_dir / server["log"]).read_text()
        # one rank per node, each rank from its own task (not the batch shell's 0 twice)
        ranks = sorted(ln.split(" is rank ")[1].split()[0] for ln in log.splitlines()
                       if " is rank " in ln)
        assert ranks == ["0", "1"], log[:2000]
        assert "node 1 joined (2/2 nodes)" in log
        assert "TP4] Init parallel ends" in log and "TP0] Init parallel ends" in log
    assert not ours_in_squeue(cluster, run_dir)
    assert_no_process_left(run_dir)


def test_a_node_that_never_joins_is_a_stall_in_the_join_phase(cluster, tmp_path):
    run_dir = tmp_path / "run"
    plan = compile_slurm(run_dir, TWO_NODES + ["readiness.phase_budget_floor_s=3"])
    phases = {p["name"]: p for p in plan["servers"][0]["readiness"]["phases"]}
    join = phases["join"]
    assert join["budget_s"] < phases["launch"]["budget_s"]   # its own budget, not the launch's
    code, out = run_driver(run_dir, env={"SPECC_SIM_FAULT": "hang@join"})
    assert code != 0
    got = assert_each_point_once(run_dir, plan)
    assert all(r["status"] == "failed" and "stalled in join" in r["reason"]
               and f"(budget {join['budget_s']:g} s)" in r["reason"] for r in got.values()), got
    log = (run_dir / plan["servers"][0]["log"]).read_text()
    assert "node 1 never joins" in log
    assert not ours_in_squeue(cluster, run_dir)
    assert_no_process_left(run_dir)


def test_a_rank_that_crashes_on_another_node_fails_the_server(cluster, tmp_path):
    run_dir = tmp_path / "run"
    plan = compile_slurm(run_dir, TWO_NODES)
    code, out = run_driver(run_dir, env={"SPECC_SIM_FAULT": "crash@join"})
    assert code != 0
    got = assert_each_point_once(run_dir, plan)
    # rank 1's traceback is a fatal line of the server's log, though rank 0 never failed
    assert all(r["status"] == "failed" and r["reason"].startswith(
        "server failed: fatal log line in join: ") and "on node 1" in r["reason"]
        for r in got.values()), got
    assert not ours_in_squeue(cluster, run_dir)
    assert_no_process_left(run_dir)


#: A vLLM server of 8 GPUs on nodes of 4: rank 0 serves, rank 1 runs --headless.
VLLM_TWO_NODES = ["engine=vllm", "model_pair=llama3_8b_eagle3", "speculation=none",
                  "model_pair.context_length=2048", "benchmark.num_prompts=4",
                  "benchmark.input_len=32", "benchmark.output_len=16", "cluster=slurm",
                  "cluster.poll_interval_s=0.5", "hardware.gpus_per_node=4", "hardware.nodes=2",
                  "hardware.tp=8", "cluster.nodes_per_server=2"]

#: Stands in for `vllm` on every node: records the command it was started with, and where.
RECORDER = """#!{python}
import json, os, sys
out = os.path.join({out!r}, "rank-" + os.environ["SLURM_NODEID"] + ".json")
with open(out, "w") as f:
    json.dump({{"argv": sys.argv[1:], "node": os.environ.get("SLURMD_NODENAME")}}, f)
"""


def _real_vllm_python() -> Path:
    """The interpreter of the drift check's venv holding the released vLLM (built once and
    cached; tests/drift builds it first in a full run)."""
    from specc.engines import get_engine

    sys.path.insert(0, str(REPO / "tests" / "drift"))
    try:
        from venvs import RegistryUnreachable, ensure_venv
    finally:
        sys.path.pop(0)
    version = get_engine("vllm").pinned_version
    try:
        return ensure_venv("vllm", version, log=print)
    except RegistryUnreachable as e:
        pytest.skip(f"package registry unreachable, cannot fetch vllm=={version}: {e}")


@pytest.mark.drift   # the released vLLM's venv (GBs on a fresh machine): the drift stage
def test_a_two_node_vllm_server_gets_the_head_command_on_rank_0_and_headless_on_rank_1(
        cluster, tmp_path):
    """vLLM cannot serve here (no GPU, no CUDA build), so the program `vllm` is swapped, and
    only it: a recorder named `vllm` first on PATH, run by the interpreter of a venv that
    holds the released vLLM. So the node entry's preflight reads the real release and parses
    both commands with vLLM's own parser on the node. Everything else is the real path of a
    2-node vLLM plan: `inv run` submits the compiled job with sbatch, the node entry finds
    the head's address (Slurm's NodeAddr of the job's first node) and launches one srun task
    per node through specc.run.rank, which fills in each task's rank and adds --headless
    on rank 1. The recorder then exits, so the server fails its points: only the commands
    are checked here."""
    from specc.compile.emit import write_outputs
    from specc.compile.pipeline import compile_config
    from specc.run.rank import fill

    run_dir, bin_dir, out = tmp_path / "run", tmp_path / "bin", tmp_path / "recorded"
    bin_dir.mkdir()
    out.mkdir()
    (bin_dir / "vllm").write_text(RECORDER.format(python=_real_vllm_python(), out=str(out)))
    (bin_dir / "vllm").chmod(0o755)
    config = compose_config(VLLM_TWO_NODES)
    config["engine"]["base_port"] = free_port_block(8)
    result = compile_config(config)
    assert result.ok, [d.line() for d in result.diagnostics if d.severity == "error"]
    write_outputs(run_dir, result.plan, result.diagnostics, title="slurm test")
    (server,) = result.plan.servers
    assert server.nodes == 2 and server.follower_args == ("--headless",)
    code, log = run_driver(run_dir, env={"PATH": f"{bin_dir}:{os.environ['PATH']}"})
    assert code != 0   # the recorder serves nothing
    got = {int(p.stem.split("-")[1]): json.loads(p.read_text()) for p in out.glob("rank-*.json")}
    assert sorted(got) == [0, 1], (got, log[-3000:])
    assert got[0]["node"] != got[1]["node"]   # one rank per node
    head = cluster.run("scontrol", "show", "node", got[0]["node"]).stdout.split(
        "NodeAddr=")[1].split()[0]
    assert head.startswith("127.0.0.1")   # the job's first node, as Slurm addresses it
    argv = list(server.argv)
    assert ["vllm", *got[0]["argv"]] == fill(argv, rank="0", head=head)
    assert ["vllm", *got[1]["argv"]] == fill(argv, rank="1", head=head) + ["--headless"]
    i = got[1]["argv"].index("--node-rank")
    assert got[1]["argv"][i:i + 6] == ["--node-rank", "1", "--master-addr", head,
                                       "--master-port", str(server.rendezvous_port)]
    assert "--headless" not in got[0]["argv"]
    assert not ours_in_squeue(cluster, run_dir)
    assert_no_process_left(run_dir)


# -- Hydra multirun through hydra-submitit-launcher ------------------------------------------
def test_submitit_slurm_runs_two_experiments_each_in_its_own_slurm_job(cluster, tmp_path):
    """`specc -m hydra/launcher=submitit_slurm ...`: each multirun job (compile, then execute
    with cluster=local) runs inside its own Slurm allocation."""
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    from executor_helpers import results, run_cli, tiny_experiments, wait_no_sim

    ports = {"tiny_a": free_port_block(1), "tiny_b": free_port_block(1)}
    conf = tiny_experiments(tmp_path / "conf", ports)
    sweep = tmp_path / "sweep"
    res = run_cli(["-m", "hydra/launcher=submitit_slurm", "hydra.launcher.partition=debug",
                   "hydra.launcher.gpus_per_node=8", "hydra.launcher.timeout_min=10",
                   "--config-dir", str(conf), "+experiment=tiny_a,tiny_b", "execute=true",
                   f"hydra.sweep.dir={sweep}"], timeout=240, env=cluster.env)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    assert "Traceback" not in out
    assert "submitted 2 job(s) through submitit_slurm: " in res.stdout
    ran_on = {}
    for job, name in (("0", "tiny_a"), ("1", "tiny_b")):
        run_dir = sweep / job
        assert {"plan.json", "results.jsonl", "report.md", "review.md"} <= \
            {p.name for p in run_dir.iterdir()}
        assert json.loads((run_dir / "plan.json").read_text())["experiment"] == name
        assert [r["status"] for r in results(run_dir)] == ["ok"]
        state = json.loads((run_dir / "state.json").read_text())
        assert all(s["status"] for s in state["servers"].values())
        # the job's own output (submitit's log) shows it ran in a Slurm allocation
        logs = list((sweep / ".submitit").glob(f"*_{job}/*_{job}_0_log.out"))
        assert len(logs) == 1, list((sweep / ".submitit").rglob("*"))
        ran_on[job] = logs[0].read_text()
        assert f"report: {run_dir}/report.md" in ran_on[job]
    assert (sweep / "report.md").exists() and (sweep / "review.md").exists()
    combined = json.loads((sweep / "report.json").read_text())
    assert combined["summary"]["ok"] == 2 and combined["summary"]["failed"] == 0
    assert not cluster.active_jobs()
    assert not wait_no_sim(tmp_path, ports.values())
    left = [p.pid for p in psutil.process_iter(["cmdline"])
            if str(sweep) in " ".join(p.info["cmdline"] or []) and p.pid != os.getpid()]
    assert not left, left


def test_search_tune_submits_one_job_at_a_time_and_resumes_after_a_sigkill(cluster, tmp_path):
    """search=tune on Slurm: the driver submits the search's next server as a job once the
    last ended; SIGKILLed mid-search, the rerun follows the live job and starts nothing
    that finished."""
    run_dir = tmp_path / "run"
    plan = compile_slurm(run_dir, [
        "model_pair=kimi_k25_eagle3", "search=tune", "search.max_starts=3",
        "+sweep={speculation:[{num_steps:1,topk:1,num_draft_tokens:2},"
        "{num_steps:3,topk:1,num_draft_tokens:4},{num_steps:3,topk:4,num_draft_tokens:8},"
        "{num_steps:5,topk:4,num_draft_tokens:16}],benchmark.concurrency:[1,2]}", *LONG])
    base, probe = plan["search"]["baseline"], plan["search"]["probe"]
    proc = start_driver(run_dir)
    held = {}
    try:   # the probe held mid-sweep (suspended): alive until the rerun follows it
        held = hold_mid_sweep(cluster, run_dir, plan, [probe], timeout=180)
        first = {name: j["id"] for name, j in jobs(run_dir).items() if j.get("id")}
        assert set(first) == {base, probe}   # one at a time: nothing else submitted yet
    finally:
        proc.kill()
        proc.wait()
    try:
        rerun = Output(start_driver(run_dir))
        assert rerun.wait_for(f"following job {first[probe]}"), rerun.text()[-3000:]
    finally:
        for job_id in held.values():
            cluster.run("scontrol", "resume", job_id, check=False)
    out = rerun.finish(timeout=240)
    assert rerun.proc.returncode == 0, out[-3000:]
    tune = json.loads((run_dir / "tune.json").read_text())
    submitted = {name: j for name, j in jobs(run_dir).items() if j.get("id")
                 and not name.endswith("-verify")}   # the deployed command's: after the search
    assert set(submitted) == {s["server"] for s in tune["starts"]}
    assert 2 <= tune["server_starts"] <= 3 and tune["grid_server_starts"] == 5
    assert submitted[base]["id"] == first[base] and submitted[probe]["id"] == first[probe]
    ordered = sorted(submitted.values(), key=lambda j: j["submitted_at"])
    assert all(a["ended_at"] <= b["submitted_at"] for a, b in zip(ordered, ordered[1:])
               if a["id"] != first[probe])   # sequential (the followed job excepted)
    got = assert_each_point_once(run_dir, plan, all_of_them=False)
    assert {r["server"] for r in got.values()} == set(submitted)
    assert all(r["status"] == "ok" for r in got.values())
    assert "## Decision" in (run_dir / "report.md").read_text()
    assert not ours_in_squeue(cluster, run_dir)
    assert_no_process_left(run_dir)


def test_search_tune_verifies_the_deployed_command_in_one_more_job(cluster, tmp_path):
    """After the search, the deployed command runs as one more job on the resources of the
    job of the server it is shaped as; the node renders the command again from the sealed
    plan and deploy.json's bands. Its points are paired with the baseline's; a rerun does
    not submit it again."""
    run_dir = tmp_path / "run"
    plan = compile_slurm(run_dir, [
        "model_pair=kimi_k25_eagle3", "search=tune", "engine.sim.acceptance=0.9",
        "+sweep={speculation:[{num_steps:1,topk:1,num_draft_tokens:2},"
        "{num_steps:3,topk:1,num_draft_tokens:4}],benchmark.concurrency:[1,2]}"])
    code, out = run_driver(run_dir, timeout=240)
    assert code == 0, out[-3000:]
    deploy = json.loads((run_dir / "deploy.json").read_text())
    tune = json.loads((run_dir / "tune.json").read_text())
    assert "verify_note" not in deploy, deploy.get("verify_note")
    sid = deploy["verify_server"]
    assert tune["deployed"]["server"] == sid and set(deploy["verify"]) == {"1", "2"}
    for v in deploy["verify"].values():   # each point paired with the baseline's
        lo, hi = v["interval"]
        assert lo <= v["speedup"] <= hi
    submitted = {name: j for name, j in jobs(run_dir).items() if j.get("id")}
    verify = [name for name in submitted if name.endswith("-verify")]
    assert len(verify) == 1 and submitted[verify[0]]["servers"] == [sid]
    search_jobs = [j for name, j in submitted.items() if name not in verify]
    assert {s["server"] for s in tune["starts"]} == {j["servers"][0] for j in search_jobs}
    # after every search job ended (one job at a time)
    assert max(j["ended_at"] for j in search_jobs) <= submitted[verify[0]]["submitted_at"]
    script = (run_dir / "slurm" / f"{verify[0]}.sbatch").read_text()
    template = verify[0][:-len("-verify")]
    assert f"--job {template} --verify" in script
    assert template in {j["name"] for j in plan["cluster"]["jobs"]}
    rows = [json.loads(x) for x in (run_dir / "verify" / "results.jsonl").read_text().splitlines()]
    assert {r["server"] for r in rows} == {sid} and all(r["status"] == "ok" for r in rows)
    assert (run_dir / "servers" / f"{sid}.log").exists()
    assert "verify_note" not in json.loads((run_dir / "report.json").read_text())["deploy"]
    assert not ours_in_squeue(cluster, run_dir)
    assert_no_process_left(run_dir)
    # a rerun submits nothing again, the verification included
    code, out = run_driver(run_dir, timeout=120)
    assert code == 0, out[-3000:]
    again = {name: j["id"] for name, j in jobs(run_dir).items() if j.get("id")}
    assert again == {name: j["id"] for name, j in submitted.items()}
    assert json.loads((run_dir / "deploy.json").read_text())["verify"] == deploy["verify"]
