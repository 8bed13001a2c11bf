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
    (lambda c: c["engine"].update(mem_fraction_static=1.5), "SCHEMA_ANYOF",
     "engine.mem_fraction_static", "type"),
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
    assert schema.validate_value("hardware.tp", 2) is None
    assert "not of type" in schema.validate_value("hardware.tp", "x")
    assert "swept" in schema.validate_value("nope.x", 1)
