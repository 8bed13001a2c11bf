"""JSON Schema over the composed config: types, ranges, enums, required keys, no unknown keys.

The schema is the single description of what a config may say; the semantic
rules (rules.py) only ever see configs that passed it. The `engine` section has
one schema per engine, chosen by `engine.name`: a key of another engine is an
error that names the engine that has it (and the chosen engine's equivalent).
"""

from __future__ import annotations

import ipaddress
import os
import re
from functools import cache, lru_cache
from pathlib import Path

from specc.diagnostics import Diagnostic, error

#: One path component (a run dir, a server's log, a point's output) may be this long.
NAME_MAX = 255

#: Bounds of the benchmark's times and rates (docs/checks.md): far outside any real
#: benchmark, and inside what the schedule's and the estimate's arithmetic holds.
MAX_SECONDS = 7 * 86400          # a week: ramp_s, timeout_s; an SLO's milliseconds
MIN_TIMEOUT_S = 0.1
MAX_REQUEST_RATE = 1e6           # requests/s

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


#: Integer facts: engines keep lengths, sizes and counts in int32.
_COUNT = {"type": "integer", "minimum": 1, "maximum": 2**31 - 1}
#: A path handed to a program as an argument: one starting with '-' would be read as a flag.
_ARG_PATH = {"type": "string", "minLength": 1, "pattern": "^[^-]"}
#: A host name or an IP address (checked by _is_host).
_HOST = {"type": "string", "format": "host"}


_FACTS = _obj({
    "architecture": _STR,
    "max_position_embeddings": _COUNT,
    "max_sequence_length": _COUNT,
    "seq_length": _COUNT,
    "max_seq_len": _COUNT,
    "model_max_length": _COUNT,
    "rope_scaling": _nullable({"type": "object", "properties": {
        "factor": {"type": "number", "exclusiveMinimum": 0, "maximum": 1e6},
        "original_max_position_embeddings": _COUNT}}),
    "vocab_size": _COUNT,
    "draft_vocab_size": _COUNT,
    "hidden_size": _COUNT,
    "num_attention_heads": _COUNT,
    "num_key_value_heads": _COUNT,
    "num_hidden_layers": _COUNT,
    "head_dim": _COUNT,
    "kv_lora_rank": _COUNT,
    "qk_rope_head_dim": _COUNT,
    "n_routed_experts": _COUNT,
    "num_local_experts": _COUNT,
    "num_experts_per_tok": _COUNT,
    "weight_gb": {"type": "number", "exclusiveMinimum": 0},
    "total_params_b": {"type": "number", "exclusiveMinimum": 0},
    "active_params_b": {"type": "number", "exclusiveMinimum": 0},
})

_MODEL = _obj({
    "path": _ARG_PATH,
    "trust_remote_code": _BOOL,
    # the model path `facts` were written for: they apply only while `path` is that model
    "facts_for": _nullable(_ARG_PATH),
    "facts": _FACTS,
}, required=("path",))

#: An engine release: digits and dots, optionally a post/rc/dev suffix (quote it in YAML).
#: A release, and optionally its build (a PEP 440 local label: '0.32.0+cpu', vLLM's CPU build,
#: as `specc doctor` reads it from the installed engine).
VERSION_PATTERN = r"^v?[0-9]+(\.[0-9]+)*([.-]?(post|rc|dev|a|b)[0-9]*)?(\+[A-Za-z0-9]+([._-][A-Za-z0-9]+)*)?$"

_ENV = {"type": "object", "additionalProperties": {"type": ["string", "number", "boolean"]},
        "propertyNames": {"pattern": "^[A-Za-z_][A-Za-z0-9_]*$"}}

#: A word sbatch reads in an `#SBATCH` line as one value: no space, quote, backslash or `#`.
_SBATCH_WORD = {"type": "string", "pattern": "^[^\\s\"'\\\\#]+$"}
#: sbatch --time: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS.
TIME_LIMIT_PATTERN = r"^(\d+-\d+(:\d+(:\d+)?)?|\d+(:\d+(:\d+)?)?)$"

