"""Secrets by name and by value; references in the plan; what a launch needs from its environment."""

from __future__ import annotations

import pytest

from specc import secrets
from specc.compile.pipeline import compile_config
from specc.plan import CacheFlush, Server

HF = "hf_" + "Ab1" * 12                       # the shape of a Hugging Face token
SK = "sk-proj-AbCdEf0123456789xyzQ"
RANDOM = "q7Rk2LmN9xVb4TzW8cYp3HdF6sJa1GeU5"  # a long random word with no known prefix


@pytest.mark.parametrize("name", ["HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "WANDB_API_KEY",
                                  "AWS_SECRET_ACCESS_KEY", "DB_PASSWORD", "MY_SECRET", "apiKey",
                                  "--api-key", "--admin-api-key", "--hf-token",
                                  "--ssl-keyfile-password", "GOOGLE_CREDENTIALS"])
def test_secret_names(name):
    assert secrets.is_secret(name)


@pytest.mark.parametrize("name", ["TOKENIZERS_PARALLELISM", "--max-total-tokens",
                                  "--speculative-num-draft-tokens", "--ssl-keyfile",
                                  "HF_TOKEN_PATH", "num_key_value_heads", "--tokenizer-path",
                                  "CUDA_VISIBLE_DEVICES", "max_running_requests"])
def test_names_that_are_not_secret(name):
    assert not secrets.is_secret(name)


@pytest.mark.parametrize("value", [HF, SK, RANDOM, "ghp_" + "x1Y2" * 9, "AKIAIOSFODNN7EXAMPLE",
                                   "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJlX2hlcmU"])
def test_secret_values(value):
    assert secrets.looks_secret(value)


@pytest.mark.parametrize("value", [
    "641ffc808110f46f03d32842fe1dbd9106706c8d",           # a commit hash
    "meta-llama/Llama-3.1-8B-Instruct", "/models/kimi/k2.5", "KimiK25ForConditionalGeneration",
    "DeepseekV3ForCausalLMWithSomethingElse2", "LlamaForCausalLMEagle3", "${HF_TOKEN}", "true",
    "0,1,2,3", "fp8_e4m3"])
def test_values_that_are_not_secret(value):
    assert not secrets.looks_secret(value)


def test_extra_args_become_references_named_after_their_flag_and_stay_so():
    args = ["--api-key", SK, "--served-model-name", "${HOME}", f"--hf-token={HF}",
            "--foo", RANDOM, "--api-key", "second-key", 8]
    out, names, values = secrets.split_args(args)
    assert out == ["--api-key", "${API_KEY}", "--served-model-name", "${HOME}",
                   "--hf-token=${HF_TOKEN}", "--foo", "${FOO}", "--api-key", "${API_KEY_2}", 8]
    assert names == ["API_KEY", "HF_TOKEN", "FOO", "API_KEY_2"]
    assert set(values) == {SK, HF, RANDOM, "second-key"}
    assert secrets.split_args(out)[:2] == (out, names)      # a second pass changes nothing


def test_env_secret_by_name_or_by_value_and_a_literal_reference_stays_literal():
    env, names = secrets.split_env({"HF_TOKEN": "short", "HUB": HF, "PLAIN": "${HOME}",
                                    "N": 3, "B": True, "KEEP": "${KEEP}"})
    assert env == {"HF_TOKEN": "${HF_TOKEN}", "HUB": "${HUB}", "PLAIN": "${HOME}", "N": "3",
                   "B": "true", "KEEP": "${KEEP}"}
    assert names == ["HF_TOKEN", "HUB", "KEEP"]
    assert secrets.split_env(env) == (env, names)


def test_scrub_reaches_lists_mappings_and_every_section():
    cfg = {"engine": {"name": "sglang", "env": {"HF_TOKEN": ["abcd-1", {"x": "abcd-2"}]},
                      "extra_args": ["--api-key", "abcd-3"]},
           "model_pair": {"target": {"path": HF, "api_key": {"nested": "abcd-4"}}}}
    clean, found, problems = secrets.scrub_config(cfg)
    assert {"abcd-1", "abcd-2", "abcd-3", "abcd-4", HF} <= found
    text = repr(clean)
    assert not any(v in text for v in found)
    assert clean["engine"]["env"]["HF_TOKEN"] == [secrets.REDACTED, {"x": secrets.REDACTED}]
    assert problems == [("model_pair.target.path", "this value looks like a credential")]
    assert cfg["engine"]["extra_args"][1] == "abcd-3"    # the caller's dict is left alone


def test_a_credential_outside_env_is_an_error_that_does_not_echo_it(compose):
    cfg = compose(["+experiment=llama3_eagle3_pack"])
    cfg["benchmark"]["dataset_path"] = HF
    result = compile_config(cfg)
    (d,) = [d for d in result.diagnostics if d.severity == "error"]
    assert (d.code, d.path) == ("SECRET_IN_CONFIG", "benchmark.dataset_path")
    assert HF not in d.line() and result.plan is None


def test_scan_overrides_finds_what_hydra_would_echo():
    found = secrets.scan_overrides([
        f"+engine.env.HF_TOKEN={HF}[,", "engine.extra_args=[--api-key,abcd-5]",
        "engine.env={MY_KEY:abcd-6,PLAIN:visible}", f"hardware.host={RANDOM}", "--cfg",
        "hardware.tp=8"])
    assert {HF, "abcd-5", "abcd-6", RANDOM} <= found
    assert not {"visible", "8", "--cfg"} & found


