"""Whether a server that runs in real time (the simulator) kept its step schedule during a point.

The plan says where (``Server.schedule_lag``, from the engine adapter): a Prometheus
histogram of how late each step was delivered after its deadline, and a gauge of the
latest step since start. Read before and after the point, the histogram's buckets say
how many of the point's steps were later than the bound; the gauge, if it rose, says
exactly how late the worst was (else the histogram's edge it passed is what is known).
"""

from __future__ import annotations

import math
import re

from specc.plan import ScheduleLag
from specc.run.prometheus import samples, scrape

_LE = re.compile(r'le="([^"]*)"')


def parse(text: str, recipe: ScheduleLag) -> dict | None:
    """{"buckets": {upper edge s: cumulative steps}, "worst": s} from a /metrics text;
    None without the histogram's +Inf bucket (nothing to judge)."""
    buckets: dict[float, float] = {}
    worst = 0.0
    for name, labels, v in samples(text):
        if name == recipe.histogram + "_bucket":
            le = _LE.search(labels)
            try:
                edge = float(le.group(1)) if le else None
            except ValueError:
                continue
            if edge is not None and not math.isnan(edge):
                buckets[edge] = buckets.get(edge, 0.0) + v
        elif name == recipe.worst and math.isfinite(v):
            worst = max(worst, v)
    if math.inf not in buckets:
        return None
    return {"buckets": buckets, "worst": worst}


async def read(client, url: str, recipe: ScheduleLag | None) -> dict | None:
    """The histogram now; None without a recipe or an answer."""
    if recipe is None:
        return None
    text = await scrape(client, url + recipe.path)
    return None if text is None else parse(text, recipe)


def over_point(recipe: ScheduleLag | None, before: dict | None, after: dict | None,
               duration_s: float | None = None) -> dict | None:
    """The point's figure, for its row: steps, how many were later than the point's bound
    (for its duration; counted against the histogram's edge at or below the bound, so
    never fewer), the worst lateness (s; `worst_exact` false: only that it was later
    than this) and the bound. None if unknown (a read missing, or counters that went
    back: a restart)."""
    if not before or not after or recipe is None:
        return None
    bound = recipe.bound(duration_s)
    b, a = before["buckets"], after["buckets"]
    delta = {le: a[le] - b.get(le, 0.0) for le in a}
    total = delta[math.inf]
    if any(d < 0 for d in delta.values()) or not math.isfinite(total):
        return None
    within = max((le for le in delta if le <= bound), default=None)
    late = total - (delta[within] if within is not None else 0.0)
    passed = max((le for le, d in delta.items() if d < total), default=0.0)
    exact = after["worst"] > before["worst"]
    worst = after["worst"] if exact else passed
    if exact and worst <= bound:   # the histogram's edge below the bound counted too many
        late = 0.0
    return {"steps": int(total), "late_steps": int(late), "worst_s": round(worst, 4),
            "worst_exact": exact, "bound_s": round(bound, 4)}


def behind(figure: dict | None) -> str | None:
    """The point's reason not to be valid, or None when the server kept its schedule."""
    if not figure or not figure.get("late_steps"):
        return None
    by = f"{figure['worst_s'] * 1e3:.0f} ms" if figure["worst_exact"] \
        else f"more than {figure['worst_s'] * 1e3:.0f} ms"
    return (f"simulator fell behind its schedule by {by} (bound {figure['bound_s'] * 1e3:.0f} "
            f"ms) in {figure['late_steps']} of {figure['steps']} steps")