_PATTERN_HINTS = {
    _SBATCH_WORD["pattern"]: "give one word: no spaces, quotes, backslashes or '#'",
    "^-[^\\s\"'\\\\#]*$": "give one option per item, starting with '-', e.g. --qos=high "
                                "(no spaces, quotes, backslashes or '#')",
    TIME_LIMIT_PATTERN: "use minutes, HH:MM:SS or D-HH:MM:SS, e.g. 90 or 01:30:00",
    "^[^\\s,\"'\\\\]+$": "give SRC:DST, one mount per item (no spaces, commas or quotes)",
}

_CLUSTER = _obj({
    "name": {"enum": ["local", "slurm"]},
    "partition": _nullable(_SBATCH_WORD),
    "account": _nullable(_SBATCH_WORD),
    "time_limit": _nullable({"anyOf": [_POS_INT,
                                       {"type": "string", "pattern": TIME_LIMIT_PATTERN}]}),
    "gpus_per_node": _POS_INT,
    "nodes_per_server": _POS_INT,
    "pack": _BOOL,
    "sbatch_args": {"type": "array", "items": {**_SBATCH_WORD, "pattern": "^-[^\\s\"'\\\\#]*$"}},
    "container_image": _nullable(_SBATCH_WORD),
    "container_mounts": {"type": "array", "items": {"type": "string",
                                                    "pattern": "^[^\\s,\"'\\\\]+$"}},
    "pending_timeout_s": _nullable({"type": "number", "exclusiveMinimum": 0}),
    "poll_interval_s": {"type": "number", "minimum": 0.05, "maximum": 60},
}, required=("name",))

_ENGINE_COMMON = {
    "name": {"enum": ["sglang", "vllm", "sim"]},
    # the engine release the plan targets (facts, flags and log markers follow it)
    "version": {"type": "string", "pattern": VERSION_PATTERN},
    "python": _STR,
    "bind_host": _HOST,
    "base_port": {"type": "integer", "minimum": 1024, "maximum": 65000},
    "extra_args": {"type": "array", "items": {"type": ["string", "number"]}},
    "env": _ENV,
}
_SGLANG = {
    "attention_backend": _nullable(_STR),
    "enable_metrics": _BOOL,
}
_ENGINE_REQUIRED = ("name", "base_port")
#: The `engine` section per engine.name: each engine's own knobs, nothing else.
ENGINE_SCHEMAS = {
    "sglang": _obj({**_ENGINE_COMMON, **_SGLANG}, required=_ENGINE_REQUIRED),
    "vllm": _obj(_ENGINE_COMMON, required=_ENGINE_REQUIRED),
    "sim": _obj({**_ENGINE_COMMON, **_SGLANG, "sim": _obj({
        "time_scale": {"type": "number", "exclusiveMinimum": 0, "maximum": 10},
        "seed": _INT,
        "acceptance": _nullable({"type": "number", "minimum": 0, "exclusiveMaximum": 1}),
        "time_dilation": {"anyOf": [{"enum": ["auto"]},
                                    {"type": "number", "minimum": 1, "maximum": 100}]},
    })}, required=_ENGINE_REQUIRED),
}

#: The knobs every engine has, said once under `server` (each adapter writes its own flag;
#: docs/config-knobs.md). null: the engine release's own default, and no flag.
SERVER = _obj({
    "max_running_requests": _nullable(_POS_INT),
    "mem_fraction": _nullable({"type": "number", "exclusiveMinimum": 0, "maximum": 1}),
    "cuda_graph_max_bs": _nullable(_POS_INT),
    "dtype": _nullable(_STR),
    "kv_cache_dtype": _nullable(_STR),
    "quantization": _nullable(_STR),
})
SERVER_KNOBS = tuple(SERVER["properties"])
#: Engine keys that were one engine's spelling of a server knob: engine.<key> -> server.<knob>.
MOVED_TO_SERVER = {"max_running_requests": "max_running_requests",
                   "max_num_seqs": "max_running_requests",
                   "mem_fraction_static": "mem_fraction",
                   "gpu_memory_utilization": "mem_fraction",
                   "cuda_graph_max_bs": "cuda_graph_max_bs",
                   "dtype": "dtype", "kv_cache_dtype": "kv_cache_dtype",
                   "quantization": "quantization"}


def server_section(config: dict) -> dict:
    """The `server` section with every knob present (null where the config says nothing)."""
    given = config["server"] if isinstance(config.get("server"), dict) else {}
    return {k: given.get(k) for k in SERVER_KNOBS}


