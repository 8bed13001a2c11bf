"""The report's statistics over a synthetic run dir with per-request records (issue 10)."""

from __future__ import annotations

import csv
import json
import random

import pytest

from specc import report as R
from fixtures.report.make_fixtures import strict_plan

CATS = ["writing", "coding"]
N = 40


def _lines(lat_of, verify_of=None, attempt=1.0):
    out = []
    for i in range(N):
        cat = CATS[i % 2]
        out.append({"attempt": attempt, "repeat": 0, "i": i, "id": f"{cat}-{i // 2:02d}",
                    "category": cat, "ok": True, "error": None, "input_tokens": 20,
                    "output_tokens": 100, "ttft": 0.02, "e2e_latency": lat_of(i),
                    "start": float(i), "verify_ct": verify_of(i) if verify_of else None})
    return out


def _run_dir(tmp_path):
    rng = random.Random(0)
    base_lat = [2.0 * rng.uniform(0.9, 1.1) for _ in range(N)]
    # s1: 2x on coding, 1.25x on writing; s2: nearly the same as s1 (tied); s3: no gain
    speeds = {"s1": (1.25, 2.0), "s2": (1.24, 1.98), "s3": (1.0, 1.0)}
    servers = [{"id": "base", "label": "baseline", "baseline": True, "params": {}}]
    benches = [{"id": "b-base", "server": "base", "baseline": None,
                "params": {"concurrency": 1, "dataset": "specc", "output_len": 100,
                           "num_prompts": N}}]
    results = []
    lines = {"b-base": _lines(lambda i: base_lat[i])}
    for name, (w, c) in speeds.items():
        servers.append({"id": name, "label": f"EAGLE3 {name}", "baseline": False,
                        "params": {"num_steps": 3, "topk": int(name[1]), "num_draft_tokens": 4}})
        benches.append({"id": f"b-{name}", "server": name, "baseline": "b-base",
                        "params": dict(benches[0]["params"])})
        f = lambda i, w=w, c=c: base_lat[i] / (c if i % 2 else w) * rng.uniform(0.99, 1.01)  # noqa: E731
        lines[f"b-{name}"] = _lines(f, lambda i, w=w, c=c: int(100 / (2.6 if i % 2 else 2.0)))
    for bid, ls in lines.items():
        dur = sum(x["e2e_latency"] for x in ls)
        m = {"completed": N, "duration": dur, "output_throughput": N * 100 / dur,
             "total_output_tokens": N * 100}
        results.append({"benchmark": bid, "server": bid[2:], "status": "ok", "reason": None,
                        "metrics": m, "params": benches[0]["params"],
                        "basis": {"requests": N, "output_tokens": N * 100, "unit": "request",
                                  "repeats": [{"duration": dur, "output_tokens": N * 100}],
                                  "stopped": "fixed"}})
        (tmp_path / "requests").mkdir(exist_ok=True)
        # an earlier, failed attempt's lines come first: the report reads the latest
        stale = _lines(lambda i: 99.0, attempt=0.5)
        (tmp_path / "requests" / f"{bid}.jsonl").write_text(
            "".join(json.dumps(x) + "\n" for x in stale + ls))
    (tmp_path / "plan.json").write_text(json.dumps(strict_plan("t", servers, benches)))
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in results))
    return tmp_path


