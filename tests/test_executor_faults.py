"""The executor against a misbehaving simulator, end to end.

One packed plan (TP 1: eight servers on eight GPUs, one wave, all at once) in
which every server but the baseline gets its own fault through its plan env
(the executor runs exactly what plan.json says). The baseline must go on as if
nothing happened; each faulty server must be diagnosed the way a user needs to
read it: which phase, which line. Only order and outcome are asserted here; how
fast each fault is caught is measured by benchmarks/executor_timing.py, and the
stall's budget + 1 s bound is checked on a fake clock in tests/test_readiness.py.
"""

from __future__ import annotations

import socket

import pytest

from executor_helpers import (SimGuard, compile_plan, execute, results, set_server_env, state,
                              wait_port_free)

# label of the zipped speculation entry -> fault given to that server
CONFIGS = [
    ({"num_steps": 3, "topk": 1, "num_draft_tokens": 4}, "hang@capture_draft_cuda_graph"),
    ({"num_steps": 2, "topk": 1, "num_draft_tokens": 3}, "crash@load_weights"),
    ({"num_steps": 1, "topk": 1, "num_draft_tokens": 2}, "health_503_forever"),
    ({"num_steps": 3, "topk": 4, "num_draft_tokens": 8}, "die_mid_run:40"),
    ({"num_steps": 5, "topk": 1, "num_draft_tokens": 6}, "health_flap"),
    ({"num_steps": 5, "topk": 4, "num_draft_tokens": 8}, "context_mismatch"),
    ({"num_steps": 2, "topk": 4, "num_draft_tokens": 8}, "port_taken"),
]
ALLOW = "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"


def _entry(c):
    return "{" + ",".join(f"{k}:{v}" for k, v in c.items()) + "}"


@pytest.fixture(scope="module")
def faulty(tmp_path_factory):
    """Compile + execute the packed faulty plan once; yield what the tests inspect."""
    root = tmp_path_factory.mktemp("faults")
    guard = SimGuard(root)
    base = guard.port(len(CONFIGS) + 1)
    sweep = ("+sweep={speculation:[" + ",".join(_entry(c) for c, _ in CONFIGS)
             + "],benchmark.concurrency:[1,2]}")
    by_fault: dict[str, str] = {}

    def edit(plan):
        for i, s in enumerate(plan["servers"]):
            if s["baseline"]:
                by_fault["none"] = s["id"]
                continue
            p = s["params"]
            fault = next(f for c, f in CONFIGS if all(p[k] == v for k, v in c.items()))
            by_fault[fault] = s["id"]
            if fault == "context_mismatch":
                set_server_env(plan, i, **{ALLOW: None})   # the runtime death the compiler warned of
            elif fault != "port_taken":
                set_server_env(plan, i, SPECC_SIM_FAULT=fault)

    run_dir = root / "run"
    plan = compile_plan(run_dir, ["hardware.tp=1", "model_pair.context_length=null",
                                  "model_pair.draft_context_override=true", sweep],
                        port=base, edit=edit)
    assert len(plan.waves) == 1 and len(plan.servers) == len(CONFIGS) + 1
    taken = plan.server(by_fault["port_taken"])
    squatter = socket.socket()
    squatter.bind(("127.0.0.1", taken.port))
    squatter.listen(1)
    try:
        code = execute(plan, run_dir)
    finally:
        squatter.close()
        left = guard.check()
    yield {"code": code, "run_dir": run_dir, "plan": plan, "ids": by_fault,
           "left": left, "state": state(run_dir), "rows": results(run_dir)}


def _server(faulty, fault):
    sid = faulty["ids"][fault]
    return faulty["state"]["servers"][sid], [r for r in faulty["rows"] if r["server"] == sid]


def test_exit_code_3_and_no_server_left(faulty):
    assert faulty["code"] == 3
    assert faulty["left"] == []
    for s in faulty["plan"].servers:
        assert wait_port_free(s.port, 10), f"port {s.port} still taken after the run"
    assert (faulty["run_dir"] / "report.md").exists()


def test_every_point_has_exactly_one_row(faulty):
    ids = [r["benchmark"] for r in faulty["rows"]]
    assert sorted(ids) == sorted(b.id for b in faulty["plan"].benchmarks)


