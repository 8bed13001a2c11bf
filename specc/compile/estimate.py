"""The review's wall-time estimate: server start phases + benchmark points, wave by wave.

Point durations come from the performance model (`specc.perf.model`, shared
with the simulator) with the calibration of the hardware's GPU kind. For people reviewing a plan; nothing at run time depends on it.
"""

from __future__ import annotations

import math
from functools import lru_cache

from specc.compile.spec import ServerSpec
from specc.engines.base import Engine

#: Per-point overhead beyond the requests themselves (warm-up, cache flush, snapshots).
POINT_OVERHEAD_S = 0.3


def note(spec: ServerSpec) -> str:
    """Which calibration the estimate rests on, for the review."""
    from specc.perf.hardware import calibration

    hw = calibration(spec.hardware.get("gpu"))
    if hw.fallback_for:
        return f"phase estimates + specc.perf's model, no calibration for {hw.fallback_for}: " \
               f"{hw.kind.upper()}'s used"
    return f"phase estimates + specc.perf's model, {hw.kind.upper()} calibration" + (
        f" measured {hw.date}" if hw.date else " derived from datasheet ratios")


def point_estimator(spec: ServerSpec, engine: Engine):
    """bench -> wall time of one benchmark point on this server, in seconds."""
    from specc.perf import model as perf

    tp, gpu = spec.hardware["tp"], spec.hardware.get("gpu")
    target = perf.model_cost(spec.target.values, tp=tp, gpu=gpu)
    spec_cfg = draft = None
    steps, topk, ndt = spec.spec_triple
    if spec.speculative and steps and topk and ndt:
        acceptance = engine.assumed_acceptance(spec) or perf.DEFAULT_ACCEPTANCE
        spec_cfg = perf.SpecConfig(steps, topk, ndt, acceptance)
        draft = perf.draft_cost(spec.draft.values, tp=tp, gpu=gpu) if spec.draft else None

    @lru_cache(maxsize=None)
    def wave_s(running: int, input_len: int, output_len: int) -> float:
        context = input_len + output_len / 2   # mean KV length while decoding
        per_stream = perf.tokens_per_s_per_stream(target, running, spec_cfg, draft, context)
        return target.prefill_s(running * input_len) + output_len / per_stream

    def estimate(bench: dict) -> float:
        # adaptive stopping (target_ci) may send more, up to max_requests: the least is shown
        n, conc = bench["num_prompts"], bench["concurrency"]
        repeats = bench.get("repeats", 1)
        return repeats * (math.ceil(n / conc) * wave_s(min(n, conc), bench["input_len"],
                                                       bench["output_len"]) + POINT_OVERHEAD_S)

    return estimate


def server_seconds(spec: ServerSpec, engine: Engine, start_s: float, benches) -> float:
    """Start-up estimate plus every point the server runs, one after another."""
    estimate = point_estimator(spec, engine)
    total = start_s
    for bench in benches:
        total += estimate(bench)
    return round(total, 1)


def wall_seconds(servers) -> float:
    """[(wave, server seconds)] -> the sweep's wall time: waves run one after another,
    and a wave lasts as long as its slowest server."""
    waves: dict[int, float] = {}
    for wave, seconds in servers:
        waves[wave] = max(waves.get(wave, 0.0), seconds)
    return round(sum(waves.values()), 1)
