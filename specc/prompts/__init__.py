"""The prompts a point sends: file datasets (datasets.py) and prompt sets by category
(promptsets.py). Pure reading, shared by compile (which checks a dataset before anything
launches) and run (which sends it); what both build on is here.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Prompt:
    text: str
    input_tokens: int
    output_tokens: int  # requested output length
    category: str | None = None   # prompt sets by category (specc.prompts.promptsets)
    id: str | None = None         # the prompt's id in its set


class DatasetError(ValueError):
    """A user-fixable dataset problem (missing file, empty dataset, bad JSON)."""


def count_tokens(text: str) -> int:
    """Word count: the simulator's token count."""
    return len(text.split())
