"""The three APIs on the wire: request bodies, and streamed (SSE) responses parsed
once complete, each event stamped with the time of the read that delivered its last byte."""

from __future__ import annotations

import json
import time

from specc.run.answers import BadAnswer, loads, short, token_count
from specc.run.loadgen.metrics import per_token_itls, spread_itls
from specc.run.loadgen.records import RequestRecord

API_PATHS = {"chat": "/v1/chat/completions", "completions": "/v1/completions",
             "generate": "/generate"}


def finish(rec: RequestRecord, api: str, status: int, body: bytes | bytearray,
           ts: list[float], offs: list[int], fail: str | None) -> None:
    """Fill ``rec`` from a complete (or broken) response body and its read times.

    Per-token ITL counts tokens as bench_serving does: /generate's cumulative
    ``meta_info.completion_tokens`` on every chunk with text; on the OpenAI APIs
    the per-chunk ``usage`` that ``continuous_usage_stats`` asks for (bench_serving
    re-tokenizes the chunk's text instead; specc has no tokenizer).  A stream
    without per-chunk counts gets ``spread_itls``.

    The answer is untrusted (``specc.run.answers``): a field of the wrong type, JSON
    that is not plain JSON, or token counts that contradict what was streamed or
    asked for fail the request with a reason naming what the server sent."""
    rec.status = status
    if ts:
        rec.end = ts[-1]
    elif not rec.end:
        rec.end = time.time()
    if status != 200:
        text = bytes(body[:300]).decode("utf-8", "replace").strip().replace("\n", " ")
        rec.error = fail or f"HTTP {status}: {text[:200]}"
        return
    if not ts:      # bytes without a read time (a body cut short): the end's
        ts, offs = [rec.end], [len(body)]
    s = _Stream(api)
    try:
        s.read(body, ts, offs)
    except BadAnswer as e:
        s.err = str(e)
    rec.rid = s.rid
    wrong = count_mismatch(s, rec.requested_output_tokens)
    chunk_times, chunk_counts = s.chunk_times, s.chunk_counts
    rec.chunk_times = chunk_times
    rec.chunk_count = len(chunk_times)
    # where the server's count and the stream disagree, the stream is the truth
    rec.output_tokens = s.streamed() if wrong or s.usage is None else s.usage
    if chunk_times:
        rec.first_token_t = chunk_times[0]
        rec.ttft = chunk_times[0] - rec.start
        rec.chunk_gaps = [b - a for a, b in zip(chunk_times, chunk_times[1:])]
        if wrong or s.err or None in s.tok_counts or None in chunk_counts:
            rec.itls = spread_itls(rec.chunk_gaps, rec.output_tokens)
        else:
            rec.itls = per_token_itls(s.tok_times, s.tok_counts)
            rec.chunk_tokens = [b - a for a, b in zip([0] + chunk_counts, chunk_counts)]
    rec.verify_ct = _verify_ct(s.verify_ct, rec.output_tokens)
    if rec.keep_answer:
        rec.answer = "".join(s.text)
    rec.e2e_latency = rec.end - rec.start
    if fail:
        rec.error = fail
    elif s.err:
        rec.error = s.err
    elif not s.done:
        rec.error = "stream ended without [DONE]"
    elif not chunk_times:
        rec.error = "no output tokens"
    elif wrong:
        rec.error = wrong
    elif rec.ignore_eos and rec.output_tokens < rec.requested_output_tokens:
        rec.error = (f"short output: {rec.output_tokens} of "
                     f"{rec.requested_output_tokens} tokens (ignore_eos set)")
    else:
        rec.ok = True


def count_mismatch(s: _Stream, requested: int) -> str | None:
    """Why a stream's token counts cannot be true, or None.

    What was streamed is a lower bound, not the count: an engine holds back the text of
    a token that does not complete a UTF-8 character (and of special tokens), and may
    send no chunk for it, so a stream can end with tokens that only the final count
    holds (vLLM under ``ignore_eos``, a character cut by ``max_tokens``).  Impossible,
    and refused: a count (running or final) above the ``max_tokens`` asked for, a final
    count below what was streamed (the running count, or the chunks that each carried a
    token), and a count going back (``_Stream.count``)."""
    streamed = s.streamed()
    reported = s.usage
    if reported is None:
        if requested and streamed > requested:
            return f"server streamed {streamed} chunks for {requested} requested tokens"
        return None
    if (requested and reported > requested) or reported < streamed:
        return (f"server reported {reported} completion tokens for {requested} requested "
                f"and {streamed} streamed")
    return None


def _verify_ct(value, output_tokens: int) -> int | None:
    """A request's verify passes (SGLang's spec_verify_ct) when they can be true: at
    least one, at most one per output token; else unknown."""
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if 1 <= value <= max(output_tokens, 1) else None


def _obj(value, what: str) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise BadAnswer(f"server sent {what} {short(value)}, not an object")
    return value


