"""The per-point path of a compile, a column at a time (10^5 client points on one server):
each piece reads and writes exactly what the point-by-point code it replaced did."""

from __future__ import annotations

import dataclasses
import itertools
import json

import pytest

from specc.compile import emit, rules
from specc.compile.matrix import NEUTRAL_WORKLOAD, _client_points, _num_prompts, canonical
from specc.compile.pipeline import compile_config
from specc.engines import get_engine
from specc.compile.build import build_many
from specc.plan import BenchParams, Benchmark, Plan, Readiness

LLAMA = ["model_pair.context_length=2048"]


def _points_one_by_one(base: dict, client_axes) -> list[dict]:
    """The client points as the compile made them before columns: one dict per point."""
    points = []
    for combo in itertools.product(*(v for _, v in client_axes)):
        bench = dict(base)
        for (path, _), value in zip(client_axes, combo):
            if path == "benchmark":
                bench.update(value)
            else:
                bench[path.split(".", 1)[1]] = value
        bench["num_prompts"] = _num_prompts(bench)
        for key, neutral in NEUTRAL_WORKLOAD.items():
            if bench.get(key) == neutral:
                del bench[key]
        points.append(bench)
    return points


AXES = [
    [("benchmark.concurrency", [1, 4, 16]), ("benchmark.output_len", [8, 64])],
    [("benchmark.burstiness", [None, 2.0, 0.5]), ("benchmark.request_rate", [1, 2.5])],
    [("benchmark", [{"concurrency": 1, "output_len": 64}, {"concurrency": 8}])],
    [("benchmark.multi_turn", [False, True]), ("benchmark.shared_prefix_len", [0, 128])],
    [("benchmark.categories", [["coding"], ["math", "writing"], None]),
     ("benchmark.seed", [0, 1])],
    [("benchmark.temperature", [0, 0.0, 0.7]), ("benchmark.num_prompts", [None, 12])],
    [("benchmark.min_output_tokens", [0, 1000]), ("benchmark.concurrency", [1, 200])],
]


@pytest.mark.parametrize("axes", AXES)
def test_client_points_are_the_dicts_the_product_makes(compose, axes):
    base = compose(LLAMA)["benchmark"]
    points = _client_points({"benchmark": base}, axes)
    expected = _points_one_by_one(base, axes)
    assert len(points) == len(expected)
    assert list(points) == expected
    assert [list(p) for p in points] == [list(p) for p in expected]   # key order too
    texts = list(points.canonical_texts())
    assert texts == [canonical(p) for p in expected]
    quoted = list(points.canonical_texts(quoted=True, around=('"', '"]')))
    assert quoted == [json.dumps(canonical(p)) + "]" for p in expected]


@pytest.mark.parametrize("axes", AXES)
def test_the_rules_see_each_distinct_point_they_read(compose, axes):
    """Checked once per distinct combination of what each rule reads: the diagnostics are
    those of checking every point, in the same order once repeats are dropped."""
    from specc.compile.matrix import spec_for
    from specc.diagnostics import unique

    cfg = compose(LLAMA)
    engine = get_engine("sglang")
    points = _client_points(cfg, axes)
    each = _points_one_by_one(cfg["benchmark"], axes)
    assert unique(rules.check_clients(engine, points)) == unique(
        [d for rule in rules.CLIENT_RULES for b in each for d in rule(None, engine, b)])
    spec = spec_for({k: cfg[k] for k in ("model_pair", "hardware", "engine", "server",
                                         "speculation", "readiness")})
    checks = [rule(spec, engine) for rule in rules.POINT_RULES]
    assert unique(rules.check_points(spec, engine, points)) == unique(
        [d for b in each for check in checks for d in check(b)])


