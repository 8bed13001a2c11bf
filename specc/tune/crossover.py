"""The crossover refined between two ladder points: bisect the concurrency, pairing the
deployed command with the baseline at each probed load.

A pure state machine (no I/O, no clock), the SLO bracket's rules (``specc.tune.bracket``)
with "pays" for "meets" and "does not pay" for "fails": seeded with the ladder's two
points (speculation pays at ``lo``, no candidate's interval reaches 1.0 at ``hi``), it
answers the next concurrency to probe, or that it is done. The executor's side
(``specc.run.crossover``) measures each load on the baseline and on the deployed command,
side by side and alternately (the same prompts), and feeds the paired speedup.

A pair's verdict, from the speedup's 95% interval [lo, hi]:

- ``pays``: lo > 1.0;
- ``does not pay``: hi < 1.0;
- ``undecided``: the interval straddles 1.0 (or a point failed). Measured once more with
  twice the requests; undecided again, it bounds the crossover from above as "not shown
  to pay" and the result's status is ``undecided``: never counted either way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from specc.tune import bracket as B

PAYS, DOES_NOT_PAY, UNDECIDED = "pays", "does not pay", "undecided"
_TO_BRACKET = {PAYS: B.MEETS, DOES_NOT_PAY: B.FAILS, UNDECIDED: B.UNDECIDED}
_FROM_BRACKET = {v: k for k, v in _TO_BRACKET.items()}


@dataclass(frozen=True)
class Pair:
    """One probed load: the paired speedup with its interval, and the verdict."""
    at: int
    verdict: str
    speedup: float | None = None
    lo: float | None = None
    hi: float | None = None
    n: int = 0
    why: str = ""


def judge(at: int, speedup: float | None, lo: float | None, hi: float | None, n: int,
          failed: str | None = None) -> Pair:
    """The verdict of one pair (the deployed command's point over the baseline's)."""
    if failed:
        return Pair(at, UNDECIDED, n=n, why=f"a point failed: {failed}")
    if speedup is None or lo is None or hi is None or not all(
            math.isfinite(x) for x in (speedup, lo, hi)):
        return Pair(at, UNDECIDED, speedup, lo, hi, n, "no paired interval")
    if lo > 1.0:
        return Pair(at, PAYS, speedup, lo, hi, n)
    if hi < 1.0:
        return Pair(at, DOES_NOT_PAY, speedup, lo, hi, n)
    return Pair(at, UNDECIDED, speedup, lo, hi, n,
                f"its interval [{_r(lo)}, {_r(hi)}] straddles 1.0")


class Crossover:
    """Bisect between the ladder's `lo` (pays) and `hi` (does not) to `precision`: the
    first concurrency not shown to pay within `precision` of the highest shown to pay (or
    one request of concurrency apart). Ask ``next()``, feed each pair (``observe``),
    until ``B.Done``; `result()` at any time."""

    def __init__(self, lo: int, hi: int, precision: float = B.PRECISION,
                 ladder_lo: Pair | None = None, ladder_hi: Pair | None = None):
        self.lo, self.hi, self.precision = lo, hi, precision
        self.pairs: list[Pair] = []
        self._b = B.Bracket("speedup", 1.0, precision, integer=True, floor=float(lo),
                            most=float(hi))
        self.ends = {lo: ladder_lo or Pair(lo, PAYS), hi: ladder_hi or Pair(hi, DOES_NOT_PAY)}
        self._b.observe(B.Probe(float(lo), B.MEETS, n=self.ends[lo].n, extra=False))
        self._b.observe(B.Probe(float(hi), B.FAILS, n=self.ends[hi].n, extra=False))

    def observe(self, pair: Pair) -> None:
        self.pairs.append(pair)
        self._b.observe(B.Probe(float(pair.at), _TO_BRACKET[pair.verdict], pair.speedup,
                                pair.lo, pair.hi, pair.n, pair.why))

    def next(self) -> B.Next | B.Done:
        step = self._b.next()
        return B.Done(self.result()) if isinstance(step, B.Done) else step

    def result(self, unfinished: str | None = None) -> dict:
        """tune.json's crossover.refined (docs/tune.md)."""
        pays, fails, upper = self._b._bounds()
        assert pays is not None and upper is not None   # the seeds: lo pays, hi does not
        p, u = int(pays), int(upper)
        latest = {int(a): self._pair(int(a)) for a in self._b._latest()}
        undecided = sorted(a for a, x in latest.items() if x.verdict == UNDECIDED)
        if unfinished:
            status = "unfinished"
        elif fails is not None and u == int(fails):
            status = "precise"
        else:
            status = "undecided"
        text = (f"speculation pays up to concurrency {p}{_fig(latest.get(p))}; "
                + (f"not at {u}{_fig(latest.get(u))}" if u == (fails and int(fails)) else
                   f"not shown to pay at {u} ({latest[u].why})"))
        if status == "precise":
            text += f" ({(u - p) / p:.0%} apart, precision {self.precision:.0%})"
        elif status == "unfinished":
            text += f"; unfinished ({unfinished})"
        inverted = sorted(a for a, x in latest.items() if x.verdict == PAYS
                          and fails is not None and a > fails)
        if inverted:
            text += (f"; not monotone: pays at {', '.join(map(str, inverted))} above "
                     f"{int(fails)} (noise between pairs)")  # type: ignore[arg-type]
        return {"status": status, "concurrency": u, "between": [p, u],
                "ladder": [self.lo, self.hi], "precision": self.precision,
                "pairs": len(self.pairs), "undecided": undecided,
                "not_monotone": inverted, "text": text,
                "points": [_json(x) for x in self.pairs]}

    def _pair(self, at: int) -> Pair:
        """The decided pair at `at` if any (a retry that decides wins), else the last; a
        ladder end: its seed."""
        mine = [x for x in self.pairs if x.at == at]
        decided = [x for x in mine if x.verdict != UNDECIDED]
        return (decided or mine or [self.ends[at]])[-1]


