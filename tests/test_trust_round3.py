"""Trust boundaries, round 3 (issue 30): the red team's corpora kept as tests, by category.
Each case asserts what a user sees: one line and exit 2, no traceback, and the file that
was named left byte for byte as it was.

A. the results index acts only on a file it made;  B. compare trusts only what it can
check;  C. non-finite and extreme values are refused at compile;  D. no markup from
data in the report;  E. pipes, full disks and terminals."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import subprocess
import threading
from pathlib import Path

import pytest

from executor_helpers import PY, REPO
from test_compare import _write_run


def _specc(*args, env=None, stdout=subprocess.PIPE, timeout=120) -> subprocess.CompletedProcess:
    return subprocess.run([PY, "-m", "specc", *map(str, args)], cwd=REPO, stdout=stdout,
                          stderr=subprocess.PIPE, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def _one_line(p: subprocess.CompletedProcess, *want: str) -> str:
    err = p.stderr.strip().splitlines()
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    assert "Traceback" not in p.stderr and len(err) == 1, p.stderr
    for w in want:
        assert w in err[0], err[0]
    return err[0]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    return _write_run(tmp_path_factory.mktemp("runs") / "r", seed=1)


# --------------------------------------------------------------------------- A. the index

def _snapshot(path: Path):
    st = os.lstat(path)
    return (stat.S_IFMT(st.st_mode), path.read_bytes() if stat.S_ISREG(st.st_mode) else None)


@pytest.mark.parametrize("rebuild", [False, True])
@pytest.mark.parametrize("via_env", [False, True])
def test_the_index_never_writes_over_a_text_file(tmp_path, run_dir, rebuild, via_env):
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n" * 50)
    args = ["index", *(["--rebuild"] if rebuild else []), run_dir]
    p = (_specc(*args, env={"SPECC_INDEX": str(notes)}) if via_env
         else _specc(*args[:1], "--db", notes, *args[1:]))
    _one_line(p, str(notes), "not an SQLite file", "new path")
    assert notes.read_text() == "my notes\n" * 50
    assert sorted(x.name for x in tmp_path.iterdir()) == ["notes.txt"]   # no journal


def test_the_index_never_opens_a_fifo_or_a_directory(tmp_path, run_dir):
    fifo, folder = tmp_path / "fifo", tmp_path / "folder"
    os.mkfifo(fifo)
    folder.mkdir()
    for path, kind in ((fifo, "a FIFO"), (folder, "a directory")):
        for args in (["index", "--rebuild", "--db", path, run_dir], ["history", "--db", path]):
            _one_line(_specc(*args, timeout=60), str(path), kind)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and list(folder.iterdir()) == []
    assert sorted(x.name for x in tmp_path.iterdir()) == ["fifo", "folder"]


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")
def test_a_device_node_is_never_replaced_and_gets_no_journal(tmp_path, run_dir):
    full = tmp_path / "full"   # a copy of /dev/full
    os.mknod(full, 0o666 | stat.S_IFCHR, os.stat("/dev/full").st_rdev)
    for args in (["index", "--rebuild", "--db", full, run_dir], ["index", "--db", full, run_dir]):
        line = _one_line(_specc(*args), str(full), "a character device")
        assert "--rebuild" not in line   # the error never advises the command that destroys
    assert stat.S_ISCHR(os.lstat(full).st_mode)
    assert sorted(x.name for x in tmp_path.iterdir()) == ["full"]


def test_specc_index_at_dev_full_makes_no_journal_there(run_dir):
    before = set(os.listdir("/dev"))
    p = _specc("index", run_dir, env={"SPECC_INDEX": "/dev/full"})
    line = _one_line(p, "/dev/full", "a character device")
    assert "--rebuild" not in line
    assert set(os.listdir("/dev")) == before   # no /dev/full-journal


def test_another_programs_sqlite_database_is_left_as_it_is(tmp_path, run_dir):
    db = tmp_path / "other.sqlite"
    conn = sqlite3.connect(db)
    conn.executescript("CREATE TABLE t (x); INSERT INTO t VALUES (1); PRAGMA user_version = 1;")
    conn.close()
    before = db.read_bytes()
    for args in (["index", "--rebuild", "--db", db, run_dir], ["index", "--db", db, run_dir],
                 ["history", "--db", db]):
        _one_line(_specc(*args), str(db), "another program")
    assert db.read_bytes() == before


def test_an_index_specc_made_carries_its_application_id(tmp_path, run_dir):
    from specc.report.index import APPLICATION_ID

    db = tmp_path / "i.sqlite"
    assert _specc("index", "--db", db, run_dir).returncode == 0
    assert int.from_bytes(db.read_bytes()[68:72], "big") == APPLICATION_ID
    p = _specc("index", "--rebuild", "--db", db, run_dir)   # its own file: rebuilt
    assert p.returncode == 0, p.stderr


def test_a_locked_index_is_waited_for_visibly_then_one_line(tmp_path, run_dir, monkeypatch,
                                                            capsys):
    from specc.report import index

    db = tmp_path / "i.sqlite"
    index.index_runs([run_dir], db)
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    monkeypatch.setattr(index, "WAIT_S", 0.5)
    try:
        with pytest.raises(index.IndexDbError, match="locked by another process"):
            index.index_runs([run_dir], db)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    err = capsys.readouterr().err
    assert err.count("waiting for the results index") == 1
    # released: the same call goes through
    assert index.index_runs([run_dir], db)["indexed"][0][1] == 4


def _edit(db: Path, sql: str) -> None:
    conn = sqlite3.connect(db)
    conn.executescript(sql)
    conn.close()


@pytest.mark.parametrize("sql", [
    "UPDATE runs SET manifest = '{not json';",
    "UPDATE points SET finished_at = 1e300;",
    "UPDATE configs SET key = '[[[' || id;",
    "UPDATE figures SET value = 'abc';",
])
def test_edited_rows_are_skipped_with_a_count(tmp_path, run_dir, sql):
    db = tmp_path / "i.sqlite"
    assert _specc("index", "--db", db, run_dir).returncode == 0
    _edit(db, sql)
    listing = _specc("history", "--db", db)
    assert listing.returncode == 0 and "Traceback" not in listing.stderr, listing.stderr
    if "configs" in sql:
        assert "rows of the index skipped" in listing.stdout
        return
    p = _specc("history", "--db", db, "--point", "baseline @ c=1")
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    assert "1 rows of the index skipped" in p.stdout
    j = json.loads(_specc("history", "--db", db, "--point", "baseline @ c=1", "--json").stdout)
    assert j["skipped"] == 1 and j["runs"] == []
