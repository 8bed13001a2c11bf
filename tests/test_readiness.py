"""Readiness as a pure state machine: replayed logs on a fake clock, no processes, no sleeps.

The plans here are written out by hand with the markers the engines print, so
these tests say what the machine does with a log, whatever an adapter supplies.
The fixtures are `seconds since launch <TAB> line as printed`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from specc.engines import get_engine
from specc.plan import Phase, Probe, Readiness, literal
from specc.run.readiness import (TICK_S, Failed, LogTail, PhaseChanged, ProbeNow, Ready,
                                 Startup)

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "readiness"
READY = "The server is fired up and ready to roll!"
#: The SGLang adapter's own fatal patterns (lines 0.5.23 dies of), already regexes.
FATAL = get_engine("sglang").fatal_patterns


def _phase(name, begin, end=None, budget=120.0, estimate=2.0):
    return Phase(name=name, begin=(begin,) if begin else (), end=(end,) if end else (),
                 estimate_s=estimate, budget_s=budget)


def _plan(phases, *, answers=None, interval=0.1, threshold=1, deadline=3000.0):
    return Readiness(
        probe=Probe(method="GET", path="/health_generate", interval_s=interval, timeout_s=30.0,
                    success_threshold=threshold),
        answers=answers or {"refused": "starting", "503": "warming", "200": "ready"},
        engine_health_timeout_s=20.0, ready_log=(literal(READY),),
        phases=(_phase("launch", None, budget=300.0, estimate=None), *phases),
        fatal_patterns=FATAL, estimated_start_s=250.0,
        deadline_s=deadline, serving_silence_s=60.0)


#: SGLang 0.5.23 (read from its released wheel): regexes, as the version-keyed adapter gives them.
PLAN_0_5_23 = _plan([
    _phase("load_weights", r"Load weight begin", r"Load weight end", budget=705.0, estimate=235.0),
    _phase("load_draft_weights", r"Load weight begin", r"Load weight end", estimate=3.3),
    _phase("kv_cache", r"KV Cache is allocated", r"Memory pool end"),
    _phase("capture_target_decode_cuda_graph", r"Capture target decode CUDA graph begin\."),
    _phase("capture_target_verify_cuda_graph", r"Capture target verify CUDA graph begin\."),
    _phase("capture_draft_decode_cuda_graph", r"Capture draft decode CUDA graph begin\."),
    _phase("capture_draft_extend_cuda_graph", r"Capture draft extend CUDA graph begin\."),
    _phase("warmup", r"Uvicorn running on"),
])

#: The incident's release (early 2026): its strings and order, as specc knew them then.
PLAN_EARLY_2026 = _plan([
    _phase("load_weights", "Load weight begin", "Load weight end", budget=705.0, estimate=235.0),
    _phase("kv_cache", "KV Cache is allocated", "Memory pool end"),
    _phase("capture_cuda_graph", "Capture cuda graph begin", "Capture cuda graph end"),
    _phase("load_draft_weights", "Load weight begin", "Load weight end"),
    _phase("capture_draft_cuda_graph", "Capture draft cuda graph begin"),
    _phase("capture_draft_extend_cuda_graph", "Capture draft extend cuda graph begin"),
    _phase("warmup", "Uvicorn running on"),
])


def _fixture(name: str) -> list[tuple[float, str]]:
    rows = []
    for line in (FIXTURES / name).read_text().splitlines():
        if line and not line.startswith("#"):
            t, text = line.split("\t", 1)
            rows.append((float(t), text))
    return rows


def _time_of(rows, needle: str) -> float:
    return next(t for t, text in rows if needle in text)


class Replay:
    """Feeds a Startup the way the executor's runner does, on a fake clock: each log line
    at its time, a tick every TICK_S, each probe answered `latency` after it was sent by
    `server(t)`. Records every action and every probe's (sent, answered) span."""

    def __init__(self, plan: Readiness, server=lambda t: "refused", latency=0.05,
                 never_answer=False):
        self.machine = Startup(plan, 0.0)
        self.server, self.latency, self.never_answer = server, latency, never_answer
        self.actions: list = list(self.machine.start())
        self.probes: list[list[float]] = []
        self.result = None
        self.result_at: float | None = None

    def _take(self, now, actions):
        for a in actions:
            self.actions.append(a)
            if isinstance(a, ProbeNow):
                self.probes.append([now, None])
            elif isinstance(a, (Ready, Failed)):
                self.result, self.result_at = a, now

    def run(self, rows, until: float, exit_at: tuple[float, int] | None = None):
        rows = list(rows)
        k = 0
        while self.result is None:
            now = round(k * TICK_S, 6)
            if now > until:
                break
            while rows and rows[0][0] <= now:
                self._take(now, self.machine.line(now, rows.pop(0)[1]))
            if exit_at and now >= exit_at[0]:
                self._take(now, self.machine.exited(now, exit_at[1]))
            if self.probes and self.probes[-1][1] is None and not self.never_answer:
                sent = self.probes[-1][0]
                if now >= sent + self.latency:
                    self.probes[-1][1] = now
                    self._take(now, self.machine.probe_answer(now, self.server(sent)))
            self._take(now, self.machine.tick(now))
            k += 1
        return self.result

    def labels(self) -> list[str]:
        out = []
        for a in self.actions:
            if isinstance(a, PhaseChanged) and (not out or out[-1] != a.label):
                out.append(a.label)
        return out


