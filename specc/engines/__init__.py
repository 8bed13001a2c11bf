"""Engine adapters: one per engine, all engine knowledge lives in them."""

from __future__ import annotations

from .base import Engine
from .sglang import SGLang
from .sim import Sim
from .vllm import VLLM

ENGINES: dict[str, type[Engine]] = {"sglang": SGLang, "vllm": VLLM, "sim": Sim}


def get_engine(name: str) -> Engine:
    return ENGINES[name]()