def test_paired_speedups_ties_categories_and_files(tmp_path):
    run = _run_dir(tmp_path)
    rep = R.write_report(run)
    by = {r.label: r for r in rep.rows}
    s1, s3 = by["EAGLE3 s1"], by["EAGLE3 s3"]
    assert s1.speedup_iv.value == pytest.approx(s1.speedup, rel=1e-3)
    assert s1.speedup_iv.lo < s1.speedup_iv.value < s1.speedup_iv.hi
    assert s3.speedup_iv.covers(1.0)
    cat = s1.categories
    assert cat["coding"]["speedup"].value == pytest.approx(2.0, rel=0.02)
    assert cat["writing"]["speedup"].value == pytest.approx(1.25, rel=0.02)
    assert cat["coding"]["accept_length"].value == pytest.approx(100 / 38)

    md = (run / "report.md").read_text()
    assert "Rests on 40 requests (4,000 output tokens) per point, speedups on 40 matched " \
           "prompt pairs; 95% bootstrap intervals over requests." in md
    assert "### By category (concurrency 1)" in md
    assert "n.s." in md                                    # s3 covers 1.00x
    best_line = next(ln for ln in md.splitlines() if ln.startswith("| 1 "))
    assert "EAGLE3 s1" in best_line and best_line.rstrip(" |").endswith("EAGLE3 s2")

    rows = {r["label"]: r for r in csv.DictReader(open(run / "report.csv"))}
    assert float(rows["EAGLE3 s1"]["speedup_lo"]) < float(rows["EAGLE3 s1"]["speedup_hi"])
    assert rows["EAGLE3 s3"]["speedup_significance"] == "no significant difference"
    assert rows["EAGLE3 s1"]["speedup_significance"] == "faster"
    assert rows["EAGLE3 s1"]["n_requests"] == "40" and rows["EAGLE3 s1"]["n_pairs"] == "40"
    assert float(rows["baseline"]["output_throughput_lo"]) < float(
        rows["baseline"]["output_throughput"]) < float(rows["baseline"]["output_throughput_hi"])
    js = json.loads((run / "report.json").read_text())
    j1 = next(r for r in js["rows"] if r["label"] == "EAGLE3 s1")
    assert j1["categories"]["coding"]["speedup"]["lo"] is not None
    assert "speedup_by_category" in rep.plots


def test_rows_without_request_records_keep_their_line_intervals(tmp_path):
    run = _run_dir(tmp_path)
    import shutil
    shutil.rmtree(run / "requests")
    lines = [json.loads(x) for x in (run / "results.jsonl").read_text().splitlines()]
    lines[0]["intervals"] = {"output_throughput": [90.0, 110.0]}
    (run / "results.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    rep = R.build_report(run)
    base = next(r for r in rep.rows if r.is_baseline)
    assert (base.intervals["output_throughput"].lo, base.intervals["output_throughput"].hi) == (
        90.0, 110.0)
    assert all(r.speedup_iv is None for r in rep.rows)   # no pairs without records


def test_acceptance_per_position_from_vllm_counters(tmp_path):
    from specc.run import positions

    from specc.plan import AcceptPositions

    recipe = AcceptPositions(path="/metrics", label="position",
                             accepted="vllm:spec_decode_num_accepted_tokens_per_pos_total",
                             drafts="vllm:spec_decode_num_drafts_total")
    text = ('# HELP x\nvllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 100.0\n'
            'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",position="0"} 80.0\n'
            'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",position="1"} 50.0\n'
            'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",position="2"} 20.0\n')
    after = positions.parse(text.replace("100.0", "300.0").replace("80.0", "240.0")
                            .replace("50.0", "130.0").replace("20.0", "60.0"), recipe)
    assert positions.rates(positions.parse(text, recipe), after) == [0.8, 0.4, 0.2]
    assert positions.rates(None, after) is None
    assert positions.parse("", recipe) == {"drafts": 0.0, "accepted": {}}
    # from the engine adapter into the plan, and onto the report
    from specc.engines import get_engine
    assert get_engine("vllm").accept_positions == recipe
    assert get_engine("sglang").accept_positions is None
    run = _run_dir(tmp_path)
    lines = [json.loads(x) for x in (run / "results.jsonl").read_text().splitlines()]
    lines[1]["accept_per_position"] = [0.8, 0.4, 0.2]
    (run / "results.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    rep = R.write_report(run)
    assert "acceptance_by_position" in rep.plots
    js = json.loads((run / "report.json").read_text())
    assert [r.get("accept_per_position") for r in js["rows"]][1] == [0.8, 0.4, 0.2]


def test_speedup_needs_the_same_sampling_and_categories():
    from specc.results import ResultRow, speedup

    def row(bid, tps, **params):
        return ResultRow(bid, "s", "ok", metrics={"output_throughput": tps},
                         params={"concurrency": 1, "temperature": 0.0, **params})
    assert speedup(row("a", 200.0), row("b", 100.0)) == 2.0
    assert speedup(row("a", 200.0, temperature=0.7), row("b", 100.0)) is None
    assert speedup(row("a", 200.0, categories=["coding"]), row("b", 100.0, categories=None)) \
        is None
