"""JSON Schema over the composed config: types, ranges, enums, required keys, no unknown keys.

The schema is the single description of what a config may say; the semantic
rules (rules.py) only ever see configs that passed it.
"""

from __future__ import annotations

from functools import lru_cache

from specc.diagnostics import Diagnostic, error

_INT = {"type": "integer"}
_POS_INT = {"type": "integer", "minimum": 1}
_NUM = {"type": "number"}
_STR = {"type": "string", "minLength": 1}
_BOOL = {"type": "boolean"}


def _nullable(schema: dict) -> dict:
    return {"anyOf": [{"type": "null"}, schema]}


def _obj(properties: dict, required: tuple = (), extra: bool = False) -> dict:
    return {"type": "object", "properties": properties, "required": list(required),
            "additionalProperties": extra}


_FACTS = _obj({
    "architecture": _STR,
    "max_position_embeddings": _POS_INT,
    "max_sequence_length": _POS_INT,
    "seq_length": _POS_INT,
    "max_seq_len": _POS_INT,
    "model_max_length": _POS_INT,
    "rope_scaling": _nullable({"type": "object"}),
    "vocab_size": _POS_INT,
    "draft_vocab_size": _POS_INT,
    "hidden_size": _POS_INT,
    "num_attention_heads": _POS_INT,
    "num_key_value_heads": _POS_INT,
    "num_hidden_layers": _POS_INT,
    "head_dim": _POS_INT,
    "kv_lora_rank": _POS_INT,
    "qk_rope_head_dim": _POS_INT,
    "n_routed_experts": _POS_INT,
    "num_local_experts": _POS_INT,
    "num_experts_per_tok": _POS_INT,
    "weight_gb": {"type": "number", "exclusiveMinimum": 0},
    "total_params_b": {"type": "number", "exclusiveMinimum": 0},
    "active_params_b": {"type": "number", "exclusiveMinimum": 0},
})

_MODEL = _obj({
    "path": _STR,
    "trust_remote_code": _BOOL,
    "facts": _FACTS,
}, required=("path",))

_ENV = {"type": "object", "additionalProperties": {"type": ["string", "number", "boolean"]},
        "propertyNames": {"pattern": "^[A-Za-z_][A-Za-z0-9_]*$"}}

SCHEMA = _obj({
    "experiment": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9_.-]*$"},
    "execute": _BOOL,
    "baseline": _BOOL,
    "fail_fast": _BOOL,
    "max_points": _POS_INT,
    "sweep": _nullable({"type": "object",
                        "additionalProperties": {"type": "array", "minItems": 1}}),
    "model_pair": _obj({
        "name": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9_.-]*$"},
        "target": _MODEL,
        "draft": _nullable(_MODEL),
        "context_length": _nullable(_POS_INT),
        "draft_context_override": _BOOL,
    }, required=("name", "target")),
    "hardware": _obj({
        "name": _STR,
        "gpu": _STR,
        "gpu_memory_gb": {"type": "number", "exclusiveMinimum": 0},
        "gpus_per_node": _POS_INT,
        "nodes": _POS_INT,
        "host": _STR,
        "tp": _POS_INT,
        "dp": _POS_INT,
        "pp": _POS_INT,
        "ep": _POS_INT,
    }, required=("gpu_memory_gb", "gpus_per_node", "nodes", "tp")),
    "engine": _obj({
        "name": {"enum": ["sglang", "vllm", "sim"]},
        "python": _STR,
        "bind_host": _STR,
        "base_port": {"type": "integer", "minimum": 1024, "maximum": 65000},
        "mem_fraction_static": _nullable({"type": "number", "exclusiveMinimum": 0, "maximum": 1}),
        "gpu_memory_utilization": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
        "max_running_requests": _nullable(_POS_INT),
        "max_num_seqs": _nullable(_POS_INT),
        "cuda_graph_max_bs": _nullable(_POS_INT),
        "attention_backend": _nullable(_STR),
        "dtype": _nullable(_STR),
        "kv_cache_dtype": _nullable(_STR),
        "quantization": _nullable(_STR),
        "enable_metrics": _BOOL,
        "extra_args": {"type": "array", "items": {"type": ["string", "number"]}},
        "env": _ENV,
        "sim": _obj({
            "time_scale": {"type": "number", "exclusiveMinimum": 0, "maximum": 10},
            "seed": _INT,
            "acceptance": _nullable({"type": "number", "minimum": 0, "exclusiveMaximum": 1}),
        }),
    }, required=("name", "base_port")),
    "speculation": _obj({
        "algorithm": _nullable({"enum": ["EAGLE3", "EAGLE", "NEXTN", "STANDALONE", "NGRAM"]}),
        "num_steps": _nullable(_POS_INT),
        "topk": _nullable(_POS_INT),
        "num_draft_tokens": _nullable({"type": "integer", "minimum": 2}),
    }, required=("algorithm",)),
    "readiness": _obj({
        "probe_interval_s": {"type": "number", "minimum": 0.01, "maximum": 60},
        "probe_timeout_s": {"type": "number", "exclusiveMinimum": 0},
        "success_threshold": _POS_INT,
        "phase_budget_factor": {"type": "number", "minimum": 1},
        "phase_budget_floor_s": {"type": "number", "minimum": 0},
        "deadline_s": _nullable({"type": "number", "exclusiveMinimum": 0}),
    }),
    "benchmark": _obj({
        "driver": {"enum": ["builtin", "bench_serving"]},
        "api": {"enum": ["chat", "completions", "generate"]},
        "dataset": {"enum": ["specc", "mt_bench", "spec_bench", "speed_bench", "hf", "random",
                             "jsonl", "sharegpt"]},
        "dataset_path": _nullable(_STR),
        "input_len": _POS_INT,
        "output_len": _POS_INT,
        "range_ratio": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
        "num_prompts": _nullable(_POS_INT),
        "concurrency": _POS_INT,
        "request_rate": _nullable({"type": "number", "exclusiveMinimum": 0}),
        "warmup_requests": {"type": "integer", "minimum": 0},
        "flush_cache": _BOOL,
        "seed": _INT,
        "timeout_s": {"type": "number", "exclusiveMinimum": 0},
        # prompt sets by category and the statistics (issue 10)
        "categories": _nullable({"type": "array", "items": _STR, "minItems": 1}),
        "hf_dataset": _nullable({"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9_.-]*"
                                 "(/[A-Za-z0-9][A-Za-z0-9_.-]*)?$"}),
        "hf_subset": _nullable(_STR),
        "hf_split": _STR,
        "temperature": {"type": "number", "minimum": 0, "maximum": 2},
        "ignore_eos": _BOOL,
        "repeats": _POS_INT,
        "min_requests": _POS_INT,
        "min_output_tokens": {"type": "integer", "minimum": 0},
        "target_ci": _nullable(_NUM),
        "max_requests": _POS_INT,
    }),
}, required=("experiment", "model_pair", "hardware", "engine", "speculation", "readiness",
             "benchmark"))


