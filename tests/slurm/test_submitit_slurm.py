"""`specc -m hydra/launcher=submitit_slurm ...` on a real Slurm (fake nodes on this host): each
multirun job (compile, then execute with cluster=local) runs inside its own Slurm allocation."""

from __future__ import annotations

import json
import os

import psutil
import pytest

from executor_helpers import free_port_block, results, run_cli, tiny_experiments, wait_no_sim
from slurm_cluster import cluster, slurm_cluster  # noqa: F401 (fixtures)

pytest.importorskip("hydra_plugins.hydra_submitit_launcher")


def test_two_experiments_each_in_its_own_slurm_job(cluster, tmp_path):  # noqa: F811
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