def test_each_rule_reads_only_what_it_says(compose):
    """A rule told only the keys it reads (POINT_RULE_READS, CLIENT_RULE_READS) says the same
    of two points that differ elsewhere: what lets the compile check each distinct one once."""
    from specc.compile.matrix import spec_for

    cfg = compose(LLAMA)
    engine = get_engine("sglang")
    spec = spec_for({k: cfg[k] for k in ("model_pair", "hardware", "engine", "server",
                                         "speculation", "readiness")})
    base = cfg["benchmark"]
    variants = [dict(base, concurrency=4000), dict(base, input_len=1900, output_len=400),
                dict(base, request_rate=2, burstiness=0.0), dict(base, dataset="random",
                                                                categories=["x"]),
                dict(base, target_ci=0.02, max_requests=10, num_prompts=80),
                dict(base, driver="bench_serving", shared_prefix_len=64),
                dict(base, num_prompts=10**6, input_len=2000)]
    for rule, reads in rules.CLIENT_RULE_READS.items():
        for a, b in itertools.permutations(variants, 2):
            mixed = dict(b, **{k: a[k] for k in reads if k in a})
            assert list(rule(None, engine, mixed)) == list(rule(None, engine, a)), rule.__name__
    for rule, reads in rules.POINT_RULE_READS.items():
        check = rule(spec, engine)
        for a, b in itertools.permutations(variants, 2):
            mixed = dict(b, **{k: a[k] for k in reads if k in a})
            assert list(check(mixed)) == list(check(a)), rule.__name__


