"""ServerSpec: one resolved server configuration, the unit engines and rules look at."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from specc.facts import ModelFacts, kv_bytes_per_token

#: Algorithms that load a separate draft model from speculation's draft path.
DRAFT_MODEL_ALGORITHMS = ("EAGLE", "EAGLE3", "STANDALONE")


@dataclass(frozen=True)
class ServerSpec:
    """Everything that needs a server restart when it changes."""

    model_pair: dict
    hardware: dict
    engine: dict
    #: The engine-neutral knobs (config `server`), every one present; None: the engine's default.
    server: dict
    speculation: dict
    readiness: dict
    target: ModelFacts
    draft: ModelFacts | None
    #: Where it runs (cluster.name): on Slurm a server may span nodes.
    cluster: str = "local"

    @property
    def algorithm(self) -> str | None:
        return self.speculation.get("algorithm")

    @property
    def speculative(self) -> bool:
        return self.algorithm is not None

    @property
    def uses_draft_model(self) -> bool:
        return self.algorithm in DRAFT_MODEL_ALGORITHMS

    @property
    def gpus_per_server(self) -> int:
        hw = self.hardware
        return hw["tp"] * hw.get("dp", 1) * hw.get("pp", 1)

    @property
    def on_cpu(self) -> bool:
        """hardware.device=cpu: the engine's CPU build, no GPU (conf/hardware/cpu.yaml)."""
        return self.hardware.get("device") == "cpu"

    @property
    def nodes(self) -> int:
        """Nodes one server spans: its GPUs over a node's, rounded up (1 unless multi-node)."""
        if self.on_cpu:
            return 1
        return max(1, -(-self.gpus_per_server // self.hardware["gpus_per_node"]))

    @property
    def spec_triple(self) -> tuple:
        s = self.speculation
        return (s.get("num_steps"), s.get("topk"), s.get("num_draft_tokens"))

    @cached_property
    def loaded_weight_gb_per_gpu(self) -> float:
        """Target + draft weights on each GPU (computed once: every point's memory rule reads it)."""
        return self.weight_gb_per_gpu("target") + self.weight_gb_per_gpu("draft")

    @cached_property
    def kv_bytes_per_token(self) -> float:
        """KV-cache bytes one token costs on each GPU (specc.facts.kv_bytes_per_token)."""
        return kv_bytes_per_token(self.target.values, tp=self.hardware["tp"],
                                  kv_cache_dtype=self.server.get("kv_cache_dtype"))

    def weight_gb_per_gpu(self, which: str = "target") -> float:
        # a server without a draft algorithm (a baseline, NGRAM) loads no draft weights
        facts = self.target if which == "target" else (self.draft if self.uses_draft_model else None)
        if facts is None:
            return 0.0
        shards = self.hardware["tp"] * self.hardware.get("pp", 1)
        return float(facts.get("weight_gb") or 0.0) / shards
