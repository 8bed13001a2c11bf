"""Lowering: matrix expansion, dropped points, servers, baselines, ids, placement, caps."""

from __future__ import annotations

import itertools

import pytest

from specc.compile.pipeline import compile_config
from specc.compile.emit import review
from specc.compile.lower import lower
from specc.compile.matrix import canonical as _canonical

SWEEP = ["+experiment=eagle3_sweep"]
PACK = ["+experiment=llama3_eagle3_pack"]


def _compile(compose, overrides, mutate=None):
    cfg = compose(overrides)
    if mutate:
        mutate(cfg)
    result = compile_config(cfg)
    return result


def test_matrix_is_the_product_minus_dropped(compose):
    cfg = compose(SWEEP)
    result = compile_config(cfg)
    assert result.ok
    plan = result.plan
    sweep = cfg["sweep"]
    n_client = len(sweep["benchmark.concurrency"])
    n_server = len(sweep["speculation.num_steps"]) * len(sweep["speculation.topk"]) \
        * len(sweep["speculation.num_draft_tokens"])
    spec_points = [b for b in plan.benchmarks if b.baseline is not None]
    base_points = [b for b in plan.benchmarks if b.baseline is None]
    assert len(spec_points) + sum(d.points for d in plan.dropped) == n_server * n_client
    assert len(base_points) == n_client
    assert len(plan.servers) == n_server - len(plan.dropped) + 1
    # exactly the points the rules say cannot exist are dropped
    expected = set()
    for steps, topk, ndt in itertools.product(sweep["speculation.num_steps"],
                                              sweep["speculation.topk"],
                                              sweep["speculation.num_draft_tokens"]):
        if (topk == 1 and ndt != steps + 1) or ndt > topk + (steps - 1) * topk ** 2 + 1:
            expected.add((steps, topk, ndt))
    got = {(d.point["speculation.num_steps"], d.point["speculation.topk"],
            d.point["speculation.num_draft_tokens"]) for d in plan.dropped}
    assert got == expected
    assert all(d.code in ("SPEC_TOPK1_DRAFT_TOKENS", "SPEC_DRAFT_TOKENS_LIMIT") and d.reason
               for d in plan.dropped)
    # and the review lists each of them with its reason
    text = review(plan, result.diagnostics, title="t")
    assert f"{len(plan.dropped)} server configuration(s) dropped" in text
    for d in plan.dropped:
        assert d.reason in text


def test_one_server_per_distinct_server_config(compose):
    plan = _compile(compose, SWEEP).plan
    keys = {(tuple(s.argv), tuple(sorted(s.env.items()))) for s in plan.servers}
    assert len(keys) == len(plan.servers)
    assert len({s.id for s in plan.servers}) == len(plan.servers)
    assert len({b.id for b in plan.benchmarks}) == len(plan.benchmarks)
    # client axes do not multiply servers
    for s in plan.servers:
        assert len(plan.benchmarks_of(s.id)) == 4


@pytest.mark.parametrize("overrides", [SWEEP, PACK, PACK + ["engine=sim"], PACK + ["engine=vllm"]])
def test_baselines_are_matched(compose, overrides):
    plan = _compile(compose, overrides).plan
    by_id = {b.id: b for b in plan.benchmarks}
    servers = {s.id: s for s in plan.servers}
    for b in plan.benchmarks:
        s = servers[b.server]
        if s.baseline:
            assert b.baseline is None
            continue
        base = by_id[b.baseline]
        assert servers[base.server].baseline
        assert base.baseline is None
        assert base.params == b.params          # same client params, same served model
        sp, bp = s.params, servers[base.server].params
        for k in ("target", "tp", "dp", "pp", "context_length"):
            assert getattr(sp, k) == getattr(bp, k)
    # baselines first in the plan
    flags = [s.baseline for s in plan.servers]
    assert flags == sorted(flags, reverse=True)


def test_no_baseline_when_disabled(compose):
    result = _compile(compose, SWEEP + ["baseline=false"])
    assert result.ok
    assert all(not s.baseline for s in result.plan.servers)
    assert all(b.baseline is None for b in result.plan.benchmarks)
    assert "NO_BASELINE" in {d.code for d in result.plan.diagnostics}


def _ids(plan):
    return ({s.id for s in plan.servers}, {b.id: b.baseline for b in plan.benchmarks})


def test_ids_are_stable_across_compiles(compose):
    assert _ids(_compile(compose, SWEEP).plan) == _ids(_compile(compose, SWEEP).plan)


