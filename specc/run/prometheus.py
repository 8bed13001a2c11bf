"""Prometheus text exposition, read: what the acceptance-by-position and schedule-lag
recipes take from a server's /metrics."""

from __future__ import annotations

import re
from collections.abc import Iterator

_LINE = re.compile(r'^([A-Za-z_:][A-Za-z0-9_:]*)(\{[^}]*\})?\s+([-+0-9.eE]+|NaN|[+-]Inf)\s*$')


def samples(text: str) -> Iterator[tuple[str, str, float]]:
    """(metric name, its `{labels}` text or "", value) of every sample line; comments and
    lines that are not samples are skipped."""
    for line in text.splitlines():
        m = _LINE.match(line)
        if not m:
            continue
        try:
            v = float(m.group(3))
        except ValueError:
            continue
        yield m.group(1), m.group(2) or "", v


async def scrape(client, url: str) -> str | None:
    """A server's metrics page as text (size-capped); None when it does not answer 200."""
    from specc.run.answers import get_capped

    try:
        status, body = await get_capped(client, url)
    except Exception:
        return None
    return body.decode("utf-8", "replace") if status == 200 else None