def _path(parts) -> str:
    return ".".join(str(p) for p in parts)


@lru_cache(maxsize=1)
def _validator():
    from jsonschema import Draft202012Validator

    return Draft202012Validator(SCHEMA)


def _hint(err) -> str:
    v = err.validator
    if v == "additionalProperties":
        allowed = sorted(err.schema.get("properties", {}))
        return f"remove it or use one of: {', '.join(allowed)}" if allowed else "remove it"
    if v == "enum":
        return "use one of: " + ", ".join(repr(x) for x in err.validator_value)
    if v in ("type", "anyOf"):
        return "give a value of the right type"
    if v in ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum", "minItems",
             "minLength"):
        return "give a value in range"
    if v == "required":
        return "add it to the config group or experiment"
    if v == "pattern":
        if "." not in str(err.validator_value):   # environment variable names
            return "use letters, digits and '_', not starting with a digit"
        return "use letters, digits, '.', '_' and '-'"
    return ""


def _message(err) -> tuple[str, str]:
    """(path, message): unknown keys are reported at their own path, not their parent's."""
    path = _path(err.absolute_path)
    if err.validator == "additionalProperties":
        extra = sorted(set(err.instance) - set(err.schema.get("properties", {})))
        key = extra[0] if len(extra) == 1 else ", ".join(extra)
        return (f"{path}.{key}" if path else key), f"unknown key{'s' if len(extra) > 1 else ''}"
    if err.validator == "anyOf":
        sub = [e for e in err.context if e.validator != "type" or "null" not in str(e.validator_value)]
        inner = sub[-1] if sub else None
        if inner is not None:
            return path, f"{err.instance!r}: {inner.message}"
    if err.validator == "required":
        missing = err.message.split("'")[1] if "'" in err.message else err.message
        return (f"{path}.{missing}" if path else missing), "required key is missing"
    return path, err.message


def validate(config: dict) -> list[Diagnostic]:
    """Every schema problem, one diagnostic each (code SCHEMA_<validator>)."""
    out = []
    for err in sorted(_validator().iter_errors(config), key=lambda e: list(map(str, e.absolute_path))):
        path, message = _message(err)
        out.append(error(f"SCHEMA_{err.validator.upper()}", path, message, _hint(err)))
    return out


def subschema(path: str) -> dict | None:
    """The schema for a dotted config path (for checking sweep axis values)."""
    node = SCHEMA
    for part in path.split("."):
        if "anyOf" in node:
            node = next((s for s in node["anyOf"] if s.get("type") == "object"), node)
        props = node.get("properties")
        if props is None or part not in props:
            return None
        node = props[part]
    return node


def validate_value(path: str, value) -> str | None:
    """None if `value` may stand at `path`, else the reason."""
    from jsonschema import Draft202012Validator

    schema = subschema(path)
    if schema is None:
        return "not a config key that can be swept"
    errs = list(Draft202012Validator(schema).iter_errors(value))
    return errs[0].message if errs else None
