"""Each semantic rule in specc/rules.py with a violating and a passing config; model facts."""

from __future__ import annotations

import re
import json

import pytest

from specc import facts as facts_mod
from specc.compile import rules
from specc.compile.pipeline import compile_config
from specc.engines import get_engine
from specc.engines.sglang import derived_context_length
from specc.compile.matrix import SERVER_SECTIONS, spec_for as _spec_for

LLAMA = ["model_pair.context_length=2048"]           # the llama pair needs this to be valid
KIMI = ["model_pair=kimi_k25_eagle3"]


def _spec(cfg):
    return _spec_for({k: cfg[k] for k in SERVER_SECTIONS})


def server_diags(compose, overrides, rule=None):
    cfg = compose(overrides)
    engine = get_engine(cfg["engine"]["name"], cfg["engine"].get("version"))
    spec = _spec(cfg)
    if rule is None:
        return rules.check_server(spec, engine)
    return list(rule(spec, engine))


def point_diags(compose, overrides, rule, **bench):
    cfg = compose(overrides)
    engine = get_engine(cfg["engine"]["name"], cfg["engine"].get("version"))
    bench = {**cfg["benchmark"], **bench}
    if rule in rules.POINT_RULES:   # worked out per server, then applied per point
        return list(rule(_spec(cfg), engine)(bench))
    return list(rule(_spec(cfg), engine, bench))


def codes(diags):
    return {d.code for d in diags}


def test_every_rule_is_covered_here():
    covered = {"model_path", "facts_dropped", "facts_valid", "facts_present", "draft_context", "served_context", "spec_params_all_or_none",
               "spec_tokens_required", "spec_algorithm_knobs", "topk1_draft_tokens", "draft_tokens_limit",
               "draft_architecture", "draft_shapes", "topology", "readiness_probe",
               "readiness_budgets", "readiness_deadline", "memory_weights", "running_requests", "memory_kv",
               "lengths_fit_context", "point_size", "dataset_file", "engine_version",
               "cache_flush", "engine_tree_knobs", "sample_size",
               "dataset_fits_context", "ngram_knobs",   # tests/test_dataset_check.py
               "arrivals",               # tests/test_arrivals.py
               "arrival_bounds", "arrival_span", "trace_gaps"}   # tests/test_trust_round3.py
    assert {r.__name__ for r in rules.SERVER_RULES + rules.POINT_RULES + rules.CLIENT_RULES} == covered


def test_ngram_topk_and_steps_are_sglangs_own(compose):
    """0.5.23 replaces NGRAM's topk and num_steps (tests/drift resolves it): not passed, said."""
    from specc.compile.pipeline import compile_config

    ov = LLAMA + ["speculation=ngram", "speculation.topk=4", "model_pair.context_length=2048"]
    diags = server_diags(compose, ov)
    assert [d.code for d in diags if d.code == "SPEC_NGRAM_KNOBS"] == ["SPEC_NGRAM_KNOBS"]
    plan = compile_config(compose(ov)).plan
    argv = [a for s in plan.servers for a in s.argv]
    assert "--speculative-eagle-topk" not in argv and "--speculative-num-steps" not in argv
    assert "--speculative-num-draft-tokens" in argv
    assert not [d for d in server_diags(compose, LLAMA + ["speculation=ngram"])
                if d.code == "SPEC_NGRAM_KNOBS"]


def test_default_configs_pass_every_server_rule(compose):
    for ov in (LLAMA, KIMI, KIMI + ["engine=sim"], LLAMA + ["engine=vllm"]):
        assert [d for d in server_diags(compose, ov) if d.severity == "error"] == [], ov


# --- facts_present --------------------------------------------------------------------

def test_facts_missing(compose):
    ov = LLAMA + ["model_pair.target.path=org/unknown-model", "~model_pair.target.facts"]
    found = server_diags(compose, ov, rules.facts_present)
    paths = {d.path for d in found if d.code == "FACTS_MISSING"}
    assert "model_pair.target.facts.max_position_embeddings" in paths
    assert "model_pair.target.facts.weight_gb" in paths
    assert all("org/unknown-model is a hub id" in d.message for d in found)
    assert all("declare model_pair.target.facts." in d.hint for d in found)
    assert server_diags(compose, LLAMA, rules.facts_present) == []


# --- model_path ---------------------------------------------------------------------------

