"""Model facts: read from the model's own config.json when it is readable, else from the
facts a config group wrote for that model (`facts_for`: never another model's).

Each fact carries its source, so the plan can say where every number came from.
A model's files are untrusted input: only regular files of bounded size are
read, and every field specc uses is checked for type and range; each problem
is kept (naming the file and the field) for the FACTS_INVALID rule to report.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from specc.records import Record, _load

#: Keys taken from config.json (or its text_config for multimodal wrappers).
CONFIG_KEYS = ("max_position_embeddings", "max_sequence_length", "seq_length", "max_seq_len",
               "model_max_length", "rope_scaling", "vocab_size", "draft_vocab_size",
               "hidden_size", "num_attention_heads", "num_key_value_heads",
               "num_hidden_layers", "head_dim", "kv_lora_rank", "qk_rope_head_dim",
               "n_routed_experts", "num_local_experts", "num_experts_per_tok")
#: The keys a context length is derived from.
CONTEXT_KEYS = CONFIG_KEYS[:5]
#: Largest integer fact accepted (lengths, sizes, counts): engines keep them in int32.
MAX_INT = 2**31 - 1
#: Largest rope scaling factor accepted.
MAX_ROPE_FACTOR = 1e6
#: config.json and model.safetensors.index.json are read up to this size (an index of
#: a 1T-parameter checkpoint is a few MB).
MAX_FILE_BYTES = 64 * 2**20


#: A Hugging Face hub id as huggingface_hub's validate_repo_id accepts it: `name` or
#: `org/name`, word characters, '-' and '.', at most 96 per part.
_HUB_ID = re.compile(r"^(\b[\w\-.]+\b/)?\b[\w\-.]{1,96}\b$")


def is_hub_id(path: str) -> bool:
    """A model `path` the engine fetches from the hub: shaped as a hub id and not an existing
    local path (the engines try the local path first, as specc does)."""
    if os.path.lexists(os.path.expanduser(path)):
        return False
    return bool(_HUB_ID.match(path)) and ".." not in path and "--" not in path \
        and not path.endswith(".git")


def path_problem(path: str) -> str | None:
    """Why a local model `path` cannot be served (None: it can, or it is a hub id): it does not
    exist, or it holds no config.json. A hub id is not checked (specc fetches nothing)."""
    if is_hub_id(path):
        return None
    p = Path(os.path.expanduser(path))
    if not os.path.lexists(p):
        return f"{path} does not exist"
    if p.is_dir():
        return None if os.path.lexists(p / "config.json") else \
            f"{path} holds no config.json (not a model directory)"
    if p.name == "config.json":
        return None
    return f"{path} is a file, not a model directory with a config.json"


@dataclass(frozen=True)
class ModelFacts(Record):
    """What specc knows about one model, where each value came from, and what was wrong.
    plan.json states the target's and the draft's (`facts`): to_json / read."""

    path: str
    values: dict[str, Any] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    #: The context length as the engine derives it (rope rules), None if unknown.
    context_length: int | None = None
    #: (fact key or "" for the whole file, one line naming the file and the field).
    problems: tuple[tuple[str, str], ...] = ()
    #: "local" (a directory whose config.json was read) or "hub" (a hub id: not checked).
    location: str = "local"
    #: Why `path` cannot be served (MODEL_PATH), None if it can.
    path_problem: str | None = None
    #: The path the config group's facts describe, when they were dropped because `path` is
    #: another model's (facts_for); None when they were used or there were none.
    dropped_facts_for: str | None = None

    def get(self, key, default=None):
        return self.values.get(key, default)

    @property
    def architecture(self) -> str | None:
        return self.values.get("architecture")

    def to_json(self) -> dict:
        out = {"path": self.path, "location": self.location, "values": self.values,
               "sources": self.sources, "derived_context_length": self.context_length}
        if self.dropped_facts_for is not None:
            out["dropped_facts_for"] = self.dropped_facts_for
        return out

    @classmethod
    def read(cls, value, path: str) -> ModelFacts:
        """The facts plan.json states (to_json's keys): RecordError naming the first misfit.
        What was wrong with the model's files is the compile's to say, not the plan's."""
        data = _load(_StatedFacts, value, path)
        return cls(path=data.path, values=data.values, sources=data.sources,
                   context_length=data.derived_context_length, location=data.location,
                   dropped_facts_for=data.dropped_facts_for)


@dataclass(frozen=True)
class _StatedFacts(Record):
    """ModelFacts as plan.json writes them (ModelFacts.to_json), for the strict reader."""

    path: str
    location: str
    values: dict[str, Any]
    sources: dict[str, str]
    derived_context_length: int | None
    dropped_facts_for: str | None = None


@dataclass(frozen=True)
class ModelConfig:
    """One model directory's config.json, as read: the parts that passed, and the problems."""

    raw: dict | None
    file: str
    weight_gb: float | None = None
    index_file: str = ""
    problems: tuple[tuple[str, str], ...] = ()


def read_bounded(path: Path, limit: int = MAX_FILE_BYTES) -> tuple[bytes | None, str | None]:
    """(content, None), (None, None) if there is no such file, or (None, problem): a model
    file read as every untrusted file is (`specc.files.read_bounded`)."""
    from specc.files import UnreadableFile, read_bounded as read

    try:
        return read(path, limit), None
    except FileNotFoundError:
        return None, None
    except UnreadableFile as e:
        return None, str(e)


def _load_json(path: Path) -> tuple[object, str | None]:
    data, problem = read_bounded(path)
    if data is None:
        return None, problem
    try:
        return json.loads(data.decode("utf-8")), None
    except UnicodeDecodeError as e:
        return None, f"{path}: not UTF-8 ({e.reason} at byte {e.start})"
    except RecursionError:
        return None, f"{path}: not valid JSON (nested too deeply)"
    except json.JSONDecodeError as e:
        return None, f"{path}: not valid JSON ({e.msg} at line {e.lineno} column {e.colno})"
    except ValueError as e:   # a number past int()'s digit limit: a plain ValueError, no position
        return None, f"{path}: not valid JSON ({str(e).split(':')[0]})"


def _shown(value) -> str:
    text = repr(value)
    kind = type(value).__name__
    kind = {"str": "a string", "float": "a float", "bool": "a boolean", "list": "a list",
            "dict": "a mapping", "int": "an integer"}.get(kind, kind)
    return f"{text if len(text) <= 40 else text[:37] + '...'} ({kind})"


def _int_problem(value) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_INT:
        return f"{_shown(value)}; expected an integer from 1 to {MAX_INT}"
    return None


def _rope_problem(value) -> str | None:
    if not isinstance(value, dict):
        return f"{_shown(value)}; expected a mapping or null"
    factor = value.get("factor")
    if factor is not None and (isinstance(factor, bool) or not isinstance(factor, (int, float))
                               or not 0 < factor <= MAX_ROPE_FACTOR):
        return f"factor {_shown(factor)}; expected a number in (0, {MAX_ROPE_FACTOR:g}]"
    original = value.get("original_max_position_embeddings")
    if original is not None and _int_problem(original):
        return f"original_max_position_embeddings {_int_problem(original)}"
    return None


def _checked(section: dict, where: str) -> tuple[dict, list[tuple[str, str]]]:
    """The fields specc uses that pass their type and range; one problem per bad field.
    A null field counts as absent (config.json files write `"head_dim": null`)."""
    good: dict = {}
    problems: list[tuple[str, str]] = []
    for key in CONFIG_KEYS:
        value = section.get(key)
        if value is None:
            continue
        bad = _rope_problem(value) if key == "rope_scaling" else _int_problem(value)
        if bad:
            problems.append((key, f"{where}: {key} is {bad}"))
        else:
            good[key] = value
    archs = section.get("architectures")
    if archs is not None:
        if (not isinstance(archs, list) or not archs
                or not all(isinstance(a, str) and a for a in archs)):
            problems.append(("architecture", f"{where}: architectures is {_shown(archs)}; "
                                             "expected a non-empty list of names"))
        else:
            good["architecture"] = archs[0]
    return good, problems


@lru_cache(maxsize=64)
def load_model_config(path: str) -> ModelConfig:
    """A model directory's (or a config.json file's own) config.json and the weight size from
    its safetensors index. No file there: raw None and no problems (facts come from conf)."""
    p = Path(os.path.expanduser(path))   # unknown ~user: left as is, no error
    if p.name == "config.json" and os.path.lexists(p) and not p.is_dir():
        p = p.parent
    cfg_file = p / "config.json"
    raw, problem = _load_json(cfg_file)
    problems: list[tuple[str, str]] = [("", problem)] if problem else []
    if raw is not None and not isinstance(raw, dict):
        problems.append(("", f"{cfg_file}: {_shown(raw)[:60]} at the top level; "
                             "expected a JSON object"))
        raw = None
    weight_gb = None
    index_file = p / "model.safetensors.index.json"
    if raw is not None:
        index, problem = _load_json(index_file)
        if problem:
            problems.append(("weight_gb", problem))
        elif index is not None:
            total = (index.get("metadata") or {}).get("total_size") \
                if isinstance(index, dict) and isinstance(index.get("metadata"), dict) else None
            if isinstance(total, bool) or not isinstance(total, (int, float)) or not total > 0:
                problems.append(("weight_gb", f"{index_file}: metadata.total_size is "
                                              f"{_shown(total)}; expected a positive byte count"))
            else:
                weight_gb = float(total) / 1e9
    return ModelConfig(raw=raw, file=str(cfg_file), weight_gb=weight_gb,
                       index_file=str(index_file), problems=tuple(problems))


def engine_architecture(raw: dict) -> str | None:
    """The architecture an engine dispatches on: ``hf_config.architectures[0]``,
    i.e. a multimodal wrapper's own (``KimiK25ForConditionalGeneration``), not
    its text_config's (SGLang 0.5.23 srt/arg_groups/speculative_hook.py reads
    ``model_config.hf_config.architectures[0]``)."""
    text = raw["text_config"] if isinstance(raw.get("text_config"), dict) else {}
    return (raw.get("architectures") or text.get("architectures") or [None])[0]


def flatten_config(raw: dict) -> dict:
    """config.json as one flat dict: a wrapper's text_config keys, with the
    wrapper's ``architectures`` (engine_architecture) on top."""
    text = raw.get("text_config")
    if not isinstance(text, dict):
        return dict(raw)
    merged = dict(text)
    arch = engine_architecture(raw)
    if arch:
        merged["architectures"] = [arch]
        merged["text_architectures"] = text.get("architectures")
    return merged


def kv_bytes_per_token(facts: dict, *, tp: int, kv_cache_dtype: str | None = None) -> float:
    """KV-cache bytes one token costs on each GPU (MLA keeps one latent per layer, on every rank).

    ``facts`` in config.json's keys (a flattened text_config)."""
    layers = facts.get("num_hidden_layers") or 0
    width = 1 if "fp8" in str(kv_cache_dtype or "") else 2
    if facts.get("kv_lora_rank"):
        return (facts["kv_lora_rank"] + (facts.get("qk_rope_head_dim") or 64)) * layers * width
    heads = facts.get("num_attention_heads") or 1
    head_dim = facts.get("head_dim") or (facts.get("hidden_size") or 0) // heads
    kv_per_gpu = max(1.0, (facts.get("num_key_value_heads") or heads) / tp)
    return 2 * kv_per_gpu * head_dim * layers * width


def defaulted(values: dict) -> dict[str, tuple[int, str]]:
    """Facts a config.json may leave out, as the engines (and kv_bytes_per_token) take them
    then: key -> (value, the rule), for the review's facts table."""
    out = {}
    heads, hidden = values.get("num_attention_heads"), values.get("hidden_size")
    if values.get("num_key_value_heads") is None and heads:
        out["num_key_value_heads"] = (heads, "num_attention_heads")
    if values.get("head_dim") is None and heads and hidden and not values.get("kv_lora_rank"):
        out["head_dim"] = (hidden // heads, "hidden_size / num_attention_heads")
    return out


def read_config_json(path: str) -> tuple[dict, str, float | None] | None:
    """(config, file, total weight GB from the safetensors index) for a model directory
    (or a config.json file itself); None if there is none or it is unusable. Shared with
    the simulator."""
    found = load_model_config(path)
    if found.raw is None:
        return None
    return found.raw, found.file, found.weight_gb


def declared_facts(model_cfg: dict) -> tuple[dict, str | None]:
    """(the config group's facts that describe this model's `path`, the `facts_for` of facts
    dropped because they describe another model). A group's facts say which model they were
    written for (`facts_for`); a path overridden to another model keeps none of them, so no
    model is ever sized with another's weights or context (issue 27)."""
    declared = dict(model_cfg.get("facts") or {})
    written_for = model_cfg.get("facts_for")
    if declared and written_for is not None and written_for != model_cfg["path"]:
        return {}, written_for
    return declared, None


def resolve(model_cfg: dict, conf_path: str, derive_context=None) -> ModelFacts:
    """Facts for one model: config.json at `path` wins over facts declared at `conf_path`
    (those only while `path` is the model they were written for: declared_facts).

    `derive_context(values) -> int` is the engine's rule for the context length
    (facts know no engine); without it the context length stays unknown.
    """
    path = model_cfg["path"]
    declared, dropped_for = declared_facts(model_cfg)
    values: dict = {}
    sources: dict = {}
    for key, value in declared.items():
        values[key] = value
        sources[key] = f"conf:{conf_path}.facts.{key}"
    found = load_model_config(path)
    problems = list(found.problems)
    if found.raw is not None:
        raw = found.raw
        for key in CONFIG_KEYS + ("architecture",):  # the model's own file wins whole
            values.pop(key, None)
            sources.pop(key, None)
        text = raw.get("text_config")
        where = found.file
        if "text_config" in raw and not isinstance(text, dict):
            problems.append(("", f"{found.file}: text_config is {_shown(text)}; "
                                 "expected a mapping"))
            text = raw
        elif isinstance(text, dict):
            where = found.file + ":text_config"
        else:
            text = raw
        good, bad = _checked(text, where)
        problems += bad
        for key, value in good.items():
            values[key] = value
            sources[key] = where
        if text is not raw and raw.get("architectures") is not None:
            # engines dispatch on the wrapper's own architecture (engine_architecture)
            wrapper, bad = _checked({"architectures": raw["architectures"]}, found.file)
            problems += bad
            if wrapper:
                values["architecture"] = wrapper["architecture"]
                sources["architecture"] = found.file
        if found.weight_gb is not None:
            values["weight_gb"] = found.weight_gb
            sources["weight_gb"] = found.index_file
    context = None
    if derive_context is not None and any(values.get(k) is not None for k in CONTEXT_KEYS):
        context = derive_context(values)
    hub = is_hub_id(path)
    return ModelFacts(path=path, values=values, sources=sources, context_length=context,
                      problems=tuple(dict.fromkeys(problems)), location="hub" if hub else "local",
                      path_problem=None if hub else path_problem(path),
                      dropped_facts_for=dropped_for)