def test_redact_tree_of_hydra_saved_overrides():
    tree = {"task": ["hardware.tp=8,engine.env.HF_TOKEN=abc,x=1", "+engine.env.API_KEY=zz",
                     f"engine.extra_args=[--api-key,{SK}]"],
            "engine": {"env": {"HF_TOKEN": "abc", "X": "y"}}}
    clean = secrets.redact_tree(tree, {SK})
    assert clean == {"task": ["hardware.tp=8,engine.env.HF_TOKEN=<redacted>,x=1",
                              "+engine.env.API_KEY=<redacted>",
                              "engine.extra_args=[--api-key,<redacted>]"],
                     "engine": {"env": {"HF_TOKEN": "<redacted>", "X": "y"}}}


def _server(**kw) -> Server:
    base = dict(id="s1", label="x", baseline=True, params={}, host="localhost", port=30000,
                gpus=(0,), wave=0, argv=("python", "-m", "sglang.launch_server"),
                env={"CUDA_VISIBLE_DEVICES": "0"}, log="servers/s1.log", readiness=None,
                cache_flush=CacheFlush(unavailable="not needed here"), acceptance=None)
    return Server(**{**base, **kw})


def test_missing_secrets_names_every_reference_the_launch_cannot_resolve():
    server = _server(env={"CUDA_VISIBLE_DEVICES": "0", "HF_TOKEN": "${HF_TOKEN}",
                          "PLAIN": "${HOME}"},
                     argv=("python", "-m", "sglang.launch_server", "--api-key", "${API_KEY}",
                           "--served-model-name", "${USER}"),
                     secrets=("HF_TOKEN", "API_KEY"))
    assert secrets.missing_secrets(server, {}) == ["HF_TOKEN", "API_KEY"]
    assert secrets.missing_secrets(server, {"HF_TOKEN": "x", "API_KEY": ""}) == ["API_KEY"]
    assert secrets.missing_secrets(server, {"HF_TOKEN": "x", "API_KEY": "y"}) == []
    assert secrets.missing_secrets(_server(), {}) == []
    line = secrets.missing_line(server, ["API_KEY"])
    assert "\n" not in line and "s1" in line and "export API_KEY" in line
    # resolved only at launch, and only what the plan lists as secret
    assert secrets.expand("--x=${API_KEY}/${USER}", server.secrets, {"API_KEY": "v", "USER": "u"}) \
        == "--x=v/${USER}"


def test_a_compiled_plan_lists_every_secret_the_launch_references(compose):
    cfg = compose(["+experiment=llama3_eagle3_pack"])
    cfg["engine"]["env"] = {"HF_TOKEN": "abcd-7", "HUB": HF}
    cfg["engine"]["extra_args"] = ["--api-key", SK]
    result = compile_config(cfg)
    assert result.ok, [d.line() for d in result.diagnostics]
    for s in result.plan.servers:
        assert set(s.secrets) == {"HF_TOKEN", "HUB", "API_KEY"}
        assert "${API_KEY}" in s.argv
        assert secrets.missing_secrets(s, {}) == ["HF_TOKEN", "HUB", "API_KEY"]
    text = result.plan.dumps() + "".join(d.line() for d in result.diagnostics)
    assert not any(v in text for v in ("abcd-7", HF, SK))
    refs = {d.path for d in result.diagnostics if d.code == "SECRET_REFERENCED"}
    assert refs == {"engine.env.HF_TOKEN", "engine.env.HUB", "engine.extra_args[1]"}


def test_a_key_tried_only_from_the_start_of_its_word_blanks_what_every_start_did():
    """The key=value pattern skips starts inside a word (a 10^5-line plan.json was scanned
    once per character of every word): the same text comes out as with every start tried."""
    import re

    from hypothesis import given, strategies as st

    from specc import secrets

    every_start = re.compile(r"([A-Za-z_][\w.\-]*)(=|:[ \t]+)([^\s&;,\"'\\<>]{4,})")
    pieces = st.sampled_from(["api_key", "--api-key", "password", "HF_TOKEN", "x-api-key",
                              "1password", "0.5", "a.b-c", "s3cr3tvalue", "token", "=", ": ",
                              ":", "\t", '"', "'", " ", "-", ".", "&", "9", "Xy"])

    @given(st.lists(pieces, max_size=10).map("".join))
    def same(text):
        fast = secrets._KEY_VALUE.sub(secrets._blank_key_value, text)
        assert fast == every_start.sub(secrets._blank_key_value, text)

    same()


def test_a_saved_config_libyaml_cannot_read_is_still_scrubbed(tmp_path):
    """Hydra's saved configs are read back with libyaml first (fast); one holding a tag only
    OmegaConf reads (a Path) is read as OmegaConf wrote it, and its secret still blanked."""
    import pathlib

    from omegaconf import OmegaConf

    from specc.config.compose import _scrub_saved_configs

    saved = tmp_path / "config.yaml"
    OmegaConf.save(OmegaConf.create({"p": pathlib.Path("/x"), "tok": "sk-secretvalue123456"}),
                   saved)
    plain = tmp_path / "overrides.yaml"
    plain.write_text("- engine.extra_args=[--api-key,sk-secretvalue123456]\n- a=1\n")
    untouched = tmp_path / "hydra.yaml"
    untouched.write_text("a: 1\nb: [x, y]\n")
    before = untouched.stat().st_mtime_ns
    _scrub_saved_configs([saved, plain, untouched], {"sk-secretvalue123456"})
    assert "sk-secretvalue123456" not in saved.read_text()
    assert "!!python/object/apply:pathlib" in saved.read_text()
    assert "sk-secretvalue123456" not in plain.read_text()
    assert untouched.stat().st_mtime_ns == before   # nothing to blank: not rewritten
