"""run_load: warm-up, then one benchmark point at a concurrency cap and/or an arrival schedule
(a rate with its burstiness and ramp, or a trace's own times)."""

from __future__ import annotations

import asyncio
import gc
import itertools
import logging
import math
import time
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import urlsplit

from specc.prompts import count_tokens
from specc.prompts.datasets import Prompt
from specc.run.loadgen.client import FastClient, ServerGone
from specc.run.loadgen.httpx_client import HttpxClient
from specc.run.loadgen.metrics import summarize
from specc.run.loadgen.schedule import arrival_offsets
from specc.run.loadgen.records import LoadResult, RequestRecord
from specc.run.loadgen.sse import API_PATHS, request_body

log = logging.getLogger(__name__)

WARMUP_MAX_TOKENS = 8


async def run_load(base_url: str, prompts: list[Prompt], *, api: str = "chat",
                   model: str, concurrency: int | None, request_rate: float = float("inf"),
                   warmup: int = 1, seed: int = 0, timeout_s: float = 600.0,
                   on_request_done: Callable[[RequestRecord], None] | None = None,
                   transport: str = "auto", kernel_timestamps: bool = True,
                   disable_gc: bool = True, temperature: float = 0.0, ignore_eos: bool = True,
                   request_ids: list[tuple[str, str]] | Callable[[int, Prompt], tuple[str, str]]
                   | None = None,
                   keep_sending: Callable[[], bool] | None = None,
                   headers: dict[str, str] | None = None, burstiness: float = 1.0,
                   ramp_s: float = 0.0, send_at: list[float] | None = None,
                   stream: Iterable[tuple[Prompt, float]] | None = None) -> LoadResult:
    """Run one benchmark point; per-request failures become ``ok=False`` records.

    If the server refuses connections (it is gone), no further requests are
    sent: the unsent ones are recorded as failed with ``error="not sent: ..."``
    and ``LoadResult.server_gone`` is set.

    ``keep_sending`` (adaptive stopping) is asked before each request is sent;
    once it says no, the remaining prompts are not sent and leave no record
    (the requests in flight finish and count). ``request_ids[i]`` is the
    (field, value) request ``i`` carries (see ``request_body``). ``headers`` go on every
    request (e.g. the server's ``Authorization``).

    Multi-turn: a prompt with ``turn`` k > 1 continues the conversation of the prompt
    before it. A conversation is one unit of the schedule (and of the concurrency cap):
    its turns go one after the other, each sent once the previous answer is in, with the
    whole conversation so far (that answer included) and its ``input_tokens`` counted
    over all of it; after a failed turn, the rest of the conversation is not sent.

    Conversation ``k`` (request ``k`` when all are single-turn) is due ``send_at[k]``
    seconds after the point starts (a trace), else as ``schedule.arrival_offsets`` lays
    out ``request_rate``; the concurrency cap may hold it back further. Each record keeps
    when it was due and when it was sent (``scheduled_s``, ``sent_at_s``): how late the
    load generator was is a figure, not a guess. A later turn has no due time: it is sent
    when the answer before it is in.

    ``stream`` (a trace: `specc.prompts.trace.Replay`) replaces ``prompts`` and
    ``send_at``: single-turn requests with their due times, read and built as the schedule
    reaches them (iterated once for the warm-up, once for the run), never held whole: a
    request's body is built when it may be sent (under the concurrency cap), and dropped
    once it is. ``request_ids`` is then a function of (index, prompt).
    """
    if stream is not None:
        return await _run_stream(base_url, stream, api=api, model=model,
                                 concurrency=concurrency, warmup=warmup, timeout_s=timeout_s,
                                 on_request_done=on_request_done, transport=transport,
                                 kernel_timestamps=kernel_timestamps, disable_gc=disable_gc,
                                 temperature=temperature, ignore_eos=ignore_eos,
                                 request_ids=request_ids, keep_sending=keep_sending,
                                 headers=headers)
    if api not in API_PATHS:
        raise ValueError(f"unknown api {api!r} (expected one of {', '.join(API_PATHS)})")
    if concurrency is not None and concurrency < 1:
        raise ValueError(f"concurrency must be >= 1 or None, got {concurrency}")
    units = _conversations(prompts)
    if send_at is not None and len(send_at) != len(units):
        raise ValueError(f"send_at has {len(send_at)} times for {len(units)} conversations")
    # validates rate, burstiness and ramp before anything is sent
    due = list(send_at) if send_at is not None else arrival_offsets(
        len(units), request_rate, burstiness=burstiness, ramp_s=ramp_s, seed=seed)
    paced = send_at is not None or math.isfinite(request_rate)
    if transport == "auto":
        transport = "fast" if urlsplit(base_url).scheme == "http" else "httpx"
    client: FastClient | HttpxClient
    if transport == "fast":
        client = FastClient(base_url, timeout_s, kernel_timestamps, headers=headers)
    elif transport == "httpx":
        client = HttpxClient(base_url, timeout_s, concurrency or max(len(prompts), 1),
                             headers=headers)
    else:
        raise ValueError(f"unknown transport {transport!r}")

    state: dict[str, Any] = {"in_flight": 0, "max": 0, "gone": None, "t0": 0.0}
    unsent: set[int] = set()      # indices keep_sending held back

    async def one(rec: RequestRecord, payload: bytes) -> RequestRecord:
        if state["gone"]:
            rec.error = f"not sent: {state['gone']}"
            return rec
        if keep_sending is not None and not keep_sending():
            unsent.add(rec.index)
            return rec
        await _send(client, rec, api, payload, state)
        if on_request_done is not None:
            try:
                on_request_done(rec)
            except Exception:
                log.exception("load generator: on_request_done callback failed")
        return rec

    gc_was = gc.isenabled()
    warm: list[RequestRecord] = []
    records: list[RequestRecord] = []
    t0 = t1 = time.time()
    try:
        # -- warm-up: sequential, short, excluded from the metrics
        warm = await _warm_up(client, api, model, prompts, warmup, state,
                              temperature=temperature, ignore_eos=ignore_eos)

        # -- measured run: its connections open before it starts (FastClient.preconnect)
        await _preconnect(client, concurrency or (0 if paced else len(units)))
        if disable_gc and gc_was:
            gc.collect()
            gc.disable()
        sem = asyncio.Semaphore(concurrency) if concurrency else None
        def body(i: int, messages=None) -> bytes:
            p = prompts[i]
            return request_body(api, model, p.text, p.output_tokens, temperature=temperature,
                                ignore_eos=ignore_eos,
                                request_id=request_ids[i] if isinstance(request_ids, list)
                                else None, messages=messages)

        # a later turn's body is built when its previous turn has answered
        payloads = [body(i) if p.turn == 1 else b"" for i, p in enumerate(prompts)]
        multi = len(units) < len(prompts)
        first_of = {unit[0]: k for k, unit in enumerate(units)}
        records = [RequestRecord(input_tokens=p.input_tokens,
                                 requested_output_tokens=p.output_tokens, index=i,
                                 ignore_eos=ignore_eos, keep_answer=multi,
                                 scheduled_s=due[first_of[i]] if paced and i in first_of else None)
                   for i, p in enumerate(prompts)]

        async def conversation(unit: list[int]) -> None:
            history: list[dict] = []
            for n, i in enumerate(unit):
                rec = records[i]
                if n:
                    prev = records[unit[n - 1]]
                    if prev.index in unsent:
                        unsent.update(unit[n:])
                        return
                    if not prev.ok:
                        for j in unit[n:]:
                            records[j].error = f"not sent: turn {prompts[unit[n - 1]].turn} failed"
                        return
                    history += [{"role": "user", "content": prompts[unit[n - 1]].text},
                                {"role": "assistant", "content": prev.answer or ""}]
                    prev.answer = None     # held once, in the history
                    messages = history + [{"role": "user", "content": prompts[i].text}]
                    rec.input_tokens = count_tokens("\n".join(m["content"] for m in messages))
                    payloads[i] = body(i, messages)
                await one(rec, payloads[i])

        async def gated(unit: list[int]) -> None:
            if sem is None:
                return await conversation(unit)
            async with sem:
                return await conversation(unit)

        tasks = []
        t0 = state["t0"] = time.time()
        loop = asyncio.get_running_loop()
        for k, unit in enumerate(units):
            rec = records[unit[0]]
            if paced:   # wait until it is due (then the concurrency cap, in gated)
                delay = t0 + due[k] - time.time()
                if delay > 0:
                    await asyncio.sleep(delay)
            if state["gone"]:
                for i in unit:
                    records[i].error = f"not sent: {state['gone']}"
                continue
            if keep_sending is not None and paced and not keep_sending():
                unsent.update(r.index for r in records[rec.index:])
                break
            tasks.append(loop.create_task(gated(unit)))
        if tasks:
            await asyncio.gather(*tasks)
        t1 = last_answer(records, time.time())
    finally:
        if disable_gc and gc_was:
            gc.enable()
        await client.aclose()
    duration = t1 - t0
    if unsent:
        records = [r for r in records if r.index not in unsent]
    return LoadResult(records=records, duration_s=duration, t0=t0,
                      metrics=summarize(records, duration, concurrency=concurrency,
                                        max_in_flight=state["max"]),
                      warmup_records=warm, max_in_flight=state["max"],
                      server_gone=bool(state["gone"]))