def test_model_path_must_exist_and_hold_a_config_json(compose, tmp_path):
    (d,) = server_diags(compose, LLAMA + ["model_pair.target.path=/nonexistent/model"],
                        rules.model_path)
    assert (d.code, d.severity, d.path) == ("MODEL_PATH", "error", "model_pair.target.path")
    assert "/nonexistent/model does not exist" in d.message and "model directory" in d.hint
    (tmp_path / "empty").mkdir()
    (d,) = server_diags(compose, LLAMA + [f"model_pair.draft.path={tmp_path / 'empty'}"],
                        rules.model_path)
    assert d.path == "model_pair.draft.path" and "holds no config.json" in d.message
    # only MODEL_PATH: the other rules would judge a model that is not there
    assert codes(server_diags(compose, LLAMA + ["model_pair.target.path=/nonexistent/model"])) \
        == {"MODEL_PATH"}
    # a hub id is not checked (the engine fetches it); a model directory passes
    assert server_diags(compose, LLAMA + ["model_pair.target.path=org/not-on-this-machine"],
                        rules.model_path) == []
    model = _model_dir(tmp_path, "llama", _LLAMA_CONFIG)
    assert server_diags(compose, LLAMA + [f"model_pair.target.path={model}"],
                        rules.model_path) == []
    # the baseline loads no draft: a bad draft path is not its problem
    assert server_diags(compose, LLAMA + ["speculation=none", "model_pair.draft.path=/nope"],
                        rules.model_path) == []


def test_model_path_exits_2_in_one_line_and_writes_nothing(run_specc, tmp_path):
    for engine in ("sglang", "sim"):
        code, out, err = run_specc(["+experiment=eagle3_sweep", f"engine={engine}",
                                    "model_pair.target.path=/nonexistent"], tmp_path)
        assert code == 2, err
        (line,) = [ln for ln in (out + err).splitlines() if ln.startswith("error ")]
        assert line.startswith("error MODEL_PATH at model_pair.target.path: /nonexistent ")
        assert "(fix: " in line
        assert not (tmp_path / "run").exists()


# --- facts_dropped ------------------------------------------------------------------------

def test_facts_dropped_when_the_path_is_another_model(compose, tmp_path):
    model = _model_dir(tmp_path, "llama", _LLAMA_CONFIG)
    (d,) = server_diags(compose, KIMI + [f"model_pair.target.path={model}"], rules.facts_dropped)
    assert (d.code, d.severity, d.path) == ("FACTS_DROPPED", "info", "model_pair.target.facts")
    assert "moonshotai/Kimi-K2.5" in d.message and str(model) in d.message
    assert server_diags(compose, KIMI, rules.facts_dropped) == []
    # the missing weight size is asked of the new model, never taken from Kimi's
    found = server_diags(compose, KIMI + [f"model_pair.target.path={model}"], rules.facts_present)
    (missing,) = [m for m in found if m.path == "model_pair.target.facts.weight_gb"]
    assert "describe moonshotai/Kimi-K2.5" in missing.message
    assert "your own model pair" in missing.hint


def test_facts_for_is_required_with_facts(compose):
    from specc.compile.pipeline import compile_config

    result = compile_config(compose(LLAMA + ["model_pair.target.facts_for=null"]))
    (d,) = [d for d in result.diagnostics if d.severity == "error"]
    assert (d.code, d.path) == ("FACTS_FOR", "model_pair.target.facts_for")
    assert "facts_for: meta-llama/Llama-3.1-8B-Instruct" in d.hint
    assert compile_config(compose(LLAMA + ["model_pair.target.facts_for=null",
                                           "~model_pair.target.facts",
                                           "speculation=none"])).diagnostics[0].code != "FACTS_FOR"


