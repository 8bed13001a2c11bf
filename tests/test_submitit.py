"""Hydra multirun through hydra-submitit-launcher, without Slurm: its `submitit_local` executor
runs each job in its own process, as `submitit_slurm` runs it in its own allocation (that one
is tested on a real Slurm in tests/slurm/test_slurm.py). What travels back to the
login process: each job's exit code (a failed point is still exit 3) and its run dir for the
combined report; what is refused before anything is submitted: one line each, exit 2."""

from __future__ import annotations

import json
import sys

import pytest

from executor_helpers import results, run_cli, tiny_experiments, wait_no_sim

pytest.importorskip("hydra_plugins.hydra_submitit_launcher")


def _main(argv, capsys):
    from specc.__main__ import main

    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_missing_plugin_is_one_line_with_the_pip_command(monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(sys.modules, "hydra_plugins.hydra_submitit_launcher", None)
    code, out, err = _main(["-m", "hydra/launcher=submitit_slurm", "+experiment=eagle3_sweep",
                            f"hydra.sweep.dir={tmp_path / 'sweep'}"], capsys)
    assert code == 2
    assert err.strip().splitlines() == [
        "error LAUNCHER_MISSING at hydra/launcher: submitit_slurm needs the "
        "hydra-submitit-launcher package, which is not installed (fix: pip install "
        "'specc[slurm]', or pip install hydra-submitit-launcher)"]
    assert not (tmp_path / "sweep").exists()


@pytest.mark.parametrize("argv, code_name", [
    (["hydra/launcher=submitit_slurm"], "LAUNCHER_NEEDS_MULTIRUN"),
    (["-m", "hydra/launcher=submitit_local", "cluster=local,slurm"], "LAUNCHER_CLUSTER"),
    (["-m", "hydra/launcher=submitit_local", "+engine.env.HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz0123"],
     "SECRET_IN_OVERRIDE"),
])
def test_refused_before_anything_is_submitted(argv, code_name, capsys, tmp_path):
    code, out, err = _main([*argv, "+experiment=llama3_eagle3_pack", "engine=sim",
                            f"hydra.sweep.dir={tmp_path / 'sweep'}"], capsys)
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error {code_name} at "), err
    assert "Traceback" not in out + err and "hf_abcdef" not in out + err
    assert not (tmp_path / "sweep" / ".submitit").exists()   # nothing submitted
    assert not list(tmp_path.rglob("plan.json"))


def test_failed_point_in_one_job_is_exit_3_and_both_jobs_are_combined(tmp_path, guard):
    conf = tiny_experiments(tmp_path / "conf", {"tiny_a": guard.port(1), "tiny_b": guard.port(1)},
                            env={"tiny_b": {"SPECC_SIM_FAULT": "crash@load_weights"}})
    sweep = tmp_path / "sweep"
    res = run_cli(["-m", "hydra/launcher=submitit_local", "--config-dir", str(conf),
                   "+experiment=tiny_a,tiny_b", "execute=true", f"hydra.sweep.dir={sweep}"],
                  timeout=240)
    assert res.returncode == 3, res.stdout + res.stderr
    assert "Traceback" not in res.stdout + res.stderr
    assert "job 0 (submitit_local job " in res.stdout and ": exit 0; run dir " in res.stdout
    assert "job 1 (submitit_local job " in res.stdout and ": exit 3; run dir " in res.stdout
    ok, failed = results(sweep / "0"), results(sweep / "1")
    assert [r["status"] for r in ok] == ["ok"] and [r["status"] for r in failed] == ["failed"]
    for job in ("0", "1"):   # the jobs' processes wrote their own run dirs
        assert {"plan.json", "results.jsonl", "report.md", "state.json"} <= \
            {p.name for p in (sweep / job).iterdir()}
    combined = json.loads((sweep / "report.json").read_text())
    assert [j["job"] for j in combined["jobs"]] == ["0", "1"]
    assert combined["summary"]["ok"] == 1 and combined["summary"]["failed"] == 1
    assert len(list((sweep / ".submitit").glob("*/*_result.pkl"))) == 2
    assert not wait_no_sim(tmp_path, guard.ports)