async def _send(client, rec: RequestRecord, api: str, payload: bytes, state: dict) -> None:
    """One measured request; a failure is the record's error, never an exception (a server
    gone is also state["gone"]). Counts what is in flight (state["in_flight"], ["max"])."""
    state["in_flight"] += 1
    state["max"] = max(state["max"], state["in_flight"])
    try:
        await client.request(rec, api, payload)
        if rec.start:
            rec.sent_at_s = rec.start - state["t0"]
    except ServerGone as e:
        state["gone"] = str(e)
        rec.error = str(e)
        rec.end = time.time()
    except Exception as e:  # never raise for one request
        log.exception("load generator: request failed unexpectedly")
        rec.error = f"client error: {type(e).__name__}: {e}"
    finally:
        state["in_flight"] -= 1


async def _warm_up(client, api: str, model: str, rows: Iterable[Prompt], count: int,
                   state: dict, *, temperature: float, ignore_eos: bool) -> list[RequestRecord]:
    """`count` short requests, one at a time, from the first rows (round again when there are
    fewer), excluded from the metrics; stops when the server is gone (state["gone"])."""
    warm: list[RequestRecord] = []
    for p in itertools.islice(itertools.cycle(rows), count):
        n = min(p.output_tokens, WARMUP_MAX_TOKENS)
        rec = RequestRecord(input_tokens=p.input_tokens, requested_output_tokens=n)
        try:
            await client.request(rec, api, request_body(
                api, model, p.text, n, temperature=temperature, ignore_eos=ignore_eos))
        except ServerGone as e:
            state["gone"] = str(e)
            rec.error = str(e)
        warm.append(rec)
        if state["gone"]:
            break
    return warm


