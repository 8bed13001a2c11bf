"""The results index (issue 20 item 3): `specc index` adds run dirs, a finished run adds
itself, `specc history` shows one figure of one configuration run by run with its
intervals, `--rebuild` gives the same answer from the run dirs; bad input is one line,
exit 2 -- through the real command, on run dirs written as the executor writes them and
on the simulator."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from executor_helpers import PY, REPO, SMALL
from test_compare import _write_run


def _specc(*args, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([PY, "-m", "specc", *map(str, args)], cwd=REPO, capture_output=True,
                          text=True, timeout=120, env={**os.environ, **(env or {})})


def _finished_at(run: Path, t: float) -> Path:
    """Stamp every row of a run as finished at ``t`` (the executor writes finished_at)."""
    rows = [json.loads(x) for x in (run / "results.jsonl").read_text().splitlines()]
    (run / "results.jsonl").write_text("".join(json.dumps({**r, "finished_at": t}) + "\n"
                                               for r in rows))
    return run


def _two_runs(tmp: Path) -> tuple[Path, Path]:
    """An older run and a newer one where the speculative server got 25% slower; the
    newer one is written first and its ids differ (another specc version)."""
    new = _finished_at(_write_run(tmp / "new", seed=2, ids="y", slower={"EAGLE3 s1": 1.25}),
                       1_800_000_000.0)
    old = _finished_at(_write_run(tmp / "old", seed=1), 1_700_000_000.0)
    return old, new


def _history(db: Path, *args) -> dict:
    p = _specc("history", "--db", db, "--json", *args)
    assert p.returncode == 0, p.stdout + p.stderr
    return json.loads(p.stdout)


def test_history_shows_each_run_oldest_first_with_intervals(tmp_path):
    old, new = _two_runs(tmp_path)
    db = tmp_path / "index.sqlite"
    p = _specc("index", "--db", db, new, old)
    assert p.returncode == 0, p.stderr
    assert f"indexed {new} (4 points)" in p.stdout
    listed = _history(db)["configs"]
    # each label carries its model pair (target + draft; the baseline has no draft)
    assert sorted(c["label"] for c in listed) == [
        "EAGLE3 s1 @ c=1 (t + d)", "EAGLE3 s1 @ c=4 (t + d)", "baseline @ c=1 (t)",
        "baseline @ c=4 (t)"]
    assert all(c["runs"] == 2 for c in listed)
    h = _history(db, "--point", "EAGLE3 s1 @ c=4")
    assert h["metric"] == "output_throughput"
    assert [r["run"] for r in h["runs"]] == [str(old), str(new)]   # by when, not by order given
    for r in h["runs"]:
        assert r["lo"] < r["value"] < r["hi"], r
    assert h["runs"][1]["value"] < 0.85 * h["runs"][0]["value"]     # the slower draft shows
    # compare's figure names work here too; the ids differ between the runs, the point is one
    ttft = _history(db, "--point", h["config"]["id"], "--metric", "ttft")
    assert ttft["metric"] == "mean_ttft_ms" and [r["value"] for r in ttft["runs"]] == [
        35.0, 35.0 * 1.25]
    assert [r["benchmark"] for r in ttft["runs"]] == ["EAGLE3-s1-x-c4", "EAGLE3-s1-y-c4"]
    table = _specc("history", "--db", db, "--point", "EAGLE3 s1 @ c=4").stdout
    lines = table.splitlines()
    assert lines[0].startswith("EAGLE3 s1 @ c=4 (") and "oldest first" in lines[0]
    assert str(old) in lines[3] and str(new) in lines[4] and lines[3].count("[") == 1
    assert h["floor"] is None   # two runs: too few for compare's between-run floor


def test_indexing_again_replaces_a_run_and_rebuild_gives_the_same_answer(tmp_path):
    old, new = _two_runs(tmp_path)
    db = tmp_path / "index.sqlite"
    assert _specc("index", "--db", db, tmp_path).returncode == 0   # a folder of run dirs
    before = _history(db, "--point", "baseline @ c=1")
    assert len(before["runs"]) == 2
    assert _specc("index", "--db", db, old).returncode == 0        # again: no duplicate
    assert _history(db, "--point", "baseline @ c=1") == before
    # a corrupt index (its header says specc made it): one line that says how to rebuild
    db.write_bytes(db.read_bytes()[:100] + b"not a database " * 300)
    for args in (["history", "--db", db], ["index", "--db", db, old]):
        p = _specc(*args)
        err = p.stderr.strip().splitlines()
        assert p.returncode == 2 and len(err) == 1 and "Traceback" not in p.stderr, p.stderr
        assert "not a readable results index" in err[0] and "--rebuild" in err[0]
    p = _specc("index", "--rebuild", "--db", db, tmp_path)
    assert p.returncode == 0, p.stderr
    assert _history(db, "--point", "baseline @ c=1") == before
    # a rebuild from a readable index keeps its runs; one that was deleted is dropped
    (new / "plan.json").unlink()
    p = _specc("index", "--rebuild", "--db", db)
    assert p.returncode == 0 and f"dropped {new}" in p.stdout, p.stdout + p.stderr
    assert [r["run"] for r in _history(db, "--point", "baseline @ c=1")["runs"]] == [str(old)]


def test_runs_indexed_at_once_all_get_in(tmp_path):
    """Several `specc index` processes on one new index file at once: WAL and a busy
    timeout, so none fails and every run is there."""
    runs = [_finished_at(_write_run(tmp_path / f"r{i}", seed=i, ids=f"v{i}"), 1e9 + i)
            for i in range(5)]
    db = tmp_path / "index.sqlite"
    procs = [subprocess.Popen([PY, "-m", "specc", "index", "--db", str(db), str(r)], cwd=REPO,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in runs]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0] * 5, outs
    h = _history(db, "--point", "baseline @ c=4")
    assert [r["run"] for r in h["runs"]] == list(map(str, runs))
    # five runs of one configuration: the spread compare's verdict takes as its floor
    assert 0.02 <= h["floor"] < 0.1
    table = _specc("history", "--db", db, "--point", "baseline @ c=4").stdout
    assert f"between-run noise floor: {100 * h['floor']:.1f}%" in table


def test_a_twin_creating_the_index_between_two_reads_is_not_another_program(tmp_path,
                                                                            monkeypatch):
    """The race behind a failure under load: a second `specc index` read the schema version
    (0) before its twin's creating commit and the tables after it, and refused the index as
    "an SQLite database of another program". The three are read in one snapshot."""
    import sqlite3

    from specc.report import index

    db = tmp_path / "index.sqlite"
    twin = sqlite3.connect(db, isolation_level=None)
    twin.execute("PRAGMA journal_mode = WAL")   # the twin has opened it, not yet created it
    real, commits = index._application_id, []

    def twin_commits_between(conn):
        app = real(conn)
        if not commits:   # after the id is read, before the tables are
            commits.append(twin.executescript(
                f"BEGIN IMMEDIATE;{index._TABLES}PRAGMA application_id = "
                f"{index.APPLICATION_ID};PRAGMA user_version = {index.SCHEMA};COMMIT;"))
        return app

    monkeypatch.setattr(index, "_application_id", twin_commits_between)
    conn = index.connect(db)
    assert commits and conn.execute("PRAGMA user_version").fetchone()[0] == index.SCHEMA
    conn.close()
    twin.close()


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    old, new = _two_runs(tmp_path)
    db = tmp_path / "index.sqlite"
    assert _specc("index", "--db", db, old, new).returncode == 0
    cases = [(["index", "--db", db, tmp_path / "nowhere"], "no run dir here or below"),
             (["index", "--db", db, old / "requests"], "no run dir here or below"),
             (["history", "--db", db, "--point", "Medusa"], "no configuration"),
             (["history", "--db", db, "--point", "EAGLE3"], "matches 2 configurations"),
             (["history", "--db", db, "--point", "baseline @ c=1", "--metric", "tpot"],
              "no such figure; choose from"),
             (["history", "--db", tmp_path / "none.sqlite"], "no results index yet"),
             (["index", "--db", old / "results.jsonl" / "x.sqlite", old], "cannot open")]
    for args, want in cases:
        p = _specc(*args)
        err = p.stderr.strip().splitlines()
        assert p.returncode == 2, (args, p.stdout, p.stderr)
        assert len(err) == 1 and want in err[0] and "Traceback" not in p.stderr, (args, err)


def test_a_simulator_run_adds_itself_and_a_broken_index_never_fails_a_run(guard, tmp_path):
    db = tmp_path / "index.sqlite"
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    sweep = [*SMALL, "baseline=true", "speculation.num_steps=3", "speculation.topk=1",
             "speculation.num_draft_tokens=4", "execute=true"]
    good = guard.spawn([PY, "-m", "specc", *sweep, f"engine.base_port={guard.port(2)}",
                        f"hydra.run.dir={tmp_path / 'run'}"], cwd=REPO,
                       env={**os.environ, "SPECC_INDEX": str(db)},
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    bad = guard.spawn([PY, "-m", "specc", *sweep, f"engine.base_port={guard.port(2)}",
                       f"hydra.run.dir={tmp_path / 'unindexed'}"], cwd=REPO,
                      env={**os.environ, "SPECC_INDEX": str(blocked / "index.sqlite")},
                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, _ = good.communicate(timeout=300)
    assert good.returncode == 0, out
    assert f"indexed: {db} (specc history)" in out
    configs = _history(db)["configs"]
    assert len(configs) == 2 and all(c["runs"] == 1 for c in configs)
    spec = next(c for c in configs if c["label"].startswith("EAGLE3"))
    h = _history(db, "--point", spec["id"], "--metric", "speedup")
    (r,) = h["runs"]
    assert r["run"] == str((tmp_path / "run").resolve()) and r["lo"] < r["value"] < r["hi"]
    assert r["engine_release"] == "0.5.23"
    # the index could not be written: the run still exits 0, with one warning line
    out, err = bad.communicate(timeout=300)
    assert bad.returncode == 0, out + err
    warn = [ln for ln in err.splitlines() if "results index" in ln]
    assert len(warn) == 1 and warn[0].startswith("warning: ") and "specc index" in warn[0]
    assert (tmp_path / "unindexed" / "report.md").is_file()


def test_each_project_keeps_its_own_index_beside_its_run_dirs(tmp_path):
    """Without $SPECC_INDEX, runs go into the index of the outputs/ folder that holds them,
    and `specc history` reads the one of the project it is run in: two projects, two
    histories; a folder with none says so."""
    env = {k: v for k, v in os.environ.items() if k != "SPECC_INDEX"}

    def specc(*args, cwd=REPO):
        return subprocess.run([PY, "-m", "specc", *map(str, args)], cwd=cwd, env=env,
                              capture_output=True, text=True, timeout=120)

    one, two = tmp_path / "one", tmp_path / "two"
    old, new = _two_runs(one / "outputs" / "t")
    other = _write_run(two / "outputs" / "t" / "r", target="org/Llama-3.1-8B")
    for run, project in ((old, one), (new, one), (other, two)):
        p = specc("index", run)
        assert p.returncode == 0 and f"index: {project / 'outputs' / 'specc-index.sqlite'}" in (
            p.stdout), p.stdout + p.stderr
    seen = {}
    for project in (one, two, one / "outputs" / "t"):
        p = specc("history", "--json", cwd=project)
        assert p.returncode == 0, p.stderr
        seen[project] = json.loads(p.stdout)
    assert seen[one]["db"] == str(one / "outputs" / "specc-index.sqlite")
    assert seen[one / "outputs" / "t"] == seen[one]   # from below, too
    assert {c["runs"] for c in seen[one]["configs"]} == {2}
    assert sorted(c["label"] for c in seen[two]["configs"]) == [
        "EAGLE3 s1 @ c=1 (Llama-3.1-8B + d)", "EAGLE3 s1 @ c=4 (Llama-3.1-8B + d)",
        "baseline @ c=1 (Llama-3.1-8B)", "baseline @ c=4 (Llama-3.1-8B)"]
    (tmp_path / "three").mkdir()
    p = specc("history", cwd=tmp_path / "three")
    assert p.returncode == 2 and "no results index yet" in p.stderr, p.stderr


def test_point_matches_on_the_typed_key_and_the_label_is_only_printed(tmp_path):
    """`--point` given as fields of what a point measures (its typed key) finds the
    configuration the label names; the label is only what history prints."""
    old, new = _two_runs(tmp_path)
    db = tmp_path / "index.sqlite"
    assert _specc("index", "--db", db, old, new).returncode == 0
    by_key = _history(db, "--point", "algorithm=EAGLE3 num_steps=1 concurrency=4")
    by_label = _history(db, "--point", "EAGLE3 s1 @ c=4")
    assert by_key["config"] == by_label["config"]
    assert [r["run"] for r in by_key["runs"]] == [str(old), str(new)]
    # a field no point has, or a value none holds: one line, exit 2
    for bad in ("num_steps=9 concurrency=4", "no_such_field=1"):
        p = _specc("history", "--db", db, "--point", bad)
        assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    # two configurations match: named, exit 2
    p = _specc("history", "--db", db, "--point", "concurrency=4")
    assert p.returncode == 2 and "matches 2 configurations" in p.stderr, p.stderr


def test_an_index_in_a_shared_folder_or_beyond_the_project_is_never_used(tmp_path, monkeypatch):
    """The upward search stops at the project: an index planted in a folder anyone may
    write into (as /tmp), or above a folder holding .git, is not the one a run adds itself
    to, nor the one `specc history` reads; a run dir directly in a shared folder keeps its
    index inside itself rather than in the shared folder."""
    from specc.report import indexpath

    monkeypatch.delenv("SPECC_INDEX", raising=False)
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    (shared / indexpath.INDEX_FILE).write_bytes(b"planted")
    run = _write_run(shared / "mine" / "outputs" / "t" / "r")
    assert indexpath.for_run(run) == shared / "mine" / "outputs" / indexpath.INDEX_FILE
    loose = _write_run(shared / "loose")
    assert indexpath.for_run(loose) == loose / indexpath.INDEX_FILE
    assert indexpath.for_here(shared / "mine") == shared / "mine" / "outputs" / indexpath.INDEX_FILE

    above = tmp_path / "above"
    (above / "proj" / ".git").mkdir(parents=True)
    (above / indexpath.INDEX_FILE).write_bytes(b"not this project's")
    run = _write_run(above / "proj" / "runs" / "r")
    assert indexpath.for_run(run) == above / "proj" / "runs" / indexpath.INDEX_FILE
