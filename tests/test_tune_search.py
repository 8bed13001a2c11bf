"""search=tune's logic, pure: fake step costs, fake measurements, a fake clock.

The "truth" here is a small world of its own: a per-position acceptance, step costs
that grow with the tokens a step verifies, and a per-step overhead the model does not
know. Measurements are drawn from it; the search must find its best settings, its
crossover and its SLO capacity in a few starts.
"""

from __future__ import annotations

import pytest

from specc.plan import Candidate, Search as SearchRecord
from specc.tune import predict
from specc.tune.search import Point, Search, Start, Stop

SHAPES = [(1, 1, 2), (2, 1, 3), (3, 1, 4), (5, 1, 6), (7, 1, 8), (3, 4, 8), (5, 4, 8),
          (5, 4, 16), (5, 8, 16), (7, 4, 32), (7, 8, 32), (7, 8, 64)]
LADDER = (1, 8, 32, 128)


def model_step(shape, c):
    """Fake calibrated model: memory-bound until 64 tokens a step, then compute-bound."""
    def target(n):
        return 0.005 + max(0.0, n - 64) * 2e-5
    if shape is None:
        return target(c)
    steps, topk, ndt = shape
    return (steps + 1) * 0.0004 + target(c * ndt)


class World:
    """Ground truth: acceptance a, the model's step costs plus an overhead per step."""

    def __init__(self, a: float, overhead_s: float = 0.0005):
        self.a, self.overhead = a, overhead_s

    def length(self, shape):
        return predict.accept_length([self.a], shape)

    def step(self, shape, c):
        return model_step(shape, c) + self.overhead

    def speedup(self, shape, c):
        return self.length(shape) / self.step(shape, c) * self.step(None, c)

    def point(self, server, shape, c, half=0.02, requests=16):
        if shape is None:
            return Point(server, c, per_stream_tps=1.0 / self.step(None, c),
                         latency={"p99_ttft_ms": (10.0 * c, 9.0 * c, 11.0 * c)})
        s, length = self.speedup(shape, c), self.length(shape)
        tokens = 64.0
        return Point(server, c, speedup=s, lo=s * (1 - half), hi=s * (1 + half),
                     requests=tuple((tokens, tokens / length) for _ in range(requests)),
                     accept_length=length, output_tokens=tokens * requests,
                     per_stream_tps=length / self.step(shape, c),
                     latency={"p99_ttft_ms": (8.0 * c, 7.0 * c, 9.0 * c)})


def record(shapes=SHAPES, ladder=LADDER, max_starts=4, probe=None, slo=None, margin=0.03):
    cands = tuple(Candidate(f"s{s}k{k}d{d}", s, k, d) for s, k, d in shapes)
    probe = probe or predict.choose_probe(cands, 0.7, margin, model_step, ladder).server
    return SearchRecord(name="tune", baseline="base", candidates=cands,
                        concurrencies=tuple(ladder), probe=probe, max_starts=max_starts,
                        margin=margin, slo=slo or {})


def drive(search: Search, world: World, clock: list[float]) -> list[str]:
    """Act on the search until it stops, as the executor does; each start costs 60 s."""
    shapes = {c.server: (c.num_steps, c.topk, c.num_draft_tokens)
              for c in search.rec.candidates}
    order = []
    while True:
        action = search.next_action(clock[0])
        if isinstance(action, Stop):
            return order
        order.append(action.server)
        search.started(action.server, clock[0], action.reason)
        clock[0] += 60.0
        for c in search.rec.concurrencies:
            search.observe(world.point(action.server, shapes.get(action.server), c))


def grid_best(world: World, ladder=LADDER):
    return {c: max(world.speedup(s, c) for s in SHAPES) for c in ladder}


def test_baseline_then_probe_then_a_predicted_winner():
    rec = record()
    search = Search(rec, model_step)
    assert search.next_action(0.0) == Start("base", search.next_action(0.0).reason)
    search.started("base", 0.0)
    for c in LADDER:
        search.observe(World(0.7).point("base", None, c))
    nxt = search.next_action(60.0)
    assert nxt.server == rec.probe and "probe" in nxt.reason


