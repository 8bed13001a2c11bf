"""Predict a candidate from what another one measured: acceptance by position, step costs.

Acceptance. A started speculative server tells, per request, how many tokens each
verify pass brought (SGLang: output tokens / ``spec_verify_ct``) or, per draft
position, how often that position was accepted (vLLM's per-position counters). Either
becomes a list of *conditional* per-position acceptances (position i accepted given
i-1 was); a candidate's accept length follows from the performance model's chain and
tree formulas (``specc.perf.model.effective_depth_and_accept``): a shorter chain is a
prefix of a longer one, a tree's position is accepted if any of its candidates is.

Step costs come from a callable (the calibrated model in the executor, a fake one in
tests); :mod:`specc.tune.search` corrects them by what each started server measured.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from specc.perf import model as perf

#: Per-position acceptance assumed before anything is measured (chooses the probe).
PRIOR_ACCEPTANCE = perf.DEFAULT_ACCEPTANCE


@dataclass(frozen=True)
class Evidence:
    """Acceptance one started candidate measured: per unit (a request, or the whole point
    for per-position counters) its weight (tokens) and conditional per-position rates."""
    server: str
    units: tuple[tuple[float, tuple[float, ...]], ...]


def accept_length(rates, shape) -> float:
    """Expected tokens per verify pass of a (num_steps, topk, num_draft_tokens) candidate
    whose draft position i is accepted with probability rates[i] (the last rate beyond)."""
    steps, topk, ndt = shape
    depth = perf.effective_depth_and_accept(0.5, steps, topk, ndt)[0]
    total, run = 1.0, 1.0
    for i in range(depth):
        a = rates[min(i, len(rates) - 1)] if rates else 0.0
        run *= perf.effective_depth_and_accept(a, steps, topk, ndt)[1]
        total += run
    return min(total, float(steps + 1))


@functools.lru_cache(maxsize=65536)
def _length(rates: tuple, shape: tuple) -> float:
    return accept_length(rates, shape)


@functools.lru_cache(maxsize=65536)
def acceptance_from_length(length: float, shape) -> float:
    """The constant per-position acceptance at which `shape` accepts `length` tokens per
    pass (bisection on the model's monotone formula; clamped to what it can express)."""
    lo, hi = 0.0, 0.999
    if length <= accept_length([lo], shape):
        return lo
    if length >= accept_length([hi], shape):
        return hi
    for _ in range(50):
        mid = (lo + hi) / 2
        if accept_length([mid], shape) < length:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def from_requests(server: str, shape, requests) -> Evidence:
    """SGLang: one unit per request with verify passes, from (output tokens, verify passes)."""
    steps = shape[0]
    units = []
    for tokens, verifies in requests:
        if verifies and tokens:
            a = acceptance_from_length(tokens / verifies, shape)
            units.append((float(tokens), (a,) * max(1, steps)))
    return Evidence(server, tuple(units))


def from_positions(server: str, positions, weight: float = 1.0) -> Evidence:
    """vLLM: the rate each draft position was accepted (unconditional: position i and all
    before it) -> conditional rates."""
    rates, prev = [], 1.0
    for r in positions:
        rates.append(min(1.0, r / prev) if prev > 0 else 0.0)
        prev = r
    return Evidence(server, ((weight, tuple(rates)),) if rates else ())


def predicted_length(evidence: Evidence, shape) -> float | None:
    """The candidate's accept length over the evidence's units, weighted by tokens the way
    throughput weighs them (tokens / sum of passes: a harmonic mean)."""
    if not evidence.units:
        return None
    passes = sum(w / _length(rates, shape) for w, rates in evidence.units)
    return sum(w for w, _ in evidence.units) / passes if passes else None


def request_lengths(decode, length: float, shape=None) -> list[float]:
    """Each request's accept length at concurrency 1, where it ran alone: its decode rate
    (tokens per second) relative to the point's, times the point's accept length.

    With the measured `shape`, the spread over requests is shrunk by what the draws of
    one request alone would spread (tokens per pass vary around its mean: a request of
    T tokens at accept length L, variance v per pass, varies by about L * v / T), so that
    it estimates how acceptance varies between prompts, not the luck of a few passes."""
    rows = [(t, d) for t, d in decode if t > 0 and d > 0]
    tokens, seconds = sum(t for t, _ in rows), sum(d for _, d in rows)
    if not seconds:
        return []
    raw = [length * (t / d) / (tokens / seconds) for t, d in rows]
    if shape is None or len(raw) < 2:
        return raw
    mean = sum(raw) / len(raw)
    spread = sum((x - mean) ** 2 for x in raw) / (len(raw) - 1)
    noise = sum(x * _pass_variance(acceptance_from_length(x, shape), shape) / t
                for x, (t, _) in zip(raw, rows)) / len(raw)
    keep = math.sqrt(max(0.0, 1.0 - noise / spread)) if spread > 0 else 0.0
    return [mean + keep * (x - mean) for x in raw]


def _pass_variance(a: float, shape) -> float:
    """Variance of the tokens one verify pass brings (accepted chain + bonus)."""
    steps, topk, ndt = shape
    depth, p = perf.effective_depth_and_accept(a, steps, topk, ndt)
    first = sum(p ** k for k in range(1, depth + 1))
    second = sum((2 * k - 1) * p ** k for k in range(1, depth + 1))
    return max(0.0, second - first * first)


def closed_loop_seconds(passes, slots: int, cost) -> float:
    """Seconds until the last of `passes` (verify passes per request, in order) finishes,
    each request started on the first free of `slots`, a pass costing cost(requests in
    flight). A benchmark of a few waves (num_prompts = concurrency, outputs of one length)
    ends with its slowest request: a candidate whose accept length varies much between
    prompts (a chain) leaves slots idle that a wide tree, accepting nearly every
    position, keeps busy; the emptier steps of that tail are cheaper."""
    import heapq

    free = [(0.0, i) for i in range(slots)]   # (when the slot frees, slot): first free first
    spans = []
    for p in passes:
        at, i = heapq.heappop(free)
        spans.append((at, at + p))
        heapq.heappush(free, (at + p, i))
    events = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans])
    seconds, busy, at = 0.0, 0, 0.0
    for x, change in events:   # a sweep: requests in flight between consecutive edges
        if busy and x > at:
            seconds += (x - at) * cost(busy)
        busy, at = busy + change, x
    return seconds