#: The most connections opened ahead of a point (an uncapped burst of more opens the rest
#: as it goes).
PRECONNECT_MAX = 1024


async def _preconnect(client, n: int) -> None:
    """Open the point's connections before it starts, where the client can."""
    if n > 0 and isinstance(client, FastClient):
        await client.preconnect(min(n, PRECONNECT_MAX))


def last_answer(records, now: float) -> float:
    """Where a point ends: its last answer's end (each request's `end` is the kernel's
    receive time of its last bytes), not when the client has finished decoding every
    answer: on a busy machine that decoding took 0.1-1.1 s after the last byte at
    concurrency 128 and moved a baseline's throughput by 8% between two identical runs.
    The wall clock when any request has no end (failed, cut off)."""
    ends = [r.end for r in records if r.end > 0]
    return min(now, max(ends)) if ends and len(ends) == len(records) else now

def _client(base_url: str, transport: str, timeout_s: float, kernel_timestamps: bool,
            headers: dict[str, str] | None, pool: int):
    if transport == "auto":
        transport = "fast" if urlsplit(base_url).scheme == "http" else "httpx"
    if transport == "fast":
        return FastClient(base_url, timeout_s, kernel_timestamps, headers=headers)
    if transport == "httpx":
        return HttpxClient(base_url, timeout_s, pool, headers=headers)
    raise ValueError(f"unknown transport {transport!r}")