def _sglang_server(rows):
    """What a real SGLang answers: refused until uvicorn listens, 503 until the ready line."""
    listening, ready = _time_of(rows, "Uvicorn running on"), _time_of(rows, READY)
    return lambda t: "refused" if t < listening else "503" if t < ready else "200"


# -- whole startups, replayed ------------------------------------------------------------
def test_a_real_ordered_0_5_23_startup_with_long_phases_is_ready():
    """Graph capture runs 150-210 s against 120 s budgets while lines keep coming: ready."""
    rows = _fixture("sglang-0.5.23-kimi-eagle3-tp8.log")
    replay = Replay(PLAN_0_5_23, server=_sglang_server(rows))
    result = replay.run(rows, until=2000)
    assert isinstance(result, Ready), result
    assert replay.labels() == [
        "launch", "load_weights", "load_draft_weights", "kv_cache",
        "capture_target_decode_cuda_graph", "capture_target_verify_cuda_graph",
        "capture_draft_decode_cuda_graph", "capture_draft_extend_cuda_graph", "warmup"]
    # each phase began at its own marker: the draft's weights only after the target's ended
    began = {p: t for p, t in replay.machine.timeline}
    assert began["load_draft_weights"] == pytest.approx(245.0, abs=TICK_S)
    assert began["kv_cache"] == pytest.approx(250.2, abs=TICK_S)
    # the ready line fired a probe as soon as the one in flight (sent before it) answered
    ready_line = _time_of(rows, READY)
    assert ready_line <= result.at <= ready_line + 2 * (replay.latency + TICK_S)


def test_the_0_5_23_startup_read_with_the_early_2026_markers_is_not_killed():
    """The issue's false stall: markers it does not know cost labels, never the server."""
    rows = _fixture("sglang-0.5.23-kimi-eagle3-tp8.log")
    replay = Replay(PLAN_EARLY_2026, server=_sglang_server(rows))
    assert isinstance(replay.run(rows, until=2000), Ready)
    labels = replay.labels()
    # no jump to the draft's weights on another rank's (or the draft's) "Load weight begin"
    assert "load_draft_weights" not in labels
    # after "Memory pool end", lines of phases it has no marker for (the graphs): a guess
    assert labels[:4] == ["launch", "load_weights", "kv_cache", "kv_cache (?)"]
    # the skip over unknown graph markers to uvicorn: a guess too
    assert labels[-1] == "warmup (?)"


def test_the_incidents_early_2026_log_passes_in_its_own_order():
    rows = _fixture("sglang-early-2026-incident.log")
    replay = Replay(PLAN_EARLY_2026, server=_sglang_server(rows))
    assert isinstance(replay.run(rows, until=2000), Ready)
    assert replay.labels() == ["launch", "load_weights", "kv_cache", "capture_cuda_graph",
                               "load_draft_weights", "capture_draft_cuda_graph",
                               "capture_draft_extend_cuda_graph", "warmup"]