#: Closed loops replayed (seeded) to average the whole-pass draws over.
REPLICATIONS = 32


def whole_pass_occupancy(requests, shape, concurrency: int, step_s=None,
                         replications: int = REPLICATIONS) -> float:
    """Throughput of a closed loop of these requests, each (output tokens, per-position
    acceptance) taking a whole number of verify passes drawn from `pass_counts` (the last
    one cut at its max_tokens), over that of `concurrency` streams always busy at their
    mean accept length (`closed_loop_seconds`; `step_s(batch)`, constant if None).

    A wave lasts as long as its request that needed the most passes: at 64 tokens a
    7-step tree accepting every position takes 8 passes for every request, while a
    chain averaging 7.9 tokens a pass leaves most waves with one request at 9. The
    fractional count (64 / 7.9 = 8.1 passes) misses that; at concurrency 8 it cost a
    topk-8 tree 9% against a topk-4 one on the simulator. Seeded: the same inputs give
    the same figure."""
    import random

    rows = [(int(t), a) for t, a in requests if t >= 1]
    if not rows:
        return 1.0
    slots = min(concurrency, len(rows))
    cost = functools.lru_cache(maxsize=None)(step_s or (lambda b: 1.0))
    mean = [t / accept_length([a], shape) for t, a in rows]
    ideal = sum(mean) / slots * cost(slots)
    dists = [_cdf(pass_counts(t, round(a, 4), tuple(shape))) for t, a in rows]
    rng = random.Random(0)
    seconds = [closed_loop_seconds([_draw(rng, d) for d in dists], slots, cost)
               for _ in range(max(1, replications))]
    return ideal / (sum(seconds) / len(seconds))


