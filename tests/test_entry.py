"""`specc` / `python -m specc`: Hydra overrides compile, a bare first word runs a task."""

from __future__ import annotations

import pytest

from conftest import run_specc

TASKS = ("bench", "down", "logs", "plan", "report", "run", "status")


def test_help_shows_the_config_groups_and_the_tasks(tmp_path):
    code, out, err = run_specc(["--help"], tmp_path, run_dir=False)
    assert code == 0, err
    assert "== Configuration groups ==" in out and "experiment: " in out
    tasks = out.split("== Tasks", 1)[1]
    for name in TASKS:
        assert f"\n  {name} " in tasks, name


@pytest.mark.parametrize("task", TASKS)
def test_task_help(tmp_path, task):
    code, out, err = run_specc([task, "--help"], tmp_path, run_dir=False)
    assert code == 0, err
    assert f"Usage: specc [--core-opts] {task}" in out


def test_a_task_keeps_its_exit_code(tmp_path):
    code, out, err = run_specc(["status", "--run", str(tmp_path / "missing")], tmp_path,
                               run_dir=False)
    assert code == 2 and "no run dir" in err and "Traceback" not in err


def test_an_unknown_bare_word_is_one_line_exit_2(tmp_path):
    code, out, err = run_specc(["plna", "hardware.tp=4"], tmp_path, run_dir=False)
    assert code == 2
    (line,) = err.strip().splitlines()
    assert line.startswith("error CONFIG_OVERRIDE_SYNTAX at plna:") and "plan" in line
