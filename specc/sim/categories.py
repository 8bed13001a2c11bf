"""Draft acceptance by prompt category: code and math accept more draft tokens than writing.

A request's category rides in its SGLang ``rid`` as ``<anything>/<category>/<prompt id>``
(what specc's load generator sends; a real engine only uses a rid as the request's id).
A request with a category gets its own per-position acceptance: the configured
``--sim-acceptance`` times the category's factor times a factor drawn from
(``--sim-seed``, prompt) in [0.92, 1.08], so the same prompt accepts the same
way in every run and on every server of a sweep. Without one, nothing changes.
"""

from __future__ import annotations

import random

#: Relative acceptance per category (the shipped set's eight, and Spec-Bench/SPEED-Bench
#: names); low-entropy text (code, maths, extraction) is easier for a draft to predict.
FACTORS = {
    "coding": 1.15, "math": 1.12, "math_reasoning": 1.12, "extraction": 1.08,
    "translation": 1.05, "rag": 1.05, "summarization": 1.03, "reasoning": 1.0, "stem": 1.0,
    "qa": 1.0, "humanities": 0.95, "multilingual": 0.92, "roleplay": 0.9, "writing": 0.88,
}
LOW, HIGH = 0.05, 0.98


def category_of(rid) -> str | None:
    """The category in a ``<x>/<category>/<prompt id>`` rid, else None."""
    if not isinstance(rid, str):
        return None
    parts = rid.split("/", 2)
    return parts[1] if len(parts) == 3 and parts[1] and parts[1] != "-" else None


def acceptance(base: float, category: str | None, prompt_key: str, seed: int) -> float | None:
    """The request's per-position acceptance, or None (no category: the configured one)."""
    if category is None:
        return None
    jitter = random.Random(f"{seed}|cat|{prompt_key}").uniform(0.92, 1.08)
    return min(HIGH, max(LOW, base * FACTORS.get(category, 1.0) * jitter))