class _Recording(dict):
    """A point that notes each key a rule reads of it."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.read: set[str] = set()

    def __getitem__(self, key):
        self.read.add(key)
        return super().__getitem__(key)

    def get(self, key, default=None):
        self.read.add(key)
        return super().get(key, default)

    def __contains__(self, key):
        self.read.add(key)
        return super().__contains__(key)


def test_no_rule_reads_a_key_it_does_not_name(compose, tmp_path):
    """The compile hands each rule only the keys it names (POINT_RULE_READS,
    CLIENT_RULE_READS, FIRST_POINT_READS): one that read another would be told None."""
    from specc.compile.matrix import spec_for

    cfg = compose(LLAMA)
    engine = get_engine("sglang")
    spec = spec_for({k: cfg[k] for k in ("model_pair", "hardware", "engine", "server",
                                         "speculation", "readiness")})
    (tmp_path / "p.jsonl").write_text('{"prompt": "hi there"}\n')
    (tmp_path / "s.json").write_text(json.dumps([{"conversations": [
        {"from": "human", "value": "a question of some words " * 4},
        {"from": "gpt", "value": "an answer of some words " * 4}]}]))
    (tmp_path / "t.jsonl").write_text('{"timestamp": 0, "input_length": 8, "output_length": 4}\n')
    base = cfg["benchmark"]
    variants = [base, dict(base, concurrency=4000, request_rate=2, burstiness=0.3, ramp_s=5),
                dict(base, dataset="jsonl", dataset_path=str(tmp_path / "p.jsonl")),
                dict(base, dataset="sharegpt", dataset_path=str(tmp_path / "s.json")),
                dict(base, dataset="trace", dataset_path=str(tmp_path / "t.jsonl")),
                dict(base, dataset="random", categories=["x"], multi_turn=True),
                dict(base, target_ci=0.02, max_requests=10, num_prompts=10**6, input_len=2000)]
    for v in variants:
        for rule, reads in rules.CLIENT_RULE_READS.items():
            point = _Recording(v)
            list(rule(None, engine, point))
            assert point.read <= {*reads, *rules.FIRST_POINT_READS.get(rule, ())}, rule.__name__
        for rule, reads in rules.POINT_RULE_READS.items():
            point = _Recording(v)
            list(rule(spec, engine)(point))
            assert point.read <= set(reads), rule.__name__


def test_records_built_a_field_at_a_time_are_the_constructors(compose):
    from conftest import bench_params

    rows = [bench_params(concurrency=c, seed=s) for c, s in ((1, 0), (4, 1), (16, 2))]
    for row in rows:
        row["categories"] = None
        row["accept_positions"] = None
    names = [f.name for f in dataclasses.fields(BenchParams)]
    varying = {"concurrency": [r["concurrency"] for r in rows], "seed": [r["seed"] for r in rows]}
    shared = {k: rows[0][k] for k in names if k in rows[0] and k not in varying}
    built = build_many(BenchParams, 3, varying, shared)
    made = [BenchParams(**{k: r[k] for k in names if k in r}) for r in rows]
    assert built == made and [hash(b) for b in built] == [hash(m) for m in made]
    assert all(type(b) is BenchParams for b in built)
    with pytest.raises(dataclasses.FrozenInstanceError):
        built[0].seed = 9
    with pytest.raises(TypeError, match="constructor"):   # it checks what it is given
        build_many(Readiness, 1, {})
    with pytest.raises(TypeError, match="no value for 'server'"):
        build_many(Benchmark, 1, {"id": ["a"]}, {"baseline": None, "params": made[0]})


PLANS = [
    ["+experiment=llama3_eagle3_pack"],
    ["+experiment=eagle3_sweep"],
    ["+experiment=eagle3_sweep", "benchmark.request_rate=2",
     "++sweep={speculation.num_steps:[1,3],benchmark.burstiness:[null,2.0],"
     "benchmark.categories:[[coding],null]}"],
    ["+experiment=eagle3_sweep", "benchmark.driver=bench_serving", "benchmark.dataset=random"],
    ["+experiment=eagle3_sweep", "engine=vllm"],
    ["+experiment=llama3_tune", "engine=sim", "search=grid",
     "engine.sim.time_dilation=3"],   # points slowed down: their time_dilation written
    ["+experiment=llama3_eagle3_pack", "baseline=false",   # one server: its points' own columns
     "++sweep={speculation:[{num_steps:3,topk:1,num_draft_tokens:4}],"
     "benchmark.concurrency:[1,2,3],benchmark.input_len:[4,8]}"],
    ["+experiment=llama3_eagle3_pack", "engine=sim", "engine.sim.time_dilation=3", "baseline=false",
     "++sweep={speculation:[{num_steps:3,topk:1,num_draft_tokens:4}],benchmark.concurrency:[1,2,3]}"],
]


@pytest.mark.parametrize("overrides", PLANS)
def test_plan_json_entries_are_what_the_entry_encoder_writes(compose, overrides):
    """plan.json's point lines, a column at a time, are character for character what the
    one-entry-at-a-time encoder (still writing the servers) writes for each point."""
    result = compile_config(compose(overrides))
    assert result.ok, result.diagnostics
    benchmarks = result.plan.benchmarks
    entries = emit._benchmark_entries(benchmarks, emit._param_columns(result.plan))
    assert list(entries) == list(emit._entries(benchmarks))


def test_a_point_that_holds_a_credential_is_still_scrubbed(compose, tmp_path):
    """The point lines skip the scrub only when none of their pieces holds anything it
    looks for: a dataset path with a URL's password is blanked as before."""
    cfg = compose(LLAMA + ["benchmark.dataset=jsonl"])
    cfg["benchmark"]["dataset_path"] = str(tmp_path / "prompts.jsonl")
    (tmp_path / "prompts.jsonl").write_text('{"prompt": "hi"}\n')
    result = compile_config(cfg)
    assert result.ok, result.diagnostics
    secret = "https://user:hunter2hunter2@example.com/p.jsonl"
    plan = dataclasses.replace(result.plan, benchmarks=tuple(
        dataclasses.replace(b, params=dataclasses.replace(b.params, dataset_path=secret))
        for b in result.plan.benchmarks))
    emit.write_outputs(tmp_path / "run", plan, result.diagnostics, title="t")
    text = (tmp_path / "run" / "plan.json").read_text()
    assert "hunter2hunter2" not in text and "@example.com/p.jsonl" in text
    assert Plan.load_checked(tmp_path / "run" / "plan.json")[2]   # its digest still holds


