"""The three APIs on the wire: request bodies, and streamed (SSE) responses parsed
once complete, each event stamped with the time of the read that delivered its last byte."""

from __future__ import annotations

import json
import time

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
    without per-chunk counts gets ``spread_itls``."""
    rec.status = status
    if ts:
        rec.end = ts[-1]
    elif not rec.end:
        rec.end = time.time()
    if status != 200:
        text = bytes(body[:300]).decode("utf-8", "replace").strip().replace("\n", " ")
        rec.error = fail or f"HTTP {status}: {text[:200]}"
        return
    chunk_times: list[float] = []     # content chunks (new text): what a user sees
    chunk_counts: list = []           # ... and the cumulative tokens at each (None: unknown)
    tok_times: list[float] = []       # chunks bench_serving's ITL counts, and their counts
    tok_counts: list = []
    usage_tokens = None
    done = False
    err = None
    prev_len = 0
    pos = 0
    k = 0
    last = len(offs) - 1
    generate = api == "generate"
    chat = api == "chat"
    loads = json.loads
    for line in bytes(body).split(b"\n"):
        end = pos + len(line) + 1
        pos = end
        if not line.startswith(b"data:"):
            continue
        payload = line[5:].strip()
        if payload == b"[DONE]":
            done = True
            continue
        if not payload:
            continue
        while k < last and offs[k] < end:
            k += 1
        try:
            obj = loads(payload)
        except ValueError:
            err = "bad JSON in stream"
            continue
        if not isinstance(obj, dict):
            continue
        if "error" in obj and obj["error"]:
            e = obj["error"]
            err = "server error: " + str(e.get("message", e) if isinstance(e, dict) else e)[:200]
            continue
        if generate:
            meta = obj.get("meta_info") or {}
            if rec.rid is None:
                rec.rid = meta.get("id")
            ct = meta.get("completion_tokens")
            if ct is not None:
                usage_tokens = ct
            if meta.get("spec_verify_ct") is not None:
                rec.verify_ct = meta["spec_verify_ct"]
            text = obj.get("text") or ""
            if text:
                tok_times.append(ts[k])
                tok_counts.append(ct)
            if len(text) > prev_len:
                prev_len = len(text)
                chunk_times.append(ts[k])
                chunk_counts.append(ct)
            continue
        if rec.rid is None:
            rec.rid = obj.get("id")
        usage = obj.get("usage")
        ct = None
        if usage and usage.get("completion_tokens") is not None:
            usage_tokens = ct = usage["completion_tokens"]
        choices = obj.get("choices")
        if choices:
            c0 = choices[0]
            if chat:
                d = c0.get("delta") or {}
                content = d.get("content") or d.get("reasoning_content")
            else:
                content = c0.get("text")
            if content:
                chunk_times.append(ts[k])
                chunk_counts.append(ct)
                tok_times.append(ts[k])
                tok_counts.append(ct)
    rec.chunk_times = chunk_times
    rec.chunk_count = len(chunk_times)
    rec.output_tokens = usage_tokens if usage_tokens is not None else len(chunk_times)
    if chunk_times:
        rec.first_token_t = chunk_times[0]
        rec.ttft = chunk_times[0] - rec.start
        rec.chunk_gaps = [b - a for a, b in zip(chunk_times, chunk_times[1:])]
        if None in tok_counts or None in chunk_counts:
            rec.itls = spread_itls(rec.chunk_gaps, rec.output_tokens)
        else:
            rec.itls = per_token_itls(tok_times, tok_counts)
            rec.chunk_tokens = [b - a for a, b in zip([0] + chunk_counts, chunk_counts)]
    rec.e2e_latency = rec.end - rec.start
    if fail:
        rec.error = fail
    elif err:
        rec.error = err
    elif not done:
        rec.error = "stream ended without [DONE]"
    elif not chunk_times:
        rec.error = "no output tokens"
    elif rec.ignore_eos and rec.output_tokens < rec.requested_output_tokens:
        rec.error = (f"short output: {rec.output_tokens} of "
                     f"{rec.requested_output_tokens} tokens (ignore_eos set)")
    else:
        rec.ok = True


def request_body(api: str, model: str, text: str, max_tokens: int, *,
                 temperature: float = 0.0, ignore_eos: bool = True,
                 request_id: tuple[str, str] | None = None) -> bytes:
    """One request; ``request_id`` = (the engine's request-id field, value): SGLang's
    ``rid``, vLLM's ``request_id``; an engine uses it only as the request's id."""
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
            body["messages"] = [{"role": "user", "content": text}]
        else:
            body["prompt"] = text
    if request_id is not None:
        body[request_id[0]] = request_id[1]
    return json.dumps(body, separators=(",", ":")).encode()
