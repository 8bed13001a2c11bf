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
    # multi-turn (benchmark.multi_turn): this request's turn in its conversation (1 = the
    # first, or a single-turn prompt); a first turn carries its conversation's later user
    # turns, each sent with the conversation so far, the server's answers included
    turn: int = 1
    later: tuple[str, ...] = ()


class DatasetError(ValueError):
    """A user-fixable dataset problem (missing file, empty dataset, bad JSON)."""


def count_tokens(text: str) -> int:
    """Word count: the simulator's token count."""
    return len(text.split())


def by_turn(conversations: list[Prompt]) -> list[Prompt]:
    """Each conversation as one request per turn, in order (turn 1 first): the load
    generator sends turn k+1 of a conversation once turn k's answer is in."""
    from dataclasses import replace

    out: list[Prompt] = []
    for c in conversations:
        out.append(replace(c, later=()) if c.later else c)
        out.extend(replace(c, text=t, input_tokens=count_tokens(t), turn=k, later=())
                   for k, t in enumerate(c.later, 2))
    return out