def test_a_llama_config_json_as_target_shows_no_kimi_fact(run_specc, tmp_path):
    """Issue 27: a Llama-8B pair's config.json files under the Kimi experiment were sized
    with Kimi's 554 GB and 1000 B parameters, merged silently into the review."""
    import shutil
    from pathlib import Path

    models = Path(__file__).resolve().parent / "drift" / "models"
    target, draft = tmp_path / "llama", tmp_path / "eagle3"
    shutil.copytree(models / "llama3.1-8b-instruct", target)
    shutil.copytree(models / "eagle3-llama3.1-instruct-8b", draft)
    (target / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": 16_060_522_496}, "weight_map": {}}))
    code, out, err = run_specc(["+experiment=eagle3_sweep", f"model_pair.target.path={target}",
                                f"model_pair.draft.path={draft}", "model_pair.name=llama-local",
                                "model_pair.context_length=2048"], tmp_path)
    assert code == 0, err
    review = (tmp_path / "run" / "review.md").read_text()
    section = review[review.index("## Model facts"):]
    # the Kimi pair is named only where the review says its facts are not used
    said = [ln for ln in review.splitlines() if "moonshotai" in ln or "AQ-MedAI" in ln]
    assert said and all("describe" in ln and "none of them is used" in ln for ln in said), said
    for kimi in ("554", "1000", "DeepseekV3", "163840", "7168", "262144", "total_params_b",
                 "kv_lora_rank"):
        assert not re.search(rf"(?<![\w.]){kimi}(?![\w.])", review), kimi   # a word, not 31000
    assert "FACTS_DROPPED at model_pair.target.facts" in review
    assert "FACTS_DROPPED at model_pair.draft.facts" in review
    # target and draft side by side, each fact with its file
    header = next(ln for ln in section.splitlines() if ln.startswith("| fact"))
    assert [c.strip() for c in header.strip("|").split("|")] == \
        ["fact", "target", "source", "draft", "source"]
    row = next(ln for ln in section.splitlines() if ln.startswith("| max_position_embeddings"))
    assert "131072" in row and "2048" in row
    assert f"config.json at {target}" in row and f"config.json at {draft}" in row
    assert f"model.safetensors.index.json at {target}" in section


def test_facts_missing_draft_model(compose):
    found = server_diags(compose, LLAMA + ["model_pair.draft=null"], rules.facts_present)
    assert "SPEC_DRAFT_MISSING" in codes(found)
    assert server_diags(compose, LLAMA + ["model_pair.draft=null", "speculation=ngram"],
                        rules.facts_present) == []


# --- draft_context / served_context ----------------------------------------------------

def test_draft_context_shorter_is_an_error_on_sglang(compose):
    found = server_diags(compose, ["model_pair=kimi_k25_eagle3_short_draft"], rules.draft_context)
    (d,) = found
    assert (d.code, d.severity) == ("CONTEXT_DRAFT_SHORTER", "error")
    assert "262144" in d.message and "131072" in d.message
    assert "model_pair.context_length=131072" in d.hint
    assert "draft_context_override=true" in d.hint
    assert "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN" in d.hint
    ok = ["model_pair=kimi_k25_eagle3_short_draft", "model_pair.context_length=131072"]
    assert server_diags(compose, ok, rules.draft_context) == []


def test_draft_context_override_is_a_warning_and_sets_the_env(compose):
    ov = ["model_pair=kimi_k25_eagle3_short_draft", "model_pair.draft_context_override=true"]
    (d,) = server_diags(compose, ov, rules.draft_context)
    assert (d.code, d.severity) == ("CONTEXT_DRAFT_OVERRIDE", "warning")
    result = compile_config(compose(ov))
    assert result.ok
    spec_servers = [s for s in result.plan.servers if not s.baseline]
    assert spec_servers and all(
        s.env.get("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN") == "1" for s in spec_servers)
    assert all("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN" not in s.env
               for s in result.plan.servers if s.baseline)
    # without the opt-in the env var is never set
    plain = compile_config(compose(KIMI))
    assert all("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN" not in s.env for s in plain.plan.servers)


def test_vllm_raises_a_short_drafts_positions_with_a_warning(compose):
    # vLLM 0.33 raises the draft's max_position_embeddings to the target's (no rope scaling)
    (d,) = server_diags(compose, ["engine=vllm"], rules.draft_context)
    assert (d.code, d.severity) == ("CONTEXT_DRAFT_RAISED", "warning")
    assert "raises the draft's max_position_embeddings from 2048" in d.message
    assert "model_pair.context_length=2048" in d.hint
    assert server_diags(compose, ["engine=vllm"] + LLAMA, rules.draft_context) == []


def test_vllm_lowers_the_targets_length_for_a_yarn_draft(compose):
    ov = ["engine=vllm", "+model_pair.draft.facts.rope_scaling={type: yarn, factor: 4}"]
    (d,) = server_diags(compose, ov, rules.draft_context)
    assert d.code == "CONTEXT_TARGET_LOWERED" and "lowers the served max_model_len" in d.message


def test_served_context(compose):
    (d,) = server_diags(compose, KIMI + ["model_pair.context_length=300000"], rules.served_context)
    assert d.code == "CONTEXT_TARGET_EXCEEDED" and d.path == "model_pair.context_length"
    assert server_diags(compose, KIMI + ["model_pair.context_length=262144"],
                        rules.served_context) == []


# --- speculation knobs ---------------------------------------------------------------

def test_spec_tokens_required_on_an_engine_without_defaults(compose):
    """vLLM 0.33 picks no number of speculative tokens (it raises without one): no row may be
    labelled "engine defaults" there; SGLang picks per architecture and says so."""
    none = ["speculation.num_steps=null", "speculation.topk=null", "speculation.num_draft_tokens=null"]
    (d,) = server_diags(compose, LLAMA + ["engine=vllm"] + none, rules.spec_tokens_required)
    assert (d.code, d.severity, d.path) == ("SPEC_TOKENS_REQUIRED", "error", "speculation.num_steps")
    assert "vllm 0.33.0" in d.message and "num_steps" in d.hint
    assert server_diags(compose, LLAMA + ["engine=vllm"] + none, rules.spec_params_all_or_none) == []
    assert server_diags(compose, LLAMA + none, rules.spec_tokens_required) == []       # SGLang
    assert server_diags(compose, LLAMA + ["engine=vllm"], rules.spec_tokens_required) == []
    assert server_diags(compose, LLAMA + ["engine=vllm", "speculation=ngram"],
                        rules.spec_tokens_required) == []                     # 8 draft tokens: 7


def test_spec_tokens_required_exits_2_in_one_line(run_specc, tmp_path):
    code, out, err = run_specc(["engine=vllm", "speculation.num_steps=null", "speculation.topk=null",
                                "speculation.num_draft_tokens=null", "model_pair.context_length=2048"],
                               tmp_path)
    assert code == 2
    lines = [ln for ln in (out + err).splitlines() if ln.startswith("error ")]
    assert lines == [ln for ln in lines if "SPEC_TOKENS_REQUIRED at speculation.num_steps" in ln] != []
    assert not (tmp_path / "run" / "plan.json").exists()


def test_spec_params_all_or_none(compose):
    (d,) = server_diags(compose, LLAMA + ["speculation.topk=null"], rules.spec_params_all_or_none)
    assert (d.code, d.path) == ("SPEC_PARAMS_ALL_OR_NONE", "speculation.topk")
    none = ["speculation.topk=null", "speculation.num_steps=null", "speculation.num_draft_tokens=null"]
    (d,) = server_diags(compose, LLAMA + none, rules.spec_params_all_or_none)
    assert (d.code, d.severity) == ("SPEC_ENGINE_DEFAULTS", "info")
    assert server_diags(compose, LLAMA, rules.spec_params_all_or_none) == []


def test_spec_algorithm_knobs(compose):
    (d,) = server_diags(compose, LLAMA + ["speculation.algorithm=null"], rules.spec_algorithm_knobs)
    assert d.code == "SPEC_ALGORITHM_KNOBS"
    assert server_diags(compose, LLAMA + ["speculation=none"], rules.spec_algorithm_knobs) == []


def test_topk1_draft_tokens(compose):
    ov = LLAMA + ["speculation.topk=1", "speculation.num_draft_tokens=8"]
    (d,) = server_diags(compose, ov, rules.topk1_draft_tokens)
    assert d.code == "SPEC_TOPK1_DRAFT_TOKENS" and "num_draft_tokens=4" in d.hint
    assert server_diags(compose, LLAMA + ["speculation.topk=1", "speculation.num_draft_tokens=4"],
                        rules.topk1_draft_tokens) == []
    # vLLM does not rewrite
    assert server_diags(compose, ov + ["engine=vllm"], rules.topk1_draft_tokens) == []


def _triple(steps, topk, ndt):
    return [f"speculation.num_steps={steps}", f"speculation.topk={topk}",
            f"speculation.num_draft_tokens={ndt}"]


def test_draft_tokens_limit(compose):
    # SGLang's tree: topk + (num_steps - 1) * topk^2 + 1 = 2 + 4 + 1 = 7
    (d,) = server_diags(compose, LLAMA + _triple(2, 2, 8), rules.draft_tokens_limit)
    assert d.code == "SPEC_DRAFT_TOKENS_LIMIT" and "<= 7" in d.hint
    for valid in ((2, 2, 6), (2, 2, 7), (3, 4, 16), (1, 4, 5)):   # (2, 2, 6) was dropped before
        assert server_diags(compose, LLAMA + _triple(*valid), rules.draft_tokens_limit) == [], valid
    (d,) = server_diags(compose, LLAMA + _triple(1, 4, 6), rules.draft_tokens_limit)
    assert "<= 5" in d.hint
    # vLLM has no tree: no bound, but the ignored knobs are said
    assert server_diags(compose, LLAMA + ["engine=vllm"] + _triple(2, 2, 8),
                        rules.draft_tokens_limit) == []


def test_engine_tree_knobs(compose):
    (d,) = server_diags(compose, LLAMA + ["engine=vllm"] + _triple(3, 4, 8), rules.engine_tree_knobs)
    assert (d.code, d.severity) == ("ENGINE_NO_TREE", "warning")
    assert "num_speculative_tokens=3" in d.message
    assert server_diags(compose, LLAMA + ["engine=vllm"] + _triple(3, 1, 4),
                        rules.engine_tree_knobs) == []
    assert server_diags(compose, LLAMA + _triple(3, 4, 8), rules.engine_tree_knobs) == []
    # topk alone, no number of tokens to draft: SPEC_TOKENS_REQUIRED's error, not a TypeError
    assert server_diags(compose, LLAMA + ["engine=vllm"] + _triple("null", 4, "null"),
                        rules.engine_tree_knobs) == []
    codes = {d.code for d in server_diags(compose, LLAMA + ["engine=vllm"] + _triple("null", 4, "null"))}
    assert "SPEC_TOKENS_REQUIRED" in codes, codes


def test_draft_architecture(compose):
    (d,) = server_diags(compose, LLAMA + ["speculation=eagle"], rules.draft_architecture)
    assert d.code == "SPEC_DRAFT_ARCH" and "speculation=eagle3" in d.hint
    assert server_diags(compose, LLAMA, rules.draft_architecture) == []
    # vLLM 0.33 has no EAGLE-3 target allow-list: the headline pair is accepted
    assert server_diags(compose, KIMI + ["engine=vllm"], rules.draft_architecture) == []
    # releases before 0.17.0 refused a DeepSeek-V3 target
    (d,) = server_diags(compose, KIMI + ["engine=vllm", "engine.version=0.16.0"],
                        rules.draft_architecture)
    assert d.code == "ENGINE_TARGET_UNSUPPORTED" and "vllm 0.16.0" in d.message
    assert server_diags(compose, LLAMA + ["engine=vllm", "engine.version=0.16.0"],
                        rules.draft_architecture) == []


def test_draft_shapes(compose):
    (d,) = server_diags(compose, LLAMA + ["model_pair.draft.facts.vocab_size=32000"],
                        rules.draft_shapes)
    assert d.code == "SPEC_VOCAB_MISMATCH"
    (d,) = server_diags(compose, LLAMA + ["model_pair.draft.facts.hidden_size=7168"],
                        rules.draft_shapes)
    assert d.code == "SPEC_HIDDEN_MISMATCH"
    assert server_diags(compose, LLAMA, rules.draft_shapes) == []


# --- topology, readiness, memory -----------------------------------------------------

@pytest.mark.parametrize("overrides, code, path", [
    (["hardware.tp=3"], "TOPOLOGY_HEADS", "hardware.tp"),
    (["hardware.tp=8", "hardware.dp=2"], "TOPOLOGY_GPUS", "hardware.tp"),
    (["hardware.tp=8", "hardware.dp=2", "hardware.nodes=2"], "TOPOLOGY_MULTINODE", "hardware.tp"),
    (["hardware.tp=4", "hardware.nodes=2"], "TOPOLOGY_MULTINODE", "hardware.nodes"),
    (["hardware.tp=4", "hardware.pp=2"], "TOPOLOGY_PP_SPEC", "hardware.pp"),
])
def test_topology_violations(compose, overrides, code, path):
    found = server_diags(compose, LLAMA + overrides, rules.topology)
    assert (code, path) in {(d.code, d.path) for d in found}


def test_pipeline_parallel_speculation_as_each_sglang_release_serves_it(compose):
    """0.5.23 serves PP with EAGLE (SGLANG_ENABLE_PP_SPEC=1, which specc sets), refuses EAGLE3
    with its launch assertion; releases before it refuse any speculation with pp > 1."""
    pp = LLAMA + ["hardware.tp=4", "hardware.pp=2"]
    eagle = pp + ["speculation=eagle", "model_pair.draft.facts.architecture=LlamaForCausalLMEagle"]
    assert server_diags(compose, eagle, rules.topology) == []
    cfg = compose(eagle)
    env, _ = get_engine("sglang").env(_spec(cfg), [0, 1, 2, 3, 4, 5, 6, 7])
    assert env["SGLANG_ENABLE_PP_SPEC"] == "1"
    (d,) = server_diags(compose, pp, rules.topology)            # eagle3
    assert (d.code, d.path) == ("TOPOLOGY_PP_SPEC", "hardware.pp")
    assert "refuses EAGLE3 with pipeline parallelism" in d.message
    assert "only supports EAGLE (non-multi-layer)" in d.message and "speculation=eagle" in d.hint
    (d,) = server_diags(compose, eagle + ["engine.version=0.5.13"], rules.topology)
    assert d.code == "TOPOLOGY_PP_SPEC" and "sglang 0.5.13 refuses speculative" in d.message
    env, _ = get_engine("sglang").env(_spec(compose(pp + ["speculation=none"])), [0, 1])
    assert "SGLANG_ENABLE_PP_SPEC" not in env


def test_topology_passes(compose):
    for tp in (1, 2, 4, 8):
        assert server_diags(compose, LLAMA + [f"hardware.tp={tp}"], rules.topology) == []
    assert server_diags(compose, LLAMA + ["hardware.tp=4", "hardware.pp=2", "speculation=none"],
                        rules.topology) == []


def test_readiness_probe(compose):
    (d,) = server_diags(compose, LLAMA + ["readiness.probe_timeout_s=3"], rules.readiness_probe)
    assert d.code == "READINESS_PROBE_TIMEOUT" and "20" in d.message
    assert server_diags(compose, LLAMA + ["readiness.probe_timeout_s=25"], rules.readiness_probe) == []
    # vLLM's /health answers at once: a 5 s timeout is fine there
    assert server_diags(compose, ["engine=vllm", "readiness.probe_timeout_s=5"],
                        rules.readiness_probe) == []


def test_readiness_budgets_name_the_engines_phases(compose):
    vllm = LLAMA + ["engine=vllm"]
    assert server_diags(compose, vllm + ["+readiness.phase_budgets_s.compile=1800"],
                        rules.readiness_budgets) == []
    (d,) = server_diags(compose, LLAMA + ["+readiness.phase_budgets_s.compile=1800"],
                        rules.readiness_budgets)          # SGLang has no compile phase
    assert (d.code, d.path) == ("READINESS_PHASE_UNKNOWN", "readiness.phase_budgets_s.compile")
    assert "load_weights" in d.hint


def test_readiness_deadline(compose):
    (d,) = server_diags(compose, KIMI + ["readiness.deadline_s=10"], rules.readiness_deadline)
    assert d.code == "READINESS_DEADLINE"
    assert server_diags(compose, KIMI + ["readiness.deadline_s=3600"], rules.readiness_deadline) == []
    assert server_diags(compose, KIMI, rules.readiness_deadline) == []   # null: sum of budgets


def test_memory_weights(compose):
    ov = KIMI + ["hardware=h100x8", "hardware.tp=2"]
    found = server_diags(compose, ov, rules.memory_weights)
    assert [d.code for d in found] == ["MEMORY_WEIGHTS"]
    assert server_diags(compose, KIMI, rules.memory_weights) == []   # h200x8, tp 8
    assert server_diags(compose, KIMI + ["hardware=h100x8", "server.mem_fraction=0.9"],
                        rules.memory_weights) == []


def test_memory_weights_of_a_baseline_exclude_the_draft(compose):
    """A non-speculative server loads no draft: its weights must not count the draft's."""
    found = server_diags(compose, KIMI + ["hardware=h100x8", "hardware.tp=2", "speculation=none"],
                         rules.memory_weights)
    assert "277.0 GB" in found[0].message


def test_running_requests(compose):
    (d,) = point_diags(compose, LLAMA, rules.running_requests, concurrency=64)
    assert (d.code, d.severity, d.path) == ("RUNNING_REQUESTS_CAP", "warning",
                                            "server.max_running_requests")
    assert "48" in d.message
    assert point_diags(compose, LLAMA, rules.running_requests, concurrency=48) == []
    assert point_diags(compose, LLAMA + ["server.max_running_requests=64"], rules.running_requests,
                       concurrency=64) == []
    # vLLM's --max-num-seqs default: 1024 on H100/H200-class GPUs, 256 elsewhere
    assert point_diags(compose, LLAMA + ["engine=vllm"], rules.running_requests, concurrency=300) == []
    (d,) = point_diags(compose, LLAMA + ["engine=vllm"], rules.running_requests, concurrency=1100)
    assert d.path == "server.max_running_requests" and "1024" in d.message
    assert d.hint == "set server.max_running_requests=1100"   # the same knob on every engine
    (d,) = point_diags(compose, LLAMA + ["engine=vllm", "hardware=h100x8"], rules.running_requests,
                       concurrency=1100)
    assert "1024" in d.message
    (d,) = point_diags(compose, LLAMA + ["engine=vllm", "hardware.gpu=A100",
                                         "hardware.gpu_memory_gb=80"], rules.running_requests,
                       concurrency=300)
    assert "256" in d.message
    (d,) = point_diags(compose, LLAMA + ["server.cuda_graph_max_bs=8"], rules.running_requests,
                       concurrency=16)
    assert d.code == "CUDA_GRAPH_BS"


def test_memory_kv(compose):
    (d,) = point_diags(compose, KIMI, rules.memory_kv, concurrency=2000, input_len=8192,
                       output_len=8192)
    assert d.code == "MEMORY_KV" and d.path == "benchmark.concurrency"
    assert point_diags(compose, KIMI, rules.memory_kv, concurrency=16) == []


def test_memory_kv_on_vllm_uses_the_releases_own_default_fraction(compose):
    """No server.mem_fraction: vLLM runs at 0.33.0's default 0.92 (not specc's old 0.9), and
    the estimate says so; a configured fraction is the one used."""
    (d,) = point_diags(compose, KIMI + ["engine=vllm"], rules.memory_kv, concurrency=2000,
                       input_len=8192, output_len=8192)
    assert f"> {141 * 0.92:.1f} GB per GPU" in d.message
    assert "vLLM 0.33.0's default --gpu-memory-utilization (vllm/config/cache.py)" in d.message
    (d,) = point_diags(compose, KIMI + ["engine=vllm", "server.mem_fraction=0.8"], rules.memory_kv,
                       concurrency=2000, input_len=8192, output_len=8192)
    assert f"> {141 * 0.8:.1f} GB per GPU (server.mem_fraction)" in d.message


def test_lengths_fit_context(compose):
    (d,) = point_diags(compose, LLAMA, rules.lengths_fit_context, input_len=2000, output_len=256)
    assert d.code == "BENCH_CONTEXT_EXCEEDED"
    assert point_diags(compose, LLAMA, rules.lengths_fit_context, input_len=1024,
                       output_len=1024) == []


def test_dataset_file(compose, tmp_path):
    (d,) = point_diags(compose, LLAMA, rules.dataset_file, dataset="jsonl")
    assert d.code == "BENCH_DATASET_MISSING"
    (d,) = point_diags(compose, LLAMA, rules.dataset_file, dataset="jsonl",
                       dataset_path=str(tmp_path / "nope.jsonl"))
    assert "no readable file" in d.message
    f = tmp_path / "prompts.jsonl"
    f.write_text('{"prompt": "hi"}\n')
    assert point_diags(compose, LLAMA, rules.dataset_file, dataset="jsonl",
                       dataset_path=str(f)) == []
    assert point_diags(compose, LLAMA, rules.dataset_file) == []


def test_client_rules_read_each_dataset_once_and_still_judge_every_point(compose, tmp_path,
                                                                        monkeypatch):
    """A sweep over lengths names one dataset per point: it is read once per distinct
    dataset, while the per-point rules still see every point."""
    from specc.prompts import promptsets

    cfg = compose(LLAMA)
    engine = get_engine(cfg["engine"]["name"], cfg["engine"].get("version"))
    reads = []
    real = promptsets.load
    monkeypatch.setattr(promptsets, "load", lambda *a, **k: (reads.append(k), real(*a, **k))[1])
    points = [{**cfg["benchmark"], "output_len": n, "num_prompts": 4} for n in range(8, 808, 8)]
    points.append({**points[0], "num_prompts": 10**6, "input_len": 1000})   # too large a point
    missing = {**points[0], "dataset": "jsonl", "dataset_path": str(tmp_path / "nope.jsonl")}
    diags = rules.check_clients(engine, points + [missing, dict(missing)])
    assert len(reads) == 1
    assert [d.code for d in diags] == ["BENCH_TOO_LARGE", "BENCH_DATASET_MISSING"]
    assert diags == [d for b in points + [missing] for d in rules.check_client(engine, b)]


# --- model facts from config.json ------------------------------------------------------

_LLAMA_CONFIG = {"architectures": ["LlamaForCausalLM"], "max_position_embeddings": 4096,
                 "vocab_size": 128256, "hidden_size": 4096, "num_attention_heads": 32,
                 "num_key_value_heads": 8, "num_hidden_layers": 32}


def _model_dir(tmp_path, name, cfg, index_bytes=None):
    d = tmp_path / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    if index_bytes is not None:
        (d / "model.safetensors.index.json").write_text(
            json.dumps({"metadata": {"total_size": index_bytes}, "weight_map": {}}))
    return d


def test_config_json_wins_and_is_the_recorded_source(compose, tmp_path):
    target = _model_dir(tmp_path, "target", {
        "architectures": ["LlamaForCausalLM"], "max_position_embeddings": 4096,
        "vocab_size": 128256, "hidden_size": 4096, "num_attention_heads": 32,
        "num_key_value_heads": 8, "num_hidden_layers": 32}, index_bytes=16_000_000_000)
    cfg = compose(LLAMA + [f"model_pair.target.path={target}", "speculation=none"])
    result = compile_config(cfg)
    assert result.ok, [d.line() for d in result.diagnostics]
    facts = result.plan.facts["target"]
    assert facts.values["max_position_embeddings"] == 4096     # not the conf's 131072
    assert facts.context_length == 4096
    assert facts.values["weight_gb"] == pytest.approx(16.0)
    assert facts.sources["max_position_embeddings"] == str(target / "config.json")
    assert facts.sources["architecture"] == str(target / "config.json")
    assert facts.sources["weight_gb"] == str(target / "model.safetensors.index.json")
    # the config group's facts describe the group's model, not this one: none is taken
    assert "active_params_b" not in facts.values
    assert not [s for s in facts.sources.values() if s.startswith("conf:")]
    assert facts.dropped_facts_for == "meta-llama/Llama-3.1-8B-Instruct"


def test_config_json_wins_over_the_facts_written_for_it(tmp_path):
    """A config group's facts for this very path: the file wins; what it lacks, the group says."""
    d = _model_dir(tmp_path, "llama", _LLAMA_CONFIG)
    f = facts_mod.resolve({"path": str(d), "facts_for": str(d),
                           "facts": {"max_position_embeddings": 1, "active_params_b": 8}},
                          "model_pair.target", derived_context_length)
    assert f.get("max_position_embeddings") == 4096 and f.get("active_params_b") == 8
    assert f.sources["active_params_b"] == "conf:model_pair.target.facts.active_params_b"
    assert f.location == "local" and f.path_problem is None and f.dropped_facts_for is None


def test_config_json_text_config_of_a_multimodal_wrapper(tmp_path):
    d = _model_dir(tmp_path, "kimi", {
        "architectures": ["KimiK25ForConditionalGeneration"],
        "text_config": {"architectures": ["DeepseekV3ForCausalLM"],
                        "max_position_embeddings": 262144,
                        "rope_scaling": {"type": "yarn", "factor": 64,
                                         "original_max_position_embeddings": 4096},
                        "vocab_size": 163840, "hidden_size": 7168}})
    f = facts_mod.resolve({"path": str(d), "facts": {"max_position_embeddings": 1}},
                          "model_pair.target", derived_context_length)
    assert f.get("max_position_embeddings") == 262144
    # SGLang dispatches on hf_config.architectures[0]: the wrapper's (issue 7, bug 6)
    assert f.architecture == "KimiK25ForConditionalGeneration"
    assert f.context_length == 262144
    assert f.sources["vocab_size"] == f"{d / 'config.json'}:text_config"


def test_a_hub_id_takes_the_facts_written_for_it():
    f = facts_mod.resolve({"path": "org/draft", "facts_for": "org/draft",
                           "facts": {"max_position_embeddings": 1024}},
                          "model_pair.draft", derived_context_length)
    assert f.context_length == 1024 and f.problems == ()
    assert (f.location, f.path_problem) == ("hub", None)
    assert f.sources["max_position_embeddings"] == "conf:model_pair.draft.facts.max_position_embeddings"


def test_facts_know_no_engine():
    """Layering: the facts module does not import an engine adapter; lowering passes the
    engine's context-length rule in."""
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(facts_mod))
    imported = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    imported += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    assert not [m for m in imported if m and "engines" in m], imported
    f = facts_mod.resolve({"path": "x", "facts": {"max_position_embeddings": 4096}}, "m")
    assert f.context_length is None    # no engine, no derivation


