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
        arch = (text.get("architectures") or raw.get("architectures") or [None])[0]
        if arch:
            values["architecture"] = arch
            sources["architecture"] = where
        if weight_gb is not None:
            values["weight_gb"] = weight_gb
            sources["weight_gb"] = str(Path(path) / "model.safetensors.index.json")
    return ModelFacts(path=path, values=values, sources=sources)
