"""Readiness: how log lines move a server through its startup phases."""

from __future__ import annotations


def test_a_renamed_phase_marker_never_causes_a_false_stall():
    from specc.run.readiness import _next_phase

    phases = [{"name": n, "begin": b} for n, b in [
        ("launch", None), ("load_weights", "Load weight begin"), ("kv_cache", "KV Cache is allocated"),
        ("capture_cuda_graph", "Capture cuda graph begin"), ("load_draft_weights", "Load weight begin"),
        ("capture_draft_cuda_graph", "Capture draft cuda graph begin"), ("warmup", "Uvicorn running on")]]
    begins = [p["begin"] for p in phases]
    skippable = [b is not None and b not in begins[:j] for j, b in enumerate(begins)]
    line = "[2026-02-26 05:24:10 TP0] Capture cuda graph begin. This can take up to several minutes."
    # the KV-cache line was renamed in a new release: the graph phase is still recognised
    assert _next_phase(phases, 1, line, skippable) == 3
    # another rank's "Load weight begin" never jumps to the draft's phase
    assert _next_phase(phases, 1, "[..] Load weight begin. avail mem=283.62 GB", skippable) is None
    assert _next_phase(phases, 3, "[..] Load weight begin. avail mem=9.1 GB", skippable) == 4