def test_a_silent_hang_in_draft_capture_is_caught_within_its_budget_plus_one_second():
    rows = _fixture("sglang-0.5.23-kimi-eagle3-tp8.log")
    began = _time_of(rows, "Capture draft decode CUDA graph begin")
    hung = [(t, text) for t, text in rows if t <= began]     # then nothing, ever
    replay = Replay(PLAN_0_5_23, server=_sglang_server(rows))
    result = replay.run(hung, until=began + 1000)
    assert isinstance(result, Failed)
    assert result.phase == "capture_draft_decode_cuda_graph"
    assert result.reason == ("stalled in capture_draft_decode_cuda_graph: no log output for "
                             "120 s (budget 120 s)")
    assert began + 120.0 < replay.result_at <= began + 120.0 + 1.0


def test_a_hang_in_the_incidents_draft_capture_names_that_phase():
    rows = _fixture("sglang-early-2026-incident.log")
    began = _time_of(rows, "Capture draft cuda graph begin")
    replay = Replay(PLAN_EARLY_2026)
    result = replay.run([(t, x) for t, x in rows if t <= began + 0.5], until=began + 1000)
    assert isinstance(result, Failed) and result.phase == "capture_draft_cuda_graph"
    assert began + 120.0 < replay.result_at <= began + 121.5


# -- phases -------------------------------------------------------------------------------
def test_a_marker_shared_with_the_next_phase_moves_on_only_after_this_phase_ended():
    m = Startup(PLAN_0_5_23, 0.0)
    for rank in range(8):
        m.line(1.0, f"[TP{rank}] Load weight begin. avail mem=139.23 GB")
    assert m.phase == "load_weights"          # eight ranks, one phase
    m.line(200.0, "[TP3] Load weight end. elapsed=199 s")
    (changed,) = m.line(201.0, "[TP3] Load weight begin. avail mem=69.5 GB")
    assert changed == PhaseChanged("load_draft_weights", False, 201.0)
    # a late rank's target "end" and draft "begin" do not move it again
    m.line(201.5, "[TP7] Load weight end. elapsed=200 s")
    assert m.line(202.0, "[TP7] Load weight begin. avail mem=69.5 GB") == []
    assert m.phase == "load_draft_weights"


def test_a_later_phases_marker_advances_to_it_and_says_it_is_a_guess():
    """0.5.23 prints the target's verify graphs (not decode) with speculation: a plan
    listing both skips one, and the phase shown admits it."""
    m = Startup(PLAN_0_5_23, 0.0)
    m.line(1.0, "KV Cache is allocated. dtype: torch.bfloat16, #tokens: 3262823")
    (changed,) = m.line(2.0, "Capture target verify CUDA graph begin. backend=flashinfer")
    assert changed.label == "capture_target_verify_cuda_graph (?)"
    (changed,) = m.line(3.0, "Capture draft decode CUDA graph begin. backend=flashinfer")
    assert changed.label == "capture_draft_decode_cuda_graph"   # the next one: known again


def test_any_of_a_phases_patterns_begins_it_each_with_its_own_flags():
    plan = _plan([Phase(name="capture_cuda_graph", end=(), estimate_s=1.5, budget_s=120.0,
                        begin=(r"(?i)Capture cuda graph begin",
                               r"(?i)Capture target (decode |verify )?CUDA graph begin"))])
    for line in ("Capture cuda graph begin. This can take up to several minutes.",
                 "Capture target verify CUDA graph begin. backend=flashinfer"):
        m = Startup(plan, 0.0)
        assert m.line(1.0, line) == [PhaseChanged("capture_cuda_graph", False, 1.0)]


def test_a_plain_adapter_string_is_a_literal_and_a_list_holds_regexes():
    from specc.engines.base import patterns

    assert patterns("Capture cuda graph begin. (x)") == (r"Capture cuda graph begin\. \(x\)",)
    assert patterns([r"Capture (target|draft) \w+ CUDA graph begin\."]) == \
        (r"Capture (target|draft) \w+ CUDA graph begin\.",)
    assert patterns(None) == ()