@functools.lru_cache(maxsize=4096)
def pass_counts(tokens: int, a: float, shape: tuple) -> tuple[tuple[int, float], ...]:
    """(passes, probability): how many verify passes a request of `tokens` output tokens
    takes when each pass brings its accepted drafts (per position `a`, through the
    model's chain and tree formula, until the first reject) plus the bonus token."""
    steps, topk, ndt = shape
    depth, p = perf.effective_depth_and_accept(a, steps, topk, ndt)
    per_pass = [(k + 1, p ** k * ((1.0 - p) if k < depth else 1.0)) for k in range(depth + 1)]
    mass = {0: 1.0}
    out = []
    for n in range(1, tokens + 1):
        nxt: dict[int, float] = {}
        for got, m in mass.items():
            for k, q in per_pass:
                if q > 0:
                    key = min(tokens, got + k)
                    nxt[key] = nxt.get(key, 0.0) + m * q
        done = nxt.pop(tokens, 0.0)
        if done > 0:
            out.append((n, done))
        mass = nxt
        if sum(mass.values()) < 1e-9:
            break
    return tuple(out)


def _cdf(dist) -> tuple[tuple[int, float], ...]:
    total, rows = 0.0, []
    for n, q in dist:
        total += q
        rows.append((n, total))
    return tuple(rows)


def _draw(rng, cdf) -> int:
    u = rng.random() * cdf[-1][1]
    for n, c in cdf:
        if u <= c:
            return n
    return cdf[-1][0]


def mean_acceptance(evidence: Evidence) -> float | None:
    if not evidence.units:
        return None
    total = sum(w for w, _ in evidence.units)
    return sum(w * rates[0] for w, rates in evidence.units) / total if total else None


def sensitivity(shape, a: float) -> float:
    """How much the candidate's accept length says about acceptance: d log E / d a."""
    h = 1e-3
    # kept inside (0, 0.999): a draft that accepted every token (a = 1.0, as the real
    # engine measured for `specc tiny-models`' draft) would leave no interval at all
    mid = min(max(a, h), 0.999 - h)
    lo, hi = mid - h, mid + h
    up, down = accept_length([hi], shape), accept_length([lo], shape)
    return (math.log(up) - math.log(down)) / (hi - lo)


#: Below this d log E / d a the accept length hardly moves with acceptance (a wide tree
#: accepts nearly every position): such a probe could not tell a good draft from a poor one.
MIN_SENSITIVITY = 0.1


def choose_probe(candidates, prior: float = PRIOR_ACCEPTANCE, margin: float = 0.03,
                 step_s=None, concurrencies=()):
    """The first speculative server to start: the one the model, at the prior acceptance,
    ranks within `margin` of the best at the most concurrencies (it is likely to be kept,
    which matters when the budget is a third of the grid), among those whose accept length
    says something about acceptance; ties go to the most sensitive."""
    cands = list(candidates)
    readable = [x for x in cands if sensitivity(_shape(x), prior) >= MIN_SENSITIVITY] or cands
    cover = {x.server: 0 for x in cands}
    if step_s is not None:
        for c in concurrencies:
            figs = {x.server: accept_length([prior], _shape(x)) / step_s(_shape(x), c)
                    for x in cands}
            top = max(figs.values())
            for k, v in figs.items():
                cover[k] += v >= top * (1 - margin)
    return max(readable, key=lambda x: (cover[x.server], sensitivity(_shape(x), prior),
                                        -cands.index(x)))


def _shape(c) -> tuple[int, int, int]:
    return (c.num_steps, c.topk, c.num_draft_tokens)


def perf_steps(target_values: dict, draft_values: dict | None, *, tp: int, gpu: str | None,
               context: float | None):
    """The calibrated model's step costs: (shape or None for the baseline, concurrency) ->
    seconds of one decode step (a speculative one: drafts + verify)."""
    target = perf.model_cost(target_values, tp=tp, gpu=gpu)
    draft = perf.draft_cost(draft_values, tp=tp, gpu=gpu) if draft_values else None

    def step_s(shape: tuple[int, int, int] | None, concurrency: int) -> float:
        spec = None if shape is None else perf.SpecConfig(*shape, PRIOR_ACCEPTANCE)
        return perf.decode_step_s(target, concurrency, spec, draft if spec else None, context)

    return step_s


def plan_steps(plan, *, tp: int):
    """perf_steps for a plan with a search record (target facts, draft facts, GPU, context)."""
    rec = plan.search
    target = plan.facts.get("target")
    return perf_steps(target.values if target is not None else {}, rec.draft_facts,
                      tp=tp, gpu=rec.gpu, context=rec.context)