SCHEMA = _obj({
    "experiment": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9_.-]*$",
                   "maxLength": NAME_MAX},
    "execute": _BOOL,
    "resume": _nullable(_BOOL),
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
        "host": _HOST,
        "tp": _POS_INT,
        "dp": _POS_INT,
        "pp": _POS_INT,
        "ep": _POS_INT,
        # device: cpu, this machine's CPU, no GPU (vLLM's CPU build; conf/hardware/cpu.yaml)
        "device": {"enum": ["gpu", "cpu"]},
        "memory_gb": {"type": "number", "exclusiveMinimum": 0},
        "kv_cache_gb": _POS_INT,
        "threads_bind": {"type": "string", "minLength": 1, "pattern": "^[^\\s\"'\\\\]+$"},
    }, required=("nodes", "tp")) | {
        "if": {"properties": {"device": {"const": "cpu"}}, "required": ["device"]},
        "then": {"required": ["memory_gb", "kv_cache_gb"]},
        "else": {"required": ["gpu_memory_gb", "gpus_per_node"]}},
    "server": SERVER,
    "engine": {"type": "object", "properties": {"name": {"enum": list(ENGINE_SCHEMAS)}},
               "required": ["name"],
               "allOf": [{"if": {"type": "object", "properties": {"name": {"const": name}},
                                 "required": ["name"]},
                          "then": schema} for name, schema in ENGINE_SCHEMAS.items()]},
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
        "phase_budgets_s": {"type": "object",
                            "additionalProperties": {"type": "number", "exclusiveMinimum": 0}},
        "deadline_s": _nullable({"type": "number", "exclusiveMinimum": 0}),
    }),
    "benchmark": _obj({
        "driver": {"enum": ["builtin", "bench_serving"]},
        "api": {"enum": ["chat", "completions", "generate"]},
        "dataset": {"enum": ["specc", "mt_bench", "spec_bench", "speed_bench", "hf", "random",
                             "jsonl", "sharegpt", "trace"]},
        "dataset_path": _nullable(_ARG_PATH),
        "input_len": _POS_INT,
        "output_len": _POS_INT,
        "range_ratio": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
        "num_prompts": _nullable(_POS_INT),
        "concurrency": _POS_INT,
        "request_rate": _nullable({"type": "number", "exclusiveMinimum": 0,
                                   "maximum": MAX_REQUEST_RATE}),
        # arrivals (docs/workloads.md): ranges checked by rules.arrivals, with their fixes
        "burstiness": _nullable(_NUM),
        "ramp_s": _nullable({"type": "number", "maximum": MAX_SECONDS}),
        "warmup_requests": {"type": "integer", "minimum": 0},
        "flush_cache": _BOOL,
        "seed": _INT,
        "timeout_s": {"type": "number", "minimum": MIN_TIMEOUT_S, "maximum": MAX_SECONDS},
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
        # workloads (docs/workloads.md)
        "multi_turn": _BOOL,
        "shared_prefix_len": {"type": "integer", "minimum": 0},
        "shared_prefix_groups": _POS_INT,
    }),
    "cluster": _CLUSTER,
    "search": _obj({
        "name": {"enum": ["grid", "tune"]},
        "max_starts": _nullable({"type": "integer", "minimum": 2}),
        "margin": {"type": "number", "minimum": 0, "maximum": 1},
        # the SLO bracket's stated precision (specc.tune.bracket.PRECISION_BOUNDS)
        "precision": {"type": "number", "minimum": 0.01, "maximum": 0.5},
        # the deployed schedule (docs/tune.md "Deploy"); compile/search.py refuses them
        # with search=grid
        "verify": _BOOL,
        "vs_engine_default": _BOOL,
        "deploy": {"enum": ["auto", "schedule", "static"]},
        # keys are checked by compile/search.py (a latency metric, one line each)
        "slo": {"type": "object", "additionalProperties": {"type": "number",
                                                           "exclusiveMinimum": 0,
                                                           "maximum": MAX_SECONDS * 1000}},
    }, required=("name",)),
}, required=("experiment", "model_pair", "hardware", "engine", "speculation", "readiness",
             "benchmark"))


def _path(parts) -> str:
    return ".".join(str(p) for p in parts)


_HOSTNAME = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
                       r"(\.[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?)*$")