def test_a_shorter_chain_is_predicted_from_a_longer_ones_acceptance_exactly():
    world = World(0.62, overhead_s=0.0)
    rec = record(probe="s7k1d8")
    search = Search(rec, model_step)
    for c in LADDER:
        search.observe(world.point("base", None, c))
        search.observe(world.point("s7k1d8", (7, 1, 8), c))
    for shape in [(1, 1, 2), (3, 1, 4), (5, 1, 6)]:
        for c in LADDER:
            assert search.predict(f"s{shape[0]}k{shape[1]}d{shape[2]}", c) == \
                pytest.approx(world.speedup(shape, c), rel=0.01)


def test_per_position_counters_predict_a_tree_through_the_model():
    """vLLM's counters: position i accepted (and every one before it) at rate a^(i+1)."""
    a = 0.55
    ev = predict.from_positions("x", [a ** (i + 1) for i in range(7)])
    assert predict.predicted_length(ev, (7, 8, 32)) == pytest.approx(
        predict.accept_length([a], (7, 8, 32)), rel=1e-6)
    assert predict.acceptance_from_length(predict.accept_length([a], (3, 4, 8)), (3, 4, 8)) \
        == pytest.approx(a, abs=1e-4)


def regrets(search: Search, world: World) -> dict:
    decision, truth = search.decision(), grid_best(world)
    out = {}
    for c in LADDER:
        best = decision["best"][str(c)]
        got = 1.0 if best.get("baseline") else best["speedup"]
        out[c] = 1.0 - got / max(truth[c], 1.0)
    return out


@pytest.mark.parametrize("a", [0.3, 0.45, 0.6, 0.7, 0.85])
def test_without_a_budget_it_stops_when_separated_with_the_exact_best(a):
    """Predictions are exact in this world: it starts the baseline, the probe and at most
    one winner per concurrency, then stops by separation, not by running out; a setting
    better by less than the margin is not worth a start."""
    world, search = World(a), Search(record(max_starts=13), model_step)
    order = drive(search, world, [0.0])
    assert len(order) <= 2 + len(LADDER)
    assert search.stop_reason.startswith("separated")
    assert all(r <= search.rec.margin for r in regrets(search, world).values())


@pytest.mark.parametrize("a", [0.3, 0.7])
def test_in_a_third_of_the_grids_starts_within_3_percent_at_every_concurrency(a):
    world, clock = World(a), [1000.0]
    search = Search(record(max_starts=4), model_step)
    order = drive(search, world, clock)
    assert order[0] == "base" and len(order) <= (len(SHAPES) + 1) // 3
    assert all(r <= 0.03 for r in regrets(search, world).values()), regrets(search, world)
    decision = search.decision()
    assert decision["server_starts"] == len(order)
    assert [s["at"] for s in decision["starts"]] == [1000.0 + 60.0 * i for i in range(len(order))]


@pytest.mark.parametrize("a", [0.45, 0.6, 0.85])
def test_a_budget_is_never_exceeded_and_spent_to_cover_the_ladder(a):
    """Four different winners, one start for each is more than the budget: the starts go
    where they cover most (all but one concurrency within 3%), then it stops."""
    world, search = World(a), Search(record(max_starts=4), model_step)
    assert len(drive(search, world, [0.0])) == 4
    assert "budget" in search.stop_reason
    assert sum(r > 0.03 for r in regrets(search, world).values()) <= 1


def test_the_crossover_moves_with_acceptance():
    """Speculation stops paying where verify passes turn compute-bound; with a better
    draft it pays further up."""
    ladder = (1, 8, 32, 64, 128, 256, 512)
    found = {}
    for a in (0.3, 0.7):
        world, search = World(a), Search(record(ladder=ladder, max_starts=13), model_step)
        drive(search, world, [0.0])
        truth = next((c for c in ladder if max(world.speedup(s, c) for s in SHAPES) < 1.0),
                     None)
        x = search.decision()["crossover"]
        found[a] = x["concurrency"]
        assert x["concurrency"] == truth
        assert x["between"] == [ladder[ladder.index(truth) - 1], truth]
    assert found[0.3] < found[0.7]