# -- failures ------------------------------------------------------------------------------
def test_a_fatal_line_fails_with_the_line_that_names_the_cause():
    m = Startup(PLAN_0_5_23, 0.0)
    m.line(1.0, "[TP0] Load weight begin. avail mem=139.23 GB")
    assert m.line(5.0, "[TP0] Scheduler hit an exception: Traceback (most recent call last):") == []
    m.line(5.0, '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 2201')
    assert m.tick(5.1) == []                 # the traceback's last line is still to come
    m.line(5.2, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")
    (failed,) = m.tick(5.2)
    assert failed == Failed("fatal log line in load_weights: torch.OutOfMemoryError: CUDA out "
                            "of memory. Tried to allocate 2.00 GiB", "load_weights")
    assert m.tick(400.0) == []               # decided once


def test_a_fatal_line_without_a_cause_fails_after_the_grace_with_itself():
    m = Startup(PLAN_0_5_23, 0.0)
    m.line(5.0, "Received sigquit from a child process. It usually means the child failed.")
    assert m.tick(5.2) == []
    (failed,) = m.tick(5.6)
    assert failed.reason == ("fatal log line in launch: Received sigquit from a child process. "
                             "It usually means the child failed.")


def test_a_fatal_line_then_the_exit_names_both():
    m = Startup(PLAN_0_5_23, 0.0)
    m.line(5.0, "Scheduler hit an exception: Traceback (most recent call last):")
    (failed,) = m.exited(5.1, 1)
    assert failed.reason == ("fatal log line in launch: Scheduler hit an exception: Traceback "
                             "(most recent call last): (process exited with code 1)")


def test_warnings_that_log_their_traceback_do_not_fail_a_healthy_server(compose):
    """0.5.23 logs tracebacks under warnings and carries on (the stale-shm sweep before the
    weights, a glue-graph fallback in warm-up): with the plan specc compiles, ready."""
    from specc.compile.pipeline import compile_config

    rows = _fixture("sglang-0.5.23-warnings-with-tracebacks.log")
    assert sum("Traceback (most recent call last)" in text for _, text in rows) == 2
    plan = compile_config(compose(["+experiment=eagle3_sweep", "engine=sglang"])).plan
    for readiness in (PLAN_0_5_23, plan.servers[0].readiness):
        replay = Replay(readiness, server=_sglang_server(rows))
        assert isinstance(replay.run(rows, until=2000), Ready), replay.result


def test_no_fatal_pattern_matches_a_traceback_or_an_exception_line():
    """A fatal pattern is a message an engine dies of: the lines of any traceback match none."""
    import re

    lines = ("Traceback (most recent call last):", "ValueError: bad value",
             "RuntimeError: CUDA error: operation not permitted when stream is capturing",
             "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
             "PermissionError: [Errno 1] Operation not permitted: '/dev/shm/x'")
    for engine in ("sglang", "vllm", "sim"):
        for pattern in get_engine(engine).fatal_patterns:
            assert not any(re.search(pattern, ln) for ln in lines), (engine, pattern)


def test_a_crash_without_a_fatal_message_names_its_exception_at_exit():
    m = Startup(PLAN_0_5_23, 0.0)
    m.line(1.0, "[TP0] Load weight begin. avail mem=139.23 GB")
    assert m.line(2.0, "Traceback (most recent call last):") == []
    m.line(2.0, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")
    m.line(2.1, "[rank0]:[W1130 10:00:02] ProcessGroupNCCL destroyed without shutdown")
    assert not [a for a in m.tick(3.0) if isinstance(a, Failed)]   # a traceback alone: no
    (failed,) = m.exited(3.5, 1)
    assert failed == Failed(
        "process exited with code 1 during load_weights; last exception logged: "
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB; last log line: "
        "[rank0]:[W1130 10:00:02] ProcessGroupNCCL destroyed without shutdown", "load_weights")


def test_a_process_exit_fails_with_its_code_and_last_line():
    m = Startup(PLAN_0_5_23, 0.0)
    m.line(1.0, "[TP0] Load weight begin. avail mem=139.23 GB")
    m.line(2.0, "Killed")
    (failed,) = m.exited(2.5, -9)
    assert failed == Failed("process exited with code -9 during load_weights; last log line: "
                            "Killed", "load_weights")


def test_the_deadline_applies_while_lines_keep_coming():
    m = Startup(_plan([_phase("load_weights", "Load weight begin", budget=50.0)], deadline=100.0),
                0.0)
    m.line(0.5, "Load weight begin. avail mem=139.23 GB")
    t, out = 0.0, []
    while not out:
        t += 1.0
        m.line(t, "Loading safetensors checkpoint shards: 1%")
        out = [a for a in m.tick(t) if isinstance(a, Failed)]
    assert t == 101.0
    assert out[0].reason == "not ready within the deadline of 100 s (in load_weights)"


# -- health --------------------------------------------------------------------------------
def test_health_refused_then_503_then_200_is_ready_only_at_200():
    m = Startup(_plan([_phase("warmup", "Uvicorn running on")], threshold=2), 0.0)
    assert m.tick(0.0) == [ProbeNow()]
    assert m.probe_answer(0.1, "refused") == []
    assert m.tick(0.2) == [ProbeNow()]
    (changed,) = m.probe_answer(0.3, "503")
    assert changed.detail == "health: 503 (warming)"
    assert m.tick(0.4) == [ProbeNow()]
    assert m.probe_answer(0.5, "200") == []            # one of two
    assert m.tick(0.5) == [ProbeNow()]                 # the next at once
    assert m.probe_answer(0.6, "503") != [Ready(0.6)]  # consecutive, or start over
    m.tick(0.7)
    m.probe_answer(0.8, "200")
    m.tick(0.8)
    assert m.probe_answer(0.9, "200") == [Ready(0.9)]


def test_an_answer_meaning_dead_fails_at_once():
    m = Startup(_plan([], answers={"refused": "starting", "503": "dead", "200": "ready"}), 0.0)
    m.tick(0.0)
    (failed,) = m.probe_answer(0.1, "503")
    assert failed.reason == "health answered 503: the engine reports itself dead"


def test_probes_never_overlap_however_long_one_takes():
    rows = [(1.0, "[TP0] Load weight begin.")] + [(float(t), "shard") for t in range(2, 90, 5)]
    replay = Replay(_plan([_phase("load_weights", "Load weight begin", budget=705.0)]),
                    never_answer=True)
    replay.run(rows, until=90.0)
    assert len(replay.probes) == 1                     # still waiting for the first answer
    replay.never_answer = False
    replay.run([], until=95.0)
    spans = replay.probes
    assert len(spans) > 10
    assert all(a[1] is not None and a[1] <= b[0] for a, b in zip(spans, spans[1:]))


def test_the_ready_line_fires_a_probe_at_once():
    m = Startup(_plan([_phase("warmup", "Uvicorn running on")], interval=10.0), 0.0)
    m.tick(0.0)
    m.probe_answer(0.1, "503")
    assert m.tick(5.0) == []                           # next probe due at 10.1
    assert m.line(5.0, READY) == [ProbeNow()]
    assert m.probe_answer(5.1, "200") == [Ready(5.1)]


def test_an_answer_from_before_the_ready_line_asks_again_at_once():
    m = Startup(_plan([_phase("warmup", "Uvicorn running on")], interval=10.0), 0.0)
    assert m.tick(0.0) == [ProbeNow()]
    assert m.line(0.5, READY) == []                    # a probe is in flight: no second one
    m.probe_answer(0.6, "503")                         # it was sent before the line
    assert m.tick(0.6) == [ProbeNow()]


def test_our_own_probes_echo_in_the_access_log_is_not_progress():
    m = Startup(_plan([_phase("warmup", "Uvicorn running on", budget=30.0)]), 0.0)
    m.line(1.0, "INFO:     Uvicorn running on http://127.0.0.1:30000 (Press CTRL+C to quit)")
    out, t = [], 1.0
    while not out:
        t = round(t + 0.5, 6)
        actions = m.tick(t) + m.probe_answer(t, "503")
        actions += m.line(t, 'INFO:     127.0.0.1:51234 - "GET /health_generate HTTP/1.1" 503')
        out = [a for a in actions + m.tick(t) if isinstance(a, Failed)]
    assert 31.0 < t <= 31.5
    assert out[0].reason == ("stalled in warmup: no log output for 30 s (budget 30 s); health "
                             "answered 503 (last probe)")


# -- the log tail ---------------------------------------------------------------------------
def test_log_tail_reads_whole_lines_and_a_carriage_return_ends_one(tmp_path):
    log = tmp_path / "s.log"
    log.write_bytes(b"")
    tail = LogTail(log)
    with open(log, "ab") as f:
        f.write(b"Load weight begin\nshards: 10%\rshards: 20%\rshar")
        f.flush()
        assert tail.read() == ["Load weight begin", "shards: 10%", "shards: 20%"]
        f.write(b"ds: 30%\r\nKV Cache is allocated\npartial")
        f.flush()
        assert tail.read() == ["shards: 30%", "KV Cache is allocated"]
        assert tail.read(final=True) == ["partial"]
    assert LogTail(tmp_path / "missing.log").read() == []


# -- vLLM 0.33, with the plan specc compiles -----------------------------------------------
VLLM_LLAMA = ["+experiment=eagle3_sweep", "engine=vllm",
              "model_pair=llama3_8b_eagle3", "model_pair.context_length=2048"]


def _vllm_readiness(compose, extra=()):
    from specc.compile.pipeline import compile_config

    result = compile_config(compose([*VLLM_LLAMA, *extra]))
    assert result.ok, [d.line() for d in result.diagnostics if d.severity == "error"]
    return next(s for s in result.plan.servers if s.params.algorithm).readiness


def _vllm_server(rows):
    """vLLM: the API process listens only once the engine is up; then /health is 200."""
    listening = _time_of(rows, "Started server process")
    return lambda t: "refused" if t < listening else "200"


def test_a_real_shaped_vllm_0_33_startup_goes_through_its_phases_in_their_order(compose):
    """Load, torch.compile (191 s of silence in Inductor), the profiling capture with its own
    "Graph capturing finished", the KV cache, the real capture, the API server: each phase
    entered at its line, none skipped, none a guess, and the compile's silence within its
    own budget."""
    readiness = _vllm_readiness(compose)
    budgets = {p.name: p.budget_s for p in readiness.phases}
    rows = _fixture("vllm-0.33.0-llama8b-eagle3-tp1.log")
    replay = Replay(readiness, server=_vllm_server(rows))
    assert isinstance(replay.run(rows, until=2000), Ready), replay.result
    assert replay.labels() == ["launch", "load_weights", "compile", "profile_cuda_graph",
                               "kv_cache", "capture_cuda_graph", "api_server"]
    began = {p: t for p, t in replay.machine.timeline}
    assert began["compile"] == pytest.approx(_time_of(rows, "Starting torch.compile"), abs=TICK_S)
    assert began["kv_cache"] == pytest.approx(_time_of(rows, "Available KV cache memory"),
                                              abs=TICK_S)
    # the real capture starts once the KV cache is sized, not at the profiling capture
    assert began["capture_cuda_graph"] == pytest.approx(_time_of(rows, "GPU KV cache size:"),
                                                        abs=TICK_S)
    silent = _time_of(rows, "Compiling a graph") - _time_of(rows, "Dynamo bytecode")
    assert budgets["load_weights"] < silent < budgets["compile"]


def test_a_silent_hang_in_vllms_compile_is_named_compile_and_its_budget_is_configurable(compose):
    rows = _fixture("vllm-0.33.0-llama8b-eagle3-tp1.log")
    began = _time_of(rows, "Dynamo bytecode")
    hung = [(t, x) for t, x in rows if t <= began]
    readiness = _vllm_readiness(compose, ["+readiness.phase_budgets_s.compile=1800"])
    assert {p.name: p.budget_s for p in readiness.phases}["compile"] == 1800.0
    replay = Replay(readiness)
    result = replay.run(hung, until=began + 2000)
    assert isinstance(result, Failed) and result.phase == "compile"
    assert result.reason.startswith("stalled in compile: no log output for 1800 s")


def test_the_adapters_0_5_23_phases_read_a_real_startup_with_no_guess(compose):
    """The SGLang adapter's own markers on a real-shaped 0.5.23 log: the scheduler's last
    init line and uvicorn's start lines, after the last capture, begin the warmup, not an
    unknown phase (`capture_draft_extend_cuda_graph (?)` in the live progress)."""
    from specc.compile.pipeline import compile_config

    result = compile_config(compose(["+experiment=eagle3_sweep"]))
    assert result.ok, [d.line() for d in result.diagnostics if d.severity == "error"]
    # the log's server: 3 steps, topk 1, 4 draft tokens
    readiness = next(s for s in result.plan.servers if s.params.num_steps == 3
                     and s.params.topk == 1).readiness
    rows = _fixture("sglang-0.5.23-kimi-eagle3-tp8.log")
    replay = Replay(readiness, server=_sglang_server(rows))
    assert isinstance(replay.run(rows, until=2000), Ready), replay.result
    labels = replay.labels()
    assert not [x for x in labels if x.endswith("(?)")], labels
    assert labels[-2:] == ["capture_draft_extend_cuda_graph", "warmup"]
    began = {p: t for p, t in replay.machine.timeline}
    assert began["warmup"] == pytest.approx(_time_of(rows, "max_total_num_tokens="), abs=TICK_S)