def _is_host(value) -> bool:
    """A host name (dot-separated labels of letters, digits, '-', '_') or an IP address."""
    if not isinstance(value, str):
        return True   # the type check reports it
    try:
        ipaddress.ip_address(value)
        return True
    except ValueError:
        pass
    return not re.fullmatch(r"[0-9.]+", value) and bool(_HOSTNAME.match(value))


@lru_cache(maxsize=1)
def _format_checker():
    from jsonschema import FormatChecker

    checker = FormatChecker(formats=())
    checker.checks("host")(_is_host)
    return checker


@lru_cache(maxsize=1)
def _validator():
    from jsonschema import Draft202012Validator

    return Draft202012Validator(SCHEMA, format_checker=_format_checker())


def _nested(err):
    """Every error under an anyOf, however deep (a nullable anyOf holds another)."""
    for e in err.context or ():
        yield e
        yield from _nested(e)


def _hint(err) -> str:
    v = err.validator
    if v == "additionalProperties":
        allowed = sorted(err.schema.get("properties", {}))
        return f"remove it or use one of: {', '.join(allowed)}" if allowed else "remove it"
    if v == "enum":
        return "use one of: " + ", ".join(repr(x) for x in err.validator_value)
    if v in ("type", "anyOf"):
        known = [e.validator_value for e in _nested(err)
                 if e.validator == "pattern" and e.validator_value in _PATTERN_HINTS]
        return _PATTERN_HINTS[known[0]] if known else "give a value of the right type"
    if v == "maxLength":
        return f"use at most {err.validator_value} characters: it names a directory (NAME_MAX)"
    if v in ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum", "minItems",
             "minLength"):
        return "give a value in range"
    if v == "required":
        return "add it to the config group or experiment"
    if v == "format":
        return "give a host name (letters, digits, '-', '.') or an IP address"
    if v == "pattern":
        if err.validator_value in _PATTERN_HINTS:
            return _PATTERN_HINTS[err.validator_value]
        if err.validator_value == VERSION_PATTERN:
            return ("give a release such as '0.5.23' or '0.32.0+cpu' (quoted, so YAML keeps it "
                    "a string)")
        if err.validator_value == _ARG_PATH["pattern"]:
            return "a path starting with '-' is read as a flag by the program it is passed to: write ./-name or an absolute path"
        if "." not in str(err.validator_value):   # environment variable names
            return "use letters, digits and '_', not starting with a digit"
        return "use letters, digits, '.', '_' and '-'"
    return ""


#: A value out of range whose generic message would mislead: (what it means, the fix).
_OWN_WORDS = {
    "benchmark.concurrency": (
        "concurrency caps the requests in flight, so 0 would send nothing, whatever "
        "benchmark.request_rate says (0 is not 'unlimited' here, as vLLM's and SGLang's "
        "--max-concurrency 0 is)",
        "give at least 1; for arrivals at benchmark.request_rate that no cap holds back, a cap "
        "above what can be in flight (e.g. 1024)"),
}


def _value(value) -> str:
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def other_engine_key(chosen: str | None, key: str, where: str, value=None, *, swept: bool = False):
    """A key the chosen engine does not have: an engine's old spelling of a server knob
    (name the knob), or another engine's own knob (name that engine). None if no engine
    has the key."""
    knob = MOVED_TO_SERVER.get(key)
    if knob is not None:
        fix = (f"sweep server.{knob} instead" if swept
               else f"use server.{knob}={_value(value)}" if not isinstance(value, (dict, list))
               else f"use server.{knob}")
        return error("SCHEMA_ENGINE_KEY", where,
                     f"engine.{key} is server.{knob} now: one knob for every engine, each "
                     "engine writes its own flag", fix)
    owners = [n for n, sch in ENGINE_SCHEMAS.items() if key in sch["properties"]]
    if not owners or chosen not in ENGINE_SCHEMAS:
        return None
    message = f"{key} is a {' / '.join(owners)} key; {chosen} has no equivalent"
    fix = "remove the axis" if swept else "remove it"
    return error("SCHEMA_ENGINE_KEY", where, message, f"{fix}, or engine={owners[0]}")


