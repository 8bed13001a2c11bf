"""Trust boundaries, round 3 (issue 30): the red team's corpora kept as tests, by category.
Each case asserts what a user sees: one line and exit 2, no traceback, and the file that
was named left byte for byte as it was.

A. the results index acts only on a file it made;  B. compare trusts only what it can
check;  C. non-finite and extreme values are refused at compile;  D. no markup from
data in the report;  E. pipes, full disks and terminals."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import stat
import subprocess
from pathlib import Path

import pytest

from executor_helpers import PY, REPO
from specc.files import PLAN_BYTES
from specc.manifest import MANIFEST_BYTES
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


# --------------------------------------------------------------------------- B. compare

def _pair(tmp_path) -> tuple[Path, Path]:
    return _write_run(tmp_path / "a", seed=1), _write_run(tmp_path / "b", seed=2)


def _strict(text: str):
    def refuse(name):
        raise ValueError(f"{name} is not JSON")
    return json.loads(text, parse_constant=refuse)


def _edit_npz(path: Path, edit, keep_self: bool = True) -> None:
    """Rewrite compare.npz with ``edit`` applied to its arrays, as a hand with numpy does."""
    import io

    import numpy as np

    with np.load(path) as f:
        arrays = {k: f[k].copy() for k in f.files}
    edit(arrays)
    if not keep_self:
        arrays.pop("self", None)
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    path.write_bytes(buf.getvalue())


@pytest.mark.parametrize("edit", ["latency x3", "ttft nan", "self recomputed wrongly"])
def test_a_hand_edited_copy_is_rebuilt_never_trusted(tmp_path, edit):
    import numpy as np

    a, b = _pair(tmp_path)
    first = _specc("compare", a, b, "--json")
    assert first.returncode == 0, first.stderr
    npz = b / "compare.npz"
    assert npz.is_file()
    st = os.stat(npz)

    def change(arrays):
        if edit == "latency x3":
            arrays["latency"] = arrays["latency"] * 3
        elif edit == "ttft nan":
            arrays["ttft"][0] = np.nan
        else:
            arrays["self"] = np.frombuffer(b"0" * 64, np.uint8)
    _edit_npz(npz, change)
    os.utime(npz, ns=(st.st_atime_ns, st.st_mtime_ns))
    again = _specc("compare", a, b, "--json")
    assert again.returncode == 0, again.stdout + again.stderr   # no regression flagged
    assert _strict(again.stdout)["comparisons"] == _strict(first.stdout)["comparisons"]


def test_an_edited_source_with_its_old_mtime_put_back_makes_the_copy_stale(tmp_path):
    from specc.report import columns

    a, _ = _pair(tmp_path)
    digest, _ = columns.listing_digest(a)
    res = a / "results.jsonl"
    st = os.stat(res)
    res.write_text(res.read_text().replace('"ok"', '"failed"', 1))
    os.utime(res, ns=(st.st_atime_ns, st.st_mtime_ns))   # same size? not needed: content
    assert columns.listing_digest(a)[0] != digest
    req = next((a / "requests").iterdir())
    digest = columns.listing_digest(a)[0]
    st = os.stat(req)
    req.write_bytes(req.read_bytes())   # same bytes, same size, the mtime put back
    os.utime(req, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert columns.listing_digest(a)[0] != digest   # its ctime moved



@pytest.mark.parametrize("name, cap", [("plan.json", PLAN_BYTES), ("report.json", PLAN_BYTES),
                                       ("manifest.json", MANIFEST_BYTES)])
def test_the_copys_fingerprint_reads_nothing_of_a_file_its_reader_refuses(tmp_path, name, cap):
    """A source over its own reader's cap (plan.json and report.json 1 GiB, manifest.json
    64 MiB) is "unreadable" to the fingerprint too, not hashed up to the 2 GiB of the
    request files (a second of sha256 per GiB that compare then refuses anyway)."""
    from specc.report import columns

    a, _ = _pair(tmp_path)
    with open(a / name, "wb") as f:
        f.truncate(cap + 1)   # sparse
    digest, _ = columns.listing_digest(a)
    (a / name).unlink()
    os.mkfifo(a / name)   # "unreadable" too: the same digest, so nothing of the file was read
    assert columns.listing_digest(a)[0] == digest


def test_a_crafted_column_of_a_trillion_elements_allocates_nothing(tmp_path):
    """An .npy header that claims 10^12 float64s over a few bytes: refused by its header
    before numpy allocates (8 TB), under a 2 GiB address-space limit."""
    a, b = _pair(tmp_path)
    assert _specc("compare", a, b).returncode == 0
    npz = b / "compare.npz"
    import zipfile

    with zipfile.ZipFile(npz) as z:
        members = {i.filename: z.read(i) for i in z.infolist()}
    lat = members["latency.npy"]
    header_end = lat.index(b"\n") + 1
    fake = re.sub(rb"\(\d+,\)", b"(1000000000000,)", lat[:header_end - 1])
    assert b"(1000000000000,)" in fake
    fake = fake.ljust(header_end - 1) + b"\n"
    members["latency.npy"] = fake + lat[header_end:]
    with zipfile.ZipFile(npz, "w", zipfile.ZIP_STORED) as z:
        for name, data in members.items():
            z.writestr(name, data)
    code = ("import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30));"
            "from specc.report import columns;"
            f"d, _ = columns.listing_digest({str(b)!r});"
            f"print(columns.read({str(b)!r}, d) is None)")
    p = subprocess.run([PY, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert p.returncode == 0 and p.stdout.strip() == "True", p.stderr
    assert _specc("compare", a, b).returncode == 0


def test_nan_in_the_result_is_strict_json_null_with_a_reason():
    from specc.report.compare import strict_json

    out = _strict(strict_json({"comparisons": [{"change": float("nan"), "lo": float("inf")}],
                               "warnings": []}))
    assert out["comparisons"] == [{"change": None, "lo": None}]
    assert out["warnings"] == ["2 figures were not finite numbers (a NaN or infinity in the "
                               "run's records): shown as null"]


@pytest.mark.parametrize("what", ["fifo", "dev-zero", "huge"])
@pytest.mark.parametrize("name", ["report.json", "plan.json"])
def test_run_dir_files_go_through_the_bounded_reader(tmp_path, what, name):
    a, b = _pair(tmp_path)
    target = b / name
    target.unlink(missing_ok=True)
    if what == "fifo":
        os.mkfifo(target)
    elif what == "dev-zero":
        target.symlink_to("/dev/zero")
    else:
        with open(target, "wb") as f:
            f.truncate((1 << 30) + 1)   # sparse: over the 1 GiB cap
    db = tmp_path / "i.sqlite"
    for args in (["compare", a, b], ["index", "--db", db, b]):
        p = _specc(*args, timeout=60)
        line = _one_line(p)
        assert str(b) in line, line
    if what == "fifo":
        assert stat.S_ISFIFO(os.lstat(target).st_mode)


# --------------------------------------------------------------------------- E. output

def _named_run(tmp_path, name: str) -> Path:
    return _write_run(tmp_path / name, seed=1)


def test_a_closed_pipe_ends_quietly(tmp_path):
    a, b = _pair(tmp_path)
    db = tmp_path / "i.sqlite"
    assert _specc("index", "--db", db, a, b).returncode == 0
    for cmd in (f"history --db {db}", f"compare {a} {b}", f"compare {a} {b} --json"):
        p = subprocess.run(f"{PY} -m specc {cmd} | head -c 1 >/dev/null; "
                           "echo ${PIPESTATUS[0]}", shell=True, executable="/bin/bash",
                           cwd=REPO, capture_output=True, text=True, timeout=120)
        assert p.stderr == "", (cmd, p.stderr)
        assert p.stdout.strip() in ("0", "141"), (cmd, p.stdout)


def test_a_full_disk_on_stdout_is_one_line(tmp_path):
    a, b = _pair(tmp_path)
    with open("/dev/full", "w") as full:
        p = _specc("compare", a, b, "--json", stdout=full)
    _one_line(p, "error OUTPUT at stdout", "No space left on device")


def test_terminal_escapes_from_a_run_dir_name_are_shown_not_obeyed(tmp_path):
    evil = "r\x1b]0;owned\x07\x1b[2J\nfake line"
    a = _named_run(tmp_path, evil)
    b = _write_run(tmp_path / "b", seed=2)
    db = tmp_path / "i.sqlite"
    outs = [_specc("index", "--db", db, a, b), _specc("compare", a, b),
            _specc("history", "--db", db, "--point", "baseline @ c=1")]
    for p in outs:
        assert p.returncode == 0, p.stderr
        assert "\x1b" not in p.stdout and "\x07" not in p.stdout, p.stdout
        assert "\\x1b]0;owned\\x07" in p.stdout
        assert not any(ln.startswith("fake line") for ln in p.stdout.splitlines())


# --------------------------------------------------------------------------- C. compile

SIM = ["engine=sim", "model_pair.context_length=2048"]


def _compile_errors(*overrides) -> list:
    from conftest import compose_config
    from specc.compile.pipeline import compile_config

    result = compile_config(compose_config([*SIM, *overrides]))
    return [d for d in result.diagnostics if d.severity == "error"]


@pytest.mark.parametrize("overrides, key, says", [
    (["search=tune", "search.margin=nan"], "search.margin", "not a finite number"),
    (["+search.slo={p99_ttft_ms: nan}"], "search.slo.p99_ttft_ms", "not a finite number"),
    (["benchmark.request_rate=1", "benchmark.burstiness=inf"], "benchmark.burstiness",
     "not a finite number"),
    (["benchmark.request_rate=1", "benchmark.burstiness=1e308"], "benchmark.burstiness",
     "outside [0.01, 100]"),
    (["benchmark.request_rate=1", "benchmark.burstiness=5e-324"], "benchmark.burstiness",
     "outside [0.01, 100]"),
    (["benchmark.request_rate=nan"], "benchmark.request_rate", "not a finite number"),
    (["benchmark.request_rate=inf"], "benchmark.request_rate", "not a finite number"),
    (["benchmark.request_rate=1e-6"], "benchmark.request_rate",
     "the second request is due 1e+06 s after the first, past benchmark.timeout_s (600 s)"),
    (["benchmark.request_rate=0.1"], "benchmark.request_rate",
     "the point's 80 requests take 790 s to send, past benchmark.timeout_s (600 s)"),
    (["benchmark.timeout_s=nan"], "benchmark.timeout_s", "not a finite number"),
    (["benchmark.timeout_s=1e-308"], "benchmark.timeout_s", "less than the minimum of 0.1"),
    (["benchmark.temperature=nan"], "benchmark.temperature", "not a finite number"),
    (["benchmark.request_rate=1", "benchmark.ramp_s=inf"], "benchmark.ramp_s",
     "not a finite number"),
    (["+sweep={benchmark.request_rate: [1, inf]}"], "sweep.benchmark.request_rate.1",
     "not a finite number"),
])
def test_non_finite_and_extreme_values_are_refused_at_compile(overrides, key, says):
    (d,) = _compile_errors(*overrides)
    assert d.path == key and says in d.message, d.line()


def test_request_rate_inf_is_one_line_naming_its_key(tmp_path):
    p = _specc(*SIM, "benchmark.request_rate=inf", f"hydra.run.dir={tmp_path / 'run'}")
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    errors = [ln for ln in p.stderr.splitlines() if ln.startswith("error ")]
    assert errors == ["error SCHEMA_FINITE at benchmark.request_rate: inf is not a finite "
                      "number (fix: give a finite number (nan and inf are refused))"], p.stderr
    assert "Error executing job" not in p.stderr


def test_a_tune_candidate_with_topk_null_is_refused_not_dropped():
    (d,) = _compile_errors("+experiment=llama3_tune", "sweep.speculation.0.topk=null")
    assert d.code == "TUNE_CANDIDATES" and "topk: null" in d.message, d.line()


def _trace(tmp_path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_a_trace_gap_of_1e308_is_refused_with_its_figures(tmp_path):
    path = _trace(tmp_path, "t.jsonl",
                  '{"timestamp": 0, "input_length": 8, "output_length": 4}\n'
                  '{"timestamp": 1e308, "input_length": 8, "output_length": 4}\n')
    (d,) = _compile_errors("benchmark.dataset=trace", f"benchmark.dataset_path={path}")
    assert d.code == "BENCH_TRACE" and f"{path}:2: due 1e+305 s after" in d.message, d.line()


def test_a_trace_header_naming_timestamp_twice_is_refused(tmp_path):
    path = _trace(tmp_path, "t.csv", "timestamp,input_length,timestamp,output_length\n"
                                     "0,8,5,4\n")
    (d,) = _compile_errors("benchmark.dataset=trace", f"benchmark.dataset_path={path}")
    assert "names timestamp more than once" in d.message, d.line()


def test_a_csv_cell_with_a_quoted_newline_is_read_by_the_csv_rules(tmp_path):
    from specc.prompts import trace

    path = _trace(tmp_path, "t.csv", 'timestamp,prompt,output_length\n'
                                     '0,"first line\nsecond line",4\n'
                                     '10,"plain",4\n')
    assert _compile_errors("benchmark.dataset=trace", f"benchmark.dataset_path={path}") == []
    rows = list(trace.rows(path))
    assert [r.prompt for r in rows] == ["first line\nsecond line", "plain"]
    assert [r.where for r in rows] == [f"{path}:2", f"{path}:4"]


# --------------------------------------------------------------------------- D. the report

EVIL = "\n![k]({src})\n<script>alert(1)</script>"


def _evil_run(tmp_path) -> tuple[Path, bytes]:
    """The report fixture in a run dir whose name, experiment, labels, failure reasons,
    dropped reasons, compile diagnostics and tune.json `stopped` text all hold an image
    of a secret file and a <script>."""
    import shutil

    secret = tmp_path / "secret"
    secret.write_bytes(b"TOP-SECRET-BYTES" * 8)
    evil = EVIL.format(src=secret)
    run = Path(str(tmp_path / "runs" / "r") + evil)   # the name spans folders ('/' in it)
    run.parent.mkdir(parents=True)
    shutil.copytree(Path(__file__).parent / "fixtures" / "report" / "run_a", run)
    plan = json.loads((run / "plan.json").read_text())
    plan["experiment"] = "x" + evil
    for s in plan["servers"]:
        s["label"] = s["label"] + evil
    for d in plan["dropped"]:
        d["reason"] = d["reason"] + evil
    plan["diagnostics"] = [{"code": "X" + evil, "severity": "warning", "path": "p" + evil,
                            "message": "m" + evil, "hint": ""}]
    (run / "plan.json").write_text(json.dumps(plan))
    lines = (run / "results.jsonl").read_text().splitlines(True)
    first = json.loads(lines[0])
    lines[0] = json.dumps({**first, "status": "failed", "reason": "r" + evil}) + "\n"
    (run / "results.jsonl").write_text("".join(lines))
    (run / "tune.json").write_text(json.dumps({
        "server_starts": 2, "grid_server_starts": 4, "max_starts": 3, "stopped": "s" + evil,
        "best": {}, "crossover": {"note": "n" + evil}, "candidates": []}))
    return run, secret.read_bytes()


def test_no_markup_from_data_reaches_the_report(tmp_path):
    import base64

    from specc.report import write_report

    run, secret = _evil_run(tmp_path)
    write_report(run)
    md_text = (run / "report.md").read_text()
    page = (run / "report.html").read_text()
    assert md_text.count("alert(1)") >= 8   # every field is there, shown
    prose = re.sub(r"`[^`\n]*`", "", md_text)   # a code span shows its text literally
    assert "<script>" not in prose and "<script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    images = [ln for ln in md_text.splitlines() if ln.lstrip().startswith("![")]
    assert all(re.fullmatch(r"!\[[\w.-]+\]\(plots/[\w.-]+\.png\)", ln) for ln in images), images
    assert "![k](" not in prose.replace("!\\[k\\](", "")
    assert base64.b64encode(secret).decode()[:40] not in page
    assert "<img" not in page.replace('<img alt="', "", page.count("data:image/png"))
    # the terminal's copy: control characters escaped, the text shown
    from specc.report import build_report, render_terminal

    text = render_terminal(build_report(run))
    assert "\x1b" not in text and all("![k]" not in ln[:4] for ln in text.splitlines())


def test_report_html_embeds_only_the_runs_own_plots(tmp_path):
    from specc.report.html import markdown_to_html

    secret = tmp_path / "secret.png"
    secret.write_bytes(b"\x89PNG secret")
    (tmp_path / "plots").mkdir()
    (tmp_path / "plots" / "a.png").write_bytes(b"\x89PNG plot")
    page = markdown_to_html(f"![a](plots/a.png)\n![s]({secret})\n![t](plots/../secret.png)\n",
                            tmp_path)
    assert page.count("<img") == 1 and "plots/a.png" not in page.split("<img")[0]
    assert "secret" not in page.split("<img")[1].split(">")[0]


# --------------------------------------------------------------------------- F. what compile foresees

def test_the_estimate_covers_the_traces_own_span_and_a_rates_schedule(tmp_path):
    from conftest import compose_config
    from specc.compile.pipeline import compile_config

    path = _trace(tmp_path, "t.jsonl",
                  '{"timestamp": 0, "input_length": 8, "output_length": 4}\n'
                  '{"timestamp": 500000, "input_length": 8, "output_length": 4}\n')

    def wall(*overrides):
        result = compile_config(compose_config([*SIM, *overrides]))
        assert result.ok, [d.line() for d in result.diagnostics if d.severity == "error"]
        return result.plan.estimates.servers_s

    closed = wall()
    for servers in (wall("benchmark.dataset=trace", f"benchmark.dataset_path={path}"),
                    wall("benchmark.request_rate=0.2")):   # 80 requests: 395 s
        for sid, s in servers.items():
            assert s >= 395 > closed[sid], (sid, s, closed[sid])


def test_a_multi_turn_conversation_is_checked_at_its_full_length(tmp_path):
    turn = " ".join(["w"] * 600)
    conv = [{"from": "human", "value": turn}, {"from": "gpt", "value": "ok"},
            {"from": "human", "value": turn}, {"from": "gpt", "value": "ok"},
            {"from": "human", "value": turn}]
    path = tmp_path / "sg.json"
    path.write_text(json.dumps([{"id": "c1", "conversations": conv}]))
    args = ["benchmark.dataset=sharegpt", f"benchmark.dataset_path={path}",
            "benchmark.output_len=128"]
    assert _compile_errors(*args) == []   # each turn alone fits 2048
    (d,) = _compile_errors(*args, "benchmark.multi_turn=true")
    assert "entry 0 (its 3 turns" in d.message and "1800 tokens" in d.message, d.line()
    assert "384 output tokens is over the context length 2048" in d.message