@pytest.mark.parametrize("overrides", PLANS)
def test_the_params_the_compile_hands_emit_are_the_plans(compose, overrides, tmp_path):
    """Lowering hands emit the points' params a field at a time, as it built them: the same
    values as reading them back from the records, and the same files either way."""
    from specc.compile.columns import RecordColumns, Same

    result = compile_config(compose(overrides))
    plan = result.plan
    given = result.params
    assert given is not None and given.of is plan.benchmarks
    read = RecordColumns.read([b.params for b in plan.benchmarks],
                              [f.name for f in dataclasses.fields(BenchParams)])

    def each(columns):
        n = len(plan.benchmarks)
        return {k: [(type(v), v) for v in ([c.value] * n if type(c) is Same else c)]
                for k, c in columns.per_entry()}
    assert each(given) == each(read)
    if len(plan.servers) == 1:   # and the benchmarks' fields that hold one value each
        assert given.entries is not None and given.entries.of is plan.benchmarks
        names = list(given.entries.columns)
        assert {"server", "baseline", "argv"} <= set(names) and "id" not in names
        assert each(given.entries) == each(RecordColumns.read(plan.benchmarks, names))
    emit.write_outputs(tmp_path / "a", plan, result.diagnostics, title="t", params=given)
    emit.write_outputs(tmp_path / "b", plan, result.diagnostics, title="t")
    for name in ("plan.json", "plan.sh", "review.md"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


#: Axes over which the rules that grow with what they read (rules.GROWING) say something of
#: some points and nothing of others: KV cache over concurrency x lengths, a point's tokens
#: over prompts x lengths; zipped, where each key's largest value is at a different point.
GROWING_AXES = [
    [("benchmark.concurrency", [1, 64, 2000, 4000]), ("benchmark.input_len", [100, 1900]),
     ("benchmark.output_len", [8, 100])],
    [("benchmark.num_prompts", [10, 60_000]), ("benchmark.input_len", [100, 1800]),
     ("benchmark.seed", [0, 1])],
    [("benchmark", [{"concurrency": 4000, "input_len": 16, "output_len": 8},
                    {"concurrency": 1, "input_len": 1900, "output_len": 100},
                    {"concurrency": 4000, "input_len": 1900, "output_len": 100,
                     "num_prompts": 100_000}])],
    [("benchmark", [{"concurrency": 4000, "input_len": 16, "output_len": 8},   # none says
                    {"concurrency": 1, "input_len": 1900, "output_len": 100}])],
]


@pytest.mark.parametrize("axes", GROWING_AXES)
def test_growing_rules_say_what_each_point_says_in_its_order(compose, axes):
    """MEMORY_KV and BENCH_TOO_LARGE are checked first at the largest values (not always one
    point's); where they say something there, the compile says what a point-by-point pass
    says, line for line and in its order."""
    from specc.compile.matrix import spec_for
    from specc.diagnostics import unique

    cfg = compose(LLAMA)
    engine = get_engine("sglang")
    points = _client_points(cfg, axes)
    each = _points_one_by_one(cfg["benchmark"], axes)
    spec = spec_for({k: cfg[k] for k in ("model_pair", "hardware", "engine", "server",
                                         "speculation", "readiness")})
    checks = [rule(spec, engine) for rule in rules.POINT_RULES]
    got = unique(rules.check_points(spec, engine, points))
    assert got == unique([d for b in each for check in checks for d in check(b)])
    clients = unique(rules.check_clients(engine, points))
    assert clients == unique([d for rule in rules.CLIENT_RULES for b in each
                              for d in rule(None, engine, b)])
    codes = {d.code for d in got + clients}
    if axes is GROWING_AXES[-1]:   # the largest of each key together: no point has them
        largest = points.largest(("concurrency", "input_len", "output_len"))
        assert largest == {"concurrency": 4000, "input_len": 1900, "output_len": 100}
        assert list(rules.memory_kv(spec, engine)(largest))   # said there: checked one by one
        assert not codes & {"MEMORY_KV", "BENCH_TOO_LARGE"}
    else:
        assert codes & {"MEMORY_KV", "BENCH_TOO_LARGE"}
        said = [d for d in got + clients if d.code in ("MEMORY_KV", "BENCH_TOO_LARGE")]
        assert len(said) < len(each)   # some points pass


def test_a_point_without_a_largest_is_checked_one_by_one(compose):
    """Values that are not whole numbers >= 0 have no largest for a growing rule to be
    checked at: every distinct point is checked, and says what it says alone."""
    from specc.compile.matrix import spec_for
    from specc.diagnostics import unique

    cfg = compose(LLAMA + ["benchmark.input_len=1900", "benchmark.output_len=100"])
    points = _client_points(cfg, [("benchmark.concurrency", [1, 4000])])
    assert points.largest(("concurrency", "input_len")) == {"concurrency": 4000,
                                                            "input_len": 1900}
    assert _client_points(cfg, [("benchmark.concurrency", [1, True])]).largest(
        ("concurrency", "input_len")) is None
    points = _client_points(cfg, [("benchmark.concurrency", [1, 4000])])
    points.columns["concurrency"] = [1, 4000.0]   # as no config gives it: a float
    assert points.largest(("input_len", "concurrency")) is None
    spec = spec_for({k: cfg[k] for k in ("model_pair", "hardware", "engine", "server",
                                         "speculation", "readiness")})
    engine = get_engine("sglang")
    said = unique(rules.check_points(spec, engine, points))
    checks = [rule(spec, engine) for rule in rules.POINT_RULES]
    assert said == unique([d for b in points for check in checks for d in check(b)])
    kv = [d for d in said if d.code == "MEMORY_KV"]
    assert len(kv) == 1 and "concurrency 4000.0 x 2000" in kv[0].message


def test_the_estimate_written_out_per_point_is_the_models(compose):
    """The estimate's loop (a wave: prefill + output / rate, written out per point) sums
    exactly what the model's own functions give, point by point in the shapes' order."""
    import math
    from collections import Counter

    from specc.compile import estimate
    from specc.compile.matrix import spec_for
    from specc.perf import model as perf

    cfg = compose(LLAMA + ["benchmark.request_rate=4"])
    engine = get_engine("sglang")
    axes = [("benchmark.concurrency", [1, 3, 64, 100]), ("benchmark.input_len", [4, 100, 1000]),
            ("benchmark.num_prompts", [None, 50, 200]), ("benchmark.request_rate", [None, 4])]
    points = _client_points(cfg, axes)
    shapes = Counter(points.rows(estimate.SHAPE_KEYS))
    for speculative in (False, True):
        sections = {k: cfg[k] for k in ("model_pair", "hardware", "engine", "server",
                                         "speculation", "readiness")}
        if not speculative:
            sections["speculation"] = {k: None for k in sections["speculation"]}
            sections["model_pair"] = {**sections["model_pair"], "draft": None}
        spec = spec_for(sections)
        assert spec.speculative == speculative
        values, tp, gpu, speculation, draft_values = estimate._model_inputs(spec, engine)
        target = perf.model_cost(values, tp=tp, gpu=gpu)
        spec_cfg = perf.SpecConfig(*speculation) if speculation else None
        draft = perf.draft_cost(draft_values, tp=tp, gpu=gpu) if draft_values else None
        terms = []
        for (n, conc, i, o, repeats, rate, ramp_s, dataset, path), count in shapes.items():
            running = min(n, conc)
            wave = target.prefill_s(running * i) + o / perf.tokens_per_s_per_stream(
                target, running, spec_cfg, draft, i + o / 2)
            paced = estimate.arrival_s(n, rate, ramp_s, dataset, path)
            terms.append(count * repeats * (max(math.ceil(n / conc) * wave, paced)
                                            + estimate.POINT_OVERHEAD_S))
        assert estimate._points_seconds(shapes, *estimate._model_inputs(spec, engine)) == sum(terms)