def test_ids_do_not_depend_on_sweep_order(compose):
    def reverse(cfg):
        cfg["sweep"] = {k: list(reversed(v)) for k, v in reversed(list(cfg["sweep"].items()))}

    a = _compile(compose, SWEEP).plan
    b = _compile(compose, SWEEP, reverse).plan
    assert _ids(a) == _ids(b)
    for mutate in (None, reverse):
        p = _compile(compose, PACK, mutate).plan
        assert _ids(p) == _ids(_compile(compose, PACK).plan)


def test_ids_name_the_same_resolved_point(compose):
    """A point compiled alone (no sweep) gets the same id as inside the sweep."""
    sweep_plan = _compile(compose, SWEEP).plan

    def single(cfg):
        cfg["sweep"] = {}
        cfg["speculation"].update(num_steps=3, topk=4, num_draft_tokens=8)
        cfg["benchmark"]["concurrency"] = 16

    alone = _compile(compose, SWEEP, single).plan
    assert {b.id for b in alone.benchmarks} <= {b.id for b in sweep_plan.benchmarks}
    assert {s.id for s in alone.servers} <= {s.id for s in sweep_plan.servers}


def test_placement_packs_the_llama_servers(compose):
    plan = _compile(compose, PACK).plan
    assert len(plan.servers) == 8 and len(plan.waves) == 1
    assert sorted(g for s in plan.servers for g in s.gpus) == list(range(8))
    assert all(len(s.gpus) == 1 for s in plan.servers)
    assert sorted(s.port for s in plan.servers) == list(range(31000, 31008))
    for s in plan.servers:
        assert s.env["CUDA_VISIBLE_DEVICES"] == str(s.gpus[0])
        assert s.argv[s.argv.index("--port") + 1] == str(s.port)


@pytest.mark.parametrize("overrides", [SWEEP, PACK, PACK + ["hardware.tp=2"],
                                       PACK + ["hardware.tp=4", "engine=vllm"]])
def test_waves_have_disjoint_gpus_and_ports(compose, overrides):
    plan = _compile(compose, overrides).plan
    for wave in plan.waves:
        gpus = [g for s in wave for g in s.gpus]
        assert len(gpus) == len(set(gpus))
        assert len({s.port for s in wave}) == len(wave)
        assert max(gpus) < 8
    if "hardware.tp=2" in overrides:
        assert [len(w) for w in plan.waves] == [4, 4]


def _sweep(axes):
    def mutate(cfg):
        cfg["sweep"] = axes
    return mutate


@pytest.mark.parametrize("axes, waves", [
    ({"hardware.tp": [1, 8]}, 3),                                   # issue 7, bug 1
    ({"hardware.tp": [1, 2], "hardware.dp": [1, 2]}, 3),            # sizes 1, 2, 2, 4
    ({"hardware.tp": [1, 4, 8], "benchmark.concurrency": [1, 4]}, 4),
])
def test_servers_of_different_sizes_are_placed_by_their_own_size(compose, axes, waves):
    plan = _compile(compose, ["model_pair.context_length=2048"], _sweep(axes)).plan
    for s in plan.servers:
        hw = s.params
        assert len(s.gpus) == hw.tp * hw.dp * hw.pp, s.id
        assert s.env["CUDA_VISIBLE_DEVICES"] == ",".join(map(str, s.gpus))
        assert s.argv[s.argv.index("--port") + 1] == str(s.port)
    for wave in plan.waves:
        gpus = [g for s in wave for g in s.gpus]
        assert len(gpus) == len(set(gpus)) and max(gpus) < 8
        assert len({s.port for s in wave}) == len(wave)
    assert len(plan.waves) == waves
    # the review lists servers in the order their waves start
    table = review(plan, [], title="t").split("## Servers")[1].split("## Launch")[0]
    rows = [ln.split("|")[1].strip() for ln in table.splitlines() if ln.startswith("|")]
    listed = [int(w) for w in rows if w.isdigit()]
    assert listed == sorted(listed) and len(listed) == len(plan.servers)


def test_a_server_larger_than_the_node_is_refused(compose):
    result = _compile(compose, ["model_pair.context_length=2048"],
                      _sweep({"hardware.tp": [1, 8], "hardware.dp": [1, 2]}))
    assert result.plan is None
    assert {(d.code, d.path) for d in result.diagnostics if d.severity == "error"} == {
        ("TOPOLOGY_GPUS", "hardware.tp")}


def test_matrix_too_large(compose):
    cfg = compose(SWEEP + ["max_points=10"])
    n = 1
    for values in cfg["sweep"].values():
        n *= len(values)
    assert n > 10
    result = compile_config(cfg)
    assert not result.ok and result.plan is None
    (d,) = [d for d in result.diagnostics if d.severity == "error"]
    assert d.code == "MATRIX_TOO_LARGE" and d.path == "sweep"
    assert f"{n} points" in d.message and "max_points=" in d.hint
    hinted = int(d.hint.rsplit("max_points=", 1)[1].split()[0])
    assert compile_config(compose(SWEEP + [f"max_points={hinted}"])).ok