def test_stops_when_separated_before_the_budget():
    world = World(0.7)
    shapes = [(1, 1, 2), (7, 8, 64)]   # one cheap chain, one huge tree: no contest
    search = Search(record(shapes=shapes, ladder=(1,), max_starts=3), model_step)
    order = drive(search, world, [0.0])
    assert len(order) <= 3
    stop = search.next_action(0.0)
    assert isinstance(stop, Stop)
    decision = search.decision()
    assert decision["crossover"]["concurrency"] is None
    assert "undefined" in decision["crossover"]["note"]
    assert decision["stopped"] == stop.reason


def test_ties_are_reported_and_where_nothing_pays_the_baseline_is_chosen():
    rec = record(shapes=[(1, 1, 2), (2, 1, 3), (3, 1, 4)], ladder=(1, 128))
    search = Search(rec, model_step)
    for sid, s1, s128 in [("s1k1d2", 1.50, 0.80), ("s2k1d3", 1.52, 0.70),
                          ("s3k1d4", 1.20, 0.60)]:
        search.started(sid, 0.0)
        search.observe(Point(sid, 1, s1, s1 - 0.05, s1 + 0.05))
        search.observe(Point(sid, 128, s128, s128 - 0.05, s128 + 0.05))
    d = search.decision()
    assert d["best"]["1"]["server"] == "s2k1d3"
    assert [t["server"] for t in d["best"]["1"]["ties"]] == ["s1k1d2"]
    assert d["best"]["128"]["baseline"] is True
    assert d["best"]["128"]["best_speculative"]["server"] == "s1k1d2"
    assert d["crossover"] == {"concurrency": 128, "between": [1, 128]}


def test_slo_capacity_of_baseline_and_speculation():
    world = World(0.7)
    search = Search(record(slo={"p99_ttft_ms": 300.0}, max_starts=3), model_step)
    drive(search, world, [0.0])
    slo = search.decision()["slo"]["p99_ttft_ms"]
    # baseline p99 TTFT 10 ms x c (interval 9..11 x c): meets 300 ms up to 8 of the ladder
    assert slo["baseline"]["concurrency"] == 8 and slo["baseline"]["first_over"] == 32
    assert slo["speculative"]["concurrency"] == 32   # 8 ms x c: 256 ms at 32
    assert slo["adds_percent"] == 300.0 and "adds 300%" in slo["text"]


def test_a_failed_baseline_stops_the_search():
    search = Search(record(), model_step)
    search.started("base", 0.0)
    search.fail("base", "server failed: out of memory")
    action = search.next_action(10.0)
    assert isinstance(action, Stop) and "out of memory" in action.reason


def test_a_failed_candidate_is_not_started_again():
    world = World(0.7)
    rec = record()
    search = Search(rec, model_step)
    search.started("base", 0.0)
    for c in LADDER:
        search.observe(world.point("base", None, c))
    assert search.next_action(1.0).server == rec.probe
    search.started(rec.probe, 1.0)
    search.fail(rec.probe, "server failed: stall")
    nxt = search.next_action(2.0)
    assert isinstance(nxt, Start) and nxt.server != rec.probe


def test_a_baseline_that_never_ran_decides_nothing():
    """The incident: a failed baseline read as "deploy the baseline" and "speculation pays up
    to the top of the ladder", with nothing measured."""
    from specc.report.decision import lines

    search = Search(record(), model_step)
    search.started("base", 0.0)
    search.fail("base", "server failed: crashed in load_weights")
    assert isinstance(search.next_action(1.0), Stop)
    d = search.decision()
    why = "the baseline failed (server failed: crashed in load_weights)"
    assert d["no_decision"] == why
    assert d["best"] == {str(c): {"no_decision": why} for c in LADDER}
    assert d["crossover"]["concurrency"] is None and why in d["crossover"]["note"]
    text = "\n".join(lines(d))
    assert f"No decision: {why}" in text
    assert "no setting pays" not in text and "speculation pays" not in text
    assert "| 8 | no decision | " + why in text


