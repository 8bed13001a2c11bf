"""A point's acceptance length, read the way the plan's recipe says (no engine knowledge here).

Before the point: the recipe's counters. After: the counters again and, as a
fallback, the figure the server keeps itself. Counter differences give the
point's own figure (scope "run"); the server's figure covers everything since
it started, warm-up included (scope "cumulative"), and is labelled so.
"""

from __future__ import annotations

import httpx

from specc.plan import Acceptance, CounterRatio, ServerField


def prometheus_values(text: str) -> dict[str, float]:
    """`name{labels} value` lines -> {name: sum over label sets}."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        try:
            name_part, value = line.rsplit(None, 1)
            name = name_part.split("{", 1)[0]
            out[name] = out.get(name, 0.0) + float(value)
        except ValueError:
            continue
    return out


async def read_counters(client: httpx.AsyncClient, url: str, recipe: CounterRatio) -> dict | None:
    """The recipe's two counters now; None when the endpoint does not answer 200.
    A counter the endpoint does not list yet is 0 (a labelled Prometheus counter
    appears only once incremented)."""
    try:
        r = await client.get(url + recipe.path, timeout=10.0)
    except httpx.HTTPError:
        return None
    if r.status_code != 200:
        return None
    values = prometheus_values(r.text)
    return {name: values.get(name, 0.0) for name in (recipe.numerator, recipe.denominator)}


def counter_ratio(recipe: CounterRatio, before: dict | None, after: dict | None) -> float | None:
    """offset + delta(numerator) / delta(denominator); None without a positive denominator."""
    if not before or not after:
        return None
    den = after[recipe.denominator] - before[recipe.denominator]
    if den <= 0:
        return None
    return round(recipe.offset + (after[recipe.numerator] - before[recipe.numerator]) / den, 4)


def _dig(data, dotted: str):
    for key in dotted.split("."):
        if isinstance(data, list) and key.isdigit() and int(key) < len(data):
            data = data[int(key)]
        elif isinstance(data, dict) and key in data:
            data = data[key]
        else:
            return None
    return data


async def read_field(client: httpx.AsyncClient, url: str, source: ServerField) -> float | None:
    """The server's own figure from the first endpoint that answers 200; None if absent or 0."""
    for path in source.paths:
        try:
            r = await client.get(url + path, timeout=10.0)
        except httpx.HTTPError:
            continue
        if r.status_code != 200:
            continue
        try:
            value = _dig(r.json(), source.field)
        except ValueError:
            return None
        return round(float(value), 4) if isinstance(value, (int, float)) and value else None
    return None


class AcceptanceReading:
    """Snapshot before a point, `finish` after it: (accept length, scope) or (None, None)."""

    def __init__(self, recipe: Acceptance | None):
        self.recipe = recipe
        self.before: dict | None = None

    async def start(self, client: httpx.AsyncClient, url: str) -> None:
        if self.recipe and self.recipe.run:
            self.before = await read_counters(client, url, self.recipe.run)

    async def finish(self, client: httpx.AsyncClient, url: str) -> tuple[float | None, str | None]:
        if self.recipe is None:
            return None, None
        if self.recipe.run and self.before is not None:
            after = await read_counters(client, url, self.recipe.run)
            value = counter_ratio(self.recipe.run, self.before, after)
            if value is not None:
                return value, "run"
        if self.recipe.cumulative:
            value = await read_field(client, url, self.recipe.cumulative)
            if value is not None:
                return value, self.recipe.cumulative.scope
        return None, None
