"""The report over fixture run dirs (tests/fixtures/report/, see make_fixtures.py there)."""

import csv
import re
import json
import shutil
from pathlib import Path

import pytest

from specc import report as R
from specc.report import plots as report_plots, tables as report_tables

FIX = Path(__file__).parent / "fixtures" / "report"
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def run_a(tmp_path):
    return Path(shutil.copytree(FIX / "run_a", tmp_path / "run_a"))


@pytest.fixture
def run_b(tmp_path):
    return Path(shutil.copytree(FIX / "run_b", tmp_path / "run_b"))


def rows_by(rep):
    return {(r.label, r.concurrency): r for r in rep.rows}


def test_statuses_duplicates_and_truncated_line(run_a):
    rep = R.build_report(run_a)
    assert (rep.count("ok"), rep.count("failed"), rep.count("pending")) == (6, 1, 1)
    by = rows_by(rep)
    # the duplicated id: the last line wins
    assert by[("EAGLE3 s3 k1 d4", 1)].output_tps == 150.0
    assert by[("EAGLE3 s3 k4 d8", 16)].status == "pending"
    assert any("unparseable last line" in w for w in rep.warnings)


def test_speedups_given_and_computed(run_a):
    by = rows_by(R.build_report(run_a))
    assert by[("EAGLE3 s3 k1 d4", 1)].speedup == pytest.approx(150 / 82.5)
    s2 = by[("EAGLE3 s2 k4 d8", 1)]  # no speedup on the result line: computed
    assert s2.speedup == pytest.approx(140.25 / 82.5) and s2.speedup_computed
    assert by[("EAGLE3 s2 k4 d8", 16)].speedup is None  # failed


def test_best_setting_per_concurrency(run_a):
    best = {b.group.concurrency: b for b in R.build_report(run_a).best()}
    assert best[1].row.label == "EAGLE3 s3 k4 d8" and best[1].by == "speedup"
    assert best[16].row.label == "EAGLE3 s3 k1 d4"
    assert best[16].baseline.output_tps == 1100.0