def test_a_baseline_that_failed_at_one_concurrency_decides_the_others():
    world = World(0.7)
    rec = record(ladder=(1, 8, 32), max_starts=2)
    search = Search(rec, model_step)
    search.started("base", 0.0)
    for c in (1, 8):
        search.observe(world.point("base", None, c))
    search.miss("base", 32, "server died mid-run (exit code 1)")
    search.started(rec.probe, 1.0)
    shape = next((c.num_steps, c.topk, c.num_draft_tokens) for c in rec.candidates
                 if c.server == rec.probe)
    for c in (1, 8):
        search.observe(world.point(rec.probe, shape, c))
    search.observe(Point(rec.probe, 32))   # ran, but nothing to pair it with
    d = search.decision()
    assert "no_decision" not in d
    assert d["best"]["1"]["server"] == rec.probe and d["best"]["8"]["server"] == rec.probe
    assert d["best"]["32"] == {"no_decision": "the baseline failed (server died mid-run "
                                              "(exit code 1))"}
    # it pays at 1 and 8; at 32 nothing is known: never "pays up to the top of the ladder"
    assert d["crossover"]["concurrency"] is None and d["crossover"]["between"] == [8, None]
    assert d["crossover"]["note"].startswith("speculation pays up to concurrency 8; above "
                                             "it no decision at concurrency 32")


@pytest.mark.parametrize("a", [1.0, 0.9995, 0.999, 0.0])
def test_sensitivity_at_the_ends_of_acceptance(a):
    """A draft that accepted every token (a = 1.0: the real engine with `specc tiny-models`'
    draft) or none: the sensitivity is a finite slope, never a division by zero (tune's
    decision crashed there after measuring such a draft)."""
    for shape in ((1, 1, 2), (3, 1, 4)):
        s = predict.sensitivity(shape, a)
        assert s == s and s >= 0 and s != float("inf"), (shape, a, s)


def test_a_wave_is_set_by_its_slowest_request():
    one = lambda b: 1.0   # noqa: E731
    assert predict.closed_loop_seconds([5.0] * 8, 8, one) == pytest.approx(5.0)
    # four slots, one request three times as long: half the slot-steps are idle
    assert predict.closed_loop_seconds([1.0, 1.0, 1.0, 3.0], 4, one) == pytest.approx(3.0)
    # the emptier tail steps are cheaper: a step of one request costs half of four's
    assert predict.closed_loop_seconds([1.0, 1.0, 1.0, 3.0], 4,
                                       lambda b: 1.0 if b == 4 else 0.5) == pytest.approx(2.0)


def test_a_request_takes_whole_verify_passes():
    """64 tokens at 8 a pass (a 7-step tree accepting every position): exactly 8 passes;
    a chain that sometimes stops short needs a ninth now and then, never 8.1."""
    assert predict.pass_counts(64, 1.0, (7, 8, 32)) == ((8, 1.0),)
    dist = dict(predict.pass_counts(64, 0.9, (7, 1, 8)))
    assert set(dist) <= set(range(8, 65)) and sum(dist.values()) == pytest.approx(1.0)
    assert dist[8] < 0.5 and sum(q for n, q in dist.items() if n >= 9) > 0.5


