"""results.jsonl: the row type, its one reader, the one speedup (executor and report agree)."""

import json
import shutil
from pathlib import Path

import pytest

from specc.report import build_report
from specc.results import (ResultLog, ResultRow, RowError, parse_rows, read_rows, speedup,
                           with_speedup)

FIX = Path(__file__).parent / "fixtures" / "report"
PARAMS = {"concurrency": 16, "dataset": "random", "input_len": 256, "output_len": 128}


def row(bid, out=None, status="ok", params=PARAMS, **metrics):
    m = dict(metrics)
    if out is not None:
        m["output_throughput"] = out
    return {"benchmark": bid, "server": "s", "status": status,
            "reason": None if status == "ok" else "boom", "metrics": m, "params": dict(params)}


def test_row_round_trip_keeps_unknown_fields():
    obj = {**row("b1", 100.0, median_itl_ms=4.0), "finished_at": 12.5, "server_hung": True}
    r = ResultRow.from_json(obj)
    assert r.ok and r.metric("output_throughput") == 100.0 and r.extra == {
        "finished_at": 12.5, "server_hung": True}
    assert r.to_json() == obj
    assert ResultRow.from_json(json.loads(json.dumps(r.to_json()))) == r


@pytest.mark.parametrize("obj, why", [
    ([1, 2], "not a JSON object"),
    ({"status": "ok"}, "no benchmark id"),
    ({"benchmark": "b", "status": "done"}, "neither 'ok' nor 'failed'"),
    ({"benchmark": "b", "status": "ok", "metrics": [1]}, "metrics: expected an object, got list"),
    ({"benchmark": "b", "status": "ok", "server": 3}, "server: expected a string or null, got int"),
    ({"benchmark": "b", "status": "failed", "reason": ["x"]}, "reason: expected a string or null"),
])
def test_not_a_row(obj, why):
    with pytest.raises(RowError, match=why):
        ResultRow.from_json(obj)


def test_a_row_is_frozen():
    r = ResultRow.from_json(row("a", 1.0))
    with pytest.raises(AttributeError):
        r.status = "failed"


def test_reader_skips_and_names_lines_that_are_not_rows():
    text = "\n".join([json.dumps(row("a", 1.0)), "[1, 2]", "{garbage", "",
                      json.dumps({"benchmark": "b", "status": "odd"}),
                      json.dumps(row("a", 2.0)), '{"benchmark": "c", "sta'])
    rows, warnings = parse_rows(text)
    assert list(rows) == ["a"] and rows["a"].metric("output_throughput") == 2.0  # last wins
    assert warnings == [
        "results.jsonl: ignored line 2: not a result row (not a JSON object but list)",
        "results.jsonl: ignored unparseable line 3",
        "results.jsonl: ignored line 5: not a result row (status: 'odd' is neither 'ok' nor 'failed')",
        "results.jsonl: ignored an unparseable last line (line 7; truncated by an interrupted write?)",
    ]
    assert read_rows(Path("/nonexistent/results.jsonl")) == ({}, [])


def test_result_log_survives_lines_that_are_not_rows(tmp_path, capsys):
    """A JSON line without a benchmark id used to stop every resume with a KeyError."""
    p = tmp_path / "results.jsonl"
    p.write_text(json.dumps(row("a", 1.0)) + "\n" + json.dumps({"note": "hand-written"}) + "\n"
                 + "[]\n" + json.dumps(row("b", 2.0))[:20])
    log = ResultLog(p)
    assert list(log.rows) == ["a"] and log.finished("a") and not log.finished("b")
    err = capsys.readouterr().err
    assert "warning: results.jsonl: ignored line 2: not a result row (benchmark: no benchmark id)" in err
    assert "ignored line 3" in err and "dropped a truncated last line" in err
    assert p.read_text().endswith("[]\n")        # the cut line is gone, so appends stay lines
    log.append(row("b", 2.0))
    assert list(ResultLog(p).rows) == ["a", "b"]
    with pytest.raises(RowError):
        log.append({"benchmark": "c", "status": "maybe"})


def test_speedup():
    base = ResultRow.from_json(row("base", 80.0))
    assert speedup(ResultRow.from_json(row("x", 200.0)), base) == 2.5
    assert speedup(ResultRow.from_json(row("x", 100.0)), ResultRow.from_json(row("b", 30.0))) == 3.3333
    assert speedup(ResultRow.from_json(row("x", 200.0)), None) is None
    assert speedup(ResultRow.from_json(row("x", 200.0, status="failed")), base) is None
    assert speedup(ResultRow.from_json(row("x", 200.0)), ResultRow.from_json(row("b", 80.0, status="failed"))) is None
    for bad in (None, "fast", True, float("inf"), float("nan")):
        assert speedup(ResultRow.from_json(row("x", bad) if bad is not None else row("x")), base) is None
    assert speedup(ResultRow.from_json(row("x", 200.0)), ResultRow.from_json(row("b", 0.0))) is None
    # not the matched baseline: another concurrency or dataset
    other = ResultRow.from_json(row("b", 80.0, params={**PARAMS, "concurrency": 1}))
    assert speedup(ResultRow.from_json(row("x", 200.0)), other) is None
    other = ResultRow.from_json(row("b", 80.0, params={**PARAMS, "dataset": "sharegpt"}))
    assert speedup(ResultRow.from_json(row("x", 200.0)), other) is None
    # rows without params (older files) are taken as matched by the plan
    assert speedup(ResultRow.from_json(row("x", 200.0, params={})), base) == 2.5


def test_with_speedup_sets_the_metric_in_place():
    r = row("x", 165.0)
    assert with_speedup(r, row("b", 82.5)) is r and r["metrics"]["speedup"] == 2.0
    for base in (None, row("b", 82.5, status="failed"), row("b")):
        r = row("x", 165.0)
        assert "speedup" not in with_speedup(r, base)["metrics"]


def test_report_and_executor_compute_the_same_speedup(tmp_path):
    """The report's computed speedup is the executor's, to the digit (they once differed)."""
    d = Path(shutil.copytree(FIX / "run_a", tmp_path / "run_a"))
    p = d / "results.jsonl"   # a throughput whose ratio has more than 4 digits
    p.write_text(p.read_text().replace('"output_throughput": 140.25', '"output_throughput": 140.3'))
    rep = build_report(d)
    computed = [r for r in rep.rows if r.speedup_computed]
    assert computed
    rows, _ = read_rows(d / "results.jsonl")
    for r in computed:
        line = rows[r.benchmark].to_json()
        with_speedup(line, rows[r.baseline_benchmark].to_json())
        assert r.speedup == line["metrics"]["speedup"]