def _diagnostics(err) -> list[Diagnostic]:
    """One diagnostic per problem: each unknown key at its own path, not its parent's."""
    path = _path(err.absolute_path)
    code = f"SCHEMA_{err.validator.upper()}"
    if err.validator == "additionalProperties":
        out = []
        for key in sorted(map(str, set(err.instance) - set(err.schema.get("properties", {})))):
            where = f"{path}.{key}" if path else key
            found = None
            if path == "engine":
                found = other_engine_key(err.instance.get("name"), key, where, err.instance.get(key))
            out.append(found or error(code, where, "unknown key",
                                      unknown_key_hint(where) or _hint(err)))
        return out
    message, hint = err.message, _hint(err)
    if path in _OWN_WORDS and err.validator in ("minimum", "exclusiveMinimum"):
        message, hint = _OWN_WORDS[path]
        message = f"{err.instance!r}: {message}"
    if err.validator == "anyOf":
        sub = [e for e in err.context
               if e.validator != "type" or "null" not in str(e.validator_value)]
        if sub and isinstance(err.instance, dict):   # a nullable section: its own problems
            return [d for e in sub for d in _diagnostics(e)]
        if sub:
            message = f"{err.instance!r}: {sub[-1].message}"
            hint = _hint(sub[-1]) if sub[-1].validator == "pattern" else hint
    elif err.validator == "required":
        missing = err.message.split("'")[1] if "'" in err.message else err.message
        path, message = (f"{path}.{missing}" if path else missing), "required key is missing"
    elif err.validator == "format":
        message = f"{err.instance!r} is not a host name or IP address"
    elif err.validator == "maxLength":
        message = f"{len(err.instance)} characters, more than {err.validator_value}"
    return [error(code, path, message, hint)]


def validate(config: dict) -> list[Diagnostic]:
    """Every schema problem, one diagnostic each (code SCHEMA_<validator>), then the sweep's.
    A number that is not finite is one SCHEMA_FINITE line at its key (jsonschema lets NaN
    pass every range: `nan < 0` is false), and nothing else at that key."""
    out = not_finite(config)
    bad = {d.path for d in out}
    for err in sorted(_validator().iter_errors(config),
                      key=lambda e: list(map(str, e.absolute_path))):
        out += [d for d in _diagnostics(err) if d.path not in bad]
    return out + check_sweep(config)


def not_finite(node, parts: tuple = ()) -> list[Diagnostic]:
    """One SCHEMA_FINITE error per NaN or infinity anywhere in the config (a swept value
    too): no key of specc takes one."""
    import math

    if isinstance(node, float) and not math.isfinite(node):
        path = _path(parts)
        return [error("SCHEMA_FINITE", path, f"{node} is not a finite number",
                      "give a finite number (nan and inf are refused)")]
    if isinstance(node, dict):
        return [d for k, v in node.items() for d in not_finite(v, (*parts, k))]
    if isinstance(node, (list, tuple)):
        return [d for i, v in enumerate(node) for d in not_finite(v, (*parts, i))]
    return []


def _sets(value, rest: list[str]) -> bool:
    """Whether a (zipped) axis value sets the dotted key `rest` inside it."""
    for key in rest:
        if not isinstance(value, dict) or key not in value:
            return False
        value = value[key]
    return True


def check_sweep(config: dict) -> list[Diagnostic]:
    """What the matrix would get wrong silently: an engine key the chosen engine does not
    have (dropped from the launch), the engine itself (one adapter lowers the whole plan),
    and two axes that set the same key (one replaces the other's values)."""
    sweep = config.get("sweep") if isinstance(config, dict) else None
    if not isinstance(sweep, dict):
        return []
    engine = config["engine"] if isinstance(config.get("engine"), dict) else {}
    chosen = engine.get("name")
    out = []
    for axis, values in sweep.items():
        axis, where = str(axis), f"sweep.{axis}"
        values = values if isinstance(values, list) else []
        parts = axis.split(".")
        if parts[0] != "engine":
            continue
        keys = parts[1:2] or sorted({str(k) for v in values if isinstance(v, dict) for k in v})
        if "name" in keys:
            out.append(error("SWEEP_AXIS", where, "the engine cannot be swept within one plan",
                             "one plan per engine: python -m specc -m engine=sglang,vllm ..."))
            continue
        for key in keys:
            if key in MOVED_TO_SERVER or (chosen in ENGINE_SCHEMAS
                                          and key not in ENGINE_SCHEMAS[chosen]["properties"]):
                found = other_engine_key(chosen, key, where, swept=True)
                if found:
                    out.append(found)
    axes = [str(a) for a in sweep]
    for outer in axes:
        for inner in axes:
            rest = inner[len(outer) + 1:].split(".") if inner.startswith(outer + ".") else None
            if rest and any(_sets(v, rest) for v in sweep[outer] or ()):
                out.append(error(
                    "SWEEP_AXIS", f"sweep.{inner}",
                    f"overlaps sweep.{outer}, whose values also set {'.'.join(rest)}: one axis "
                    "would silently replace the other's values",
                    f"give {inner} in one axis only"))
    return out


