"""specc's simulator: SGLang's flags and semantics, startup scaled by a time scale."""

from __future__ import annotations

import math
import os
from functools import lru_cache

from specc.plan import ScheduleLag, TimeDilation

from .base import flag_args, parse_version
from .sglang import SGLang

#: The simulator's own route (no SGLang one) that sets a point's time dilation.
TIME_DILATION_PATH = "/specc_sim/time_dilation"


class Sim(SGLang):
    """`python -m specc.sim`: same flags as SGLang plus `--sim-*` knobs."""

    name = "sim"
    launcher = ("python", "-m", "specc.sim")
    parser = "specc.engines.parsers.sim_parse"
    package = None
    version_read = "specc.sim (mirrors SGLang " + SGLang.version_read + ")"
    uses_gpus = False
    #: Python start-up of the simulator process, unscaled.
    launch_budget_s = 15.0
    #: No phase budget below this, whatever the time scale: process scheduling noise.
    min_budget_s = 3.0
    #: A point during which one simulated step was delivered later than this fraction of
    #: the point's duration (never less than the floor) after its deadline is measured
    #: again, then failed. The schedule is absolute: a step delivered late moves no later
    #: deadline, so while requests keep running the simulator catches up and a point's
    #: duration, hence its throughput, is off by at most its latest step's lateness;
    #: 5% keeps a valid point's throughput within 5% of the schedule's, two runs within 10%
    #: (2.5% failed the README's main job on a busy machine: docs/simulator.md, "Its own
    #: schedule"). The floor: the event loop's ~1 ms timers and a process scheduler's
    #: slice, which no point is failed for.
    schedule_lag_fraction = 0.05
    schedule_lag_floor_s = 0.01
    #: A test hook, read when the plan is compiled: a floor in seconds (> 0) in place of
    #: the one above. The test suite raises it: its points last a fraction of a second
    #: on a machine that other suites keep busy, and only its test of this check keeps
    #: the real bound.
    schedule_lag_floor_env = "SPECC_SIM_LAG_FLOOR_S"

    def time_scale(self, spec) -> float:
        return float(spec.engine["sim"]["time_scale"])

    def argv(self, spec, *, host, port, rendezvous_port=None):
        sim = spec.engine["sim"]
        args = super().argv(spec, host=host, port=port, rendezvous_port=rendezvous_port)
        args += flag_args([
            # SGLang 0.5.23's run-scoped acceptance needs the /metrics counters
            ("--enable-metrics", not spec.engine.get("enable_metrics")),
            ("--sim-version", None if self.sim_version() == "0.5.23" else self.sim_version()),
            ("--sim-time-scale", sim["time_scale"]),
            ("--sim-seed", sim["seed"]),
            ("--sim-acceptance", sim["acceptance"]),
            ("--sim-gpu", spec.hardware.get("gpu")),
            ("--sim-target-facts", self.sim_facts_json(spec.target)),
            ("--sim-draft-facts",
             self.sim_facts_json(spec.draft) if spec.uses_draft_model and spec.draft else None),
        ])
        return args

    def schedule_lag(self, spec):
        """specc/sim/http.py's histogram of its steps' lateness and worst-step gauge."""
        floor = self.schedule_lag_floor_s
        try:
            floor = float(os.environ.get(self.schedule_lag_floor_env) or floor)
        except ValueError:
            pass
        return ScheduleLag(path="/metrics", histogram="specc_sim:step_lateness_seconds",
                           worst="specc_sim:step_lateness_max_seconds",
                           bound_s=floor if floor > 0 else self.schedule_lag_floor_s,
                           bound_fraction=self.schedule_lag_fraction)

    #: Time dilation, auto (docs/simulator.md, "Time dilation"). The simulator's CPU per
    #: streamed chunk (its SSE JSON built and written), from benchmarks/sim_capacity.py on
    #: the 2-core machine under load: ~47 us per one-token chunk at concurrency 128, ~88 us
    #: per ~3-token EAGLE-3 chunk.
    chunk_cpu_s = 50e-6
    token_cpu_s = 15e-6
    #: The share of one core the simulator's steps may need at their dilated pace: beside
    #: the load generator, two busy loops and other work on 2 cores, a process needing more
    #: than its share falls behind.
    cpu_share = 0.15
    #: A closed loop's client turnaround (a response's end to the next request's send) on a
    #: busy machine, and the share of a request's dilated time it may take: 4-10 ms per
    #: request beside two busy loops (docs/simulator.md), against ~90 ms Llama-8B requests.
    client_turnaround_s = 0.005
    turnaround_share = 0.015
    #: The shortest a point may last in real time: a busy machine stops a process for up to
    #: ~100-300 ms at a time (measured: single steps that late at concurrency 128, load
    #: average 16 on 2 cores), and a point's bound is 5% of its duration. 4 s measured the
    #: grid of docs/simulator.md; 2.5 s keeps the README's main job near its time budget.
    min_point_s = 2.5
    #: A closed loop begins with a wave: `concurrency` requests sent at once, each on a new
    #: connection. The simulator admits them by when they arrived (specc/sim/arrivals.py),
    #: so the whole wave should reach it within its first request's prefill, else how fast
    #: the client sent it decides the prefill batches (measured 2026-12-03 at load average
    #: 5-8: 27-141 ms for 127 requests, batches 1, 83, 44 in one run and 1, 44, 83 in another).
    wave_send_s = 1e-3
    max_time_dilation = 16
    #: A test hook, read when the plan is compiled: a factor in place of `auto`. The test
    #: suite sets 1: its points of a few tiny requests would all be slowed to `min_point_s`,
    #: and only the tests of dilation itself keep the real rule.
    time_dilation_env = "SPECC_SIM_TIME_DILATION"

    def time_dilation(self, spec) -> TimeDilation:
        return TimeDilation(path=TIME_DILATION_PATH)

    def point_time_dilation(self, spec, concurrency: int | None, input_len: int,
                            output_len: int, num_prompts: int) -> float:
        """The factor a point runs at: `engine.sim.time_dilation`, or with `auto` the
        smallest whole factor at which the simulator's predicted CPU per step stays within
        `cpu_share` of a core, a busy client's turnaround within `turnaround_share` of a
        request's time, the point lasts `min_point_s`, and its first wave reaches the
        server within its first request's prefill (`wave_send_s`) (1 when none is at
        risk: no point is slowed for nothing)."""
        fixed = spec.engine["sim"].get("time_dilation", "auto")
        if fixed == "auto":
            try:
                fixed = float(os.environ.get(self.time_dilation_env) or fixed)
            except ValueError:
                pass
        if fixed != "auto":
            return float(fixed)
        return _auto_dilation(self, *_model_key(spec), concurrency or num_prompts, input_len,
                              output_len, num_prompts)

    def assumed_acceptance(self, spec):
        return spec.engine["sim"]["acceptance"]

    #: The simulator emulates an SGLang release (specc/sim/versions.py): engine.version
    #: picks the one whose strings and order the adapter's phase markers describe.
    def sim_version(self) -> str:
        return "0.5.23" if parse_version(self.version) >= parse_version("0.5.14") else "early-2026"

    def phases(self, spec):
        scale = self.time_scale(spec)
        return [{**p, "estimate_s": p["estimate_s"] * scale} for p in super().phases(spec)]

    def budget(self, spec, estimate_s, phase=""):
        scale = self.time_scale(spec)
        if (spec.readiness.get("phase_budgets_s") or {}).get(phase) is not None:
            return super().budget(spec, estimate_s, phase)   # the config's seconds, unscaled
        unscaled = super().budget(spec, estimate_s / scale) if scale else 0.0
        return round(max(unscaled * scale, self.min_budget_s), 1)


