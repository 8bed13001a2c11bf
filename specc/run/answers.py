"""A server's answers are untrusted input: the checks they pass before they become numbers.

One place for the policy (docs/trust-server-answers.md has the table): JSON that is
not plain JSON (NaN, Infinity, nested past any real answer), token counts that are
not counts, a response body past its byte cap, an accept length outside what the
speculation setting can produce. Every check returns or raises one line that says
what the server sent, never a traceback.
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from specc.plan import ServerParams

#: A response body may hold this much per token asked for, plus BODY_BASE_BYTES: a
#: streamed chunk is a few hundred bytes of JSON around a token's text, so this is
#: ~10x what a real engine sends, and a flooding server is cut off within a few MiB.
BODY_BYTES_PER_TOKEN = 4096
BODY_BASE_BYTES = 1 << 20
#: An accept length's ceiling when the plan does not say the speculation's depth (the
#: engine picks its own steps): no supported engine verifies 64 tokens in one pass.
UNKNOWN_DEPTH_BOUND = 64.0


#: A side read's answer (/metrics, /server_info) may hold this many bytes, and take this long.
SIDE_READ_CAP = 16 << 20
SIDE_READ_S = 30.0


class BadAnswer(ValueError):
    """What a server sent is not a valid answer; the message says what was wrong."""


def body_cap(max_tokens: int) -> int:
    """The byte cap of one response body, generous for ``max_tokens`` tokens."""
    return BODY_BASE_BYTES + BODY_BYTES_PER_TOKEN * max(int(max_tokens or 0), 0)


def _no_constant(name: str):
    raise BadAnswer(f"JSON holds {name}")


def _finite(text: str) -> float:
    v = float(text)
    if not math.isfinite(v):
        raise BadAnswer(f"JSON holds {text[:20]}, past a float's range")
    return v


def loads(text: bytes | str):
    """json.loads for a server's answer: plain JSON only (BadAnswer for NaN, Infinity,
    nesting past the interpreter's recursion limit, or anything that is not JSON)."""
    try:
        return json.loads(text, parse_constant=_no_constant, parse_float=_finite)
    except BadAnswer:
        raise
    except RecursionError:
        raise BadAnswer("JSON nested too deep") from None
    except ValueError as e:
        raise BadAnswer(f"not JSON ({str(e)[:80]})") from None


def short(value, n: int = 60) -> str:
    """A value a server sent, for a reason line."""
    s = repr(value)
    return s if len(s) <= n else s[:n] + "..."


def token_count(value, what: str = "completion_tokens") -> int:
    """A token count a server reported: a non-negative integer, else BadAnswer."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        if isinstance(value, float) and value.is_integer() and value >= 0:
            return int(value)
        raise BadAnswer(f"server sent {what} {short(value)}, not a token count")
    return value


def accept_bound(server_params: ServerParams | None) -> float:
    """The most tokens one verify pass can yield for a server's speculation setting:
    steps + 1 (a chain of num_steps drafts, or a tree num_steps deep, plus the bonus
    token); an n-gram proposer's num_draft_tokens + 1; UNKNOWN_DEPTH_BOUND when the
    engine picks."""
    steps, ndt = ((server_params.num_steps, server_params.num_draft_tokens)
                  if server_params is not None else (None, None))
    if isinstance(steps, int) and not isinstance(steps, bool) and steps > 0:
        return float(steps + 1)
    if isinstance(ndt, int) and not isinstance(ndt, bool) and ndt > 0:
        return float(ndt + 1)
    return UNKNOWN_DEPTH_BOUND


def check_accept_length(value, bound: float) -> tuple[float | None, str | None]:
    """(value, None) when an accept length is a finite number in [1, bound], else
    (None, why)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None, f"not a number ({short(value)})"
    if not math.isfinite(value):
        return None, f"{value} is not a finite number"
    if value < 1.0 or value > bound:
        return None, f"{value:.6g} is outside [1, {bound:g}] for this speculation setting"
    return float(value), None


async def get_capped(client, url: str, *, cap: int = SIDE_READ_CAP,
                     total_s: float = SIDE_READ_S) -> tuple[int, bytes]:
    """GET a server's side endpoint: (status, body). BadAnswer past ``cap`` bytes or
    ``total_s`` seconds (a server that floods or drips cannot hold a point up);
    httpx.HTTPError as httpx raises it."""
    import asyncio

    async def read() -> tuple[int, bytes]:
        async with client.stream("GET", url, timeout=10.0) as r:
            body = bytearray()
            async for chunk in r.aiter_bytes():
                body += chunk
                if len(body) > cap:
                    raise BadAnswer(f"answer past {cap} bytes")
            return r.status_code, bytes(body)

    try:
        return await asyncio.wait_for(read(), total_s)
    except TimeoutError:
        raise BadAnswer(f"no complete answer in {total_s:g} s") from None
