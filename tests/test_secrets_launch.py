"""Secrets at launch (issue 8 item 4, executor side): a referenced secret that is not set
stops that server's launch with one line (nothing started); `${NAME}` in argv is expanded
only in the launched process; a server launched with `--api-key` is sent
`Authorization: Bearer <key>` by the load generator and the point's own requests, and the
key is in no file specc writes."""

from __future__ import annotations

import pytest

from executor_helpers import compile_plan, execute, results, state
from specc.secrets import missing_line

KEY = "sk-test-" + "Qm9vYmFyYmF6cXV4MTIzNDU2Nzg5"



def _plan(guard, tmp_path):
    run_dir = tmp_path / "run"
    plan = compile_plan(run_dir, ["baseline=false", "+sweep={benchmark.concurrency:[1,2]}",
                                  f"engine.extra_args=[--api-key,{KEY}]"], port=guard.port(1))
    (server,) = plan.servers
    assert "${API_KEY}" in server.argv and "API_KEY" in server.secrets
    return run_dir, plan, server


def test_a_secret_not_set_stops_the_launch_with_one_line(guard, tmp_path, monkeypatch):
    run_dir, plan, server = _plan(guard, tmp_path)
    monkeypatch.delenv("API_KEY", raising=False)
    assert execute(plan, run_dir) == 3
    (entry,) = state(run_dir)["servers"].values()
    line = missing_line(server, ["API_KEY"])
    assert entry["status"] == "failed" and entry["reason"] == line
    assert "pid" not in entry and not (run_dir / server.log).exists()    # nothing started
    rows = results(run_dir)
    assert len(rows) == 2 and all(r["status"] == "failed" and line in r["reason"] for r in rows)


def test_api_key_server_is_benchmarked_with_its_key_and_the_key_is_written_nowhere(
        guard, tmp_path, monkeypatch):
    run_dir, plan, server = _plan(guard, tmp_path)
    monkeypatch.setenv("API_KEY", KEY)
    assert execute(plan, run_dir) == 0, results(run_dir)
    rows = results(run_dir)
    assert [r["status"] for r in rows] == ["ok", "ok"]
    # /server_info needs the key on 0.5.23: acceptance was read through it
    assert all(r["metrics"]["accept_length"] for r in rows)
    for f in run_dir.rglob("*"):
        if f.is_file():
            assert KEY not in f.read_text(errors="replace"), f
    # the server printed its arguments (as SGLang 0.5.23 does, api_key included): blanked
    log = (run_dir / server.log).read_text()
    assert "'api_key': '<redacted>'" in log and "The server is fired up" in log


def test_a_header_value_cannot_split_the_request():
    """A key with a line break would inject headers into every request: refused."""
    from specc.run.loadgen.client import header_lines

    assert header_lines({"Authorization": "Bearer k"}) == b"Authorization: Bearer k\r\n"
    for bad in ({"Authorization": "Bearer k\r\nX-Evil: 1"}, {"A: B": "c"}, {"A": "b\nc"}):
        with pytest.raises(ValueError):
            header_lines(bad)