def test_point_size(compose):
    (d,) = point_diags(compose, LLAMA, rules.point_size, num_prompts=10**9)
    assert d.code == "BENCH_TOO_LARGE" and d.path == "benchmark.num_prompts"
    assert "num_prompts <=" in d.hint
    assert point_diags(compose, LLAMA, rules.point_size, num_prompts=1000) == []


@pytest.mark.parametrize("config, expected", [
    # yarn with original_max_position_embeddings: the length already includes the factor
    ({"max_position_embeddings": 262144,
      "rope_scaling": {"type": "yarn", "factor": 64, "original_max_position_embeddings": 4096}},
     262144),
    # llama3 rope type: factor ignored
    ({"max_position_embeddings": 131072, "rope_scaling": {"rope_type": "llama3", "factor": 8.0}},
     131072),
    # a plain factor multiplies
    ({"max_position_embeddings": 4096, "rope_scaling": {"type": "linear", "factor": 4}}, 16384),
    # 0.5.23 (transformers 5) fills in original_max_position_embeddings for yarn: no factor
    ({"max_position_embeddings": 4096, "rope_scaling": {"type": "yarn", "factor": 2}}, 4096),
    ({"max_position_embeddings": 4096, "rope_scaling": {"rope_type": "longrope", "factor": 2}}, 4096),
    # first present key wins
    ({"seq_length": 8192, "max_position_embeddings": 32768}, 8192),
    ({"max_sequence_length": 1000, "seq_length": 8192}, 1000),
    ({"max_position_embeddings": 2048, "rope_scaling": None}, 2048),
    # nothing: SGLang's fallback
    ({}, 2048),
    ({"rope_scaling": {"factor": 4}}, 2048),
])
def test_derived_context_length(config, expected):
    assert derived_context_length(config) == expected


def test_yarn_without_original_length_derives_per_sglang_release(compose):
    yarn = {"max_position_embeddings": 4096, "rope_scaling": {"type": "yarn", "factor": 2}}
    assert derived_context_length(yarn, "0.5.23") == 4096
    assert derived_context_length(yarn, "0.5.9") == 8192      # transformers 4: factor applied
    # the rules follow engine.version: a 4096-token yarn draft vs a 8192-token target
    ov = LLAMA + ["model_pair.context_length=8192", "model_pair.draft.facts.max_position_embeddings=4096",
                  "+model_pair.draft.facts.rope_scaling={type: yarn, factor: 2}",
                  "model_pair.target.facts.max_position_embeddings=8192"]
    (d,) = server_diags(compose, ov, rules.draft_context)
    assert d.code == "CONTEXT_DRAFT_SHORTER" and "4096" in d.message
    assert server_diags(compose, ov + ["engine.version=0.5.9"], rules.draft_context) == []
