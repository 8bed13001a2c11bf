"""Engine adapters: one per engine, all engine knowledge lives in them."""

from __future__ import annotations

from .base import Engine
from .sglang import SGLang
from .sim import Sim
from .vllm import VLLM

ENGINES: dict[str, type[Engine]] = {"sglang": SGLang, "vllm": VLLM, "sim": Sim}


def get_engine(name: str, version: str | None = None) -> Engine:
    """The adapter for `name`, bound to release `version` (default: the pinned one)."""
    return ENGINES[name](version)


def engine_for_plan(plan) -> Engine:
    """The adapter a compiled plan was made for (engine and engine_info.version)."""
    return get_engine(plan.engine, plan.engine_info.version)
