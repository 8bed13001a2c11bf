"""Run-dir files and plan.json are untrusted (issue 22 item 3): opened non-blocking, regular
files only, size-capped, JSON nested 200,000 deep read as one line. Real FIFOs, /dev/zero,
directories; the CLI as a subprocess, with a timeout that a hang would hit."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO
from specc import files

DEEP = "[" * 200_000 + "]" * 200_000


def specc(*args, timeout=60):
    proc = subprocess.run([sys.executable, "-m", "specc", *map(str, args)], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout)
    return proc.returncode, proc.stdout, proc.stderr


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    run = tmp_path_factory.mktemp("compiled") / "run"
    code, _, err = specc("+experiment=eagle3_sweep", "engine=sim", "baseline=false",
                         f"hydra.run.dir={run}", timeout=120)
    assert code == 0, err
    return run


@pytest.fixture
def run_dir(compiled, tmp_path):
    d = tmp_path / "run"
    shutil.copytree(compiled, d)
    return d


def _one_line(code, out, err, *words):
    lines = [ln for ln in err.splitlines() if "error" in ln]
    assert code == 2, (code, out, err)
    assert len(lines) == 1 and "Traceback" not in err, err
    for w in words:
        assert w in lines[0], lines[0]


#: (task, the run-dir file it reads): `down` reads only state.json
FIFO_CASES = [(task, name) for task in ("status", "report", "run")
              for name in ("plan.json", "state.json", "results.jsonl")] + [("down", "state.json")]


@pytest.mark.parametrize("task,name", FIFO_CASES)
def test_a_fifo_in_the_run_dir_is_refused_not_waited_on(run_dir, name, task):
    target = run_dir / name
    target.unlink(missing_ok=True)
    os.mkfifo(target)
    args = ["--plan", run_dir / "plan.json"] if task == "run" else ["--run", run_dir]
    code, out, err = specc(task, *args)
    if task == "report" and name == "state.json":   # states are an extra: the report is made
        assert code == 0 and "state.json: a FIFO, not a regular file" in out, (out, err)
        return
    _one_line(code, out, err, "FIFO", name)


def test_run_plan_dev_zero_is_refused_at_once():
    code, out, err = specc("run", "--plan", "/dev/zero")
    _one_line(code, out, err, "PLAN_UNREADABLE", "character device")


def test_a_plan_that_is_a_directory_is_refused(tmp_path):
    (tmp_path / "plan.json").mkdir()
    code, out, err = specc("run", "--plan", tmp_path / "plan.json")
    _one_line(code, out, err, "PLAN_UNREADABLE", "a directory")


def test_deep_json_plan_is_one_line_not_a_recursion_error(run_dir):
    (run_dir / "plan.json").write_text(DEEP)
    for args in (["run", "--plan", run_dir / "plan.json"], ["status", "--run", run_dir],
                 ["report", "--run", run_dir]):
        code, out, err = specc(*args)
        _one_line(code, out, err, "nested too deeply")


def test_deep_json_state_is_one_line(run_dir):
    (run_dir / "state.json").write_text(DEEP)
    code, out, err = specc("down", "--run", run_dir)
    _one_line(code, out, err, "nested too deeply")


def test_a_deep_results_line_is_skipped_with_a_warning(run_dir):
    (run_dir / "results.jsonl").write_text(DEEP + "\n")
    code, out, err = specc("status", "--run", run_dir)
    assert code == 0 and "unparseable last line (line 1;" in err and "Traceback" not in err, err


def test_read_bounded_caps_size_and_kind(tmp_path):
    big = tmp_path / "big"
    with open(big, "wb") as f:
        f.truncate(4096)
    with pytest.raises(files.UnreadableFile, match="over the 1024 bytes"):
        files.read_bounded(big, 1024)
    assert len(files.read_bounded(big, 1024, tail=True)) == 1024
    with pytest.raises(FileNotFoundError):
        files.read_bounded(tmp_path / "none", 10)
    with pytest.raises(files.UnreadableFile, match="character device"):
        files.read_bounded("/dev/zero", 10)


def test_a_fifo_server_log_is_refused_by_logs(run_dir):
    (run_dir / "servers").mkdir(exist_ok=True)
    os.mkfifo(run_dir / "servers" / "s1.log")
    code, out, err = specc("logs", "--run", run_dir)
    _one_line(code, out, err, "FIFO")


def test_a_lock_that_is_a_fifo_does_not_hang_down(run_dir):
    (run_dir / ".lock").unlink(missing_ok=True)
    os.mkfifo(run_dir / ".lock")
    code, out, err = specc("down", "--run", run_dir)
    _one_line(code, out, err, "not a regular file")
    assert Path(run_dir / ".lock").is_fifo()


# --- the machine: open files against concurrency (issue 22 item 5) ---------------------

def _run_under_ulimit(plan, soft, hard):
    """`specc run` in a child whose RLIMIT_NOFILE is (soft, hard): a real ulimit."""
    import resource

    def limit():
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    proc = subprocess.run([sys.executable, "-m", "specc", "run", "--plan", str(plan),
                           "--accept-edited"], cwd=REPO, capture_output=True, text=True,
                          timeout=120, preexec_fn=limit)
    return proc.returncode, proc.stdout, proc.stderr


def _concurrency_plan(run_dir, concurrency):
    import json

    data = json.loads((run_dir / "plan.json").read_text())
    for b in data["benchmarks"]:
        b["params"]["concurrency"] = concurrency
    (run_dir / "plan.json").write_text(json.dumps(data))
    return run_dir / "plan.json"


def test_a_concurrency_over_the_hard_open_file_limit_is_one_line_and_nothing_launches(run_dir):
    plan = _concurrency_plan(run_dir, 3080)
    code, out, err = _run_under_ulimit(plan, 1024, 1024)
    assert code == 2, (out, err)
    errors = [ln for ln in err.splitlines() if ln.startswith("error")]
    assert len(errors) == 1 and "OPEN_FILES_LIMIT at benchmark.concurrency: concurrency 3080" \
        in errors[0] and "this shell allows 1024 (hard limit 1024)" in errors[0], err
    assert "Traceback" not in err
    assert not (run_dir / "servers").exists() and not (run_dir / "results.jsonl").exists()


def test_the_soft_limit_is_raised_to_the_hard_one_when_that_is_enough():
    """In a child: soft 1024, hard 4096, a plan at concurrency 3080 passes and the soft
    limit is now the hard one."""
    code = ("import resource, types\n"
            "resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 4096))\n"
            "from specc.run.executor import open_files_problem\n"
            "b = types.SimpleNamespace(params=types.SimpleNamespace(concurrency=3080))\n"
            "assert open_files_problem(types.SimpleNamespace(benchmarks=[b])) is None\n"
            "print(resource.getrlimit(resource.RLIMIT_NOFILE))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "(4096, 4096)", out.stderr
