"""Run dirs are what they say (issue 22 item 6): a folder without a plan.json is refused
before anything is read or written there; two multirun jobs whose subdirs collide do not
overwrite each other (the run-dir lock covers compile); every path a plan.json names stays
inside its run dir; a refused experiment name keeps its review under outputs/."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import REPO


def specc(*args, cwd=REPO, timeout=120):
    proc = subprocess.run([sys.executable, "-m", "specc", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)
    return proc.returncode, proc.stdout, proc.stderr


@pytest.mark.parametrize("task", ["status", "down", "logs"])
def test_a_folder_without_a_plan_is_not_a_run_dir(tmp_path, task):
    code, out, err = specc(task, "--run", tmp_path)
    assert code == 2 and err.strip().count("\n") == 0, (code, out, err)
    assert "RUN_DIR_INVALID" in err and "no plan.json" in err
    assert list(tmp_path.iterdir()) == []   # down wrote no .lock


def test_colliding_multirun_subdirs_refuse_the_second_job(tmp_path):
    sweep = tmp_path / "sweep"
    code, out, err = specc("-m", "+experiment=eagle3_sweep", "engine=sim", "baseline=false",
                           "benchmark.seed=1,2", f"hydra.sweep.dir={sweep}",
                           "hydra.sweep.subdir=same", timeout=300)
    assert code == 2, (out, err)
    lines = [ln for ln in err.splitlines() if "error" in ln]
    assert len(lines) == 1 and "RUN_DIR_TAKEN at hydra.sweep.subdir" in lines[0], err
    plan = json.loads((sweep / "same" / "plan.json").read_text())
    assert {b["params"]["seed"] for b in plan["benchmarks"]} == {1}   # the first job's, kept


def test_rerunning_the_same_sweep_into_its_dirs_is_allowed(tmp_path):
    sweep = tmp_path / "sweep"
    args = ("-m", "+experiment=eagle3_sweep", "engine=sim", "baseline=false",
            "benchmark.seed=1", f"hydra.sweep.dir={sweep}")
    assert specc(*args, timeout=300)[0] == 0
    code, out, err = specc(*args, timeout=300)
    assert code == 0, err


def _edited_plan(tmp_path, edit):
    run = tmp_path / "run"
    code, _, err = specc("+experiment=eagle3_sweep", "engine=sim", "baseline=false",
                         f"hydra.run.dir={run}")
    assert code == 0, err
    data = json.loads((run / "plan.json").read_text())
    edit(data)
    (run / "plan.json").write_text(json.dumps(data))
    return run


@pytest.mark.parametrize("edit,word", [
    (lambda d: d["servers"][0].update(log="../../escaped.log"), "log"),
    (lambda d: d["servers"][0].update(log="/tmp/escaped.log"), "log"),
    (lambda d: d["benchmarks"][0].update(id="../../escaped"), "benchmark"),
])
def test_a_plan_naming_a_path_outside_its_run_dir_is_refused(tmp_path, edit, word):
    run = _edited_plan(tmp_path, edit)
    code, out, err = specc("run", "--plan", run / "plan.json", "--accept-edited")
    assert code == 2 and "PLAN_UNREADABLE" in err and "inside the run dir" in err or \
        "not a plain file name" in err, err
    assert not (tmp_path / "escaped.log").exists() and not (tmp_path / "escaped").exists()
    assert "Traceback" not in err


def test_a_refused_experiment_name_writes_nothing_anywhere(tmp_path):
    conf = tmp_path / "conf" / "experiment"
    conf.mkdir(parents=True)
    text = (REPO / "conf" / "experiment" / "eagle3_sweep.yaml").read_text()
    (conf / "bad.yaml").write_text(text.replace("experiment: eagle3_sweep",
                                                "experiment: ../../../escaped"))
    cwd = tmp_path / "work"
    cwd.mkdir()
    code, out, err = specc("--config-dir", tmp_path / "conf", "+experiment=bad", "engine=sim",
                           cwd=cwd)
    assert code == 2 and "experiment" in err and "nothing written" in err, err
    assert not list(tmp_path.parent.glob("escaped*")) and not list(tmp_path.rglob("escaped*"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["conf", "work"]
    assert list(cwd.iterdir()) == []   # Hydra's run dir and the folders it made, removed


def test_two_compiles_in_one_second_get_two_run_dirs(tmp_path):
    """The default run dir is stamped to the second: a script that compiles, then compiles
    again (or runs) within it wrote the second plan and Hydra's config over the first. The
    dirs of the next seconds are taken here, so the compile lands in one of them whatever
    second it starts in, and must take the name beside it."""
    import time

    stamps = [time.strftime("%Y-%m-%d_%H-%M-%S", time.localtime(time.time() + s))
              for s in range(30)]
    for stamp in stamps:
        taken = tmp_path / "outputs" / "eagle3_sweep" / stamp
        taken.mkdir(parents=True)
        (taken / "plan.json").write_text("the earlier compile's\n")
    code, out, err = specc("+experiment=eagle3_sweep", cwd=tmp_path)
    assert code == 0, err
    made = [p for p in (tmp_path / "outputs" / "eagle3_sweep").iterdir()
            if p.name not in stamps]
    assert len(made) == 1 and made[0].name[:-2] in stamps and made[0].name.endswith("_2")
    assert (made[0] / "plan.json").is_file() and (made[0] / ".hydra").is_dir()
    assert all((tmp_path / "outputs" / "eagle3_sweep" / s / "plan.json").read_text()
               == "the earlier compile's\n" for s in stamps)
    assert f"outputs/eagle3_sweep/{made[0].name}/plan.json" in out
