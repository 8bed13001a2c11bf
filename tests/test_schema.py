"""The JSON Schema: one diagnostic per problem, at the problem's own config path, with a hint."""

from __future__ import annotations

import pytest

from specc.config import schema


def _diags(compose, mutate):
    cfg = compose(["+experiment=llama3_eagle3_pack"])
    mutate(cfg)
    return schema.validate(cfg)


def test_shipped_configs_are_schema_valid(compose):
    for ov in (["+experiment=eagle3_sweep"], ["+experiment=llama3_eagle3_pack", "engine=vllm"],
               ["engine=sim", "speculation=ngram"], ["speculation=none"]):
        assert schema.validate(compose(ov)) == [], ov


@pytest.mark.parametrize("mutate, code, path, hint", [
    (lambda c: c["speculation"].update(bogus=1), "SCHEMA_ADDITIONALPROPERTIES",
     "speculation.bogus", "num_steps"),
    (lambda c: c.update(nope=1), "SCHEMA_ADDITIONALPROPERTIES", "nope", "remove it"),
    (lambda c: c["hardware"].update(tp="abc"), "SCHEMA_TYPE", "hardware.tp", "type"),
    (lambda c: c["hardware"].update(tp=0), "SCHEMA_MINIMUM", "hardware.tp", "range"),
    (lambda c: c["engine"].update(base_port=80), "SCHEMA_MINIMUM", "engine.base_port", "range"),
    (lambda c: c["engine"].update(base_port=70000), "SCHEMA_MAXIMUM", "engine.base_port", "range"),
    (lambda c: c["benchmark"].update(api="grpc"), "SCHEMA_ENUM", "benchmark.api", "'chat'"),
    (lambda c: c["speculation"].update(num_steps=0), "SCHEMA_ANYOF", "speculation.num_steps", "type"),
    (lambda c: c["model_pair"]["target"].pop("path"), "SCHEMA_REQUIRED",
     "model_pair.target.path", "add it"),
    (lambda c: c.update(experiment="bad name!"), "SCHEMA_PATTERN", "experiment", "letters"),
    (lambda c: c["engine"].update(env={"BAD-NAME": "x"}), "SCHEMA_PATTERN", "engine.env",
     "not starting with a digit"),
    (lambda c: c["server"].update(mem_fraction=1.5), "SCHEMA_ANYOF",
     "server.mem_fraction", "type"),
])
def test_one_diagnostic_at_the_offending_path(compose, mutate, code, path, hint):
    found = _diags(compose, mutate)
    assert len(found) == 1, [d.line() for d in found]
    (d,) = found
    assert (d.code, d.path, d.severity) == (code, path, "error")
    assert hint in d.hint
    assert "\n" not in d.line()


def test_several_problems_are_all_reported(compose):
    def bad(c):
        c["hardware"]["tp"] = 0
        c["engine"]["base_port"] = 80
        c["speculation"]["bogus"] = 1
    assert {d.path for d in _diags(compose, bad)} == {"hardware.tp", "engine.base_port",
                                                      "speculation.bogus"}


def test_nullable_number_message_names_the_range(compose):
    (d,) = _diags(compose, lambda c: c["speculation"].update(num_steps=0))
    assert "0" in d.message and "minimum" in d.message


def test_subschema_and_validate_value():
    assert schema.subschema("hardware.tp")["minimum"] == 1
    assert schema.subschema("model_pair.draft.path") is not None     # through the nullable draft
    assert schema.subschema("hardware.nope") is None
    assert schema.subschema("engine.attention_backend", "vllm") is None
    assert schema.subschema("engine.attention_backend")["anyOf"]      # some engine has it
    assert schema.subschema("server.max_running_requests")["anyOf"]
    assert schema.validate_value("hardware.tp", 2) is None
    assert "not of type" in schema.validate_value("hardware.tp", "x")
    assert "swept" in schema.validate_value("nope.x", 1)


# --- one engine schema per engine ------------------------------------------------------

@pytest.mark.parametrize("engine, key, value, knob", [
    ("sglang", "max_num_seqs", 8, "max_running_requests"),
    ("sim", "max_running_requests", 8, "max_running_requests"),
    ("vllm", "max_running_requests", 8, "max_running_requests"),
    ("vllm", "mem_fraction_static", 0.8, "mem_fraction"),
    ("sglang", "gpu_memory_utilization", 0.8, "mem_fraction"),
    ("vllm", "gpu_memory_utilization", 0.8, "mem_fraction"),
    ("sglang", "cuda_graph_max_bs", 8, "cuda_graph_max_bs"),
    ("vllm", "kv_cache_dtype", "fp8", "kv_cache_dtype"),
])
def test_an_engine_spelling_of_a_server_knob_names_the_knob(compose, engine, key, value, knob):
    """Each engine's old key for a knob both engines have is one line naming server.<knob>:
    the knob is said once, so an old key and the knob can never both be set."""
    cfg = compose([f"engine={engine}"])
    cfg["engine"][key] = value
    (d,) = schema.validate(cfg)
    assert (d.code, d.path) == ("SCHEMA_ENGINE_KEY", f"engine.{key}")
    assert f"server.{knob}" in d.message
    assert d.hint == f"use server.{knob}={value}"