def test_a_wave_of_whole_passes_matches_the_simulators_own_draws():
    """Issue 31: at concurrency 8 (16 prompts of 64 tokens, two waves), the closed loop
    of whole verify passes, each pass drawn as the simulator draws it
    (`perf.sample_accept`), lasts as long as each wave's request that needed the most
    passes. The whole-pass occupancy predicts it within 1.5%; fractional passes (64 /
    accept length) miss it by more than 4%, the size of the regret it caused."""
    import random

    from specc.perf import model as perf

    rates = [0.55 + 0.4 * i / 15 for i in range(16)]
    for shape in ((7, 4, 32), (7, 1, 8)):
        mean = [64 / predict.accept_length([a], shape) for a in rates]
        rng, seconds = random.Random(7), []
        for _ in range(300):
            passes = []
            for a in rates:
                depth, p = perf.effective_depth_and_accept(a, *shape)
                got = n = 0
                while got < 64:
                    got, n = got + perf.sample_accept(rng, p, depth), n + 1
                passes.append(n)
            seconds.append(predict.closed_loop_seconds(passes, 8, lambda b: 1.0))
        truth = sum(mean) / 8 / (sum(seconds) / len(seconds))
        whole = predict.whole_pass_occupancy([(64, a) for a in rates], shape, 8)
        assert whole == pytest.approx(truth, rel=0.015), shape
        fractional = sum(mean) / 8 / predict.closed_loop_seconds(mean, 8, lambda b: 1.0)
        assert fractional > truth * 1.04, shape


class Prompts(World):
    """Acceptance that differs between prompts; a point is a closed loop of 64-token
    prompts: 16 one after another at concurrency 1, else one wave of as many as its
    concurrency, which ends with its slowest."""

    RATES = [0.55 + 0.4 * i / 15 for i in range(16)]

    @staticmethod
    def prompts(c):
        return 16 if c == 1 else c

    def duration(self, shape, c):
        rates = [self.RATES[i % len(self.RATES)] for i in range(self.prompts(c))]
        if c == 1:
            return sum(64.0 / (predict.accept_length([a], shape) if shape else 1.0)
                       for a in rates) * self.step(shape, 1)
        passes = sorted(64.0 / (predict.accept_length([a], shape) if shape else 1.0)
                        for a in rates)
        done, t = 0.0, 0.0
        for i, p in enumerate(passes):     # after each finish, one request fewer runs
            t += (p - done) * self.step(shape, c - i)
            done = p
        return t

    def speedup(self, shape, c):
        return self.duration(None, c) / self.duration(shape, c)

    def point(self, server, shape, c, half=0.02, requests=16):
        n = self.prompts(c)
        rates = [self.RATES[i % len(self.RATES)] for i in range(n)]
        if shape is None:
            return Point(server, c, per_stream_tps=1.0 / self.step(None, c),
                         requests=tuple((64.0, 64.0) for _ in range(n)))
        lengths = [predict.accept_length([a], shape) for a in rates]
        reqs = tuple((64.0, 64.0 / x) for x in lengths)
        s = self.speedup(shape, c)
        return Point(server, c, speedup=s, lo=s * (1 - half), hi=s * (1 + half),
                     requests=reqs, output_tokens=64.0 * n,
                     per_stream_tps=64.0 * n / sum(v for _, v in reqs) / self.step(shape, c),
                     decode=tuple((64.0, v * self.step(shape, 1)) for _, v in reqs))


def test_a_short_tree_beats_a_chain_where_a_wave_waits_for_its_slowest_prompt():
    """Issue 31: predicted from a measured tree (its decode times at concurrency 1 give
    each prompt's acceptance), a chain and a short tree at concurrency 32 (one wave of 32
    prompts): the chain's low-acceptance prompts finish last and leave the batch
    emptying, which a tree, accepting nearly every position, does not; per-stream rates
    alone would rank them the other way round."""
    world = Prompts(0.0)
    rec = record(probe="s5k4d8", ladder=(1, 32))
    search = Search(rec, model_step)
    for c in (1, 32):
        search.observe(world.point("base", None, c))
        search.observe(world.point("s5k4d8", (5, 4, 8), c))
    chain, tree = world.speedup((5, 1, 6), 32), world.speedup((3, 4, 8), 32)
    assert tree > chain
    assert search.predict("s3k4d8", 32) == pytest.approx(tree, rel=0.03)
    assert search.predict("s5k1d6", 32) == pytest.approx(chain, rel=0.03)
    assert search.predict("s3k4d8", 32) > search.predict("s5k1d6", 32)
