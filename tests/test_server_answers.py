"""A server's answers are untrusted (issue 22 items 1 and 3): against a real misbehaving
server process (tests/hostile_server.py), through the real client, the real point code
and a whole `specc run`, a wrong answer becomes a failed request or an unknown figure
with a reason a user can act on; never an ok row with an inflated number, a NaN in
results.jsonl, a hang or a traceback."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import subprocess
from contextlib import contextmanager
from pathlib import Path

import pytest

from executor_helpers import PY, compile_plan, free_port_block, results, run_cli
from specc.results import ResultLog, read_rows
from specc.prompts.datasets import load_prompts
from specc.run.loadgen import run_load

HOSTILE = Path(__file__).with_name("hostile_server.py")
SPEC = ["+sweep={speculation:[{num_steps:3,topk:1,num_draft_tokens:4}]}"]


@contextmanager
def hostile(mode: str = ""):
    """The misbehaving server on a free port, ready; killed afterwards."""
    port = free_port_block(1)
    proc = subprocess.Popen([PY, str(HOSTILE), "--port", str(port), "--mode", mode],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        line = proc.stdout.readline()
        assert b"ready to roll" in line, line
        yield f"http://127.0.0.1:{port}", port
    finally:
        proc.kill()
        proc.wait(10)


def _load(url, *, api="chat", n=3, out=16, transport="auto", timeout_s=600.0):
    """``transport``: "fast" (kernel receive stamps), "fast-user" (asyncio's protocol,
    user-space stamps) or "httpx"."""
    prompts = load_prompts("random", num=n, input_len=16, output_len=out, seed=1)
    kernel = transport != "fast-user"
    transport = "fast" if transport == "fast-user" else transport
    return asyncio.run(run_load(url, prompts, api=api, model="m", concurrency=2, warmup=0,
                                timeout_s=timeout_s, transport=transport,
                                kernel_timestamps=kernel))


def _no_tracebacks(caplog):
    bad = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert not bad, [r.getMessage() for r in bad]


# ============================================================================ token counts
@pytest.mark.timeout(60)
@pytest.mark.parametrize("api", ["chat", "completions", "generate"])
def test_inflated_usage_fails_the_request_with_the_three_counts(api, caplog):
    with hostile("usage_scale:4") as (url, _):
        res = _load(url, api=api)
    assert res.metrics["completed"] == 0 and res.metrics["output_throughput"] == 0
    assert {r.error for r in res.records} == {
        "server reported 64 completion tokens for 16 requested and 16 streamed"}
    # the stream is the truth for what the request did
    assert all(r.output_tokens == 16 for r in res.records)
    _no_tracebacks(caplog)


@pytest.mark.timeout(60)
def test_a_trillion_tokens_is_not_a_throughput():
    with hostile("usage_huge") as (url, _):
        for api in ("chat", "generate"):
            res = _load(url, api=api)
            assert res.metrics["completed"] == 0, api
            assert res.records[0].error == ("server reported 1000000000000 completion tokens "
                                            "for 16 requested and 16 streamed")
            assert res.metrics["total_output_tokens"] == 0


@pytest.mark.timeout(60)
def test_honest_server_with_and_without_per_chunk_counts_is_ok():
    for mode in ("", "no_chunk_usage"):
        with hostile(mode) as (url, _):
            res = _load(url)
        assert res.metrics["completed"] == 3, [r.error for r in res.records]
        assert res.metrics["total_output_tokens"] == 48


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode,reason", [
    ("usage_text", "server sent completion_tokens '16', not a token count"),
    ("choices_dict", "server sent choices {'index': 0, 'delta': {'content': 't'}}, not a list"),
])
def test_a_field_of_the_wrong_type_is_named_not_a_client_error(mode, reason, caplog):
    with hostile(mode) as (url, _):
        res = _load(url)
    assert {r.error for r in res.records} == {reason}
    _no_tracebacks(caplog)


@pytest.mark.timeout(60)
def test_a_401_is_a_failed_request_with_the_servers_words():
    with hostile("echo_401") as (url, _):
        res = _load(url)
    for r in res.records:
        assert r.status == 401 and r.error.startswith("HTTP 401: {\"error\": \"Unauthorized")
        assert "\n" not in r.error


# ============================================================================ framing, cap, depth
@pytest.mark.timeout(60)      # timeout_s is 600: a request waiting it out fails this test
@pytest.mark.parametrize("transport", ["fast", "fast-user", "httpx"])
@pytest.mark.parametrize("mode,reason", [
    ("bad_content_length", "bad Content-Length 'abc'"),
    ("bad_chunk_size", "bad chunk size"),
])
def test_bad_framing_fails_at_once(mode, reason, transport, caplog):
    with hostile(mode) as (url, _):
        res = _load(url, transport=transport)
    assert res.metrics["completed"] == 0
    for r in res.records:
        if transport != "httpx":
            assert r.error.startswith("bad response: ") and reason in r.error, r.error
        else:   # httpx's h11 names the framing error itself
            assert "RemoteProtocolError" in r.error, r.error
    _no_tracebacks(caplog)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("transport", ["fast", "fast-user", "httpx"])
def test_a_flooding_stream_is_cut_at_the_body_cap(transport):
    from specc.run.answers import body_cap

    with hostile("flood") as (url, _):
        res = _load(url, transport=transport)
    cap = body_cap(16)
    assert {r.error for r in res.records} == {
        f"bad response: response body past {cap} bytes (the cap for the tokens asked for)"}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("api", ["chat", "generate"])
def test_deep_json_in_a_stream_is_one_line(api, caplog):
    with hostile("deep_json") as (url, _):
        res = _load(url, api=api)
    assert {r.error for r in res.records} == {"bad JSON in stream: JSON nested too deep"}
    _no_tracebacks(caplog)


# ============================================================================ a point
@pytest.fixture(scope="module")
def plan(tmp_path_factory):
    return compile_plan(tmp_path_factory.mktemp("plan"), SPEC)


def _point(plan, port, run_dir, **params):
    from specc.run.point import run_point

    bench = next(b for b in plan.benchmarks if plan.server(b.server).acceptance)
    server = dataclasses.replace(plan.server(bench.server), host="127.0.0.1", port=port)
    bench = dataclasses.replace(bench, params=dataclasses.replace(bench.params, **params))
    run_dir.mkdir(parents=True, exist_ok=True)
    row = asyncio.run(run_point(server, bench, run_dir=run_dir))
    log = ResultLog(run_dir / "results.jsonl")
    log.append(row)         # a NaN here was a traceback and an abandoned sweep
    # read back strictly: a line holding NaN or Infinity would be refused with a warning
    rows, warnings = read_rows(run_dir / "results.jsonl")
    assert not warnings and bench.id in rows
    return row


@pytest.mark.timeout(60)
def test_honest_counters_give_the_run_accept_length(plan, tmp_path):
    with hostile() as (_, port):
        row = _point(plan, port, tmp_path)
    assert row["status"] == "ok", row["reason"]
    assert row["metrics"]["accept_length"] == 2.0
    assert row["metrics"]["accept_length_scope"] == "run"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode,why", [
    ("metrics_nan", "counter sglang:spec_verify_calls_total read nan"),
    ("metrics_inf", "counter sglang:generation_tokens_total read inf"),
    ("metrics_reset", "counter sglang:generation_tokens_total went back from"),
    ("metrics_huge", "is outside [1, 4] for this speculation setting"),
    ("metrics_tiny", "counter sglang:spec_verify_calls_total moved by only 1e-09"),
    ("metrics_flood", "/metrics: answer past 16777216 bytes"),
    ("info_nan", "/server_info: JSON holds NaN"),
    ("info_deep", "/server_info: JSON nested too deep"),
])
def test_impossible_acceptance_is_unknown_with_a_reason(plan, tmp_path, mode, why):
    with hostile(mode) as (_, port):
        row = _point(plan, port, tmp_path)
    # the requests were fine: the point is ok, only its accept length is unknown
    assert row["status"] == "ok", row["reason"]
    assert row["metrics"]["accept_length"] is None
    assert row["metrics"]["accept_length_scope"] is None
    assert why in row["accept_length_unknown"], row["accept_length_unknown"]


@pytest.mark.timeout(60)
def test_broken_counters_fall_back_to_the_servers_own_figure_with_a_note(plan, tmp_path):
    with hostile("metrics_reset,info_ok") as (_, port):
        row = _point(plan, port, tmp_path)
    assert row["metrics"]["accept_length"] == 2.0
    assert row["metrics"]["accept_length_scope"] == "cumulative"
    assert "went back from" in row["accept_length_note"]


@pytest.mark.timeout(60)
def test_a_request_verify_count_past_the_bound_is_left_out(plan, tmp_path):
    """spec_verify_ct of 1 for 16 tokens is 16 tokens per pass; the setting allows 4."""
    with hostile() as (_, port):
        honest = _point(plan, port, tmp_path / "a", api="generate")
    with hostile("verify_ct_one") as (_, port):
        row = _point(plan, port, tmp_path / "b", api="generate")
    assert honest["intervals"]["accept_length"][0] == pytest.approx(2.0, abs=0.2)
    assert row["status"] == "ok" and "accept_length" not in row["intervals"]


@pytest.mark.timeout(60)
def test_one_token_outputs_leave_out_what_needs_two(plan, tmp_path):
    with hostile() as (_, port):
        row = _point(plan, port, tmp_path, output_len=1)
    m = row["metrics"]
    assert row["status"] == "ok" and m["completed"] == 4 and m["total_output_tokens"] == 4
    assert m["mean_ttft_ms"] > 0
    left_out = [k for k in m if "tpot" in k or "itl" in k or "chunk_gap" in k
                or "per_stream" in k]
    assert left_out == []


# ============================================================================ results.jsonl
def test_results_never_hold_nan_and_a_hand_edited_one_is_refused(tmp_path, capsys):
    log = ResultLog(tmp_path / "results.jsonl")
    log.append({"benchmark": "b1", "server": "s", "status": "ok", "reason": None,
                "metrics": {"output_throughput": 10.0, "accept_length": float("nan")},
                "params": {}})
    line = (tmp_path / "results.jsonl").read_text()
    assert "NaN" not in line and json.loads(line)["not_finite"] == ["metrics.accept_length"]
    assert "metrics.accept_length not a finite number" in capsys.readouterr().err
    with open(tmp_path / "results.jsonl", "a") as f:
        f.write('{"benchmark": "b2", "server": "s", "status": "ok", "metrics": '
                '{"output_throughput": Infinity}, "params": {}}\n')
    rows, warnings = read_rows(tmp_path / "results.jsonl")
    assert set(rows) == {"b1"}
    assert warnings == ["results.jsonl: ignored line 2: it holds Infinity (specc never writes "
                        "NaN or Infinity; edited by hand?)"]


# ============================================================================ a whole `specc run`
def _hostile_plan(run_dir: Path, mode: str, overrides=()):
    """A compiled plan whose servers are the hostile server (the launcher in its argv
    edited, as a user could before `specc run`; the simulator's flags stay). The plan's
    engine_info.launcher is edited with it: a command that does not start with the recorded
    launcher is refused as the plan is read (tests/test_launcher.py)."""
    def edit(d):
        d["engine_info"]["launcher"] = [PY, str(HOSTILE), "-"]
        for s in d["servers"]:
            s["argv"] = [PY, str(HOSTILE), "-", *s["argv"][3:]]
            s["env"]["HOSTILE_MODE"] = mode
    compile_plan(run_dir, [*SPEC, *overrides], port=free_port_block(4), edit=edit)
    return run_dir / "plan.json"


@pytest.mark.timeout(240)
@pytest.mark.parametrize("mode,status,reason", [
    ("usage_scale:4", "failed", "4/4 requests failed (first: server reported 64 completion "
                                "tokens for 16 requested and 16 streamed)"),
    ("bad_chunk_size", "failed", "4/4 requests failed (first: bad response: bad chunk size "
                                 "b'zz')"),
    ("metrics_nan", "ok", None),
])
def test_specc_run_against_a_hostile_server(tmp_path, mode, status, reason):
    plan = _hostile_plan(tmp_path / "run", mode)
    res = run_cli(["run", "--plan", str(plan), "--accept-edited"], timeout=200)
    out = res.stdout + res.stderr
    assert "Traceback" not in out, out[-3000:]
    assert res.returncode == (0 if status == "ok" else 3), out[-3000:]
    rows = results(tmp_path / "run")
    assert len(rows) == 2 and {r["status"] for r in rows} == {status}, rows
    assert {r["reason"] for r in rows} == {reason}
    spec = [r for r in rows if r.get("accept_length_unknown")]
    if mode == "metrics_nan":   # the sweep went on; the speculative row says why, and so
        assert len(spec) == 1 and "read nan" in spec[0]["accept_length_unknown"]
        assert ("accept length unknown: counter sglang:spec_verify_calls_total read nan"
                in out)     # does the progress line, and the report
        report = (tmp_path / "run" / "report.md").read_text()
        assert (f"- {spec[0]['benchmark']}: accept length unknown: counter "
                "sglang:spec_verify_calls_total read nan") in report
