"""Acceptance per draft position, where the engine counts it (vLLM's per-position counters).

The plan says where (``params.accept_positions``, from the engine adapter):
the Prometheus counter of accepted tokens per position (label ``position``)
and the counter of drafts. Read before and after a point, the rate at
position ``i`` is accepted(i) / drafts over the point: the probability that
the ``i``-th draft token of a proposal was accepted. SGLang counts no such
thing (its acceptance is per request: ``spec_verify_ct``).
"""

from __future__ import annotations

import math
import re

from specc.plan import AcceptPositions
from specc.run.prometheus import samples, scrape


def parse(text: str, recipe: AcceptPositions) -> dict:
    """{"drafts": n, "accepted": {position: n}} from a /metrics text (absent counters: 0)."""
    accepted: dict
    drafts, accepted = 0.0, {}
    label = recipe.label
    for name, labels, v in samples(text):
        if name == recipe.drafts:
            drafts += v
        elif name == recipe.accepted:
            pos = re.search(rf'{label}="(\d+)"', labels)
            if pos:
                k = int(pos.group(1))
                accepted[k] = accepted.get(k, 0.0) + v
    return {"drafts": drafts, "accepted": accepted}


async def read(client, url: str, recipe: AcceptPositions | None) -> dict | None:
    """The counters now; None without a recipe or an answer."""
    if not recipe:
        return None
    text = await scrape(client, url + recipe.path)
    return None if text is None else parse(text, recipe)


def rates(before: dict | None, after: dict | None) -> list[float] | None:
    """Acceptance rate per position over the point (position 0 first); None if unknown,
    or when the counters cannot be true (not finite, going back between the reads, a
    position accepting more than every draft, or more than 64 positions)."""
    if not before or not after:
        return None
    drafts = after["drafts"] - before["drafts"]
    if not math.isfinite(drafts) or drafts < 1 or not after["accepted"]:
        return None
    n = max(after["accepted"]) + 1
    if n > 64:
        return None
    out = []
    for i in range(n):
        r = (after["accepted"].get(i, 0.0) - before["accepted"].get(i, 0.0)) / drafts
        if not (0.0 <= r <= 1.0):      # NaN fails this too
            return None
        out.append(round(r, 4))
    return out