def _walk(node: dict, parts: list[str]) -> dict | None:
    for part in parts:
        if "anyOf" in node:
            node = next((s for s in node["anyOf"] if s.get("type") == "object"), node)
        props = node.get("properties")
        if props is None or part not in props:
            return None
        node = props[part]
    return node


def subschema(path: str, engine: str | None = None) -> dict | None:
    """The schema for a dotted config path (for checking sweep axis values). Under
    `engine.`, the given engine's, else the first engine that has the key."""
    parts = path.split(".")
    if parts[0] != "engine":
        return _walk(SCHEMA, parts)
    names = [engine] if engine in ENGINE_SCHEMAS else list(ENGINE_SCHEMAS)
    return next((s for n in names if (s := _walk(ENGINE_SCHEMAS[n], parts[1:])) is not None), None)


@lru_cache(maxsize=256)
def _value_validator(path: str, engine: str | None):
    """The validator of one config path's values, made once per path: a swept axis of 1000
    values made 1000 validators (and format checkers)."""
    from jsonschema import Draft202012Validator

    schema = subschema(path, engine)
    return None if schema is None else Draft202012Validator(schema, format_checker=_format_checker())


def validate_value(path: str, value) -> str | None:
    """None if `value` may stand at `path`, else the reason."""
    engine = value.get("name") if path == "engine" and isinstance(value, dict) else None
    validator = _value_validator(path, engine if isinstance(engine, str) else None)
    if validator is None:
        return "not a config key that can be swept"
    errs = list(validator.iter_errors(value))
    if errs and path in _OWN_WORDS and errs[0].validator in ("minimum", "exclusiveMinimum"):
        return _OWN_WORDS[path][0]
    return errs[0].message if errs else None


def _keys_under(node: dict, prefix: str):
    for key, sub in (node.get("properties") or {}).items():
        path = f"{prefix}{key}"
        yield path
        for part in [sub] + list(sub.get("anyOf") or ()):   # a nullable section
            if isinstance(part, dict) and part.get("type") == "object":
                yield from _keys_under(part, path + ".")


@lru_cache(maxsize=1)
def config_keys() -> tuple[str, ...]:
    """Every dotted key a config may set (the schema's, each engine's own included)."""
    keys = list(_keys_under(SCHEMA, ""))
    for engine in ENGINE_SCHEMAS.values():
        keys += _keys_under(engine, "engine.")
    return tuple(dict.fromkeys(keys))


def did_you_mean(word: str, choices, cutoff: float = 0.75) -> str | None:
    """The choice closest to a mistyped `word` (a key, a config option), None if none is close."""
    import difflib

    found = difflib.get_close_matches(word, list(choices), n=1, cutoff=cutoff)
    return found[0] if found else None


def unknown_key_hint(key: str) -> str | None:
    """"did you mean KEY?" for a dotted key no config has, None if no key is close: in a known
    section, the closest of its keys by name; else the closest whole key (a mistyped
    section)."""
    parent, _, name = key.rpartition(".")
    keys = config_keys()
    if parent == "" or parent in keys:
        siblings = {k.rpartition(".")[2]: k for k in keys if k.rpartition(".")[0] == parent}
        close = siblings.get(did_you_mean(name, siblings) or "")
    else:
        close = did_you_mean(key, keys, cutoff=0.85)
    return f"did you mean {close}?" if close and close != key else None


