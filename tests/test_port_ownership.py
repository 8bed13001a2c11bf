"""The server measured is the server launched (issue 8 item 1).

Preflight finds the port free, but a server binds it only after loading; another
process that takes it in between must not be declared ready, benchmarked, and
labelled with this server's configuration. Real processes throughout: a plain
`python -m http.server` and a second simulator grab the port after preflight,
before the launched simulator can bind.
"""

from __future__ import annotations

import os
import socket
import subprocess

import psutil
import pytest

from executor_helpers import (PY, compile_plan, execute, results, state, wait_for)
from specc.run import lifecycle, ownership



def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


# -- the ownership check itself, on real sockets --------------------------------------------
def test_listener_is_ours_only_when_our_process_group_holds_it():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert ownership.listener("localhost", port, os.getpgid(0)) == ("ours", "")
        # a process in another group holds nothing here: this process's socket is foreign
        other = subprocess.Popen([PY, "-c", "import time; time.sleep(30)"],
                                 start_new_session=True)
        try:
            kind, who = ownership.listener("localhost", port, other.pid)
            line = ownership.taken("localhost", port, other.pid)
        finally:
            other.kill()
            other.wait()
        assert kind == "foreign" and who.startswith(f"pid {os.getpid()} (")
        assert line == f"port {port} taken after preflight by {who}"
    assert ownership.listener("localhost", port, os.getpgid(0)) == ("none", "")


def test_a_rank_srun_started_for_our_group_is_ours():
    """A multi-node server's rank 0 is started by slurmd, in no group of ours: the mark
    specc.run.rank gives it (the launching group) makes its listener the server's."""
    code = ("import socket,sys,time; s=socket.socket(); s.bind(('127.0.0.1',0)); s.listen(); "
            "print(s.getsockname()[1], flush=True); time.sleep(30)")
    proc = subprocess.Popen([PY, "-c", code], start_new_session=True, stdout=subprocess.PIPE,
                            text=True, env={**os.environ, "SPECC_SERVER_PGID": "999999"})
    try:
        port = int(proc.stdout.readline())
        assert ownership.listener("127.0.0.1", port, 999999) == ("ours", "")
        assert ownership.listener("127.0.0.1", port, 999998)[0] == "foreign"
    finally:
        proc.kill()
        proc.wait()


def test_a_listener_on_another_address_is_not_the_servers_port():
    """A socket on 127.0.0.2:P does not answer a client of 127.0.0.1:P."""
    with socket.socket() as s:
        s.bind(("127.0.0.2", 0))
        s.listen()
        port = s.getsockname()[1]
        assert ownership.listener("127.0.0.1", port, 1) == ("none", "")
        assert ownership.listener("127.0.0.2", port, 1)[0] == "foreign"


# -- end to end: a second process takes the port between preflight and bind ----------------
def _grabber(kind: str, server) -> list[str]:
    if kind == "http.server":
        return [PY, "-m", "http.server", str(server.port), "--bind", "127.0.0.1"]
    return lifecycle.resolve_argv(server.argv)   # another run's simulator on the same port


@pytest.mark.parametrize("kind", ["http.server", "another simulator"])
def test_port_taken_after_preflight_fails_readiness_naming_the_taker(kind, guard, tmp_path,
                                                                      monkeypatch):
    run_dir = tmp_path / "run"
    plan = compile_plan(run_dir, ["baseline=false"], port=guard.port(1))
    (server,) = plan.servers
    taker: list[subprocess.Popen] = []
    launch = lifecycle.launch

    def grab_then_launch(srv, rd):
        """Preflight has passed; the other process binds first, then ours starts."""
        proc = guard.spawn(_grabber(kind, srv), cwd=tmp_path, env=lifecycle.resolve_env(srv),
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           start_new_session=True)
        taker.append(proc)
        assert wait_for(lambda: _listening(srv.port), timeout=30), "the taker never listened"
        return launch(srv, rd)

    monkeypatch.setattr(lifecycle, "launch", grab_then_launch)
    try:
        code = execute(plan, run_dir)
        assert taker[0].poll() is None, "specc must not kill a process it did not start"
    finally:
        for p in taker:
            p.kill()
            p.wait(5)
    assert code == 3
    (entry,) = state(run_dir)["servers"].values()
    taken = f"port {server.port} taken after preflight by pid {taker[0].pid} ("
    assert entry["status"] == "failed"
    assert entry["reason"].startswith(taken), entry["reason"]
    assert ("http.server" if kind == "http.server" else "specc.sim") in entry["reason"]
    rows = results(run_dir)
    assert rows and all(r["status"] == "failed" and taken in r["reason"] for r in rows), rows


def test_a_point_does_not_start_when_the_port_changed_hands(guard, tmp_path, monkeypatch):
    """Readiness proved the listener ours; before each point it is proved again (a listener
    can change hands while the leader lives): the point fails instead of measuring it."""
    from specc.run import executor

    run_dir = tmp_path / "run"
    plan = compile_plan(run_dir, ["baseline=false", "+sweep={benchmark.concurrency:[1,2]}"],
                        port=guard.port(1))
    real = ownership.listener
    stranger = psutil.Process(os.getppid())

    def listener(host, port, pgid):
        if results(run_dir):   # after the first point: someone else holds the port
            return "foreign", f"pid {stranger.pid} (x)"
        return real(host, port, pgid)

    monkeypatch.setattr(executor.ownership, "listener", listener)
    assert execute(plan, run_dir) == 3
    first, second = sorted(results(run_dir), key=lambda r: r["params"]["concurrency"])
    assert first["status"] == "ok"
    assert second["status"] == "failed" and "taken after preflight" in second["reason"]
    (entry,) = state(run_dir)["servers"].values()
    assert entry["status"] == "failed" and "taken after preflight" in entry["reason"]
    # the leader's kernel start time, recorded at launch for `specc down` to check
    assert isinstance(entry["create_time"], float)
    assert abs(entry["create_time"] - entry["started_at"]) < 5


def test_a_taken_rendezvous_port_fails_preflight_naming_it(tmp_path):
    """A multi-node server's ranks meet at its rendezvous port on the head node (where the
    executor runs): held by another process, the server would hang in its join phase until
    the budget ran out; preflight names the holder instead and launches nothing."""
    from executor_helpers import SimGuard, set_server_env

    guard = SimGuard(tmp_path)
    base = guard.port(1)
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        meet = holder.getsockname()[1]

        def edit(plan):
            plan["servers"][0]["rendezvous_port"] = meet
            set_server_env(plan, 0)

        plan = compile_plan(tmp_path / "run", port=base, edit=edit)
        try:
            code = execute(plan, tmp_path / "run")
        finally:
            left = guard.check()
    assert left == [] and code == 3
    sid = plan.servers[0].id
    rows = [r for r in results(tmp_path / "run") if r["server"] == sid]
    assert rows and all(r["status"] == "failed" for r in rows)
    assert all(f"rendezvous port {meet} (where the server's nodes meet) is already in use by "
               f"pid {os.getpid()}" in r["reason"] for r in rows)
    assert not (tmp_path / "run" / plan.servers[0].log).exists()   # never launched
    assert state(tmp_path / "run")["servers"][sid]["status"] == "failed"