def test_a_ten_thousand_point_matrix_is_refused_by_default(compose):
    def big(cfg):
        cfg["sweep"]["benchmark.output_len"] = list(range(1, 251))
    result = _compile(compose, SWEEP, big)
    assert [d.code for d in result.diagnostics] == ["MATRIX_TOO_LARGE"]


@pytest.mark.parametrize("axis, values, message", [
    ("speculation.bogus", [1, 2], "not a config key"),
    ("nosuchsection.x", [1], "cannot be swept"),
    ("experiment", ["a", "b"], "cannot be swept"),
    ("hardware.tp", ["abc", 2], "not of type 'integer'"),
    ("hardware.tp", [0], "less than the minimum"),
    ("benchmark.concurrency", [1, 1], "repeated values"),
    ("speculation", [{"num_steps": "x"}], "x"),
    ("readiness.probe_interval_s", [0.1, 0.5], "cannot be swept"),
])
def test_sweep_axis_errors(compose, axis, values, message):
    def add(cfg):
        cfg["sweep"] = {axis: values}
    result = _compile(compose, ["model_pair.context_length=2048"], add)
    errors = [d for d in result.diagnostics if d.severity == "error"]
    assert errors and all(d.code == "SWEEP_AXIS" for d in errors)
    assert all(d.path.startswith(f"sweep.{axis}") for d in errors)
    assert any(message in d.message for d in errors)
    assert result.plan is None


def test_all_points_dropped_is_an_error(compose):
    def bad(cfg):
        cfg["sweep"] = {"speculation.num_draft_tokens": [7, 9]}
    result = _compile(compose, ["model_pair.context_length=2048"], bad)
    assert [d.code for d in result.diagnostics if d.severity == "error"] == ["MATRIX_EMPTY"]


def test_invalid_point_without_a_speculation_sweep_fails_the_plan(compose):
    result = _compile(compose, ["model_pair.context_length=2048", "speculation.num_draft_tokens=8"])
    assert not result.ok
    assert "SPEC_TOPK1_DRAFT_TOKENS" in {d.code for d in result.diagnostics}


def test_lower_is_pure(compose):
    cfg = compose(PACK)
    before = _canonical(cfg)
    lower(cfg)
    assert _canonical(cfg) == before


def test_benchmark_ids_hash_the_server_and_the_client_point(compose):
    """bid = <server id>-c<concurrency>-sha256([sid, canonical(client point)])[:6]."""
    from specc.compile.lower import _hash

    plan = _compile(compose, PACK).plan
    for b in plan.benchmarks:
        # the client point: what the engine adds (model, request ids, counters) is not part of it
        point = {k: v for k, v in b.params.to_json().items()
                 if k not in ("model", "request_id_field", "accept_positions")}
        assert b.id == f"{b.server}-c{point['concurrency']}-{_hash([b.server, _canonical(point)])}"


def test_vllm_settings_that_launch_one_server_are_measured_once(compose):
    """vLLM has no tree: in the pack, 7 labelled EAGLE-3 settings are 4 distinct servers."""
    result = _compile(compose, PACK + ["engine=vllm"])
    assert result.ok, result.diagnostics
    plan = result.plan
    commands = [(tuple(s.argv[:s.argv.index("--host")]) + tuple(s.argv[s.argv.index("--port") + 2:]),
                 tuple(sorted((k, v) for k, v in s.env.items() if k != "CUDA_VISIBLE_DEVICES")))
                for s in plan.servers]
    assert len(commands) == len(set(commands)) == 5          # baseline + 4 distinct chains
    merged = [d for d in plan.dropped if d.code == "ENGINE_SAME_SERVER"]
    assert len(merged) == 3 and all("measured once" in d.reason for d in merged)
    assert any(d.code == "ENGINE_SAME_SERVER" and d.severity == "warning"
               for d in result.diagnostics)
    # SGLang runs all seven: nothing merged there
    assert not [d for d in _compile(compose, PACK).plan.dropped if d.code == "ENGINE_SAME_SERVER"]


def test_vllm_flush_cache_sets_dev_mode_and_says_so(compose):
    result = _compile(compose, PACK + ["engine=vllm"])
    assert all(s.env.get("VLLM_SERVER_DEV_MODE") == "1" for s in result.plan.servers)
    assert any(d.code == "ENGINE_FLUSH_ENV" for d in result.diagnostics)
    plan = _compile(compose, PACK + ["engine=vllm", "benchmark.flush_cache=false"]).plan
    assert not any("VLLM_SERVER_DEV_MODE" in s.env for s in plan.servers)


