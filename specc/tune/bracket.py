"""SLO capacity by bracketing on a running server: double, then bisect, to a stated precision.

A pure state machine (no I/O, no clock): fed probe results (the load, a latency statistic
with its 95% interval), it answers the next load to probe on the server that is up, or
that it is done, with the capacity. The executor's feed (``specc.run.bracket``) runs the
probes as extra points on whichever server is up (the baseline, the best static setting,
a deployed schedule's verification start). docs/tune.md says the rules.

A probe's verdict at limit L, from the statistic's interval [lo, hi]:

- ``meets``: hi <= L (the statistic is below the limit, at 95%);
- ``fails``: lo > L;
- ``undecided``: the interval straddles L, or the probe had too few requests for the
  percentile (the order-statistic upper bound lies beyond the sample: p99 of 100 requests),
  or it failed. An undecided probe is never a pass: it is measured once more with twice
  the requests; undecided again, it bounds the bracket from above as "not shown to meet"
  and the result says so (``status: undecided``).

The load axis is the client concurrency (integers, the floor 1) or the request rate
(requests/s) when the benchmark is rate-based.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from specc import stats

#: The stated precision: stop when (first load not meeting - capacity) / capacity <= it.
PRECISION = 0.1
#: Its bounds (search.precision): tighter than 1% is below one request of concurrency at
#: the loads measured; looser than 50% is the ladder again.
PRECISION_BOUNDS = (0.01, 0.5)
#: Doublings past the highest load known to meet before "meets at the most probed".
MAX_DOUBLINGS = 3
#: An undecided probe is measured again this many times, each with twice the requests.
RETRIES = 1

MEETS, FAILS, UNDECIDED = "meets", "fails", "undecided"


def quantile_of(key: str) -> float | None:
    """The quantile an SLO key bounds (p99_ttft_ms -> 0.99), None for a mean."""
    stat = key.split("_", 1)[0]
    if stat == "mean":
        return None
    return 0.5 if stat == "median" else int(stat[1:]) / 100.0


def metric_of(key: str) -> str:
    """The per-request latency an SLO key bounds: p99_ttft_ms -> ttft."""
    return key.split("_", 1)[1][:-len("_ms")]


def min_requests(key: str) -> int:
    """Fewest requests whose interval can show the statistic meets a limit (the quantile's
    upper order statistic within the sample; 2 for a mean)."""
    q = quantile_of(key)
    if q is None:
        return 2
    n = 2
    while not stats.quantile_upper_defined(n, q):
        n += 1
    return n


@dataclass(frozen=True)
class Probe:
    """One measured load: the statistic (ms) with its interval, and the verdict."""
    at: float
    verdict: str
    value: float | None = None
    lo: float | None = None
    hi: float | None = None
    n: int = 0
    why: str = ""
    #: Measured by the bracket (False: a ladder point it was fed).
    extra: bool = True
    #: Too few requests to bound the statistic from above: not a try (a ladder point of
    #: 16 requests says nothing about a p99 meeting).
    short: bool = False

    def to_json(self) -> dict:
        return {"at": _num(self.at), "verdict": self.verdict, "value": _r(self.value),
                "interval": [_r(self.lo), _r(self.hi)], "requests": self.n,
                **({"why": self.why} if self.why else {}),
                **({} if self.extra else {"ladder": True})}


def judge(key: str, limit: float, at: float, values_ms, *, extra: bool = True,
          failed: str | None = None) -> Probe:
    """The verdict of one probe from its requests' latencies (ms) of the key's metric."""
    if failed:
        return Probe(at, UNDECIDED, why=f"the probe failed: {failed}", extra=extra)
    vals = [float(v) for v in values_ms if v is not None and math.isfinite(v)]
    if not vals:
        return Probe(at, UNDECIDED, why="no request finished", extra=extra)
    q = quantile_of(key)
    iv = stats.mean_interval(vals) if q is None else stats.quantile_interval(vals, q)
    lo, hi = iv.lo, iv.hi

    def probe(verdict: str, why: str = "", short: bool = False) -> Probe:
        return Probe(at, verdict, iv.value, lo, hi, len(vals), why, extra, short)

    if lo is not None and lo > limit:
        return probe(FAILS)
    if q is not None and not stats.quantile_upper_defined(len(vals), q):
        return probe(UNDECIDED, f"{len(vals)} requests are too few to bound the "
                     f"{key.split('_', 1)[0]} from above (at least {min_requests(key)})",
                     short=True)
    if hi is not None and hi <= limit:
        return probe(MEETS)
    return probe(UNDECIDED, f"its interval [{_r(lo)}, {_r(hi)}] straddles the limit {limit:g}")


@dataclass(frozen=True)
class Next:
    """Probe this load next, with at least `requests` requests (a retry: twice the last
    probe's there; 0: the usual number)."""
    at: float
    requests: int = 0
    reason: str = ""


@dataclass(frozen=True)
class Done:
    result: dict


@dataclass
class Bracket:
    """One SLO key on one server. Feed the ladder's points first (``observe(...,
    extra=False)``), then ask ``next()`` and feed each probe, until ``Done``."""
    key: str
    limit: float
    precision: float = PRECISION
    integer: bool = True
    #: The lowest load there is (concurrency 1; a rate: none, halving stops at precision).
    floor: float = 1.0
    #: The highest load the bracket may probe (None: MAX_DOUBLINGS past the ladder's top).
    most: float | None = None
    probes: list[Probe] = field(default_factory=list)

    def observe(self, probe: Probe) -> None:
        self.probes.append(probe)

    # -- what it knows -------------------------------------------------------------------
    def _latest(self) -> dict[float, Probe]:
        """Per load, its decided probe if any (a retry that decides wins), else the last."""
        out: dict[float, Probe] = {}
        for p in self.probes:
            if p.at not in out or p.verdict != UNDECIDED or out[p.at].verdict == UNDECIDED:
                out[p.at] = p
        return out

    def _tries(self, at: float) -> int:
        """Probes at this load that could have decided it (a short one could not)."""
        return sum(p.at == at and not p.short for p in self.probes)

    def _bounds(self) -> tuple[float | None, float | None, float | None]:
        """(capacity: the highest load meeting below every failing one; the lowest load
        failing; the lowest load above the capacity not shown to meet, failing or
        undecided with its retries spent)."""
        latest = self._latest()
        fails = min((a for a, p in latest.items() if p.verdict == FAILS), default=None)
        meets = max((a for a, p in latest.items() if p.verdict == MEETS
                     and (fails is None or a < fails)), default=None)
        stuck = [a for a, p in latest.items() if p.verdict == UNDECIDED
                 and self._tries(a) > RETRIES and (meets is None or a > meets)]
        upper = min([a for a in (fails, *stuck) if a is not None], default=None)
        return meets, fails, upper

    def _top(self) -> float:
        if self.most is not None:
            return self.most
        ladder = max((p.at for p in self.probes if not p.extra), default=self.floor)
        return ladder * 2 ** MAX_DOUBLINGS

    # -- what to do next -----------------------------------------------------------------
    def next(self) -> Next | Done:
        meets, fails, upper = self._bounds()
        latest = self._latest()
        # an undecided load that could still move the bracket: measure it again, the
        # middle one first (a pass there makes those below moot, a fail those above)
        open_ = sorted(a for a, p in latest.items() if p.verdict == UNDECIDED
                       and self._tries(a) <= RETRIES
                       and (meets is None or a > meets) and (upper is None or a < upper))
        if open_:
            a = open_[len(open_) // 2]
            return Next(a, 2 * max((p.n for p in self.probes if p.at == a and not p.short),
                                   default=0),
                        f"undecided at {_num(a)} ({latest[a].why}): again with more requests")
        if not self.probes:
            return Next(self.floor, 0, "nothing measured yet")
        if meets is None:   # nothing shown to meet: halve below the lowest load not meeting
            low = upper if upper is not None else min(latest)
            if low <= self.floor or (not self.integer and low <= self.floor * (1 + self.precision)):
                return self._done(None, upper)
            at = max(self.floor, self._mid(0.0, low) if self.integer else low / 2)
            return Next(at, 0, f"nothing meets up to {_num(low)}: halving")
        if upper is None:   # everything meets so far: double
            at = meets * 2
            if at > self._top():
                return self._done(meets, None)
            return Next(self._round(at), 0, f"meets at {_num(meets)}: doubling")
        if self._close(meets, upper):
            return self._done(meets, upper)
        return Next(self._mid(meets, upper), 0,
                    f"between {_num(meets)} (meets) and {_num(upper)}: bisecting")

    def _close(self, lo: float, hi: float) -> bool:
        return (hi - lo) <= self.precision * lo or (self.integer and hi - lo <= 1)

    def _mid(self, lo: float, hi: float) -> float:
        return float(math.floor((lo + hi) / 2)) if self.integer else (lo + hi) / 2

    def _round(self, x: float) -> float:
        return float(round(x)) if self.integer else x

    def unfinished(self, why: str) -> dict:
        """The result of a bracket stopped before it was done: what it knew, and why."""
        meets, _, upper = self._bounds()
        out = self._done(meets, upper).result
        out.update(status="unfinished", text=f"unfinished ({why}); meets at least at "
                   f"{_num(meets)}" if meets is not None else f"unfinished ({why})")
        return out

    def _done(self, capacity: float | None, upper: float | None) -> Done:
        latest = self._latest()
        at_cap = latest.get(capacity) if capacity is not None else None
        fails = self._bounds()[1]
        undecided = sorted(a for a, p in latest.items() if p.verdict == UNDECIDED)
        if capacity is None:
            status = "never meets"
            text = (f"does not meet {self.key} <= {self.limit:g} at {_num(upper or self.floor)}"
                    if upper is not None and latest[upper].verdict == FAILS else
                    f"not shown to meet {self.key} <= {self.limit:g} at any load probed")
        elif upper is None:
            status = "meets at the most probed"
            text = (f"meets {self.key} <= {self.limit:g} at {_num(capacity)}, the most the "
                    "bracket probes: the capacity is at least that")
        elif upper != fails:
            status = "undecided"
            text = (f"meets at {_num(capacity)}; at {_num(upper)} undecided after "
                    f"{self._tries(upper)} probes ({latest[upper].why})")
        else:
            status = "precise"
            text = (f"meets at {_num(capacity)}, fails at {_num(upper)} "
                    f"({(upper - capacity) / capacity:.0%} apart, precision "
                    f"{self.precision:.0%})")
        if at_cap is not None and at_cap.value is not None:
            text += (f"; at {_num(capacity)} {self.key} = {at_cap.value:.4g} "
                     f"[{_r(at_cap.lo)}, {_r(at_cap.hi)}] (95%, {at_cap.n} requests)")
        # a load meeting above one that fails: the probes disagree by more than their
        # intervals (noise between probes, e.g. a busy machine): said, never hidden
        inverted = sorted(a for a, p in latest.items() if p.verdict == MEETS
                          and fails is not None and a > fails)
        if inverted:
            text += (f"; not monotone: meets at {', '.join(str(_num(a)) for a in inverted)} "
                     f"above the failing {_num(fails)} (noise between probes)")
        return Done({"key": self.key, "limit_ms": self.limit, "capacity": _num(capacity),
                     "load": "concurrency" if self.integer else "request_rate",
                     "upper": _num(upper), "fails": _num(fails), "status": status,
                     "text": text,
                     "statistic": None if at_cap is None else {
                         "value": _r(at_cap.value), "interval": [_r(at_cap.lo), _r(at_cap.hi)],
                         "requests": at_cap.n},
                     "precision": self.precision,
                     "probes": sum(p.extra for p in self.probes),
                     "undecided": [_num(a) for a in undecided],
                     "not_monotone": [_num(a) for a in inverted],
                     "points": [p.to_json() for p in self.probes]})


def most_probes(ladder, precision: float, integer: bool = True) -> int:
    """The most extra probes one bracket can take on a ladder: the longest decided path
    (bisecting a ladder gap; doubling past the top, then bisecting; halving below the
    bottom, then bisecting), by the bracket's own rules, with each load measured up to
    1 + RETRIES times and every ladder load measured again as often (a ladder point too
    short for the percentile is no try; an undecided probe that stays undecided bounds
    the bracket as a failing one would)."""
    from functools import cache

    ladder = sorted(float(a) for a in ladder)
    rules = Bracket("mean_ttft_ms", 1.0, precision, integer,
                    floor=1.0 if integer else ladder[0] / 8)

    @cache
    def bisect(lo: float, hi: float) -> int:
        if rules._close(lo, hi):
            return 0
        mid = rules._mid(lo, hi)
        return 1 + max(bisect(lo, mid), bisect(mid, hi))

    @cache
    def halve(low: float) -> int:
        if low <= rules.floor or (not integer and low <= rules.floor * (1 + precision)):
            return 0
        at = max(rules.floor, rules._mid(0.0, low) if integer else low / 2)
        return 1 + max(halve(at), bisect(at, low))

    top = ladder[-1]
    double = max([MAX_DOUBLINGS] + [k + bisect(top * 2 ** (k - 1), top * 2 ** k)
                                    for k in range(1, MAX_DOUBLINGS + 1)])
    worst = max([double, halve(ladder[0])] + [bisect(a, b) for a, b in zip(ladder, ladder[1:])])
    return (1 + RETRIES) * (worst + len(ladder))


def capacity_gain(base: dict | None, spec: dict | None, integer: bool = True) -> dict | None:
    """"speculation adds X% capacity" with its interval: each capacity lies between the
    highest load shown to meet and the lowest shown to fail (less one request of
    concurrency; a rate: that rate), so the gain lies between spec.capacity /
    base.highest and spec.highest / base.capacity. Where nothing above the capacity was
    shown to fail (undecided, or meets at the most probed), that end is open (None).
    None unless both capacities are known."""
    if not base or not spec or not base.get("capacity") or spec.get("capacity") is None:
        return None
    step = 1.0 if integer else 0.0
    b, s = float(base["capacity"]), float(spec["capacity"])
    b_hi = max(b, float(base["fails"]) - step) if base.get("fails") is not None else None
    s_hi = max(s, float(spec["fails"]) - step) if spec.get("fails") is not None else None
    value = (s / b - 1.0) * 100.0
    lo = (s / b_hi - 1.0) * 100.0 if b_hi else None
    hi = (s_hi / b - 1.0) * 100.0 if s_hi else None
    return {"adds_percent": round(value, 1),
            "interval": [None if lo is None else round(lo, 1),
                         None if hi is None else round(hi, 1)]}


def _num(x):
    if x is None:
        return None
    return int(x) if float(x).is_integer() else round(float(x), 4)


def _r(x, n: int = 3):
    return None if x is None else round(float(x), n)


def summary(key: str, limit: float, baseline: str, results: dict[str, dict[str, dict]]) -> dict:
    """tune.json's slo.<key>.bracket: the baseline's bracketed capacity, the speculative
    setting's that reaches highest, and what speculation adds with its interval."""
    base = (results.get(baseline) or {}).get(key)
    spec = {s: r[key] for s, r in results.items() if s != baseline and key in r}
    top = max((s for s in spec if spec[s].get("capacity") is not None),
              key=lambda s: spec[s]["capacity"], default=None)
    out: dict = {"baseline": base,
                 "speculative": {"server": top, **spec[top]} if top else None,
                 "others": {s: {"capacity": r.get("capacity"), "status": r.get("status"),
                                "text": r.get("text")} for s, r in spec.items() if s != top}}
    gain = capacity_gain(base, spec.get(top) if top else None,
                         integer=(base or {}).get("load") != "request_rate")
    if gain is None:
        why = ("the baseline was not bracketed" if not base else
               "the baseline meets the limit nowhere" if base.get("capacity") is None else
               "no speculative setting meets the limit" if top is None else "")
        out["text"] = f"no capacity figure at {key} <= {limit:g}: {why}"
        return out
    assert base is not None and top is not None   # capacity_gain needs both
    out.update(gain)
    lo, hi = gain["interval"]
    iv = f" [{_fmt(lo)}, {_fmt(hi)}]"
    verb = "adds" if gain["adds_percent"] >= 0 else "costs"
    out["text"] = (f"speculation {verb} {abs(gain['adds_percent']):g}%{iv} capacity at {key} "
                   f"<= {limit:g} (bracketed: baseline {_num(base['capacity'])}, "
                   f"speculation {_num(spec[top]['capacity'])})")
    return out


def _fmt(x) -> str:
    return "open" if x is None else f"{x:+g}%"
