"""When each request of a point is due: the arrival schedule (pure, seeded).

Inter-arrival times are gamma distributed with shape ``burstiness`` and mean
``1/rate``, as vLLM's ``--burstiness``: 1 is a Poisson process (drawn with
``expovariate``, the stream specc always used), below 1 burstier (the
coefficient of variation of the gaps is ``1/sqrt(burstiness)``), above 1 more
even. The rate is kept whatever the burstiness.

A ramp (``ramp_s``) makes the rate rise linearly from 0 to ``rate`` over the
first ``ramp_s`` seconds, then stay: the same draws are laid on a clock that
runs slow at first (time-rescaling a renewal process). The expected number of
requests due by ``t`` is the integral of the rate, ``rate*t^2/(2*ramp_s)``
during the ramp, so its requests come ever closer together; after it, the gaps
are those of the plain schedule.
"""

from __future__ import annotations

import math
import random


def arrival_offsets(n: int, rate: float, *, burstiness: float = 1.0, ramp_s: float = 0.0,
                    seed: int = 0) -> list[float]:
    """Seconds from the start of the point at which each of ``n`` requests is due; the
    first at 0. ``rate`` infinite: all at 0 (closed loop, the concurrency cap paces)."""
    if not rate > 0:
        raise ValueError(f"rate must be > 0, got {rate}")
    if not burstiness > 0:
        raise ValueError(f"burstiness must be > 0, got {burstiness}")
    if not ramp_s >= 0:
        raise ValueError(f"ramp_s must be >= 0, got {ramp_s}")
    if not math.isfinite(rate):
        return [0.0] * n
    rng = random.Random(seed)
    # the schedule in "operational time", at the full rate from the start
    out, s = [], 0.0
    for _ in range(n):
        out.append(s)
        s += (rng.expovariate(rate) if burstiness == 1.0
              else rng.gammavariate(burstiness, 1.0 / (rate * burstiness)))
    if ramp_s > 0:
        out = [_ramped(x, ramp_s) for x in out]
    return out


def _ramped(s: float, ramp_s: float) -> float:
    """The wall-clock time by which a linear ramp over ``ramp_s`` has sent what the full
    rate sends by ``s``: the inverse of t -> t^2/(2*ramp_s) (t < ramp_s), t - ramp_s/2."""
    half = ramp_s / 2
    return math.sqrt(2 * s * ramp_s) if s < half else s + half