def most_pairs(lo: int, hi: int, precision: float) -> int:
    """The most pairs a refinement between `lo` and `hi` can measure: the longest
    bisection path, each load measured up to 1 + RETRIES times."""
    from functools import cache

    rules = B.Bracket("speedup", 1.0, precision, integer=True)

    @cache
    def bisect(a: float, b: float) -> int:
        if rules._close(a, b):
            return 0
        mid = rules._mid(a, b)
        return 1 + max(bisect(a, mid), bisect(mid, b))

    return (1 + B.RETRIES) * bisect(float(lo), float(hi))


def refinable(crossover: dict | None, precision: float) -> tuple[int, int] | None:
    """The ladder points (lo, hi) a crossover lies between, when the gap is wider than
    the precision (None: at the ladder's bottom, above its top, or already precise)."""
    between = (crossover or {}).get("between") or [None, None]
    lo, hi = between if len(between) == 2 else (None, None)
    if not isinstance(lo, int) or not isinstance(hi, int):
        return None
    rules = B.Bracket("speedup", 1.0, precision, integer=True)
    return None if rules._close(float(lo), float(hi)) else (lo, hi)


def _fig(x: Pair | None) -> str:
    if x is None or x.speedup is None:
        return ""
    return (f" ({x.speedup:.3g}x [{_r(x.lo)}, {_r(x.hi)}]"
            + (f", {x.n} requests)" if x.n else ", on the ladder)"))


def _json(x: Pair) -> dict:
    return {"at": x.at, "verdict": x.verdict, "speedup": _r(x.speedup),
            "interval": [_r(x.lo), _r(x.hi)], "requests": x.n,
            **({"why": x.why} if x.why else {})}


def _r(x, n: int = 4):
    return None if x is None else round(float(x), n)
