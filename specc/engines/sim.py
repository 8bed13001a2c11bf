"""specc's simulator: SGLang's flags and semantics, startup scaled by a time scale."""

from __future__ import annotations

from .base import flag_args
from .sglang import SGLang


class Sim(SGLang):
    """`python -m specc.sim`: same flags as SGLang plus `--sim-*` knobs."""

    name = "sim"
    module = "specc.sim"
    version_read = "specc.sim (mirrors SGLang " + SGLang.version_read + ")"
    uses_gpus = False
    #: Python start-up of the simulator process, unscaled.
    launch_budget_s = 15.0
    #: No phase budget below this, whatever the time scale: process scheduling noise.
    min_budget_s = 3.0

    def time_scale(self, spec) -> float:
        return float((spec.engine.get("sim") or {}).get("time_scale", 0.01))

    def argv(self, spec, *, host, port):
        sim = spec.engine.get("sim") or {}
        args = super().argv(spec, host=host, port=port)
        args += flag_args([
            # SGLang 0.5.23's run-scoped acceptance needs the /metrics counters
            ("--enable-metrics", not spec.engine.get("enable_metrics")),
            ("--sim-time-scale", sim.get("time_scale", 0.01)),
            ("--sim-seed", sim.get("seed", 0)),
            ("--sim-acceptance", sim.get("acceptance")),
            ("--sim-gpu", spec.hardware.get("gpu")),
            ("--sim-target-facts", self.sim_facts_json(spec.target)),
            ("--sim-draft-facts",
             self.sim_facts_json(spec.draft) if spec.uses_draft_model and spec.draft else None),
        ])
        return args

    def assumed_acceptance(self, spec):
        return (spec.engine.get("sim") or {}).get("acceptance")

    #: The simulator emulates SGLang 0.5.23 (specc/sim/versions.py): its phase
    #: markers and order (target weights, draft weights, KV cache, the target's
    #: graph -- "target verify" with speculation, "target decode" without --,
    #: the draft's graphs).  The draft's "Load weight begin" cannot be told from
    #: the target's other TP ranks' lines, so draft loading counts as load_weights.
    MARKERS_0_5_23 = {
        "load_weights": ("Load weight begin", "Load weight end"),
        "kv_cache": ("KV Cache is allocated", "Memory pool end"),
        "capture_draft_cuda_graph": ("Capture draft decode CUDA graph begin",
                                     "Capture draft decode CUDA graph end"),
        "capture_draft_extend_cuda_graph": ("Capture draft extend CUDA graph begin",
                                            "Capture draft extend CUDA graph end"),
    }
    ORDER_0_5_23 = ("load_weights", "kv_cache", "capture_cuda_graph", "capture_draft_cuda_graph",
                    "capture_draft_extend_cuda_graph", "warmup")

    def phases(self, spec):
        scale = self.time_scale(spec)
        est = {p["name"]: p for p in super().phases(spec)}
        graph = "target verify" if spec.speculative else "target decode"
        marks = dict(self.MARKERS_0_5_23, warmup=(est["warmup"]["begin"], est["warmup"]["end"]),
                     capture_cuda_graph=(f"Capture {graph} CUDA graph begin",
                                         f"Capture {graph} CUDA graph end"))
        seconds = {name: p["estimate_s"] for name, p in est.items()}
        seconds["load_weights"] += seconds.pop("load_draft_weights", 0.0)
        return [{"name": name, "begin": marks[name][0], "end": marks[name][1],
                 "estimate_s": seconds[name] * scale}
                for name in self.ORDER_0_5_23 if name in seconds]

    def budget(self, spec, estimate_s):
        scale = self.time_scale(spec)
        unscaled = super().budget(spec, estimate_s / scale) if scale else 0.0
        return round(max(unscaled * scale, self.min_budget_s), 1)
