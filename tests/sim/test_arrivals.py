"""A step admits the requests that arrived before it began, however long the simulator's
own HTTP side took to queue them (issue 27: a wave of 128 requests sent at once landed in
different prefill batches from run to run, by how fast the simulator parsed them on a busy
machine). specc/sim/arrivals.py; docs/simulator.md, "Its own schedule"."""

from __future__ import annotations

import asyncio
import json
import socket
import time

import httpx

from specc.sim.args import Sim, build_parser
from specc.sim.arrivals import WAIT_MAX_S, Arrivals
from specc.sim.scheduler import Scheduler

from .test_schedule import FakeClock

WAVE = 16
DILATION = 20.0   # the first prefill (one request) lasts ~0.1 s: the wave is all sent by then


def _wave(port: int, n: int) -> list[bytes]:
    """n requests of different prompts sent at once on n fresh connections; their status lines."""
    socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(n)]
    msgs = []
    for i in range(n):
        body = json.dumps({"text": " ".join(f"w{i}x{j}" for j in range(40)),
                           "sampling_params": {"max_new_tokens": 2, "ignore_eos": True}}).encode()
        msgs.append(b"POST /generate HTTP/1.1\r\nHost: sim\r\nContent-Type: application/json\r\n"
                    b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    for s, m in zip(socks, msgs):
        s.sendall(m)
    out = []
    for s in socks:
        s.settimeout(60)
        buf = b""
        while chunk := s.recv(65536):
            buf += chunk
        out.append(buf.split(b"\r\n", 1)[0])
        s.close()
    return out


def _run_wave(start_sim, tmp_path, fault: str | None) -> tuple[list[dict], float]:
    """The wave's prefill steps (truth log) and the worst lateness /metrics reports."""
    truth = tmp_path / f"truth-{fault}.jsonl"
    env = {"SPECC_SIM_TRUTH": str(truth)}
    if fault:
        env["SPECC_SIM_FAULT"] = fault
    sim = start_sim("--model-path", "m", "--enable-metrics", env=env)
    sim.wait_ready()
    assert httpx.post(sim.url + "/specc_sim/time_dilation",
                      json={"factor": DILATION}).status_code == 200
    assert _wave(sim.port, WAVE) == [b"HTTP/1.1 200 OK"] * WAVE
    metrics = httpx.get(sim.url + "/metrics").text
    # SIGTERM, not the fixture's SIGKILL: the truth log is flushed every 100 ms and on exit,
    # and the wave's last steps are within the last 100 ms
    sim.proc.terminate()
    sim.proc.wait(10)
    sim.stop()
    worst = next(float(line.split()[-1]) for line in metrics.splitlines()
                 if line.startswith("specc_sim:step_lateness_max_seconds{"))
    events = [json.loads(x) for x in truth.read_text().splitlines()]
    (change,) = [e for e in events if e["event"] == "time_dilation"]
    return [e for e in events if e["event"] == "step" and e["prefill"]
            and e["due"] > change["t"]], worst


def test_a_wave_lands_in_the_same_prefill_batches_however_slow_the_http_side(start_sim,
                                                                             tmp_path):
    calm, _ = _run_wave(start_sim, tmp_path, None)
    # the HTTP side queues the wave's requests 40 ms apart: 0.64 s, past the first step
    # (~0.1 s) and the second's deadline (~0.3 s later), within the 1 s a step waits at most
    slow, worst = _run_wave(start_sim, tmp_path, "slow_http:0.04")
    # the first request alone (the wave came in while its prefill ran), then the other 15
    assert [s["batch"] for s in calm] == [1, WAVE - 1]
    assert [s["batch"] for s in slow] == [s["batch"] for s in calm]
    # the second prefill waited for the requests being parsed, past its own deadline:
    # that step is late, and says so (truth log and /metrics, which a point's check reads)
    second = slow[1]
    assert second["wait_s"] > 0 and second["late_s"] > 0
    assert worst >= second["late_s"] - 1e-6   # the log rounds to 1 us


class FakeArrivals(Arrivals):
    """Requests whose bytes came in (at given instants) that the HTTP side has not queued."""

    def __init__(self):
        super().__init__()
        self.pending: dict[str, float] = {}

    def earliest(self):
        return min(self.pending.values(), default=None)

    def overdue(self, t):
        return any(a <= t for a in self.pending.values())

    def give_up(self, t):
        for k in [k for k, a in self.pending.items() if a <= t]:
            del self.pending[k]


def _sched(clock: FakeClock) -> tuple[Scheduler, FakeArrivals, list]:
    sim = Sim(build_parser().parse_args(["--model-path", "m", "--sim-seed", "3"]), None)
    sched = Scheduler(sim)
    sched.arrivals = arrivals = FakeArrivals()
    prefills: list[tuple[float, list[str], int]] = []   # (when, admitted, tokens running)
    log = sched._log_prefill

    def on_prefill(admit, ntok):
        prefills.append((clock(), [r.rid for r in admit],
                         sum(len(r.tokens) for r in sched.running)))
        log(admit, ntok)
    sched._log_prefill = on_prefill
    return sched, arrivals, prefills


def test_a_step_waits_for_a_request_that_arrived_before_it_began():
    """On a fake clock: request b's bytes come in while a's prefill runs, but the HTTP side
    queues it only 0.5 s after that step's deadline. The next step is still b's prefill
    (its arrival, not its queueing, decides), after waiting for it, not 0.5 s of a's
    decoding; c, which arrived after that step began, joins a later one."""
    async def go():
        clock = FakeClock(1000.0)
        sched, arrivals, prefills = _sched(clock)
        task = asyncio.ensure_future(sched.run(clock=clock, sleep=clock.sleep))
        arrivals.pending["b"] = 1000.0 + 1e-4           # during a's prefill
        a = sched.submit("a", 64, 400, True, False, rid="a", arrival=1000.0)
        while sched.schedule.due is None:
            await asyncio.sleep(0)
        first_due = sched.schedule.due
        while clock() < first_due + 0.5:    # the scheduler waits (its sleeps move the clock)
            await asyncio.sleep(0)
        b = sched.submit("b", 64, 4, True, False, rid="b", arrival=arrivals.pending.pop("b"))
        c = sched.submit("c", 64, 4, True, False, rid="c", arrival=clock())   # after it
        await asyncio.wait_for(asyncio.gather(a.done, b.done, c.done), 10)
        task.cancel()
        return prefills, first_due, sched
    prefills, first_due, sched = asyncio.run(go())
    assert [ids for _, ids, _ in prefills] == [["a"], ["b"], ["c"]]
    assert prefills[1][2] == 1                          # a's first token only: no decoding
    assert prefills[1][0] >= first_due + 0.5            # it waited for b ...
    assert sched.schedule.late_max > 0                  # ... past that step's deadline


def test_a_step_gives_up_after_the_bound_and_counts_it_as_late():
    """A request whose bytes came in but which is never queued (a client stalled
    mid-request) holds a step back WAIT_MAX_S at most; that step records at least that."""
    async def go():
        clock = FakeClock(1000.0)
        sched, arrivals, prefills = _sched(clock)
        task = asyncio.ensure_future(sched.run(clock=clock, sleep=clock.sleep))
        arrivals.pending["stalled"] = 999.9
        a = sched.submit("a", 64, 4, True, False, rid="a", arrival=1000.0)
        await asyncio.wait_for(a.done, 10)
        task.cancel()
        return prefills, sched
    prefills, sched = asyncio.run(go())
    assert [ids for _, ids, _ in prefills] == [["a"]]
    assert sched.schedule.late_max >= WAIT_MAX_S


def test_unread_bytes_are_dated_by_the_kernel_not_by_when_they_are_read():
    """A connection's first bytes, unread, date its request: a step that began before they
    were sent does not wait for them, one that began after does."""
    arrivals = Arrivals()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as lst:
        lst.bind(("127.0.0.1", 0))
        lst.listen(4)
        arrivals.listening(lst)
        with socket.create_connection(lst.getsockname()) as cli:
            before = time.monotonic()
            cli.sendall(b"POST /generate HTTP/1.1\r\n")
            assert arrivals.overdue(before)          # not even accepted: wait for the loop
            conn, _ = lst.accept()
            with conn:
                conn.setblocking(False)
                arrivals.accepted(conn)
                assert not arrivals.overdue(before)  # sent after `before`
                assert arrivals.overdue(time.monotonic())
                c = arrivals.conn(conn)
                assert c is not None
                arrivals.reading(c)                  # the transport reads it: parsing
                conn.recv(4096)
                assert c.arrival >= before and arrivals.overdue(time.monotonic())
                arrivals.queued(c)                   # in the scheduler's queue
                assert not arrivals.overdue(time.monotonic())
                arrivals.done(c)                     # response ended: nothing unread
                assert not arrivals.overdue(time.monotonic())
                arrivals.lost(c)

