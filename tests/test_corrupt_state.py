"""Corrupt or foreign files in a run dir, a read-only run dir, a full disk (issue 8 item 6).

Each gives one clear line and a non-zero exit the user can recover from, never a
traceback; state.json that cannot be read is never taken for "nothing recorded"
(it is moved aside and the run refused); finished rows are never lost. The
read-only and full filesystems are real (a small tmpfs, mounted as root).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid

import pytest

from executor_helpers import PY, REPO, SimGuard, compile_plan, results, wait_for



def _specc(*args, timeout=90) -> subprocess.CompletedProcess:
    return subprocess.run([PY, "-m", "specc", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout)


def _one_error_line(res: subprocess.CompletedProcess, prefix: str) -> str:
    assert "Traceback" not in res.stderr + res.stdout, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("error ")]
    assert len(lines) == 1 and lines[0].startswith(prefix), res.stderr
    return lines[0]


@pytest.fixture(scope="module")
def planned(tmp_path_factory):
    """A compiled one-server plan (the port is never bound by these tests: nothing starts)."""
    root = tmp_path_factory.mktemp("corrupt")
    src = root / "src"
    compile_plan(src, ["baseline=false"], port=SimGuard(root).port(1))
    return src


def _copy(planned, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(planned, run_dir)
    return run_dir


ROW = {"benchmark": "earlier-point", "server": "s", "status": "ok", "reason": None,
       "metrics": {"output_throughput": 1.0}, "params": {}}
STATES = {
    "not JSON": ('{"servers": {"a": {"pid": 12', "is not JSON"),
    "a list": ('[{"pid": 1234}]', "holds a JSON list, not an object"),
    "servers a list": ('{"servers": [1, 2]}', "'servers' is a list"),
    "pid a string": ('{"servers": {"a": {"pid": "1234", "status": "ready"}}}',
                     "server 'a': pid is '1234', not a non-negative integer"),
    "start time a string": ('{"servers": {"a": {"pid": 1, "started_at": "yesterday"}}}',
                            "started_at is 'yesterday', not a number"),
}


@pytest.mark.parametrize("case", STATES)
def test_unreadable_state_json_is_moved_aside_and_the_run_refused(case, planned, tmp_path):
    run_dir = _copy(planned, tmp_path)
    text, why = STATES[case]
    (run_dir / "state.json").write_text(text)
    (run_dir / "results.jsonl").write_text(json.dumps(ROW) + "\n")
    res = _specc("run", "--plan", str(run_dir / "plan.json"))
    assert res.returncode == 2
    line = _one_error_line(res, "error STATE_UNREADABLE: ")
    assert why in line and "moved it aside to state.json.corrupt-" in line
    (aside,) = run_dir.glob("state.json.corrupt-*")
    assert aside.read_text() == text and aside.name in line
    assert not (run_dir / "state.json").exists()
    assert not (run_dir / "servers").exists()                         # nothing launched
    assert (run_dir / "results.jsonl").read_text() == json.dumps(ROW) + "\n"


def test_status_reports_an_unreadable_state_and_down_moves_it_aside(planned, tmp_path):
    run_dir = _copy(planned, tmp_path)
    (run_dir / "state.json").write_text("[]")
    status = _specc("status", "--run", str(run_dir))
    assert status.returncode == 2 and "STATE_UNREADABLE" in status.stderr
    assert "Traceback" not in status.stderr and (run_dir / "state.json").exists()
    down = _specc("down", "--run", str(run_dir))
    assert down.returncode == 2 and "Traceback" not in down.stderr
    assert "moved it aside" in down.stderr and list(run_dir.glob("state.json.corrupt-*"))


PLANS = {"truncated": lambda p: p.write_text(p.read_text()[:200]),
         "a list": lambda p: p.write_text("[1, 2, 3]"),
         "a directory": lambda p: (p.unlink(), p.mkdir())}


@pytest.mark.parametrize("case", PLANS)
def test_an_unreadable_plan_is_one_line_for_every_task(case, planned, tmp_path):
    run_dir = _copy(planned, tmp_path)
    PLANS[case](run_dir / "plan.json")
    res = _specc("run", "--plan", str(run_dir / "plan.json"))
    assert res.returncode == 2
    _one_error_line(res, f"error PLAN_UNREADABLE at {run_dir / 'plan.json'}: ")
    for task in ("status", "report"):
        res = _specc(task, "--run", str(run_dir))
        assert res.returncode == 2, (task, res.stdout, res.stderr)
        assert "Traceback" not in res.stderr and res.stderr.startswith("error "), res.stderr


def test_result_lines_that_are_not_rows_are_skipped_and_kept(guard, tmp_path):
    """Valid JSON that is not a row: a warning each, the finished row not rerun, and a
    rewrite of results.jsonl (speedups filled in) keeps every line as written."""
    run_dir = tmp_path / "run"
    plan = compile_plan(run_dir, ["hardware.tp=1"], port=guard.port(2))
    # a speculative point finished before its baseline: its speedup comes by a rewrite
    spec = next(b for b in plan.benchmarks if b.baseline is not None)
    done = {**ROW, "benchmark": spec.id, "server": spec.server, "params": spec.params.to_json(),
            "finished_at": 1.0, "metrics": {"output_throughput": 100.0}}
    foreign = ['[1, 2]', '"a string"', '{"benchmark": 5, "status": "ok"}',
               '{"benchmark": "x", "status": "skipped"}']
    (run_dir / "results.jsonl").write_text("\n".join([*foreign, json.dumps(done)]) + "\n")
    res = _specc("run", "--plan", str(run_dir / "plan.json"))
    assert res.returncode == 0, res.stderr[-2000:]
    assert "Traceback" not in res.stderr
    assert res.stderr.count("is not a result row") + res.stderr.count("not a result row") >= 4
    lines = (run_dir / "results.jsonl").read_text().splitlines()
    assert lines[:4] == foreign
    rows = {r["benchmark"]: r for r in map(json.loads, lines[4:])}
    assert rows[spec.id]["finished_at"] == 1.0             # not rerun
    assert set(rows) == {b.id for b in plan.benchmarks}
    assert "speedup" in rows[spec.id]["metrics"]           # the rewrite happened


# -- real filesystems ---------------------------------------------------------------------------
@pytest.fixture
def tmpfs(tmp_path):
    """A 2 MiB tmpfs (root only); yields its mount point, unmounted after the test."""
    mnt = tmp_path / f"fs-{uuid.uuid4().hex[:6]}"
    mnt.mkdir()
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)],
                         capture_output=True, text=True)
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({res.stderr.strip() or res.returncode}): "
                    "needs root")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_a_read_only_run_dir_is_refused_in_one_line(planned, tmpfs):
    run_dir = tmpfs / "run"
    shutil.copytree(planned, run_dir)
    subprocess.run(["mount", "-o", "remount,ro", str(tmpfs)], check=True)
    res = _specc("run", "--plan", str(run_dir / "plan.json"))
    assert res.returncode == 2
    line = _one_error_line(res, "error RUN_DIR_UNWRITABLE: ")
    assert "Read-only file system" in line and "specc run --plan NEW/plan.json" in line
    status = _specc("status", "--run", str(run_dir))
    assert status.returncode == 0 and "Traceback" not in status.stderr


def test_a_full_disk_stops_the_sweep_keeps_rows_and_a_rerun_finishes(guard, tmpfs):
    """The disk fills after the first point: one line, exit 3, servers down, the finished
    row intact; with space again the rerun runs only what is left. (The server's log is
    kept elsewhere: a server that cannot log is a different failure.)"""
    run_dir = tmpfs / "run"
    run_dir.mkdir()
    (run_dir / "elsewhere").symlink_to(tmpfs.parent)   # a plan names paths inside its run dir

    def log_elsewhere(plan):
        for s in plan["servers"]:
            s["log"] = "elsewhere/server.log"

    plan = compile_plan(run_dir, ["baseline=false", "+sweep={benchmark.concurrency:[1,2,4]}",
                                  "benchmark.num_prompts=24", "benchmark.output_len=64"],
                        port=guard.port(1), edit=log_elsewhere)
    out = open(tmpfs.parent / "executor.out", "w")
    proc = guard.spawn([PY, "-m", "specc", "run", "--plan", str(run_dir / "plan.json"),
                        "--accept-edited"],
                       cwd=REPO, stdout=out, stderr=subprocess.STDOUT, text=True)
    assert wait_for(lambda: results(run_dir), timeout=60), "no point finished"
    filler = tmpfs / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    for size in (65536, 4096, 512, 1):   # fill the filesystem to the last byte
        try:
            while os.write(fd, b"\0" * size):
                pass
        except OSError:
            pass
    os.close(fd)
    before = (run_dir / "results.jsonl").read_text()
    code = proc.wait(timeout=60)
    out.close()
    text = (tmpfs.parent / "executor.out").read_text()
    assert code == 3, text[-3000:]
    assert "Traceback" not in text
    final = [ln for ln in text.splitlines() if ln.startswith("error RUN_DIR_WRITE: ")]
    assert final and "No space left on device" in final[-1] and "finished points are skipped" \
        in final[-1], text[-3000:]
    kept = (run_dir / "results.jsonl").read_text()
    assert kept.startswith(before) and kept.endswith("\n")   # nothing cut, nothing lost
    done = [json.loads(ln) for ln in kept.splitlines()]
    assert 1 <= len(done) < len(plan.benchmarks)
    os.unlink(filler)
    again = _specc("run", "--plan", str(run_dir / "plan.json"), "--accept-edited")
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-2000:]
    rows = results(run_dir)
    assert sorted(r["benchmark"] for r in rows) == sorted(b.id for b in plan.benchmarks)
    for old in done:
        assert next(r for r in rows if r["benchmark"] == old["benchmark"]) == old