def facts_for_missing(config: dict) -> list[Diagnostic]:
    """Facts written in a config group say which model they describe (`facts_for`): without
    it, a path overridden to another model would be sized with these facts."""
    pair = config["model_pair"] if isinstance(config.get("model_pair"), dict) else {}
    out = []
    for which in ("target", "draft"):
        model = pair.get(which)
        if isinstance(model, dict) and model.get("facts") and model.get("facts_for") is None:
            out.append(error("FACTS_FOR", f"model_pair.{which}.facts_for",
                             f"model_pair.{which}.facts are given without the model they "
                             "describe", f"add facts_for: {model.get('path')} next to them "
                             "(the facts are used only while path is that model)"))
    return out


# --- defaults ----------------------------------------------------------------------------

#: Sections whose keys a config may leave out, and the shipped option that says each key's
#: default: the one place it is said. Compile fills the gaps, so the plan holds every value
#: and no later reader (rules, adapters, the point runner) carries a default of its own.
DEFAULTED = {"benchmark": "benchmark/default.yaml", "readiness": "readiness/default.yaml",
             "server": "server/default.yaml"}
#: The simulator's own section (engine=sim), from its option's `sim` mapping.
SIM_DEFAULTS = "engine/sim.yaml"


@cache
def conf_dir() -> Path:
    """The Hydra config groups: specc/conf/ where specc is installed from a wheel (setup.py maps
    the checkout's conf/ onto the package `specc.conf`), else the checkout's top-level conf/
    (a checkout, an editable install). The installed copy wins, so that a stray top-level
    `conf/` in site-packages is never read."""
    package = Path(__file__).resolve().parent.parent
    installed = package / "conf"
    return installed if (installed / "config.yaml").is_file() else package.parent / "conf"


CONF_DIR = conf_dir()


def _shipped(conf_dir: str, relpath: str) -> dict:
    import yaml

    with open(os.path.join(conf_dir, relpath)) as f:
        return yaml.safe_load(f) or {}


def shipped_defaults(relpath: str) -> dict:
    """The keys of a shipped config option (relative to the conf dir), as YAML says them."""
    return dict(_shipped(str(CONF_DIR), relpath))


def with_defaults(config: dict) -> dict:
    """A schema-valid config with every key of the DEFAULTED sections (and engine.sim on the
    simulator) present: what the config leaves out, the shipped option says."""
    cfg = dict(config)
    for section, relpath in DEFAULTED.items():
        given = cfg[section] if isinstance(cfg.get(section), dict) else {}
        cfg[section] = {**shipped_defaults(relpath), **given}
    engine = cfg.get("engine")
    if isinstance(engine, dict) and engine.get("name") == "sim":
        cfg["engine"] = {**engine, "sim": {**shipped_defaults(SIM_DEFAULTS)["sim"],
                                           **(engine.get("sim") or {})}}
    return cfg


# --- paths -------------------------------------------------------------------------------

def _model_path(path):
    """`~` expanded; a local directory made absolute (the server starts in the run dir);
    a hub id left alone."""
    if not isinstance(path, str):
        return path
    expanded = os.path.expanduser(path)
    return os.path.abspath(expanded) if os.path.exists(expanded) else expanded


def _file_path(path):
    return os.path.abspath(os.path.expanduser(path)) if isinstance(path, str) else path


#: Paths read at compile time and again at run time (by the server, the load generator,
#: plan.sh from the run dir): resolved once, here, so both read the same file.
RESOLVED_PATHS = {"model_pair.target.path": _model_path, "model_pair.draft.path": _model_path,
                  "model_pair.target.facts_for": _model_path,
                  "model_pair.draft.facts_for": _model_path,
                  "benchmark.dataset_path": _file_path}


def _apply(node, parts: list[str], fn) -> None:
    for key in parts[:-1]:
        node = node.get(key) if isinstance(node, dict) else None
    if isinstance(node, dict) and node.get(parts[-1]) is not None:
        node[parts[-1]] = fn(node[parts[-1]])


def resolve_paths(config: dict) -> dict:
    """A schema-valid config with its file paths resolved (`~`, relative), sweep values too."""
    import copy

    cfg = copy.deepcopy(config)
    sweep = cfg.get("sweep") or {}
    for path, fn in RESOLVED_PATHS.items():
        _apply(cfg, path.split("."), fn)
        for axis, values in sweep.items():
            if axis == path:
                sweep[axis] = [fn(v) for v in values]
            elif path.startswith(axis + "."):
                for v in values:
                    _apply(v, path[len(axis) + 1:].split("."), fn)
    return cfg