def test_healthy_server_goes_on(faulty):
    entry, rows = _server(faulty, "none")
    assert entry["status"] == "stopped" and entry["ready_at"]
    assert [r["status"] for r in rows] == ["ok", "ok"]


def test_crash_while_loading_weights(faulty):
    entry, rows = _server(faulty, "crash@load_weights")
    assert entry["status"] == "failed"
    assert entry["phase"] == "load_weights"
    assert "load_weights" in entry["reason"]
    # the fatal line itself, not just "something failed"
    assert entry["reason"].startswith("fatal log line in load_weights: ")
    assert "RuntimeError: simulated failure in phase load_weights" in entry["reason"]
    assert rows and all(r["status"] == "failed" and "load_weights" in r["reason"] for r in rows)


def test_zombie_in_draft_graph_capture_is_a_stall(faulty):
    entry, rows = _server(faulty, "hang@capture_draft_cuda_graph")
    assert entry["status"] == "failed"
    assert entry["phase"] == "capture_draft_cuda_graph"
    assert "stalled in capture_draft_cuda_graph" in entry["reason"]
    phase = next(p for p in faulty["plan"].server(faulty["ids"]["hang@capture_draft_cuda_graph"])
                 .readiness.phases if p.name == "capture_draft_cuda_graph")
    assert f"(budget {phase.budget_s:g} s)" in entry["reason"]
    # never before its budget (the upper bound: test_readiness, on a fake clock)
    assert entry["failed_at"] - entry["phase_started_at"] >= phase.budget_s
    # the process group was killed (the guard also checks no sim survived)
    assert entry["stop"] in ("terminated", "killed")
    assert all(r["status"] == "failed" and "stalled" in r["reason"] for r in rows)


def test_context_mismatch_fails_with_the_valueerror(faulty):
    entry, rows = _server(faulty, "context_mismatch")
    assert entry["status"] == "failed"
    # caught by its fatal line (not a stall or the deadline), naming the cause
    assert entry["reason"].startswith("fatal log line in ")
    assert "ValueError: Warning: Target model's context_length (131072) is greater than the " \
           "derived context_length (2048)" in entry["reason"]
    assert all("context_length" in r["reason"] for r in rows)


def test_health_503_forever_is_a_stall_that_says_503(faulty):
    entry, rows = _server(faulty, "health_503_forever")
    assert entry["status"] == "failed"
    assert entry["phase"] == "warmup"
    assert "503" in entry["reason"]
    assert entry["ready_at"] is None
    assert all(r["status"] == "failed" for r in rows)


def test_health_flap_still_becomes_ready(faulty):
    """Decision: readiness needs one 200 (success_threshold 1); a flapping health check
    after that does not matter to a benchmark, which watches the process and requests."""
    entry, rows = _server(faulty, "health_flap")
    assert entry["ready_at"] and entry["status"] == "stopped"
    assert [r["status"] for r in rows] == ["ok", "ok"]


def test_port_taken_is_refused_before_launch(faulty):
    entry, rows = _server(faulty, "port_taken")
    port = faulty["plan"].server(faulty["ids"]["port_taken"]).port
    assert entry["status"] == "failed"
    assert f"port {port}" in entry["reason"]
    assert "pid" not in entry      # nothing was launched
    assert rows and all(r["status"] == "failed" and f"port {port}" in r["reason"] for r in rows)


def test_server_dies_mid_benchmark(faulty):
    entry, rows = _server(faulty, "die_mid_run:40")
    assert entry["ready_at"] and entry["status"] == "failed"
    assert "died mid-run" in entry["reason"]
    first, second = sorted(rows, key=lambda r: r["params"]["concurrency"])
    assert first["status"] == "failed" and "died mid-run" in first["reason"]
    # the cause its log names, not only the exit code
    assert "last exception logged: RuntimeError: simulated scheduler failure" in entry["reason"]
    assert second["status"] == "failed" and "died" in second["reason"]
    # the other servers' results are kept (partial results)
    assert sum(r["status"] == "ok" for r in faulty["rows"]) >= 4
