"""The between-run noise floor of `specc compare`'s verdict (docs/compare.md).

A figure's 95% interval covers the noise inside one run; two runs of the same plan also
differ by what changed between them on the machine (its load, other jobs, clocks,
thermal state), which no interval within a run can see. A change is a regression only
beyond both: its interval excludes zero and it is worse than the floor.

The floor of a point's figure comes from the results index (`specc history`) when it
holds enough earlier runs of the same configuration: the spread of that figure across
them. Else the built-in default below, measured on the simulator (benchmarks/
noise_floor.py), quiet and beside two busy loops.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path

#: Per figure, the worse-direction change two identical runs of the flagship experiment
#: on the simulator showed at most (benchmarks/noise_floor.py, 2026-12-03: 2-core machine
#: shared with other jobs, load 6-11, 3 runs as it was and 3 beside two `yes` loops; the
#: largest change of any point between any two runs, rounded up with a margin). Numbers
#: and how they were taken: docs/compare.md, "When a change is a regression".
DEFAULT_FLOOR = {"output_throughput": 0.20, "speedup": 0.20, "ttft": 3.0, "itl": 0.15}
DEFAULT_FROM = "default floor (docs/compare.md)"
#: Earlier runs of a configuration needed before its own spread is the floor.
MIN_RUNS = 3
#: A floor from history is never below this: earlier runs that agree to the last digit
#: (a deterministic figure, a run indexed twice) say nothing of the next run's noise.
MIN_FLOOR = 0.02
#: Student's t, 97.5th percentile, by degrees of freedom (2..10); beyond, its expansion.
_T975 = {2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262,
         10: 2.228}
_Z975 = 1.959963984540054


def t975(df: int) -> float:
    """The two-sided 95% quantile of Student's t with ``df`` degrees of freedom."""
    if df in _T975:
        return _T975[df]
    z = _Z975
    return z + (z ** 3 + z) / (4 * df) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * df ** 2)


def spread_floor(values: list[float], higher_is_better: bool) -> float | None:
    """The worse-direction change that 95% of pairs of identical runs stay within, from
    earlier runs' values of one figure: the difference of two runs' logs has standard
    deviation sqrt(2) s (s: the standard deviation of the earlier runs' logs), bounded with
    Student's t on n - 1 degrees of freedom -- a few runs say little about their spread,
    so the floor is wide until there are more. None with fewer than MIN_RUNS positive
    values."""
    logs = [math.log(v) for v in values if isinstance(v, (int, float)) and v > 0
            and math.isfinite(v)]
    if len(logs) < MIN_RUNS:
        return None
    bound = t975(len(logs) - 1) * math.sqrt(2) * statistics.stdev(logs)
    return max(MIN_FLOOR, 1 - math.exp(-bound) if higher_is_better else math.exp(bound) - 1)


def history_values(db: Path | None, keys: list[str], exclude: list[Path],
                   metrics: dict[str, str]) -> dict[str, dict[str, list[float]]]:
    """key -> figure -> that figure's values in the index's earlier runs (ok points), the
    runs being compared left out. {} where there is no index or it cannot be read: the
    default floor then holds."""
    import hashlib
    import sqlite3

    if db is None or not Path(db).is_file() or not keys:
        return {}
    ids = {hashlib.sha256(k.encode()).hexdigest()[:12]: k for k in keys}   # index.config_id
    names = {m: f for f, m in metrics.items()}
    skip = {str(Path(p).resolve()) for p in exclude}
    out: dict[str, dict[str, list[float]]] = {}
    try:
        conn = sqlite3.connect(f"file:{Path(db).resolve()}?mode=ro", uri=True, timeout=5)
    except sqlite3.Error:
        return {}
    try:
        wanted = list(ids)
        for i in range(0, len(wanted), 500):
            part = wanted[i:i + 500]
            rows = conn.execute(
                "SELECT p.config, f.metric, f.value, r.path FROM figures f JOIN points p "
                "ON p.run = f.run AND p.config = f.config JOIN runs r ON r.id = f.run "
                f"WHERE p.status = 'ok' AND f.config IN ({','.join('?' * len(part))}) "
                f"AND f.metric IN ({','.join('?' * len(names))})", [*part, *names])
            for cid, metric, value, path in rows:
                if path not in skip:
                    out.setdefault(ids[cid], {}).setdefault(names[metric], []).append(value)
    except sqlite3.Error:
        return {}
    finally:
        conn.close()
    return out


def floors(keys: list[str], run_paths: list[Path], figures: dict[str, tuple],
           db: Path | None) -> dict[str, dict[str, tuple[float, str]]]:
    """key -> figure -> (floor, where it comes from): the configuration's spread over the
    index's earlier runs where it holds MIN_RUNS of them, else the default."""
    seen = history_values(db, keys, run_paths, {f: m for f, (_, m) in figures.items()})
    out = {}
    for k in keys:
        mine = {}
        for name, (higher, _) in figures.items():
            values = (seen.get(k) or {}).get(name) or []
            f = spread_floor(values, higher)
            mine[name] = ((f, f"history, {len(values)} runs") if f is not None
                          else (DEFAULT_FLOOR[name], DEFAULT_FROM))
        out[k] = mine
    return out