def _text(value, what: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise BadAnswer(f"server sent {what} {short(value)}, not text")
    return value


class _Stream:
    """One streamed answer, read event by event (BadAnswer on the first wrong field)."""

    def __init__(self, api: str) -> None:
        self.api = api
        self.chunk_times: list[float] = []   # content chunks (new text): what a user sees
        self.chunk_counts: list = []         # ... the running token count at each (None: unknown)
        self.tok_times: list[float] = []     # chunks bench_serving's ITL counts, and their counts
        self.tok_counts: list = []
        self.usage: int | None = None        # the server's last count (final usage / meta_info)
        self.running: int | None = None      # the count on the last chunk of the answer
        self.token_chunks = 0                # chunks that each carried at least one token
        self.verify_ct = None
        self.rid: str | None = None
        self.done = False
        self.err: str | None = None
        self._last = 0                       # counts only grow
        self.text: list[str] = []            # the answer's text (content), in pieces

    def streamed(self) -> int:
        """Tokens the stream proves (a lower bound): the running count the server put on
        its chunks, text or none, else one per chunk that carried a token."""
        return max(self.running or 0, self.token_chunks)

    def count(self, value) -> int:
        n = token_count(value)
        if n < self._last:
            raise BadAnswer(f"server's running completion_tokens went back from {self._last} "
                            f"to {n}")
        self._last = n
        return n

    def read(self, body, ts: list[float], offs: list[int]) -> None:
        pos = k = prev_len = 0
        last = len(offs) - 1
        generate, chat = self.api == "generate", self.api == "chat"
        for line in bytes(body).split(b"\n"):
            end = pos + len(line) + 1
            pos = end
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                self.done = True
                continue
            if not payload:
                continue
            while k < last and offs[k] < end:
                k += 1
            try:
                obj = loads(payload)
            except BadAnswer as e:
                self.err = f"bad JSON in stream: {e}"
                continue
            if not isinstance(obj, dict):
                continue
            if "error" in obj and obj["error"]:
                said = obj["error"]
                self.err = "server error: " + str(
                    said.get("message", said) if isinstance(said, dict) else said)[:200]
                continue
            if generate:
                meta = _obj(obj.get("meta_info"), "meta_info")
                if self.rid is None and meta.get("id") is not None:
                    self.rid = str(meta["id"])[:200]
                ct = meta.get("completion_tokens")
                if ct is not None:     # cumulative on every chunk, text or none: the
                    # last is the final count, the one before what was streamed
                    self.running = self.usage
                    self.usage = ct = self.count(ct)
                if meta.get("spec_verify_ct") is not None:
                    self.verify_ct = meta["spec_verify_ct"]
                text = _text(obj.get("text"), "text")
                if text:
                    self.tok_times.append(ts[k])
                    self.tok_counts.append(ct)
                if len(text) > prev_len:
                    self.text = [text]       # /generate's text is cumulative
                    prev_len = len(text)
                    self.token_chunks += 1
                    self.chunk_times.append(ts[k])
                    self.chunk_counts.append(ct)
                continue
            if self.rid is None and obj.get("id") is not None:
                self.rid = str(obj["id"])[:200]
            usage = _obj(obj.get("usage"), "usage")
            ct = None
            if usage.get("completion_tokens") is not None:
                self.usage = ct = self.count(usage["completion_tokens"])
            choices = obj.get("choices")
            if choices is None:
                continue
            if not isinstance(choices, list):
                raise BadAnswer(f"server sent choices {short(choices)}, not a list")
            if not choices:
                continue
            c0 = _obj(choices[0], "choices[0]")
            if ct is not None:         # continuous_usage_stats: the count so far
                self.running = ct
            if chat:
                d = _obj(c0.get("delta"), "delta")
                content = _text(d.get("content"), "delta.content") or _text(
                    d.get("reasoning_content"), "delta.reasoning_content")
            else:
                content = _text(c0.get("text"), "text")
                # vLLM sends a chunk per token and holds back the text of one that does
                # not complete a UTF-8 character: an empty text is still a token, unless
                # the chunk only closes the stream (its finish reason)
                if not content and c0.get("finish_reason") is None:
                    self.token_chunks += 1
            if content:
                self.text.append(content)
                self.token_chunks += 1
                self.chunk_times.append(ts[k])
                self.chunk_counts.append(ct)
                self.tok_times.append(ts[k])
                self.tok_counts.append(ct)


def request_body(api: str, model: str, text: str, max_tokens: int, *,
                 temperature: float = 0.0, ignore_eos: bool = True,
                 request_id: tuple[str, str] | None = None,
                 messages: list[dict] | None = None) -> bytes:
    """One request; ``request_id`` = (the engine's request-id field, value): SGLang's
    ``rid``, vLLM's ``request_id``; an engine uses it only as the request's id.
    ``messages``: a conversation so far (multi-turn): the chat API sends it as is, the
    text APIs its contents one per line."""
    if messages is not None and api != "chat":
        text = "\n".join(m["content"] for m in messages)
    if api == "generate":
        body = {"text": text, "sampling_params": {"max_new_tokens": max_tokens,
                                                  "ignore_eos": ignore_eos,
                                                  "temperature": temperature},
                "stream": True}
    else:
        body = {"model": model, "max_tokens": max_tokens, "stream": True,
                # per-chunk usage: the tokens each chunk brought, for per-token ITL
                "stream_options": {"include_usage": True, "continuous_usage_stats": True},
                "ignore_eos": ignore_eos,
                "temperature": temperature}
        if api == "chat":
            body["messages"] = messages or [{"role": "user", "content": text}]
        else:
            body["prompt"] = text
    if request_id is not None:
        body[request_id[0]] = request_id[1]
    return json.dumps(body, separators=(",", ":")).encode()
