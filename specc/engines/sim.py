"""specc's simulator: SGLang's flags and semantics, startup scaled by a time scale."""

from __future__ import annotations

import os

from specc.plan import ScheduleLag

from .base import flag_args, parse_version
from .sglang import SGLang


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