def test_the_headline_pair_compiles_on_vllm_0_33(compose):
    result = _compile(compose, SWEEP + ["engine=vllm"])
    assert result.ok, [d.line() for d in result.diagnostics if d.severity == "error"]
    result = _compile(compose, SWEEP + ["engine=vllm", "engine.version=0.16.0"])
    assert not result.ok
    assert any(d.code == "ENGINE_TARGET_UNSUPPORTED" for d in result.diagnostics)


def test_plan_records_the_engine_version(compose):
    plan = _compile(compose, SWEEP).plan
    assert plan.engine_info.version == plan.engine_info.pinned_version == "0.5.23"
    assert "--cuda-graph-max-bs-decode" in _compile(
        compose, SWEEP + ["server.cuda_graph_max_bs=64"]).plan.servers[0].argv
    old = _compile(compose, SWEEP + ["engine.version=0.5.9", "server.cuda_graph_max_bs=64"]).plan
    assert old.engine_info.version == "0.5.9" and "--cuda-graph-max-bs" in old.servers[0].argv
    names = [p.name for p in old.servers[1].readiness.phases]
    assert names.index("load_draft_weights") > names.index("capture_cuda_graph")
    vllm = _compile(compose, SWEEP + ["engine=vllm"]).plan
    assert vllm.engine_info.version == "0.33.0"


def test_an_unverified_engine_version_is_a_warning_and_a_bad_one_an_error(compose):
    result = _compile(compose, SWEEP + ["engine.version=0.5.30"])
    assert result.ok
    (d,) = [d for d in result.diagnostics if d.code == "ENGINE_VERSION_UNVERIFIED"]
    assert d.path == "engine.version" and "0.5.23" in d.hint
    result = _compile(compose, SWEEP + ["engine.version=latest"])
    assert not result.ok
    (d,) = [d for d in result.diagnostics if d.path == "engine.version"]
    assert "0.5.23" in d.hint


def test_wall_time_estimate_uses_the_hardware_gpu_calibration(compose):
    """The review's estimate reads the calibration of hardware.gpu: the derived H100 (less
    HBM bandwidth) estimates a longer sweep than the measured H200, and says which it used."""
    h200 = _compile(compose, PACK + ["hardware=h200x8", "hardware.tp=1"]).plan.estimates
    h100 = _compile(compose, PACK + ["hardware=h100x8", "hardware.tp=1"]).plan.estimates
    assert "H200 calibration measured" in h200.note
    assert "H100 calibration derived" in h100.note
    assert h100.wall_s > h200.wall_s


def test_a_sweep_over_lengths_reads_the_prompt_set_once(compose, monkeypatch):
    """The prompt-set check ran per point with the point's output_len as the cache key: a
    sweep over 100 lengths parsed the shipped set 12,000 times (4 s at 10^4 points)."""
    from specc.prompts import promptsets

    promptsets._load_cached.cache_clear()
    parsed = []
    rows_to_prompts = promptsets._rows_to_prompts
    monkeypatch.setattr(promptsets, "_rows_to_prompts",
                        lambda *a, **k: parsed.append(1) or rows_to_prompts(*a, **k))
    cfg = compose(["+experiment=llama3_eagle3_pack", "benchmark.dataset=specc"])
    cfg["max_points"] = 10_000
    cfg["sweep"] = {"speculation": cfg["sweep"]["speculation"][:2],
                    "benchmark.output_len": list(range(8, 808, 8))}
    result = compile_config(cfg)
    assert result.ok, [d.line() for d in result.diagnostics if d.severity == "error"]
    assert len(result.plan.benchmarks) == 300
    assert len(parsed) <= 1


def test_the_plan_records_the_api_key_its_clients_send_as_a_reference(compose):
    """Run reads the key from the plan (the adapter found it in the command at compile time),
    never by parsing an engine's flags; a secret stays a `${NAME}` reference in plan.json."""
    key = "sk-" + "a1" * 20
    plan = _compile(compose, SWEEP + ["engine=sim", f"engine.extra_args=[--api-key,{key}]"]).plan
    assert {s.api_key for s in plan.servers} == {"${API_KEY}"}
    assert key not in plan.dumps()
    plain = _compile(compose, SWEEP + ["engine=sim"]).plan
    assert {s.api_key for s in plain.servers} == {None}
    assert '"api_key"' not in plain.dumps()   # left out of plan.json when there is none