def test_write_report_files(run_a):
    rep = R.write_report(run_a)
    md = (run_a / "report.md").read_text()
    # title and golden table lines
    assert md.startswith("# Report: eagle3_sweep (engine: sim)\n")
    assert "## Concurrency 1 \u2014 random, in 1024 / out 256 tokens, api=chat, temperature=0.0, 4 prompts" in md
    table_lines = [
        "| config          |   output tok/s |   per-stream tok/s |   TTFT p50 / p99 (ms) |   ITL p50 / p99 (ms) |   chunk gap p50 / p99 (ms) |   accept length |   speedup | status   |",
        "| baseline        |           82.5 |               82.5 |          45.0 / 112.5 |          12.1 / 36.3 |                12.1 / 36.3 |               \u2014 |     1.00x | ok       |",
        "| EAGLE3 s3 k4 d8 |          165.0 |              165.0 |          52.5 / 131.2 |                    \u2014 |               93.8 / 281.3 |        3.10 (?) |     2.00x | ok       |",
        "| EAGLE3 s3 k1 d4 |          150.0 |              150.0 |          51.2 / 128.1 |          27.0 / 81.0 |               65.1 / 195.2 |      2.41 (run) |     1.82x | ok       |",
        "| EAGLE3 s3 k1 d4 |         1540.0 |               96.2 |        420.0 / 1050.0 |          33.0 / 99.0 |               83.5 / 250.5 |     2.53 (cum.) |     1.40x | ok       |",
        "| EAGLE3 s2 k4 d8 |              \u2014 |                  \u2014 |                     \u2014 |                    \u2014 |                          \u2014 |               \u2014 |         \u2014 | FAILED   |",
        "| EAGLE3 s3 k4 d8 |              \u2014 |                  \u2014 |                     \u2014 |                    \u2014 |                          \u2014 |               \u2014 |         \u2014 | pending  |",
    ]
    md_lines = md.splitlines()
    for line in table_lines:
        assert line in md_lines, line
    # baseline first, then speedup descending (concurrency 1 table)
    c1 = md.split("## Concurrency 1 ")[1].split("## ")[0]
    order = [ln.split("|")[1].strip() for ln in c1.splitlines() if ln.startswith("| ") and "config" not in ln]
    assert order == ["baseline", "EAGLE3 s3 k4 d8", "EAGLE3 s3 k1 d4", "EAGLE3 s2 k4 d8"]
    # best table, failures with reasons (point and server), pending, notes
    assert "## Best speculative setting per concurrency" in md
    best = md.split("## Best speculative setting per concurrency")[1].split("## ")[0]
    assert "| 1             | EAGLE3 s3 k4 d8            |     2.00x |" in best
    assert "| 16            | EAGLE3 s3 k1 d4            |     1.40x |" in best
    fails = md.split("## Failures")[1].split("## ")[0]
    assert "EAGLE3 s2 k4 d8 @ concurrency 16" in fails and "server failed: died mid-run (exit code -9)" in fails
    assert "- server EAGLE3 s2 k4 d8 (`kimi-eagle3-s2-k4-d8-7b8c9d`): died mid-run (exit code -9)" in fails
    assert "8 points: 6 ok, 1 failed, 1 pending." in md
    assert "## Pending (1)" in md and "kimi-eagle3-s3-k4-d8-4e5f6a-c16" in md
    assert "SPEC_TOPK1_DRAFT_TOKENS" in md
    assert "**speedup**: output throughput divided by the matched baseline" in md
    assert "`*_itl_ms`: each chunk's gap spread over the tokens it brought" in md

    # CSV: one row per point, flat columns
    with open(run_a / "report.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 8
    for col in ("benchmark", "label", "status", "reason", "speedup", "num_steps", "topk",
                "num_draft_tokens", "concurrency", "output_throughput", "median_ttft_ms", "accept_length",
                "median_itl_ms", "p99_chunk_gap_ms"):
        assert col in rows[0], col
    cols = list(rows[0])   # bench_serving's per-token ITL, then the chunk gap a client sees
    assert cols.index("p99_itl_ms") < cols.index("mean_chunk_gap_ms") < cols.index("mean_tpot_ms")
    failed = [r for r in rows if r["status"] == "failed"]
    assert len(failed) == 1 and "died mid-run" in failed[0]["reason"]

    # JSON: rows + summary
    js = json.loads((run_a / "report.json").read_text())
    assert len(js["rows"]) == 8
    assert {r["benchmark"]: r.get("median_chunk_gap_ms") for r in js["rows"]}[
        "kimi-eagle3-s3-k1-d4-3f9a2c-c1"] == pytest.approx(27.0 * 2.41)
    assert js["summary"]["ok"] == 6 and js["summary"]["pending"] == 1
    assert {b["concurrency"]: b["label"] for b in js["summary"]["best"]} == {1: "EAGLE3 s3 k4 d8", 16: "EAGLE3 s3 k1 d4"}

    # plots: valid, non-empty PNGs, linked from the report
    for name in ("throughput_vs_concurrency", "speedup_heatmap"):
        p = run_a / "plots" / f"{name}.png"
        assert p.stat().st_size > 1000 and p.read_bytes()[:8] == PNG
        assert f"(plots/{name}.png)" in md
    assert set(rep.plots) == {"throughput_vs_concurrency", "speedup_heatmap"}


def test_render_terminal(run_a):
    text = R.render_terminal(R.build_report(run_a))
    assert text.startswith("eagle3_sweep (engine: sim): 8 points: 6 ok, 1 failed, 1 pending")
    assert "EAGLE3 s3 k4 d8           165.0" in text
    assert "Failures:" in text and "died mid-run" in text
    assert "1 point(s) pending" in text
    assert "|" not in text.split("Failures:")[0]  # plain tables, not markdown


def test_missing_results_everything_pending(run_a):
    (run_a / "results.jsonl").unlink()
    (run_a / "state.json").unlink()
    rep = R.write_report(run_a)
    assert rep.count("pending") == 8 and rep.count("ok") == 0
    md = (run_a / "report.md").read_text()
    assert "8 points: 0 ok, 0 failed, 8 pending." in md
    assert "## Failures\n\nNone." in md
    assert not (run_a / "plots" / "speedup_heatmap.png").exists()
    assert "(no successful speculative point)" in md


def test_missing_baseline_and_missing_keys(run_a):
    lines = (run_a / "results.jsonl").read_text().splitlines()
    keep = [ln for ln in lines[:-1] if '"kimi-base-1a2b3c' not in ln.split('"server"')[0]]
    # a point with almost no metrics at all
    keep.append(json.dumps({"benchmark": "kimi-eagle3-s3-k4-d8-4e5f6a-c16", "server": "kimi-eagle3-s3-k4-d8-4e5f6a",
                            "status": "ok", "reason": None, "metrics": {"output_throughput": 1600.0}}))
    (run_a / "results.jsonl").write_text("\n".join(keep) + "\n")
    rep = R.write_report(run_a)
    by = rows_by(rep)
    assert by[("baseline", 16)].status == "pending"
    assert by[("EAGLE3 s2 k4 d8", 1)].speedup is None  # no baseline, no speedup on the line
    assert by[("EAGLE3 s3 k1 d4", 1)].speedup == pytest.approx(150 / 82.5)  # given on the line
    best16 = {b.group.concurrency: b for b in rep.best()}[16]
    assert best16.by == "output throughput" and best16.row.label == "EAGLE3 s3 k4 d8"
    md = (run_a / "report.md").read_text()
    assert "EAGLE3 s3 k4 d8 (by output tok/s: speedup unknown)" in md
    assert "| EAGLE3 s3 k4 d8 |         1600.0 |                  \u2014 |" in md


def test_unparseable_middle_line_is_skipped_with_warning(run_a):
    p = run_a / "results.jsonl"
    lines = p.read_text().splitlines()
    lines.insert(1, "{garbage")
    p.write_text("\n".join(lines[:-1]) + "\n")  # also drop the truncated last line
    rep = R.build_report(run_a)
    assert rep.count("ok") == 6
    assert rep.warnings == ["results.jsonl: ignored unparseable line 2"]


def test_no_plan_is_an_error(tmp_path):
    from specc.rundir import RunDirError

    with pytest.raises(RunDirError, match="RUN_DIR_INVALID .*no plan.json"):
        R.build_report(tmp_path)


@pytest.mark.parametrize("text,says", [
    ("{}", "plan version None is not 2"),
    ('{"version": 2, "benchmarks": "x"}', "plan.experiment: missing"),
    ("{not json", "not JSON"),
])
def test_a_corrupt_plan_is_one_line_and_exit_2(run_a, text, says):
    """plan.json is read through its one strict reader: never an empty report, never a
    traceback (the tasks that count its points read it so too)."""
    import subprocess
    import sys

    (run_a / "plan.json").write_text(text)
    for task in ("report", "status"):
        res = subprocess.run([sys.executable, "-m", "specc", task, "--run", str(run_a)],
                             capture_output=True, text=True, timeout=120)
        assert res.returncode == 2, (task, res.stdout, res.stderr)
        (line,) = res.stderr.strip().splitlines()
        assert says in line and "plan.json" in line, (task, line)
    assert not (run_a / "report.md").exists()


@pytest.mark.parametrize("state", ['{"servers": ["x"]}', '{"servers": {"s": {"pid": "x"}}}', "{"])
def test_a_corrupt_state_json_is_a_warning_read_by_the_executors_own_reader(run_a, state):
    (run_a / "state.json").write_text(state)
    rep = R.build_report(run_a)
    assert rep.server_failures == []
    (warning,) = [w for w in rep.warnings if w.startswith("state.json")]
    assert warning.endswith("server states not shown") and str(run_a / "state.json") in warning


def test_plots_failing_do_not_fail_the_report(run_a, monkeypatch):
    def boom(report, Figure):
        raise RuntimeError("no display for you")

    monkeypatch.setattr(report_plots, "_plot_throughput", boom)
    R.write_report(run_a)
    md = (run_a / "report.md").read_text()
    assert "plot throughput_vs_concurrency failed: RuntimeError: no display for you" in md
    assert (run_a / "plots" / "speedup_heatmap.png").exists()


def test_combine_reports(tmp_path, run_a, run_b):
    sweep = tmp_path
    broken = tmp_path / "run_c"
    broken.mkdir()  # a job whose config was invalid: no plan.json
    (run_b / ".hydra").mkdir()
    (run_b / ".hydra" / "overrides.yaml").write_text("- +experiment=eagle3_llama\n- engine=sim\n")
    md_path = R.combine_reports(sweep, [run_a, run_b, broken])
    assert md_path == sweep / "report.md"
    md = md_path.read_text()
    assert md.startswith("# Combined report: 3 job(s)")
    assert "10 points: 8 ok, 1 failed, 1 pending." in md
    assert "+experiment=eagle3_llama engine=sim" in md
    assert "no plan.json" in md
    c1 = md.split("## Concurrency 1 ")[1].split("## ")[0]
    c1_rows = [ln for ln in c1.splitlines() if ln.startswith("| run_") or ln.startswith("| +")]
    # each job's rows together, baseline first; a job is named by the overrides that set it
    # apart (run_b's), else by its folder
    assert [[c.strip() for c in ln.split("|")[1:3]] for ln in c1_rows][:1] == [
        ["run_a (eagle3_sweep)", "baseline"]]
    assert re.search(r"\| \+experiment=eagle3_llama engine=sim +\| EAGLE3 s5 k1 d6 +\|", c1)
    assert re.search(r"\| run_a \(eagle3_sweep\) +\| EAGLE3 s3 k4 d8 +\|", c1)
    best = md.split("## Best speculative setting per concurrency (all jobs)")[1].split("## ")[0]
    assert "EAGLE3 s5 k1 d6 [+experiment=eagle3_llama engine=sim]" in best and "2.25x" in best
    assert "[run_a (eagle3_sweep)] EAGLE3 s2 k4 d8 @ concurrency 16" in md
    # the answer first, and the same page as HTML
    assert md.index("## Decision") < md.index("## Jobs") < md.index("## Concurrency 1 ")
    decision = md.split("## Decision")[1].split("## Jobs")[0]
    assert "| 1 | EAGLE3 s5 k1 d6 [+experiment=eagle3_llama engine=sim] | 2.25x |" in decision
    html = (sweep / "report.html").read_text()
    assert html.index("<h2>Decision</h2>") < html.index("<h2>Jobs</h2>")
    assert "- server [run_a] EAGLE3 s2 k4 d8" in md   # no overrides: its folder
    with open(sweep / "report.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 10
    assert [r["job"] for r in rows][:1] == ["run_a"]
    assert list(rows[0])[:3] == ["job", "job_label", "experiment"]
    assert {r["experiment"] for r in rows} == {"eagle3_sweep", "eagle3_llama"}


def test_cli(run_a, capsys):
    assert R.main([str(run_a), "--no-plots"]) == 0
    out = capsys.readouterr().out
    assert "Best speculative setting per concurrency" in out
    assert (run_a / "report.md").exists() and not (run_a / "plots").exists()
    assert R.main([]) == 2


def test_python_m_specc_report(run_a):
    """`python -m specc.report RUN_DIR` runs (a package needs its __main__.py)."""
    import subprocess
    import sys
    p = subprocess.run([sys.executable, "-m", "specc.report", str(run_a), "--no-plots"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "Best speculative setting per concurrency" in p.stdout


from hypothesis import given, settings, HealthCheck, strategies as st  # noqa: E402  the property tests' own, beside them

_metric_values = st.one_of(st.none(), st.booleans(), st.text(max_size=3),
                           st.floats(allow_nan=True, allow_infinity=True), st.integers(-5, 10**6))
_metrics = st.dictionaries(st.sampled_from(report_tables._METRIC_ORDER + ["speedup", "weird"]), _metric_values, max_size=8)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(0, 7), st.sampled_from(["ok", "failed", "odd"]), _metrics), max_size=10),
       st.text(max_size=20))
def test_any_results_render(tmp_path_factory, results, tail):
    """Whatever the result lines hold, the report builds and renders."""
    d = Path(shutil.copytree(FIX / "run_a", tmp_path_factory.mktemp("h") / "run"))
    plan = json.loads((d / "plan.json").read_text())
    ids = [b["id"] for b in plan["benchmarks"]]
    lines = [json.dumps({"benchmark": ids[i], "server": "x", "status": s, "reason": None, "metrics": m})
             for i, s, m in results]
    (d / "results.jsonl").write_text("\n".join(lines) + "\n" + tail)
    rep = R.build_report(d)
    assert len(rep.rows) == 8
    assert R.render_markdown(rep) and R.render_terminal(rep)
    report_tables._csv_text([r.flat() for r in rep.rows])


def _rewrite_row(run_dir, benchmark, **fields):
    p = run_dir / "results.jsonl"
    lines = [json.loads(x) for x in p.read_text().splitlines()[:-1]]   # the cut last line
    for row in lines:
        if row["benchmark"] == benchmark:
            row.update(fields)
    p.write_text("".join(json.dumps(r) + "\n" for r in lines))


def test_a_grid_report_opens_with_its_decision(run_a, capsys):
    """The answer first, in report.md, report.html and the terminal: per concurrency what to
    deploy with its interval and ties, where nothing pays, and the crossover."""
    R.write_report(run_a)
    md = (run_a / "report.md").read_text()
    assert md.index("## Decision") < md.index("Run dir:") < md.index("## Concurrency 1 ")
    decision = md.split("## Decision")[1].split("Run dir:")[0]
    assert "| 1 | EAGLE3 s3 k4 d8 | 2.00x | - |" in decision   # no intervals: no ties
    assert "| 16 | EAGLE3 s3 k1 d4 | 1.40x | - |" in decision
    assert "Crossover: speculation pays up to the top of the ladder." in decision
    html = (run_a / "report.html").read_text()
    assert html.index("<h2>Decision</h2>") < html.index("<h2>Concurrency 1 ")
    text = R.render_terminal(R.build_report(run_a))
    lines = text.splitlines()
    assert lines[2] == "Decision" and "Concurrency 1 " in text.split("Crossover:")[1]
    assert re.search(r"^16 +EAGLE3 s3 k1 d4 +1\.40x +-$", text, re.M), text

    # at 16 the only finished setting is slower than the baseline: deploy the baseline
    _rewrite_row(run_a, "kimi-eagle3-s3-k1-d4-3f9a2c-c16",
                 metrics={"output_throughput": 880.0, "speedup": 0.8})
    md = R.render_markdown(R.build_report(run_a))
    assert "| 16 | baseline (no setting pays) | best speculative EAGLE3 s3 k1 d4 0.80x | |" in md
    assert ("Crossover: speculation stops paying at concurrency 16 (between 1 and 16 on the "
            "ladder).") in md


def test_a_grid_whose_baseline_failed_decides_nothing_there(run_a):
    _rewrite_row(run_a, "kimi-base-1a2b3c-c16", status="failed", metrics={},
                 reason="server failed: crashed in load_weights")
    md = R.render_markdown(R.build_report(run_a))
    decision = md.split("## Decision")[1].split("Run dir:")[0]
    assert ("| 16 | no decision | the baseline failed (server failed: crashed in "
            "load_weights) | |") in decision
    assert "| 1 | EAGLE3 s3 k4 d8 | 2.00x |" in decision
    assert ("Crossover: speculation pays up to concurrency 1; above it no decision at "
            "concurrency 16.") in decision
    assert "no setting pays" not in decision
    _rewrite_row(run_a, "kimi-base-1a2b3c-c1", status="failed", metrics={},
                 reason="server failed: crashed in load_weights")
    decision = R.render_markdown(R.build_report(run_a)).split("## Decision")[1].split(
        "Run dir:")[0]
    assert "Crossover: no decision: the baseline failed (server failed: crashed" in decision
    assert "pays" not in decision


def test_multirun_jobs_are_named_by_the_override_that_differs(tmp_path, run_a, run_b):
    """`specc -m ... engine=sglang,vllm`: the jobs are `engine=sglang` and `engine=vllm`
    everywhere a job is named, not `0` and `1`; overrides they share are not repeated."""
    from specc.report.combine import job_labels

    sweep = tmp_path / "sweep"
    jobs = []
    for name, src, engine in (("0", run_a, "sglang"), ("1", run_b, "vllm")):
        d = shutil.copytree(src, sweep / name)
        (d / ".hydra").mkdir()
        (d / ".hydra" / "overrides.yaml").write_text(
            f"- +experiment=eagle3_sweep\n- engine={engine}\n- hardware.tp=8\n")
        jobs.append(d)
    md = R.combine_reports(sweep, jobs).read_text()
    assert re.search(r"^\| 0 \(`engine=sglang`\) +\| eagle3_sweep ", md, re.M)
    assert re.search(r"^\| 1 \(`engine=vllm`\) +\| eagle3_llama ", md, re.M)
    assert re.search(r"^\| engine=vllm \(eagle3_llama\) +\| EAGLE3 s5 k1 d6 ", md, re.M)
    assert "[engine=vllm (eagle3_llama)]" in md.split("## Decision")[1].split("## Jobs")[0]
    assert "[0]" not in md and "[1]" not in md   # no line names a job by its number alone
    assert "- server [engine=sglang] EAGLE3 s2 k4 d8" in md
    assert json.loads((sweep / "report.json").read_text())["jobs"][1]["label"] == "engine=vllm"
    assert job_labels({"0": [], "1": []}) == {"0": "0", "1": "1"}
    assert job_labels({"0": ["a=1", "b=2"], "1": ["a=1", "b=2"]}) == {"0": "0", "1": "1"}
    assert job_labels({"0": ["a=1", "+b=2"], "1": ["a=1", "b=3"], "2": ["a=2"]}) == {
        "0": "a=1 +b=2", "1": "a=1 b=3", "2": "a=2"}
