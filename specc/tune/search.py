"""The search as a pure state machine: fed measured points, it answers what to start next
and, at the end, the decision (best setting per concurrency, crossover, SLO capacity).

No I/O, no clock of its own: the executor (``specc.run.tune``) tells it when a server
started (``started(server, now)``), feeds each finished point (``observe``) and acts on
``next_action(now)`` -- start that server, or stop. Tests drive it with fake points and
a fake clock.

Prediction of an unstarted candidate x at concurrency c::

    S(x, c) = E_x / (step(x, c) + overhead(c)) * measured_step(base, c) * occ(x, c) * r

``E_x``: its accept length from the measured acceptance (``predict``); ``step``: the
calibrated model's step costs; ``overhead``: the baseline's measured minus model step
time at c (a per-step cost the model lacks, such as the scheduler's, adds to every
step); ``occ``: the share of the c streams busy until the slowest request finishes
(``predict.whole_pass_occupancy``: per-request acceptance from concurrency 1's decode
times, each request a whole number of verify passes);
``r``: measured / this formula for the measured candidate nearest to x in draft
tokens per step, at its own measured accept length (what the model misses for shapes
like x's). A measured step time is the accept length over the tokens per second one
stream sees.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import cast

from specc.tune import bracket, predict


@dataclass(frozen=True)
class Point:
    """One measured point of a started server."""
    server: str
    concurrency: int
    #: Paired speedup over the baseline and its interval (None for the baseline itself).
    speedup: float | None = None
    lo: float | None = None
    hi: float | None = None
    #: SGLang: (output tokens, verify passes) per request.
    requests: tuple[tuple[float, float], ...] = ()
    #: vLLM: acceptance rate per draft position over the point.
    positions: tuple[float, ...] | None = None
    #: The point's accept length (the server's counters) and output tokens: the
    #: acceptance when requests carry no verify counts (SGLang's OpenAI APIs).
    accept_length: float | None = None
    output_tokens: float = 0.0
    #: Decode tokens per second one stream sees: the measured step time's source.
    per_stream_tps: float | None = None
    #: Latency figures for the SLO: name -> (value, lo, hi) in ms.
    latency: dict = field(default_factory=dict)
    #: (output tokens, decode seconds) per request: at concurrency 1, each request's
    #: accept length relative to the point's (the spread of acceptance over prompts).
    decode: tuple[tuple[float, float], ...] = ()


@dataclass(frozen=True)
class Start:
    server: str
    reason: str


@dataclass(frozen=True)
class Stop:
    reason: str


class Search:
    def __init__(self, record, step_s):
        """`record`: the plan's Search; `step_s(shape or None, concurrency)`: the model's
        decode step time (None: the baseline's)."""
        self.rec = record
        self.step_s = step_s
        self.cands = {c.server: c for c in record.candidates}
        self.ladder = sorted(record.concurrencies)
        self.points: dict[tuple[str, int], Point] = {}
        self.starts: list[dict] = []          # {server, at, predicted}
        self.failed: dict[str, str] = {}
        #: (server, concurrency) -> why that point failed (the server itself may have run)
        self.missed: dict[tuple[str, int], str] = {}
        self.stop_reason: str | None = None
        self._cache: dict = {}                # predictions and evidence, until the next point
        #: server -> SLO key -> its bracketed capacity (specc.tune.bracket), when run
        self.brackets: dict[str, dict[str, dict]] = {}

    # -- what the executor tells it ---------------------------------------------------
    def started(self, server: str, now: float, reason: str = "") -> None:
        predicted = ({str(c): _r(self.predict(server, c)) for c in self.ladder}
                     if server in self.cands and self.evidence() else None)
        self.starts.append({"server": server, "at": now, "reason": reason,
                            "predicted": predicted})

    def observe(self, point: Point) -> None:
        self.points[(point.server, point.concurrency)] = point
        self._cache.clear()

    def fail(self, server: str, why: str) -> None:
        self.failed[server] = why
        self._cache.clear()

    def miss(self, server: str, concurrency: int, why: str) -> None:
        """One point of a started server failed (its other points may have finished)."""
        self.missed[(server, concurrency)] = why

    # -- what it knows ---------------------------------------------------------------
    def measured(self, server: str) -> bool:
        return any((server, c) in self.points for c in self.ladder)

    def done(self, server: str) -> bool:
        return server in self.failed or self.measured(server)

    def _spec_measured(self) -> list[str]:
        return [s for s in self.cands if self.measured(s)]

    def evidence(self) -> predict.Evidence | None:
        """Acceptance from the started candidate whose accept length says most about it."""
        if "evidence" not in self._cache:
            self._cache["evidence"] = self._evidence()
        return self._cache["evidence"]

    def _evidence(self) -> predict.Evidence | None:
        best, best_sens = None, -1.0
        for sid in self._spec_measured():
            shape = _shape(self.cands[sid])
            pts = [self.points[(sid, c)] for c in self.ladder if (sid, c) in self.points]
            pos = next((p.positions for p in pts if p.positions), None)
            ev = (predict.from_positions(sid, pos) if pos else
                  predict.from_requests(sid, shape, [r for p in pts for r in p.requests]))
            if not ev.units:   # no per-request verify counts: each point's accept length
                ev = predict.from_requests(sid, shape, [
                    (p.output_tokens or 1.0, (p.output_tokens or 1.0) / p.accept_length)
                    for p in pts if p.accept_length])
            a = predict.mean_acceptance(ev)
            if a is None:
                continue
            sens = predict.sensitivity(shape, a)
            if sens > best_sens:
                best, best_sens = ev, sens
        return best

    def _measured_length(self, server: str, concurrency: int) -> float | None:
        p = self.points.get((server, concurrency))
        if p is None:
            return None
        if p.requests:
            tok = sum(t for t, v in p.requests if v)
            ver = sum(v for t, v in p.requests if v)
            if ver:
                return tok / ver
        if p.accept_length:
            return p.accept_length
        if p.positions:
            return predict.predicted_length(predict.from_positions(server, p.positions),
                                            _shape(self.cands[server]))
        return None

    def measured_step(self, server: str | None, concurrency: int) -> float | None:
        """A measured server's decode step time (s): accept length / per-stream tokens/s."""
        sid = self.rec.baseline if server is None else server
        p = self.points.get((sid, concurrency))
        if p is None or not p.per_stream_tps:
            return None
        length = 1.0 if server is None else self._measured_length(server, concurrency)
        return length / p.per_stream_tps if length else None

    def _raw(self, shape, concurrency: int, length: float) -> float:
        """Speedup from the model's step costs plus the baseline's measured overhead."""
        model = self.step_s(shape, concurrency)
        base = self.measured_step(None, concurrency)
        if base is None:
            return length / model * self.step_s(None, concurrency)
        overhead = base - self.step_s(None, concurrency)
        return length / max(model + overhead, model / 2) * base

    def residual(self, server: str, concurrency: int) -> float:
        """Measured / raw prediction of the measured candidate nearest to `server` in draft
        tokens per step (then in topk), at its own measured accept length; 1.0 if none."""
        shape = _shape(self.cands[server])
        found, dist = 1.0, math.inf
        for sid in self._spec_measured():
            p = self.points.get((sid, concurrency))
            length = self._measured_length(sid, concurrency)
            if p is None or p.speedup is None or not length:
                continue
            other = _shape(self.cands[sid])
            d = abs(math.log(other[2] / shape[2])) + 0.01 * abs(math.log(other[1] / shape[1]))
            if d < dist:
                found, dist = p.speedup / (self._raw(other, concurrency, length)
                                           * self.occupancy(other, concurrency)), d
        return found

    def spread(self) -> list[tuple[float, float]]:
        """(output tokens, acceptance) per request at concurrency 1, from the measured
        candidate whose accept length there says most about acceptance; [] if none."""
        if "spread" not in self._cache:
            best, best_sens = [], -1.0
            for sid in self._spec_measured():
                p, length = self.points.get((sid, 1)), self._measured_length(sid, 1)
                if p is None or not p.decode or not length:
                    continue
                shape = _shape(self.cands[sid])
                sens = predict.sensitivity(shape, predict.acceptance_from_length(length, shape))
                if sens > best_sens:
                    tokens = [t for t, d in p.decode if t > 0 and d > 0]
                    best = [(t, predict.acceptance_from_length(x, shape)) for t, x in
                            zip(tokens, predict.request_lengths(p.decode, length, shape))]
                    best_sens = sens
            self._cache["spread"] = best
        return self._cache["spread"]

    def occupancy(self, shape, concurrency: int) -> float:
        """predict.whole_pass_occupancy of `shape` at `concurrency` over as many requests as the
        baseline's point there ran, their acceptance cycled from `spread`."""
        spread = self.spread()
        if not spread or concurrency <= 1:
            return 1.0
        base = self.points.get((self.rec.baseline, concurrency))
        n = len(base.decode or base.requests) if base is not None else 0
        n = n or concurrency
        base_s = self.measured_step(None, concurrency)
        overhead = 0.0 if base_s is None else base_s - self.step_s(None, concurrency)
        return predict.whole_pass_occupancy(
            [spread[i % len(spread)] for i in range(n)], shape, concurrency,
            lambda b: self.step_s(shape, b) + overhead)

    def predict(self, server: str, concurrency: int) -> float | None:
        key = ("predict", server, concurrency)
        if key not in self._cache:
            self._cache[key] = self._predict(server, concurrency)
        return self._cache[key]

    def _predict(self, server: str, concurrency: int) -> float | None:
        ev = self.evidence()
        if ev is None:
            return None
        shape = _shape(self.cands[server])
        length = predict.predicted_length(ev, shape)
        if length is None:
            return None
        return (self._raw(shape, concurrency, length) * self.occupancy(shape, concurrency)
                * self.residual(server, concurrency))

    def error(self) -> float:
        """The prediction error to allow: the margin, or the largest miss of the latest
        start's predictions (made with the most evidence) against what it measured."""
        worst = self.rec.margin
        latest = [s for s in self.starts if s["predicted"]][-1:]
        for s in latest:
            for c, pred in s["predicted"].items():
                p = self.points.get((s["server"], int(c)))
                if pred and p is not None and p.speedup:
                    worst = max(worst, abs(p.speedup / pred - 1.0))
        return worst

    def baseline_problem(self, concurrency: int) -> str | None:
        """Why nothing can be said at `concurrency` (every speedup is paired with the
        baseline), or None when the baseline was measured there: its own point, or a
        candidate's paired speedup, which needed it."""
        base = self.rec.baseline
        if (base, concurrency) in self.points or any(
                p.speedup is not None for (s, c), p in self.points.items()
                if c == concurrency and s != base):
            return None
        why = self.missed.get((base, concurrency)) or self.failed.get(base)
        return f"the baseline failed ({why})" if why else "the baseline was not measured"

    def best_at(self, concurrency: int) -> Point | None:
        pts = [self.points[(s, concurrency)] for s in self._spec_measured()
               if (s, concurrency) in self.points
               and self.points[(s, concurrency)].speedup is not None]
        return max(pts, key=lambda p: p.speedup or 0.0, default=None)   # none is None (above)

    # -- what to do next ---------------------------------------------------------------
    def next_action(self, now: float) -> Start | Stop:
        """Start the baseline, then the probe, then the candidate whose predicted speedup
        (raised by the prediction error) beats the best measured by the most, summed over
        the concurrencies; stop when none can, or at the budget."""
        if self.stop_reason:
            return Stop(self.stop_reason)
        base, probe = self.rec.baseline, self.rec.probe
        if base in self.failed:
            return self._stop(f"the baseline failed ({self.failed[base]}): no speedup can "
                              "be measured")
        if not self.done(base):
            return Start(base, "the baseline: every speedup is paired with it")
        if len(self.starts) >= self.rec.max_starts:
            return self._stop(f"the budget of {self.rec.max_starts} starts is spent")
        if not self.done(probe):
            return Start(probe, "the probe: its acceptance predicts every other candidate")
        if self.evidence() is None:
            left = [s for s in self.cands if not self.done(s)]
            if not left:
                return self._stop("every candidate was started")
            return Start(left[0], "no acceptance measured yet: the next candidate in order")
        u = self.error()
        ref = {c: max((b.speedup or 0.0) if (b := self.best_at(c)) else 0.0, 1.0) for c in self.ladder}
        preds = {sid: {c: self.predict(sid, c) or 0.0 for c in self.ladder}
                 for sid in self.cands if not self.done(sid)}
        bar = {c: ref[c] * (1 + self.rec.margin) for c in self.ladder}   # worth a start
        gains = {sid: g for sid, p in preds.items()
                 if (g := sum(max(0.0, p[c] * (1 + u) / bar[c] - 1.0) for c in self.ladder)) > 0}
        if not gains:
            return self._stop(f"separated: no unstarted candidate's prediction (+{u:.1%} "
                              f"error) beats the best measured by more than "
                              f"{self.rec.margin:.0%} at any concurrency")
        plan = self._plan({s: preds[s] for s in gains}, ref,
                          self.rec.max_starts - len(self.starts))
        pick = max(plan, key=lambda s: (gains[s], -list(self.cands).index(s)))
        where = [str(c) for c in self.ladder if preds[pick][c] * (1 + u) > bar[c]]
        return Start(pick, f"predicted to beat the best at concurrency {', '.join(where)} "
                           f"(summed gain {gains[pick]:.1%} at +{u:.1%} error)"
                           + (f"; the starts left go to {len(plan)} candidates covering the "
                              "ladder" if len(plan) > 1 else ""))

    def _plan(self, preds: dict, ref: dict, left: int) -> tuple:
        """The set of at most `left` contenders (one per concurrency at most) that leaves the
        fewest concurrencies more than the margin below the best predicted, then the least
        summed shortfall: with a budget, the starts are spent to cover the ladder."""
        import itertools

        k = max(1, min(left, len(self.ladder), len(preds)))
        top = {c: max([ref[c]] + [p[c] for p in preds.values()]) for c in self.ladder}

        def cost(group):
            short = [1.0 - max([ref[c]] + [preds[s][c] for s in group]) / top[c]
                     for c in self.ladder]
            return (sum(x > self.rec.margin for x in short), sum(short))

        if math.comb(len(preds), k) > 5000:   # large sets: the single best candidate
            return (max(preds, key=lambda s: -cost((s,))[1]),)
        return min(itertools.combinations(preds, k), key=cost)

    def _stop(self, reason: str) -> Stop:
        self.stop_reason = reason
        return Stop(reason)

    # -- the decision ------------------------------------------------------------------
    def decision(self) -> dict:
        """tune.json's content (docs/tune.md)."""
        u = self.error()
        best: dict[str, dict] = {}
        for c in self.ladder:
            problem = self.baseline_problem(c)
            if problem:   # never "deploy the baseline" nor "speculation pays": unmeasured
                best[str(c)] = {"no_decision": problem}
                continue
            b = self.best_at(c)
            if b is None:
                best[str(c)] = {"baseline": True, "measured": False}
                continue
            c_ = self.cands[b.server]
            ties = [s for s in self._spec_measured() if s != b.server
                    and (p := self.points.get((s, c))) is not None and p.speedup is not None
                    and _overlap(p, b)]
            entry = {"server": b.server, "num_steps": c_.num_steps, "topk": c_.topk,
                     "num_draft_tokens": c_.num_draft_tokens, "speedup": _r(b.speedup),
                     "interval": [_r(b.lo), _r(b.hi)],
                     "ties": [{"server": s, **_shape_dict(self.cands[s]),
                               "speedup": _r(self.points[(s, c)].speedup)} for s in ties]}
            best[str(c)] = {"baseline": True, "best_speculative": entry} if cast(float, b.speedup) < 1.0 \
                else entry
        out = {"server_starts": len(self.starts), "grid_server_starts": len(self.cands) + 1,
               "max_starts": self.rec.max_starts, "stopped": self.stop_reason,
               "prediction_error": _r(u), "best": best, "crossover": self.crossover(u),
               "starts": self.starts, "failed": self.failed,
               **({"no_decision": nd} if (nd := self._no_decision()) else {}),
               "candidates": self._table()}
        if self.rec.slo:
            out["slo"] = self.slo()
        return out

    def _no_decision(self) -> str | None:
        """Why nothing at all can be decided (the baseline measured at no concurrency)."""
        problems = [self.baseline_problem(c) for c in self.ladder]
        return problems[0] if all(problems) else None

    def crossover(self, u: float) -> dict:
        """The lowest concurrency at which no candidate's speedup interval reaches 1.0
        (an unstarted one: its prediction raised by the error). Concurrencies at which the
        baseline was not measured say nothing either way: they are named, never counted
        as paying."""
        if len(self.ladder) < 2:
            return {"concurrency": None, "between": None,
                    "note": "one concurrency: the crossover is undefined"}
        nd = self._no_decision()
        if nd:
            return {"concurrency": None, "between": None, "note": f"no decision: {nd}"}
        prev, unknown = None, []
        for c in self.ladder:
            if self.baseline_problem(c):
                unknown.append(c)
                continue
            reaches = False
            for sid in self.cands:
                p = self.points.get((sid, c))
                if p is not None and p.speedup is not None:
                    reaches |= (p.hi if p.hi is not None else p.speedup) >= 1.0
                elif not self.done(sid):
                    pred = self.predict(sid, c)
                    reaches |= pred is None or pred * (1 + u) >= 1.0
            if not reaches:
                out = {"concurrency": c, "between": [prev, c]}
                if unknown and prev is None:
                    out["note"] = (f"speculation does not pay at concurrency {c}; below it "
                                   f"no decision at {_list(unknown)}: "
                                   f"{self.baseline_problem(unknown[0])}")
                return out
            prev = c
        out = {"concurrency": None, "between": [prev, None],
               "note": "speculation pays up to the top of the ladder"}
        above = [c for c in unknown if c > prev]
        if above:
            out["note"] = (f"speculation pays up to concurrency {prev}; above it no decision "
                           f"at {_list(above)}: {self.baseline_problem(above[0])}")
        elif unknown:
            out["note"] += (f" (no decision at {_list(unknown)}: "
                            f"{self.baseline_problem(unknown[0])})")
        return out

    def slo(self) -> dict:
        """Per SLO key: the highest ladder concurrency at which the baseline and the best
        capacity speculative setting meet it (value, and [lo, hi] from the latency's
        interval), and the capacity speculation adds."""
        out = {}
        for key, limit in self.rec.slo.items():
            base = self._capacity(self.rec.baseline, key, limit)
            spec = {s: self._capacity(s, key, limit) for s in self._spec_measured()}
            top = max(spec, key=lambda s: (spec[s]["concurrency"] or 0), default=None)
            entry = {"limit_ms": limit, "baseline": base,
                     "speculative": {"server": top, **spec[top]} if top else None}
            b, s = base["concurrency"], (spec[top]["concurrency"] if top else None)
            problem = self.baseline_problem(self.ladder[0])
            if problem:   # the capacity run starts at the bottom: nothing to compare with
                entry["text"] = f"no decision: {problem}"
            elif b and s:
                entry["adds_percent"] = round((s / b - 1.0) * 100.0, 1)
                entry["text"] = (f"speculation adds {entry['adds_percent']:g}% capacity at "
                                 f"{key} <= {limit:g}" if s >= b else
                                 f"speculation costs {-entry['adds_percent']:g}% capacity at "
                                 f"{key} <= {limit:g}")
            if self.brackets and not problem:
                entry["bracket"] = bracket.summary(key, limit, self.rec.baseline,
                                                   self.brackets)
            out[key] = entry
        return out

    def _capacity(self, server: str, key: str, limit: float) -> dict:
        """The highest concurrency of the unbroken run from the ladder's bottom that meets
        the limit; [lo, hi]: the same by the latency interval's high and low ends."""
        value = lo = hi = above = None
        run = {"value": True, "lo": True, "hi": True}
        for c in self.ladder:
            p = self.points.get((server, c))
            fig = p.latency.get(key) if p else None
            if not fig:
                break
            v, flo, fhi = fig
            for name, x in (("value", v), ("lo", fhi if fhi is not None else v),
                            ("hi", flo if flo is not None else v)):
                run[name] = run[name] and x <= limit
            value = c if run["value"] else value
            lo = c if run["lo"] else lo
            hi = c if run["hi"] else hi
            if not run["value"] and above is None:
                above = c
        return {"concurrency": value, "interval": [lo, hi], "first_over": above}

    def _table(self) -> list[dict]:
        rows = []
        for sid, c_ in self.cands.items():
            start = next((s for s in self.starts if s["server"] == sid), None)
            rows.append({"server": sid, **_shape_dict(c_), "started": start is not None,
                         "predicted": (start or {}).get("predicted") or
                         {str(c): _r(self.predict(sid, c)) for c in self.ladder},
                         "measured": {str(c): _r(p.speedup) for c in self.ladder
                                      if (p := self.points.get((sid, c))) is not None}})
        return rows


def _list(cs: list[int]) -> str:
    return "concurrency " + ", ".join(map(str, cs))


def _overlap(a: Point, b: Point) -> bool:
    if a.lo is None or a.hi is None or b.lo is None or b.hi is None:
        return a.speedup == b.speedup
    return a.hi >= b.lo and b.hi >= a.lo


def _shape(c) -> tuple[int, int, int]:
    return (c.num_steps, c.topk, c.num_draft_tokens)


def _shape_dict(c) -> dict:
    return {"num_steps": c.num_steps, "topk": c.topk, "num_draft_tokens": c.num_draft_tokens}


def _r(x, n: int = 4):
    return None if x is None else round(float(x), n)