@pytest.mark.parametrize("engine, key, value, owner", [
    ("vllm", "attention_backend", "fa3", "sglang / sim"),
    ("sglang", "sim", {"seed": 1}, "sim"),
])
def test_a_key_of_another_engine_names_that_engine(compose, engine, key, value, owner):
    cfg = compose([f"engine={engine}"])
    cfg["engine"][key] = value
    (d,) = schema.validate(cfg)
    assert (d.code, d.path) == ("SCHEMA_ENGINE_KEY", f"engine.{key}")
    assert f"{key} is a {owner}" in d.message
    assert f"{engine} has no equivalent" in d.message
    assert f"engine={owner.split()[0]}" in d.hint


def test_the_server_section_lists_every_knob_and_each_adapter_translates_it(compose):
    from specc.engines import ENGINES

    assert set(compose([])["server"]) == set(schema.SERVER_KNOBS)
    for name, cls in ENGINES.items():
        assert set(cls.server_flags) == set(schema.SERVER_KNOBS), name


def test_an_unknown_engine_key_lists_the_chosen_engines_keys_only(compose):
    cfg = compose(["engine=vllm"])
    cfg["engine"]["bogus"] = 1
    (d,) = schema.validate(cfg)
    assert (d.code, d.path) == ("SCHEMA_ADDITIONALPROPERTIES", "engine.bogus")
    assert d.hint.endswith("env, extra_args, name, python, version")   # vllm's own keys only


def test_two_unknown_keys_are_two_diagnostics(compose):
    cfg = compose([])
    cfg["engine"].update(max_num_seqs=1, bogus=2)
    assert [(d.code, d.path) for d in schema.validate(cfg)] == [
        ("SCHEMA_ADDITIONALPROPERTIES", "engine.bogus"), ("SCHEMA_ENGINE_KEY", "engine.max_num_seqs")]


def test_engine_keys_in_a_sweep_are_checked_against_the_chosen_engine(compose):
    cfg = compose(["engine=vllm"])
    cfg["sweep"] = {"server.max_running_requests": [8, 16]}
    assert schema.validate(cfg) == []
    cfg["sweep"] = {"engine.max_num_seqs": [8, 16]}
    (d,) = schema.validate(cfg)
    assert (d.code, d.path) == ("SCHEMA_ENGINE_KEY", "sweep.engine.max_num_seqs")
    assert d.hint == "sweep server.max_running_requests instead"
    cfg["sweep"] = {"engine": [{"max_running_requests": 8}]}
    assert [d.code for d in schema.validate(cfg)] == ["SCHEMA_ENGINE_KEY"]
    cfg["sweep"] = {"engine.attention_backend": ["fa3"]}
    (d,) = schema.validate(cfg)
    assert "attention_backend is a sglang / sim key" in d.message
    cfg["sweep"] = {"engine.name": ["sglang", "vllm"]}
    (d,) = schema.validate(cfg)
    assert (d.code, d.path) == ("SWEEP_AXIS", "sweep.engine.name") and "-m engine=" in d.hint


def test_overlapping_axes_are_an_error_disjoint_ones_are_not(compose):
    cfg = compose([])
    cfg["sweep"] = {"speculation": [{"num_steps": 1, "topk": 1}],
                    "speculation.num_draft_tokens": [2, 4]}
    assert schema.validate(cfg) == []
    cfg["sweep"]["speculation.topk"] = [2, 4]
    (d,) = schema.validate(cfg)
    assert (d.code, d.path) == ("SWEEP_AXIS", "sweep.speculation.topk")
    assert "overlaps sweep.speculation" in d.message


@pytest.mark.parametrize("host, ok", [
    ("localhost", True), ("node-01.cluster.local", True), ("10.0.0.7", True), ("::1", True),
    ("0.0.0.0", True), ("gpu_node", True), ("bad host", False), ("999.1.1.1", False),
    ("-node", False), ("a..b", False), ("http://x", False), ("x" * 64, False)])
def test_hosts(compose, host, ok):
    cfg = compose([])
    cfg["hardware"]["host"] = host
    cfg["engine"]["bind_host"] = host
    found = schema.validate(cfg)
    assert (found == []) == ok, [d.line() for d in found]
    if not ok:
        assert {(d.code, d.path) for d in found} == {("SCHEMA_FORMAT", "hardware.host"),
                                                     ("SCHEMA_FORMAT", "engine.bind_host")}


