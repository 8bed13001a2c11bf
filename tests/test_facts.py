"""A model's config.json is untrusted input: real FIFOs, symlink loops, devices, junk, nonsense.

Each problem is one FACTS_INVALID error naming the file and the field; nothing hangs,
nothing reads without bound, nothing is silently ignored.
"""

from __future__ import annotations

import json
import os

import pytest

from specc import facts as facts_mod
from specc.compile.pipeline import compile_config

LLAMA = ["model_pair.context_length=2048", "speculation=none"]
GOOD = {"architectures": ["LlamaForCausalLM"], "max_position_embeddings": 4096,
        "vocab_size": 128256, "hidden_size": 4096, "num_attention_heads": 32,
        "num_key_value_heads": 8, "num_hidden_layers": 32}


def _errors(compose, model_dir, extra=()):
    cfg = compose(LLAMA + [f"model_pair.target.path={model_dir}", *extra])
    result = compile_config(cfg)
    return result, [d for d in result.diagnostics if d.severity == "error"]


def _model(tmp_path, name="m"):
    """A model directory with its weight size (the config group's facts describe another
    model, so none fills a gap here)."""
    d = tmp_path / name
    d.mkdir()
    (d / "model.safetensors.index.json").write_text('{"metadata": {"total_size": 16e9}}')
    return d


def _file_kinds(tmp_path):
    """(name, model dir, what the one error must say): every way config.json can be unusable."""
    out = []
    d = _model(tmp_path, "fifo")
    os.mkfifo(d / "config.json")                       # open() for reading would block forever
    out.append(("fifo", d, "a FIFO, not a regular file"))
    d = _model(tmp_path, "loop")
    os.symlink("config.json", d / "config.json")        # points at itself
    out.append(("loop", d, "a symlink loop"))
    d = _model(tmp_path, "zero")
    os.symlink("/dev/zero", d / "config.json")          # endless
    out.append(("zero", d, "a character device, not a regular file"))
    d = _model(tmp_path, "dir")
    (d / "config.json").mkdir()
    out.append(("dir", d, "a directory, not a regular file"))
    d = _model(tmp_path, "malformed")
    (d / "config.json").write_text('{"hidden_size": 4096,')
    out.append(("malformed", d, "not valid JSON"))
    d = _model(tmp_path, "bigint")
    (d / "config.json").write_text('{"hidden_size": ' + "9" * 5000 + "}")   # past int()'s digit limit
    out.append(("bigint", d, "not valid JSON (Exceeds the limit (4300 digits) for integer string conversion)"))
    d = _model(tmp_path, "list")
    (d / "config.json").write_text("[1, 2, 3]")
    out.append(("list", d, "expected a JSON object"))
    d = _model(tmp_path, "huge")
    with open(d / "config.json", "wb") as f:            # sparse: no disk, a real size
        f.truncate(facts_mod.MAX_FILE_BYTES + 1)
    out.append(("huge", d, "over the 64 MiB"))
    d = _model(tmp_path, "binary")
    (d / "config.json").write_bytes(b"\xff\xfe{}")
    out.append(("binary", d, "not UTF-8"))
    return out


def test_every_unusable_file_is_one_error_naming_it(compose, tmp_path):
    for name, model_dir, says in _file_kinds(tmp_path):
        result, errors = _errors(compose, model_dir)
        assert result.plan is None, name
        assert [(d.code, d.path) for d in errors] == [("FACTS_INVALID", "model_pair.target.path")], \
            (name, [d.line() for d in errors])
        assert str(model_dir / "config.json") in errors[0].message and says in errors[0].message, \
            (name, errors[0].line())


@pytest.mark.parametrize("field, value, says", [
    ("max_position_embeddings", "2048", "'2048' (a string)"),
    ("max_position_embeddings", 0, "0 (an integer)"),
    ("max_position_embeddings", 10**30, "(an integer); expected an integer from 1 to 2147483647"),
    ("max_position_embeddings", 2048.7, "2048.7 (a float)"),
    ("max_position_embeddings", True, "True (a boolean)"),
    ("num_attention_heads", 0, "num_attention_heads is 0"),
    ("hidden_size", [4096], "[4096] (a list)"),
    ("architectures", "LlamaForCausalLM", "'LlamaForCausalLM' (a string); expected a non-empty list"),
    ("architectures", [], "[] (a list)"),
    ("rope_scaling", "yarn", "'yarn' (a string); expected a mapping or null"),
    ("rope_scaling", {"type": "linear", "factor": "4"}, "factor '4' (a string)"),
    ("rope_scaling", {"type": "yarn", "factor": 0}, "factor 0"),
])
def test_wrong_types_and_nonsense_values_are_one_error_naming_file_and_field(
        compose, tmp_path, field, value, says):
    d = _model(tmp_path)
    (d / "config.json").write_text(json.dumps({**GOOD, field: value}))
    result, errors = _errors(compose, d)
    assert [d.code for d in errors] == ["FACTS_INVALID"], [d.line() for d in errors]
    (e,) = errors
    assert str(d / "config.json") in e.message and field in e.message and says in e.message
    assert "\n" not in e.line()


def test_null_fields_count_as_absent_and_a_symlinked_file_is_read(compose, tmp_path):
    """Hugging Face's cache links config.json to a blob; configs write `"head_dim": null`."""
    blob = tmp_path / "blob"
    blob.write_text(json.dumps({**GOOD, "head_dim": None, "rope_scaling": None}))
    d = _model(tmp_path)
    os.symlink(blob, d / "config.json")
    result, errors = _errors(compose, d)
    assert errors == [] and result.ok
    assert result.plan.facts["target"].values["max_position_embeddings"] == 4096


def test_a_bad_index_file_is_reported_too(compose, tmp_path):
    d = _model(tmp_path)
    (d / "config.json").write_text(json.dumps(GOOD))
    (d / "model.safetensors.index.json").write_text('{"metadata": {"total_size": "16e9"}}')
    result, errors = _errors(compose, d)
    (e,) = errors
    assert e.code == "FACTS_INVALID" and "model.safetensors.index.json" in e.message
    assert "metadata.total_size" in e.message


def test_one_error_per_problem_however_many_servers_share_the_file(compose, tmp_path):
    d = _model(tmp_path)
    (d / "config.json").write_text(json.dumps({**GOOD, "num_attention_heads": "32"}))
    result, errors = _errors(compose, d, ["speculation=eagle3", "baseline=true",
                                          "sweep={speculation.num_steps:[1,2,3]}",
                                          "speculation.topk=1"])
    assert [e.code for e in errors] == ["FACTS_INVALID"], [e.line() for e in errors]


def test_the_simulator_reader_skips_an_unusable_file(tmp_path):
    d = _model(tmp_path)
    os.mkfifo(d / "config.json")
    assert facts_mod.read_config_json(str(d)) is None
    assert facts_mod.read_config_json(str(d / "config.json")) is None


def test_a_fifo_config_json_does_not_hang_the_cli(tmp_path, run_specc):
    d = _model(tmp_path)
    os.mkfifo(d / "config.json")
    code, out, err = run_specc(LLAMA + [f"model_pair.target.path={d}"], tmp_path, timeout=60)
    assert code == 2
    lines = [x for x in err.splitlines() if x.startswith("error ")]
    assert len(lines) == 1 and "FACTS_INVALID" in lines[0] and "a FIFO" in lines[0], err
    assert not (tmp_path / "run" / "plan.json").exists()
