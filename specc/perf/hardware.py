"""Calibration files: the performance model's hardware constants, one JSON per GPU kind.

``specc/perf/calibration/<kind>.json`` is written by ``benchmarks/gpu_calibrate.py``
on a real GPU (``h200.json``: measured) or derived from another kind by datasheet
ratios (``h100.json``) until someone measures it.  Each constant carries its
``value``, ``unit`` and ``source`` ("measured on H200 2026-11-30", "datasheet",
"calibrated to scenario 82 tok/s", "derived from ..."); the model reads values
through :class:`Calibration` and never holds a hardware number of its own.

Pure JSON, no I/O beyond reading the packaged files, no heavy imports.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cache, cached_property
from pathlib import Path

CALIBRATION_DIR = Path(__file__).resolve().parent / "calibration"
#: The kind used when a hardware config names none, or one without a file.
DEFAULT_KIND = "h200"


def kind_of(gpu: str | None) -> str:
    """'NVIDIA H200', 'H200', 'h200-sxm' -> 'h200'; None -> the default kind."""
    if not gpu:
        return DEFAULT_KIND
    name = gpu.lower().replace("nvidia", "").strip()
    return name.split()[0].split("-")[0] if name else DEFAULT_KIND


def available_kinds() -> list[str]:
    return sorted(p.stem for p in CALIBRATION_DIR.glob("*.json"))


@dataclass(frozen=True)
class Calibration:
    """One GPU kind's constants (``constants`` of the file) plus its measured tables."""

    kind: str
    date: str | None
    constants: dict
    measurements: dict = field(default_factory=dict, compare=False, hash=False)
    #: Why this file serves a request for another kind (unknown GPU), else None.
    fallback_for: str | None = None
    path: str | None = None

    def __hash__(self) -> int:  # constants are plain JSON: hash the kind and date
        return hash((self.kind, self.date, self.fallback_for))

    @classmethod
    def from_dict(cls, d: dict, *, path: str | None = None, fallback_for: str | None = None):
        return cls(kind=str(d.get("gpu_kind", "?")).lower(), date=d.get("date"),
                   constants=d.get("constants", {}), measurements=d.get("measurements", {}),
                   fallback_for=fallback_for, path=path)

    def value(self, key: str, default=None):
        c = self.constants.get(key)
        return default if c is None else c["value"]

    def source(self, key: str) -> str | None:
        c = self.constants.get(key)
        return None if c is None else c.get("source")

    def require(self, key: str):
        v = self.value(key)
        if v is None:
            raise KeyError(f"calibration {self.kind} ({self.path}) has no constant {key!r}")
        return v

    # -- the constants the model reads (each worked out once: the model asks for them on
    # every step it prices, 10^5 times in a large compile's estimate) ------------------
    @cached_property
    def bw_dense(self) -> float:
        return float(self.require("hbm_bw_dense_Bps"))

    @cached_property
    def gemm_launch_s(self) -> float:
        return float(self.value("gemm_launch_s", 0.0))

    @cached_property
    def blend_p(self) -> float:
        return float(self.value("gemm_blend_p", 16.0))

    @cached_property
    def gemm_flops_table(self) -> list[list[float]]:
        return self.require("gemm_flops_by_rows")

    @cached_property
    def bw_moe(self) -> float:
        return float(self.value("hbm_bw_moe_Bps") or self.bw_dense)

    @cached_property
    def moe_flops(self) -> float:
        return float(self.value("moe_flops") or self.gemm_flops_table[-1][1])

    @cached_property
    def moe_layer_fixed_s(self) -> float:
        return float(self.value("moe_layer_fixed_s", 0.0))

    @cached_property
    def elementwise_kernel_s(self) -> float:
        return float(self.value("elementwise_kernel_s", 0.0))

    @cached_property
    def attn_bw(self) -> float:
        return float(self.value("attn_kv_bw_Bps") or self.bw_dense)

    @cached_property
    def attn_layer_fixed_s(self) -> float:
        return float(self.value("attn_layer_fixed_s", 0.0))

    def allreduce_latency_s(self, tp: int) -> float | None:
        v = self.value(f"allreduce_latency_tp{tp}_s")
        return None if v is None else float(v)

    def allreduce_busbw(self) -> float | None:
        for tp in (8, 4, 2):
            v = self.value(f"allreduce_busbw_tp{tp}_Bps")
            if v:
                return float(v)
        return None


def load_file(path: str | Path, *, fallback_for: str | None = None) -> Calibration:
    p = Path(path)
    return Calibration.from_dict(json.loads(p.read_text()), path=str(p), fallback_for=fallback_for)


@cache
def calibration(gpu: str | None = None) -> Calibration:
    """The calibration for a hardware config's ``gpu`` (None: the default kind).  An
    unknown kind gets the default kind's file, marked ``fallback_for``."""
    kind = kind_of(gpu)
    path = CALIBRATION_DIR / f"{kind}.json"
    if path.exists():
        return load_file(path)
    return load_file(CALIBRATION_DIR / f"{DEFAULT_KIND}.json", fallback_for=kind)
