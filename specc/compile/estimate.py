"""The review's wall-time estimate: server start phases + benchmark points, wave by wave.

Point durations come from the performance model (`specc.perf.model`, shared
with the simulator) with the calibration of the hardware's GPU kind. For people reviewing a plan; nothing at run time depends on it.
"""

from __future__ import annotations

import math
from collections import Counter

from specc.compile.matrix import canonical
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


def _model_inputs(spec: ServerSpec, engine: Engine) -> tuple:
    """Everything a server's point estimates depend on (and nothing else)."""
    from specc.perf import model as perf

    tp, gpu = spec.hardware["tp"], spec.hardware.get("gpu")
    steps, topk, ndt = spec.spec_triple
    if spec.speculative and steps and topk and ndt:
        acceptance = engine.assumed_acceptance(spec) or perf.DEFAULT_ACCEPTANCE
        speculation = (steps, topk, ndt, acceptance)
        draft = spec.draft.values if spec.draft else None
    else:
        speculation, draft = None, None
    return spec.target.values, tp, gpu, speculation, draft


def _points_seconds(shapes: Counter, target_values: dict, tp: int, gpu, speculation,
                    draft_values) -> float:
    """The points' total seconds on one server: per shape (a Counter of SHAPE_KEYS rows),
    count x repeats x (its waves of requests, or its arrival schedule if longer, + the
    per-point overhead), summed in the shapes' order.

    Each part of the model runs once per distinct value of what it reads: the prefill once
    per prompt-token count (ModelCost.prefill_at), the decode rate's context-free part once
    per batch size (perf.per_stream_terms; 10^5 points on two swept axes are 10^5 shapes,
    but a few thousand of each). A wave is `prefill + output_len / rate(mean KV length
    decoding)`, the rate written out here as tokens_per_s_per_stream_at computes it, the
    same floats (calls per point were half the estimate). arrival_s is called only where a
    rate or a trace paces the point (it is 0.0 elsewhere)."""
    from specc.perf import model as perf

    target = perf.model_cost(target_values, tp=tp, gpu=gpu)
    spec_cfg = perf.SpecConfig(*speculation) if speculation else None
    draft = perf.draft_cost(draft_values, tp=tp, gpu=gpu) if speculation and draft_values else None
    prefill_at = target.prefill_at()
    prefill: dict[int, float] = {}
    per_batch: dict[int, tuple] = {}
    ceil = math.ceil
    terms = []   # each shape's term, then summed: the same sum as over a generator
    for (n, conc, input_len, output_len, repeats, rate, ramp_s, dataset, path), count \
            in shapes.items():
        running = conc if conc < n else n   # min(n, conc)
        got = per_batch.get(running)
        if got is None:
            got = per_batch[running] = perf.per_stream_terms(target, running, spec_cfg, draft)
        tok, fv, kv, wv, tv, passes, fd, kd, wd, td, overhead = got
        tokens = running * input_len
        first = prefill.get(tokens)
        if first is None:
            first = prefill[tokens] = prefill_at(tokens)
        ctx = input_len + output_len / 2   # the mean KV length decoding, as max(float(.), 0.0)
        if ctx < 0.0:
            ctx = 0.0
        per_stream = (tok / (fv + kv * ctx / wv + tv) if passes is None else
                      tok / (passes * (fd + kd * ctx / wd + td) + (fv + kv * ctx / wv + tv)
                             + overhead))
        # adaptive stopping (target_ci) may send more, up to max_requests: the least is shown
        busy = ceil(n / conc) * (first + output_len / per_stream)
        if rate or dataset == "trace":
            busy = max(busy, arrival_s(n, rate, ramp_s, dataset, path))
        elif busy < 0.0:   # max(busy, 0.0)
            busy = 0.0
        terms.append(count * repeats * (busy + POINT_OVERHEAD_S))
    return sum(terms)


#: What the estimate reads of a client point.
SHAPE_KEYS = ("num_prompts", "concurrency", "input_len", "output_len", "repeats",
              "request_rate", "ramp_s", "dataset", "dataset_path")


def arrival_s(n: int, rate, ramp_s, dataset, dataset_path) -> float:
    """The least time a point's arrival schedule takes to send its ``n`` requests: the
    trace's own span (its first ``n`` rows), or (n - 1) / request_rate on its ramp; 0
    when requests go as fast as the concurrency cap allows."""
    if dataset == "trace" and dataset_path:
        from specc.prompts import trace

        return trace.span_s(dataset_path, n)
    if rate and rate > 0 and math.isfinite(rate) and n:
        from specc.compile.rules import _ramped

        return _ramped((n - 1) / rate, ramp_s or 0.0)
    return 0.0


class ServerTimes:
    """Each server's estimated busy time over one matrix's client points: its start-up,
    then every point one after another.

    The model runs once per distinct point shape (prompts, concurrency, lengths, repeats), and the
    points' total once per distinct set of model inputs: servers that differ only in what
    the model ignores (a running-request cap, a memory fraction) share it."""

    def __init__(self, engine: Engine, shapes):
        """`shapes`: each client point's values of SHAPE_KEYS."""
        self.engine = engine
        self.shapes = Counter(shapes)
        self._points_s: dict[str, float] = {}

    def seconds(self, spec: ServerSpec, start_s: float) -> float:
        inputs = _model_inputs(spec, self.engine)
        key = canonical(inputs)
        if key not in self._points_s:
            self._points_s[key] = _points_seconds(self.shapes, *inputs)
        return round(start_s + self._points_s[key], 1)


def wall_seconds(servers) -> float:
    """[(wave, server seconds)] -> the sweep's wall time: waves run one after another,
    and a wave lasts as long as its slowest server."""
    waves: dict[int, float] = {}
    for wave, seconds in servers:
        waves[wave] = max(waves.get(wave, 0.0), seconds)
    return round(sum(waves.values()), 1)