def _model_key(spec) -> tuple:
    import json

    steps, topk, ndt = spec.spec_triple
    spec_cfg = (steps, topk, ndt, spec.engine["sim"]["acceptance"]) \
        if spec.speculative and steps and topk and ndt else None
    draft = json.dumps(spec.draft.values, sort_keys=True, default=str) \
        if spec_cfg and spec.uses_draft_model and spec.draft else None
    return (json.dumps(spec.target.values, sort_keys=True, default=str), spec.hardware["tp"],
            spec.hardware.get("gpu"), spec_cfg, draft)


@lru_cache(maxsize=4096)
def _auto_dilation(engine: Sim, target: str, tp: int, gpu, spec_cfg, draft, concurrency: int,
                   input_len: int, output_len: int, num_prompts: int) -> float:
    import json

    from specc.perf import model as perf

    cost = perf.model_cost(json.loads(target), tp=tp, gpu=gpu)
    sc = None
    if spec_cfg:
        steps, topk, ndt, acceptance = spec_cfg
        sc = perf.SpecConfig(steps, topk, ndt, acceptance or perf.DEFAULT_ACCEPTANCE)
    dcost = perf.draft_cost(json.loads(draft), tp=tp, gpu=gpu) if draft else None
    context = input_len + output_len / 2
    running = max(1, min(concurrency, num_prompts))
    step = perf.decode_step_s(cost, running, sc, dcost, context)
    per_chunk = 1.0 if sc is None else perf.expected_accept_length(
        sc.acceptance, sc.num_steps, sc.topk, sc.num_draft_tokens)
    cpu = running * (engine.chunk_cpu_s + engine.token_cpu_s * (per_chunk - 1))
    first_prefill = cost.prefill_s(input_len) + (dcost.prefill_s(input_len) if dcost else 0.0)
    request_s = cost.prefill_s(input_len) + step * max(output_len, 1) / per_chunk
    point_s = math.ceil(num_prompts / running) * request_s   # a closed loop's waves
    need = max(cpu / (engine.cpu_share * step),
               engine.client_turnaround_s / (engine.turnaround_share * request_s),
               engine.min_point_s / point_s,
               running * engine.wave_send_s / first_prefill)
    return float(min(engine.max_time_dilation, max(1, math.ceil(need - 1e-9))))
