"""One door to a run dir (issue 29 item 2): a plan.json that is truncated, not JSON or
edited after it was reviewed is the same one line and exit 2 in `specc compare`, `specc
index`, `specc history` and `specc report` -- through the real commands, on run dirs
written as the executor writes them; and no module outside the records layer reads
plan.json, state.json, manifest.json or tune.json itself (a scan of specc/'s code)."""

from __future__ import annotations

import ast
import json
import os
import subprocess
from pathlib import Path

import pytest

from executor_helpers import PY, REPO
from test_compare import _write_run

SPECC = REPO / "specc"


def _specc(*args) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "SPECC_INDEX"}
    return subprocess.run([PY, "-m", "specc", *map(str, args)], cwd=REPO, capture_output=True,
                          text=True, timeout=120, env=env)


def _corrupt(plan: Path, how: str) -> None:
    raw = plan.read_bytes()
    if how == "truncated":
        plan.write_bytes(raw[:len(raw) // 2])
    elif how == "not JSON":
        plan.write_text("this is not a plan\n")
    else:   # edited after review: valid JSON, its recorded digest left as it was
        assert b'"experiment": "t"' in raw
        plan.write_bytes(raw.replace(b'"experiment": "t"', b'"experiment": "u"', 1))


@pytest.mark.parametrize("how,code", [("truncated", "PLAN_UNREADABLE"),
                                      ("not JSON", "PLAN_UNREADABLE"),
                                      ("edited", "PLAN_EDITED")])
def test_a_bad_plan_is_the_same_one_line_and_exit_2_in_every_command(tmp_path, how, code):
    tmp_path = tmp_path.resolve()
    a = _write_run(tmp_path / "a", seed=1)
    b = _write_run(tmp_path / "b", seed=2, ids="y")
    db = tmp_path / "index.sqlite"
    p = _specc("index", "--db", db, a, b)   # indexed while it was the reviewed plan
    assert p.returncode == 0, p.stdout + p.stderr
    _corrupt(a / "plan.json", how)
    lines = {}
    for name, args in (("compare", ["compare", a, b]), ("index", ["index", "--db", db, a]),
                       ("history", ["history", "--db", db]), ("report", ["report", "--run", a])):
        p = _specc(*args)
        err = p.stderr.strip().splitlines()
        assert p.returncode == 2 and len(err) == 1 and "Traceback" not in p.stderr, (
            name, p.stdout, p.stderr)
        lines[name] = err[0]
    assert len(set(lines.values())) == 1, lines   # one line, word for word, in every command
    line = lines["compare"]
    assert line.startswith(f"error {code} at {a / 'plan.json'}: ") and "(fix: " in line, line
    assert not (a / "report.md").exists()   # nothing written from a plan that is not the plan


def test_an_edit_the_run_accepted_is_read_and_a_later_edit_is_not(tmp_path):
    """`specc run --accept-edited` runs an edited plan: its report, compare and index read
    those bytes (the executor records them), and an edit after that is refused again."""
    from specc.rundir import RunDir, RunDirError, accept_edited

    a = _write_run(tmp_path / "a", seed=1)
    _corrupt(a / "plan.json", "edited")
    with pytest.raises(RunDirError, match="PLAN_EDITED"):
        RunDir.open(a)
    accept_edited(a)   # what the executor does as it starts on a plan it was handed
    assert RunDir.open(a).plan.experiment == "u"
    p = _specc("report", "--run", a)
    assert p.returncode == 0, p.stderr
    (a / "plan.json").write_bytes((a / "plan.json").read_bytes().replace(b'"u"', b'"v"', 1))
    with pytest.raises(RunDirError, match="PLAN_EDITED"):
        RunDir.open(a)


def test_a_plan_without_a_digest_is_read_as_written(tmp_path):
    """A plan written by hand or by a specc before digests records none: the readers read
    it (only `specc run` asks for --accept-edited)."""
    from specc.rundir import RunDir

    a = _write_run(tmp_path / "a", seed=1)
    data = json.loads((a / "plan.json").read_text())
    del data["digest"]
    (a / "plan.json").write_text(json.dumps(data))
    assert RunDir.open(a).digest is None
    assert _specc("report", "--run", a).returncode == 0


# ---------------------------------------------------------------- who reads the run dir's files

#: The files only the records layer reads, and the names the code gives them.
RECORD_FILES = {"plan.json", "state.json", "manifest.json", "tune.json"}
RECORD_NAMES = {"PLAN_JSON", "STATE_JSON", "MANIFEST", "TUNE_JSON"}
#: The records layer: each file's one reader, and the door (specc/rundir.py).
READERS = {"rundir.py", "plan.py", "state.py", "manifest.py", "results.py", "files.py"}
#: Calls that read a file's bytes or parse them.
READS = {"open", "read_text", "read_bytes", "load", "loads", "load_json", "read_bounded",
         "parse_json", "fdopen"}


def _names_a_record(node: ast.AST, tainted: set[str]) -> bool:
    for n in ast.walk(node):
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value in RECORD_FILES:
            return True
        if isinstance(n, ast.Name) and (n.id in RECORD_NAMES or n.id in tainted):
            return True
        if isinstance(n, ast.Attribute) and n.attr in RECORD_NAMES:
            return True
    return False


def _reads_of_records(tree: ast.AST) -> list[int]:
    """Lines where a record file is read: a read call whose target (or a variable that was
    given such a path in the same function) names one of RECORD_FILES."""
    found = []
    scopes = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    for scope in [tree, *scopes]:
        tainted: set[str] = set()
        body = list(ast.walk(scope))
        for n in body:   # a path to a record file kept in a variable
            if isinstance(n, ast.Assign) and _names_a_record(n.value, tainted):
                tainted |= {t.id for t in n.targets if isinstance(t, ast.Name)}
        for n in body:
            if not isinstance(n, ast.Call):
                continue
            f = n.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) \
                else None
            if name not in READS:
                continue
            target = [f.value] if isinstance(f, ast.Attribute) else []
            if any(_names_a_record(x, tainted) for x in [*target, *n.args,
                                                          *(k.value for k in n.keywords)]):
                found.append(n.lineno)
    return sorted(set(found))


def test_no_module_outside_the_records_layer_reads_a_record_file():
    outside = {}
    for path in sorted(SPECC.rglob("*.py")):
        rel = path.relative_to(SPECC)
        if len(rel.parts) == 1 and rel.name in READERS:
            continue
        lines = _reads_of_records(ast.parse(path.read_text(), str(path)))
        if lines:
            outside[str(rel)] = lines
    assert outside == {}, f"read plan/state/manifest/tune.json through specc.rundir: {outside}"


def test_the_scan_finds_each_way_a_module_could_read_one():
    """The scan is not blind: each of these reads is found."""
    for code in ['json.loads(Path(d, "plan.json").read_text())',
                 'open(run_dir / "state.json")',
                 'p = run_dir / TUNE_JSON\nx = p.read_bytes()',
                 'def f(d):\n    f = d / "manifest.json"\n    return load_json(f, 1)',
                 'read_bounded(d / PLAN_JSON, 10)']:
        assert _reads_of_records(ast.parse(code)), code
    for code in ['atomic_write(d / "plan.json", text)', 'Plan.load(path)',
                 'os.path.lexists(d / "plan.json")', 'open(d / "results.jsonl")']:
        assert not _reads_of_records(ast.parse(code)), code
