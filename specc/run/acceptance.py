"""A point's acceptance length, read the way the plan's recipe says (no engine knowledge here).

Before the point: the recipe's counters. After: the counters again and, as a
fallback, the figure the server keeps itself. Counter differences give the
point's own figure (scope "run"); the server's figure covers everything since
it started, warm-up included (scope "cumulative"), and is labelled so.
"""

from __future__ import annotations

import math

import httpx

from specc.plan import Acceptance, CounterRatio, ServerField
from specc.run.answers import (UNKNOWN_DEPTH_BOUND, BadAnswer, check_accept_length,
                                get_capped, loads)


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
    appears only once incremented). BadAnswer past the byte cap or the time limit."""
    try:
        status, body = await get_capped(client, url + recipe.path)
    except httpx.HTTPError:
        return None
    if status != 200:
        return None
    values = prometheus_values(body.decode("utf-8", "replace"))
    return {name: values.get(name, 0.0) for name in (recipe.numerator, recipe.denominator)}


def _num(v: float) -> str:
    return f"{v:.0f}" if v.is_integer() else f"{v:g}"


def counter_ratio(recipe: CounterRatio, before: dict | None, after: dict | None,
                  bound: float = UNKNOWN_DEPTH_BOUND) -> tuple[float | None, str | None]:
    """(offset + delta(numerator) / delta(denominator), None); (None, None) without
    both reads or when the denominator did not move (nothing speculated); (None, why)
    when the counters cannot be true: not finite, going back (a reset between the
    reads), a denominator that moved by less than one pass, or a ratio outside
    [1, bound]."""
    if not before or not after:
        return None, None
    for name in (recipe.numerator, recipe.denominator):
        for v in (before[name], after[name]):
            if not math.isfinite(v):
                return None, f"counter {name} read {v}"
        if after[name] < before[name]:
            return None, (f"counter {name} went back from {_num(before[name])} to "
                          f"{_num(after[name])} between the reads (a counter reset?)")
    den = after[recipe.denominator] - before[recipe.denominator]
    if den == 0:
        return None, None
    if den < 1:
        return None, f"counter {recipe.denominator} moved by only {den:g} over the point"
    value = recipe.offset + (after[recipe.numerator] - before[recipe.numerator]) / den
    value, why = check_accept_length(value, bound)
    if value is None:
        return None, f"{recipe.numerator} / {recipe.denominator}: {why}"
    return round(value, 4), None


def _dig(data, dotted: str):
    for key in dotted.split("."):
        if isinstance(data, list) and key.isdigit() and int(key) < len(data):
            data = data[int(key)]
        elif isinstance(data, dict) and key in data:
            data = data[key]
        else:
            return None
    return data


async def read_field(client: httpx.AsyncClient, url: str, source: ServerField,
                     bound: float = UNKNOWN_DEPTH_BOUND) -> tuple[float | None, str | None]:
    """The server's own figure from the first endpoint that answers 200: (value, None);
    (None, None) if absent or 0 (nothing speculated yet); (None, why) if it cannot be true."""
    for path in source.paths:
        try:
            status, body = await get_capped(client, url + path)
        except httpx.HTTPError:
            continue
        except BadAnswer as e:
            return None, f"{path}: {e}"
        if status != 200:
            continue
        try:
            value = _dig(loads(body), source.field)
        except BadAnswer as e:
            return None, f"{path}: {e}"
        if value is None or (value == 0 and not isinstance(value, bool)):
            return None, None
        value, why = check_accept_length(value, bound)
        if value is None:
            return None, f"{path} {source.field}: {why}"
        return round(value, 4), None
    return None, None


class AcceptanceReading:
    """Snapshot before a point, `finish` after it: (accept length, scope) or (None, None).
    ``bound`` is the most a verify pass can yield (``answers.accept_bound``); a figure
    the server's numbers make impossible is left unknown, its reason in ``note``."""

    def __init__(self, recipe: Acceptance | None, bound: float = UNKNOWN_DEPTH_BOUND):
        self.recipe = recipe
        self.bound = bound
        self.before: dict | None = None
        self.note: str | None = None

    async def start(self, client: httpx.AsyncClient, url: str) -> None:
        if self.recipe and self.recipe.run:
            try:
                self.before = await read_counters(client, url, self.recipe.run)
            except BadAnswer as e:
                self.note = f"{self.recipe.run.path}: {e}"

    async def finish(self, client: httpx.AsyncClient, url: str) -> tuple[float | None, str | None]:
        if self.recipe is None:
            return None, None
        notes = [self.note] if self.note else []
        if self.recipe.run and self.before is not None:
            try:
                after = await read_counters(client, url, self.recipe.run)
            except BadAnswer as e:
                after, notes = None, notes + [f"{self.recipe.run.path}: {e}"]
            value, why = counter_ratio(self.recipe.run, self.before, after, self.bound)
            if value is not None:
                return value, "run"
            if why:
                notes.append(why)
        if self.recipe.cumulative:
            value, why = await read_field(client, url, self.recipe.cumulative, self.bound)
            if why:
                notes.append(why)
            if value is not None:
                self.note = "; ".join(notes) or None
                return value, self.recipe.cumulative.scope
        self.note = "; ".join(notes) or None
        return None, None
