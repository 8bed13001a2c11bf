"""Token emission: the SSE response the scheduler feeds (``data: ...`` chunks, ``[DONE]``),
and which tokens show their text (``HeldText``)."""

from __future__ import annotations

import asyncio
import random
import time

from starlette.responses import Response

from . import truth
from .arrivals import GENERATION_PATHS, OPEN, Arrivals


class TruncatedStream(Exception):
    pass


#: An HTTP/1.1 chunk of no bytes: the end of a chunked body, never a step's output.
EMPTY_CHUNK = b"0\r\n\r\n"
#: A UTF-8 character is at most 4 bytes: a byte-level tokenizer splits one over up to 4
#: tokens, the first 3 of which complete nothing and show no text.
MAX_SPLIT = 3


class HeldText:
    """Which of a request's tokens show no text, as a real engine's detokenizer does it:
    SGLang (and vLLM) hold back the text of a token that does not complete a UTF-8
    character until one does, and never send it when the stream ends first (max_tokens
    cut the character); special tokens under ``ignore_eos`` show none either. The usage
    counts them all.

    A ``rate`` share of requests, drawn from (seed, prompt, max tokens), carries one run of
    such tokens: a character split over 2-4 tokens inside the answer, or at its end when
    max_tokens ends it (1-3 tokens cut short, or a run of special tokens with
    ``ignore_eos``). The first token always shows its text, so every answer has a first
    token time. The same request holds the same tokens on every run."""

    __slots__ = ("start", "end")

    def __init__(self, seed: int, prompt: str, limit: int, by_length: bool, ignore_eos: bool,
                 rate: float):
        self.start = self.end = 0               # tokens [start, end) show no text yet
        rng = random.Random(f"{seed}|textless|{limit}|{prompt}")
        if rate <= 0 or rng.random() >= rate:
            return
        k = rng.randint(1, MAX_SPLIT)
        if by_length and rng.random() < 0.5:    # the stream ends inside it: never shown
            if ignore_eos and rng.random() < 0.5:
                k = rng.randint(1, max(1, limit // 4))   # trailing special tokens
            k = min(k, limit - 1)                # the first token shows text (a TTFT)
            self.start, self.end = limit - k, limit
        elif limit > k + 1:                      # the token after the run completes it
            self.start = rng.randrange(1, limit - k)
            self.end = self.start + k

    def visible(self, n: int) -> int:
        """Of the first ``n`` tokens, how many have shown their text."""
        return self.start if self.start < n <= self.end else n


class SimStream(Response):
    """SSE response fed by the scheduler; ends with ``data: [DONE]``.

    Hot path: when uvicorn's raw ``send`` is reachable (the ASGI wrapper puts it
    in the scope), the scheduler pre-builds each step's chunk before the step's
    deadline and writes it, already framed as an HTTP/1.1 chunk, straight to
    the transport at the deadline; h11 still writes the headers and the final
    zero-length chunk, so the framing stays consistent.  Otherwise (HTTP/1.0,
    other servers) the chunks go through ASGI ``send`` from this task.
    """

    media_type = "text/event-stream"

    def __init__(self, app, submit, make_chunk):
        self.a, self.submit, self.make_chunk = app, submit, make_chunk
        self.status_code = 200
        self.background = None
        self.raw_headers = [(b"content-type", b"text/event-stream; charset=utf-8"),
                            (b"cache-control", b"no-cache")]

    async def __call__(self, scope, receive, send) -> None:
        f = self.a.sim.fault
        transport = None
        raw = scope.get("specc.sim.raw_send")
        if scope.get("http_version") == "1.1" and raw is not None:
            transport = getattr(getattr(raw, "__self__", None), "transport", None)
        await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
        r = self.submit()
        r.build = self.make_chunk(r)
        if f is not None and f.name == "truncate_stream":
            r.cut = int(f.arg) if f.arg is not None else max(1, r.max_new // 2)
        if transport is not None:
            def write(data: bytes, _t=transport, _r=r) -> None:
                if _t.is_closing():
                    _r.aborted = True
                elif data != EMPTY_CHUNK:   # a step that showed no text (HeldText) sends
                    _t.write(data)          # nothing: a zero-length chunk ends the body
            r.writer = write

        async def watch() -> None:
            while True:
                msg = await receive()
                if msg["type"] == "http.disconnect":
                    r.aborted = True
                    r.event.set()
                    return
        watcher = asyncio.ensure_future(watch())
        try:
            while True:
                await r.event.wait()
                r.event.clear()
                if r.aborted:
                    return
                if r.truncated:
                    raise TruncatedStream()
                if r.writer is not None:
                    if r.finished:
                        await send({"type": "http.response.body", "body": b"", "more_body": False})
                        return
                    continue
                n, r.pending = r.pending, 0
                if n == 0 and not r.finished:
                    continue
                if r.cut is not None and len(r.tokens) >= r.cut and not r.finished:
                    r.aborted = True
                    raise TruncatedStream()
                data = r.build(r, r.finished)
                truth.TRUTH.token(time.monotonic(), r.due, r.rid, n, not r.first_sent)
                r.first_sent = True
                if r.finished:
                    await send({"type": "http.response.body", "body": data + b"data: [DONE]\n\n",
                                "more_body": False})
                    return
                await send({"type": "http.response.body", "body": data, "more_body": True})
        finally:
            r.aborted = r.aborted or not r.finished
            watcher.cancel()


def raw_send_wrapper(app, arrivals: Arrivals | None = None, slow_http_s: float = 0.0):
    """ASGI wrapper: expose uvicorn's own ``send`` to SimStream (see its doc), hand a
    generation request its arrival (its connection's first bytes: arrivals.py; the route
    queues it), and tell ``arrivals`` when any other request holds no step back and when
    the response ended. ``slow_http_s``: the ``slow_http`` fault's time per request."""
    busy = [0.0]   # slow_http: when the HTTP side is free again (loop clock)

    async def asgi(scope, receive, send):
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        scope["specc.sim.raw_send"] = send
        conn = scope.get("specc.sim.conn")
        if arrivals is None or conn is None:
            await app(scope, receive, send)
            return
        if scope["path"] in GENERATION_PATHS and conn.state == OPEN:
            scope["specc.sim.arrival"] = conn.arrival
            if slow_http_s:   # one at a time, as a parser starved of CPU; the scheduler
                loop = asyncio.get_running_loop()   # runs meanwhile
                busy[0] = max(busy[0], loop.time()) + slow_http_s
                await asyncio.sleep(busy[0] - loop.time())
        else:
            arrivals.queued(conn)
        try:
            await app(scope, receive, send)
        finally:
            arrivals.queued(conn)
            arrivals.done(conn)
    return asgi

