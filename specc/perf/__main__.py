"""`python -m specc.perf [KIND]`: a calibration's constants with their sources, and the
model next to the measured tables (markdown, as quoted in docs/performance-model.md)."""

from __future__ import annotations

import sys

from .hardware import available_kinds, calibration
from .model import KIMI_FACTS, KIMI_TP, REF_CONTEXT, model_cost, model_vs_measurement, tokens_per_s_per_stream


def _si(v) -> str:
    if isinstance(v, list):
        return ", ".join(f"{int(n)}: {f / 1e12:.0f} T" for n, f in v)
    if isinstance(v, (int, float)) and v and (abs(v) >= 1e4 or abs(v) < 1e-2):
        return f"{v:.4g}"
    return str(v)


def main(argv: list[str]) -> int:
    kinds = argv or available_kinds()
    for kind in kinds:
        hw = calibration(kind)
        print(f"## {hw.kind.upper()} (specc/perf/calibration/{hw.kind}.json)\n")
        print("| constant | value | unit | source |\n|---|---|---|---|")
        for k, c in hw.constants.items():
            print(f"| `{k}` | {_si(c['value'])} | {c.get('unit', '')} | {c['source']} |")
        kimi = model_cost(KIMI_FACTS, tp=KIMI_TP, hw=hw)
        print(f"\nKimi-K2.5 TP {KIMI_TP}, 1 stream, no speculation, context {REF_CONTEXT}: "
              f"{tokens_per_s_per_stream(kimi, 1):.1f} tok/s per stream\n")
        for name, rows in model_vs_measurement(hw).items():
            print(f"| {name}: tokens per step | " + " | ".join(str(r["tokens"]) for r in rows) + " |")
            print("|---|" + "---|" * len(rows))
            print("| measured, ms | " + " | ".join(f"{r['measured_s'] * 1e3:.3f}" for r in rows) + " |")
            print("| model, ms | " + " | ".join(f"{r['model_s'] * 1e3:.3f}" for r in rows) + " |")
            print("| error | " + " | ".join(f"{r['error'] * 100:+.1f} %" for r in rows) + " |\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
