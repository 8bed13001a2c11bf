"""Model facts: read from the model's own config.json when it is readable, else from conf.

Each fact carries its source, so the plan can say where every number came from.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from specc.engines.sglang import derived_context_length

#: Keys taken from config.json (or its text_config for multimodal wrappers).
CONFIG_KEYS = ("max_position_embeddings", "max_sequence_length", "seq_length", "max_seq_len",
               "model_max_length", "rope_scaling", "vocab_size", "draft_vocab_size",
               "hidden_size", "num_attention_heads", "num_key_value_heads",
               "num_hidden_layers", "head_dim", "kv_lora_rank", "qk_rope_head_dim",
               "n_routed_experts", "num_local_experts", "num_experts_per_tok")


@dataclass(frozen=True)
class ModelFacts:
    """What specc knows about one model, and where each value came from."""

    path: str
    values: dict = field(default_factory=dict)
    sources: dict = field(default_factory=dict)

    def get(self, key, default=None):
        return self.values.get(key, default)

    @property
    def context_length(self) -> int | None:
        """The context length as SGLang derives it (rope rules), or None if unknown."""
        if not any(k in self.values for k in CONFIG_KEYS[:5]):
            return None
        return derived_context_length(self.values)

    @property
    def architecture(self) -> str | None:
        return self.values.get("architecture")

    def to_json(self) -> dict:
        return {"path": self.path, "values": self.values, "sources": self.sources,
                "derived_context_length": self.context_length}


@lru_cache(maxsize=64)
def read_config_json(path: str) -> tuple[dict, str, float | None] | None:
    """(config, file, total weight GB from the safetensors index) for a model directory
    (or a config.json file itself); None if unreadable. Shared with the simulator."""
    p = Path(os.path.expanduser(path))   # unknown ~user: left as is, no error
    if p.name == "config.json" and p.is_file():
        p = p.parent
    cfg_file = p / "config.json"
    try:
        raw = json.loads(cfg_file.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(raw, dict):
        return None
    weight_gb = None
    try:
        index = json.loads((p / "model.safetensors.index.json").read_text())
        weight_gb = float(index["metadata"]["total_size"]) / 1e9
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return raw, str(cfg_file), weight_gb


def engine_architecture(raw: dict) -> str | None:
    """The architecture an engine dispatches on: ``hf_config.architectures[0]``,
    i.e. a multimodal wrapper's own (``KimiK25ForConditionalGeneration``), not
    its text_config's (SGLang 0.5.23 srt/arg_groups/speculative_hook.py reads
    ``model_config.hf_config.architectures[0]``)."""
    text = raw.get("text_config") if isinstance(raw.get("text_config"), dict) else {}
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
        return (facts.get("kv_lora_rank") + (facts.get("qk_rope_head_dim") or 64)) * layers * width
    heads = facts.get("num_attention_heads") or 1
    head_dim = facts.get("head_dim") or (facts.get("hidden_size") or 0) // heads
    kv_per_gpu = max(1.0, (facts.get("num_key_value_heads") or heads) / tp)
    return 2 * kv_per_gpu * head_dim * layers * width


def resolve(model_cfg: dict, conf_path: str) -> ModelFacts:
    """Facts for one model: config.json at `path` wins over facts declared at `conf_path`."""
    path = model_cfg["path"]
    declared = dict(model_cfg.get("facts") or {})
    values: dict = {}
    sources: dict = {}
    for key, value in declared.items():
        values[key] = value
        sources[key] = f"conf:{conf_path}.facts.{key}"
    found = read_config_json(path)
    if found is not None:
        raw, cfg_file, weight_gb = found
        for key in CONFIG_KEYS + ("architecture",):  # the model's own file wins whole
            values.pop(key, None)
            sources.pop(key, None)
        text = raw.get("text_config") if isinstance(raw.get("text_config"), dict) else raw
        where = cfg_file + (":text_config" if text is not raw else "")
        for key in CONFIG_KEYS:
            if key in text:
                values[key] = text[key]
                sources[key] = where
        arch = engine_architecture(raw)
        if arch:
            values["architecture"] = arch
            sources["architecture"] = cfg_file if raw.get("architectures") else where
        if weight_gb is not None:
            values["weight_gb"] = weight_gb
            sources["weight_gb"] = str(Path(path) / "model.safetensors.index.json")
    return ModelFacts(path=path, values=values, sources=sources)