@pytest.mark.parametrize("where", [("model_pair", "target", "path"), ("model_pair", "draft", "path"),
                                   ("benchmark", "dataset_path")])
def test_a_path_that_reads_as_a_flag_is_refused(compose, where):
    cfg = compose([])
    node = cfg
    for k in where[:-1]:
        node = node[k]
    node[where[-1]] = "--help"
    (d,) = schema.validate(cfg)
    assert d.code.startswith("SCHEMA_") and d.path == ".".join(where) and "flag" in d.hint


def test_declared_facts_have_ranges(compose):
    cfg = compose([])
    cfg["model_pair"]["target"]["facts"]["max_position_embeddings"] = 10**30
    cfg["model_pair"]["target"]["facts"]["rope_scaling"] = {"type": "linear", "factor": "4"}
    assert {d.path for d in schema.validate(cfg)} == {
        "model_pair.target.facts.max_position_embeddings",
        "model_pair.target.facts.rope_scaling.factor"}


def test_resolve_paths_expands_home_and_makes_local_paths_absolute(compose, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "models" / "llama").mkdir(parents=True)
    cfg = compose([])
    cfg["model_pair"]["target"]["path"] = "~/models/llama"
    cfg["model_pair"]["draft"]["path"] = "org/hub-draft"          # a hub id: left alone
    cfg["benchmark"]["dataset_path"] = "data/p.jsonl"
    cfg["sweep"] = {"model_pair.draft.path": ["models/llama", "org/x"],
                    "benchmark": [{"dataset_path": "~/q.jsonl"}]}
    out = schema.resolve_paths(cfg)
    assert out["model_pair"]["target"]["path"] == str(tmp_path / "models" / "llama")
    assert out["model_pair"]["draft"]["path"] == "org/hub-draft"
    assert out["benchmark"]["dataset_path"] == str(tmp_path / "data" / "p.jsonl")
    assert out["sweep"]["model_pair.draft.path"] == [str(tmp_path / "models" / "llama"), "org/x"]
    assert out["sweep"]["benchmark"] == [{"dataset_path": str(tmp_path / "q.jsonl")}]
    assert cfg["benchmark"]["dataset_path"] == "data/p.jsonl"     # the input is left alone


# --- each default said once --------------------------------------------------------------

def test_keys_a_config_leaves_out_take_the_shipped_defaults(compose):
    """The conf's default options are the one place client, readiness and server defaults are
    said: compile fills what a config leaves out, so the plan holds every value (a config
    without min_requests used to get 4 prompts from a literal in the matrix, not conf's 80)."""
    from specc.compile.pipeline import compile_config

    cfg = compose(["model_pair.context_length=2048", "speculation=none"])
    for key in ("min_requests", "seed", "warmup_requests", "range_ratio", "hf_split",
                "temperature", "ignore_eos", "repeats", "timeout_s"):
        del cfg["benchmark"][key]
    del cfg["readiness"]["probe_timeout_s"]
    del cfg["server"]
    plan = compile_config(cfg).plan
    (bench,) = plan.benchmarks
    shipped = schema.shipped_defaults("benchmark/default.yaml")
    assert shipped["min_requests"] == 80 and bench.params.num_prompts == 80
    for key in ("seed", "warmup_requests", "range_ratio", "hf_split", "temperature",
                "ignore_eos", "repeats", "timeout_s"):
        assert getattr(bench.params, key) == shipped[key], key
    assert plan.servers[0].readiness.probe.timeout_s == \
        schema.shipped_defaults("readiness/default.yaml")["probe_timeout_s"]


def test_changing_a_shipped_default_changes_every_reader(compose, tmp_path, monkeypatch):
    """One source: a default changed in the conf dir reaches the plan, the point runner's
    params and bench_serving's command alike."""
    import shutil

    from specc.compile.pipeline import compile_config
    from specc.config import compose as compose_mod

    conf = tmp_path / "conf"
    shutil.copytree(compose_mod.CONF_DIR, conf)
    path = conf / "benchmark" / "default.yaml"
    path.write_text(path.read_text().replace("warmup_requests: 1", "warmup_requests: 3")
                    .replace("range_ratio: 1.0", "range_ratio: 0.5"))
    monkeypatch.setattr(schema, "CONF_DIR", conf)   # where the shipped defaults are read
    cfg = compose(["model_pair.context_length=2048", "speculation=none",
                   "benchmark.driver=bench_serving", "benchmark.dataset=random"])
    del cfg["benchmark"]["warmup_requests"], cfg["benchmark"]["range_ratio"]
    (bench,) = compile_config(cfg).plan.benchmarks
    assert (bench.params.warmup_requests, bench.params.range_ratio) == (3, 0.5)
    argv = list(bench.argv)
    assert argv[argv.index("--warmup-requests") + 1] == "3"
    assert argv[argv.index("--random-range-ratio") + 1] == "0.5"
