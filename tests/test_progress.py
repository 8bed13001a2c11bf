"""SweepProgress: plain lines on changes only, ETA arithmetic, idempotent close, live mode."""

import io
import re
import threading

import pytest

from specc.run.progress import SweepProgress, format_duration

STAMP = r"\d\d:\d\d:\d\d "


class FakeClock:
    def __init__(self, t=1_000_000.0):
        self.t = t

    def __call__(self):
        return self.t

    def tick(self, dt):
        self.t += dt


def lines(buf):
    return [ln for ln in buf.getvalue().splitlines() if ln]


def strip(ln):
    return re.sub("^" + STAMP, "", ln)


def test_plain_is_default_for_non_tty_and_prints_only_changes():
    buf, clock = io.StringIO(), FakeClock()
    p = SweepProgress(2, stream=buf, clock=clock)
    assert p.live is False
    p.server_phase("srv-a", "launching")
    clock.tick(3)
    p.server_phase("srv-a", "load_weights")
    for _ in range(5):  # the executor polls: the same phase again prints nothing
        clock.tick(1)
        p.server_phase("srv-a", "load_weights", detail="still loading")
    p.server_phase("srv-a", "capture_draft_cuda_graph", detail="TP0")
    clock.tick(2)
    p.server_phase("srv-a", "ready")
    got = lines(buf)
    assert all(re.match(STAMP, ln) for ln in got)
    assert [strip(ln) for ln in got] == [
        "server srv-a: launching",
        "server srv-a: load_weights [launching took 3s]",
        "server srv-a: capture_draft_cuda_graph (TP0) [load_weights took 5s]",
        "server srv-a: ready after 10s [capture_draft_cuda_graph took 2s]",
    ]
    assert "\r" not in buf.getvalue()


def test_plain_point_lines_with_status_summary_and_eta():
    buf, clock = io.StringIO(), FakeClock()
    with SweepProgress(3, stream=buf, clock=clock) as p:
        p.point_started("b1", "EAGLE3 s3 k1 d4 c16")
        clock.tick(60)
        p.point_finished("b1", "ok", "1540.0 tok/s, 1.40x")
        p.point_started("b2", "baseline c16")
        clock.tick(30)
        p.point_finished("b2", "failed", "server died")
        p.log("a note")
    got = [strip(ln) for ln in lines(buf)]
    assert got[:5] == [
        "[1/3] start EAGLE3 s3 k1 d4 c16",
        "[1/3] ok EAGLE3 s3 k1 d4 c16 in 1m00s - 1540.0 tok/s, 1.40x (ETA 2m00s)",
        "[2/3] start baseline c16",
        "[2/3] FAILED baseline c16 in 30s - server died (ETA 45s)",
        "a note",
    ]
    assert got[5] == "done: 2/3 points (1 ok, 1 failed) in 1m30s"


def test_eta_arithmetic():
    clock = FakeClock()
    p = SweepProgress(10, stream=io.StringIO(), clock=clock)
    assert p.eta() is None
    # a point that finishes without having started (e.g. its server failed) counts as done only
    p.point_finished("skipped", "failed", "server failed")
    assert p.eta() is None
    for i, dur in enumerate((10, 20, 30)):
        p.point_started(f"b{i}", f"p{i}")
        clock.tick(dur)
        p.point_finished(f"b{i}", "ok")
    # mean 20 s x (10 - 4 done) remaining
    assert p.eta() == pytest.approx(120.0)
    p.close()


def test_close_is_idempotent_and_later_calls_are_harmless():
    buf = io.StringIO()
    p = SweepProgress(1, stream=buf)
    p.close()
    p.close()
    p.server_phase("s", "launching")
    p.point_started("b", "x")
    p.point_finished("b", "ok")
    got = lines(buf)
    assert len(got) == 1 and "done: 0/1 points" in got[0]
    assert p.closed


def test_thread_safety_counts():
    buf = io.StringIO()
    p = SweepProgress(400, stream=buf)

    def work(k):
        for i in range(100):
            bid = f"{k}-{i}"
            p.point_started(bid, bid)
            p.server_phase(f"s{k}", "warming" if i % 2 else "ready")
            p.point_finished(bid, "ok")

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert p.done == 400
    p.close()
    assert "done: 400/400 points (400 ok, 0 failed)" in lines(buf)[-1]
    assert len(lines(buf)) >= 800  # every start and finish printed, none lost


def test_live_mode_forced_on_stringio_does_not_crash():
    buf, clock = io.StringIO(), FakeClock()
    p = SweepProgress(2, stream=buf, live=True, clock=clock)
    assert p.live is True
    p.server_phase("kimi-eagle3-s3", "capture_draft_cuda_graph", phase_started=clock() - 42, detail="[TP0]")
    p.point_started("b1", "EAGLE3 s3 k1 d4 c1 [brackets are not markup]")
    view = p._live.get_renderable()
    p._console.print(view)  # render once explicitly, like a refresh would
    clock.tick(5)
    p.point_finished("b1", "ok", "150.0 tok/s")
    p.log("[red]not markup[/red]")
    p.close()
    p.close()
    out = buf.getvalue()
    assert "capture_draft_cuda_graph 42s" in out
    assert "[red]not markup[/red]" in out
    assert "[1/2] ok EAGLE3 s3 k1 d4 c1 [brackets are not markup] in 5s" in out
    assert "done: 1/2 points" in out


def test_format_duration():
    assert format_duration(None) == "?"
    assert format_duration(5.4) == "5s"
    assert format_duration(185) == "3m05s"
    assert format_duration(3723) == "1h02m03s"


def test_counts_and_eta_cover_only_what_will_run():
    """A resumed run counts the points left, not those an earlier run kept; skipped points
    leave the total; the ETA adds the start-ups of the servers still to start."""
    buf, clock = io.StringIO(), FakeClock()
    p = SweepProgress(52, stream=buf, clock=clock)
    p.plan(6, servers=2, earlier=46, note="resuming: 46 of 52 kept")
    p.server_phase("s1", "launch")
    clock.tick(40)
    p.server_phase("s1", "ready")
    p.point_started("b1", "p1")
    clock.tick(10)
    p.point_finished("b1", "ok")
    # 5 points left at 10 s, and one more server to start at 40 s
    assert p.eta() == pytest.approx(5 * 10 + 40)
    p.skip(["b2", "b3"], "server failed: crash", "EAGLE3 s3")
    assert p.eta() == pytest.approx(3 * 10 + 40)
    p.close()
    got = [strip(x) for x in lines(buf)]
    assert got[0] == "resuming: 46 of 52 kept"
    assert "[1/6] ok p1 in 10s (ETA 1m30s)" in got
    assert "skip 2 point(s) of EAGLE3 s3: server failed: crash" in got
    assert got[-1] == ("done: 1/4 points (1 ok, 0 failed) in 50s; 2 skipped; 46 finished in "
                       "an earlier run")


def test_an_upper_bound_is_shown_as_one_and_shrinks_when_the_search_stops():
    buf, clock = io.StringIO(), FakeClock()
    p = SweepProgress(52, stream=buf, clock=clock)
    p.plan(16, servers=4, at_most=True)
    p.point_started("b1", "baseline @ c=1")
    clock.tick(5)
    p.point_finished("b1", "ok")
    p.plan(0, servers=0)   # the search stopped: nothing more runs
    assert p.eta() == 0
    p.close()
    got = [strip(x) for x in lines(buf)]
    assert got[0] == "[1/≤16] start baseline @ c=1" and got[1].startswith("[1/≤16] ok ")
    assert got[-1].startswith("done: 1/1 points (1 ok, 0 failed)")