async def _run_stream(base_url: str, stream: Iterable[tuple[Prompt, float]], *, api: str,
                      model: str, concurrency: int | None, warmup: int, timeout_s: float,
                      on_request_done, transport: str, kernel_timestamps: bool,
                      disable_gc: bool, temperature: float, ignore_eos: bool, request_ids,
                      keep_sending, headers) -> LoadResult:
    """run_load over a stream of (prompt, due) (see there): the same records, in the same
    order, with the same outcomes as the lists would give; only what is in flight (and
    waiting under the concurrency cap) is held."""
    if api not in API_PATHS:
        raise ValueError(f"unknown api {api!r} (expected one of {', '.join(API_PATHS)})")
    if concurrency is not None and concurrency < 1:
        raise ValueError(f"concurrency must be >= 1 or None, got {concurrency}")
    client = _client(base_url, transport, timeout_s, kernel_timestamps, headers,
                     concurrency or 1024)
    state: dict = {"in_flight": 0, "max": 0, "gone": None, "t0": 0.0}
    stopped = False   # keep_sending said no: nothing more is sent (or recorded)
    sem = asyncio.Semaphore(concurrency) if concurrency else None

    def body(i: int, p: Prompt) -> bytes:
        return request_body(api, model, p.text, p.output_tokens, temperature=temperature,
                            ignore_eos=ignore_eos,
                            request_id=request_ids(i, p) if callable(request_ids) else None)

    async def one(rec: RequestRecord, p: Prompt) -> None:
        nonlocal stopped
        if sem is not None:
            await sem.acquire()
        try:
            if state["gone"]:
                rec.error = f"not sent: {state['gone']}"
                return
            if keep_sending is not None and not keep_sending():
                rec.index, stopped = -2, True   # held back: left out, as with lists
                return
            payload = body(rec.index, p)   # built now, dropped once sent
            await _send(client, rec, api, payload, state)
        finally:
            if sem is not None:
                sem.release()
        if on_request_done is not None:
            try:
                on_request_done(rec)
            except Exception:
                log.exception("load generator: on_request_done callback failed")

    gc_was = gc.isenabled()
    warm: list[RequestRecord] = []
    records: list[RequestRecord] = []
    t0 = t1 = time.time()
    try:
        # the first rows, sequentially (round again when the warm-up is longer)
        warm = await _warm_up(client, api, model, (p for p, _ in stream), warmup, state,
                              temperature=temperature, ignore_eos=ignore_eos)
        await _preconnect(client, concurrency or 0)
        if disable_gc and gc_was:
            gc.collect()
            gc.disable()
        pending: set[asyncio.Task] = set()
        loop = asyncio.get_running_loop()
        t0 = state["t0"] = time.time()
        try:
            for i, (p, due) in enumerate(stream):
                rec = RequestRecord(input_tokens=p.input_tokens,
                                    requested_output_tokens=p.output_tokens, index=i,
                                    ignore_eos=ignore_eos, scheduled_s=due)
                delay = t0 + due - time.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                if stopped or (keep_sending is not None and not state["gone"]
                               and not keep_sending()):
                    break
                records.append(rec)
                if state["gone"]:
                    rec.error = f"not sent: {state['gone']}"
                    continue
                task = loop.create_task(one(rec, p))
                pending.add(task)
                task.add_done_callback(pending.discard)
        except BaseException:   # the trace unreadable mid-way, or cancelled: none left behind
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            raise
        if pending:
            await asyncio.gather(*pending)
        t1 = last_answer(records, time.time())
    finally:
        if disable_gc and gc_was:
            gc.enable()
        await client.aclose()
    records = [r for r in records if r.index != -2]
    duration = t1 - t0
    return LoadResult(records=records, duration_s=duration, t0=t0,
                      metrics=summarize(records, duration, concurrency=concurrency,
                                        max_in_flight=state["max"]),
                      warmup_records=warm, max_in_flight=state["max"],
                      server_gone=bool(state["gone"]))


def _conversations(prompts: list[Prompt]) -> list[list[int]]:
    """Indices of each conversation's turns, in order: a prompt with turn > 1 continues the
    one before it (a single-turn prompt is a conversation of one)."""
    units: list[list[int]] = []
    for i, p in enumerate(prompts):
        if p.turn > 1 and units and prompts[units[-1][-1]].turn == p.turn - 1:
            units[-1].append(i)
        else:
            units.append([i])
    return units
