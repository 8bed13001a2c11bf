"""specc's built-in benchmark load generator.

Streams requests to an engine's OpenAI-compatible endpoints (``/v1/chat/completions``,
``/v1/completions``) or SGLang's native ``/generate``, at a fixed concurrency cap
and/or a Poisson request rate, after a few sequential warm-up requests that are
excluded from the metrics.  Metrics are named as SGLang's ``bench_serving``
names them (see ``summarize``), plus specc's per-stream decode tokens/s.

Timing.  Every timestamp is epoch seconds (comparable with the simulator's
ground truth).  On 2 cores with 64 streams, the client's own per-chunk work
and scheduling decide how late a chunk is stamped: a batched server emits a
token for every running request at the same instant.  So the default transport
(``transport="fast"``) is a small HTTP/1.1 client on asyncio sockets that
(1) stamps each read with the kernel's receive time (``SO_TIMESTAMPNS`` via
``recvmsg``; ``kernel_timestamps=False`` or a non-Linux host falls back to
``time.time()`` in the read callback), (2) re-arms ``TCP_QUICKACK`` after every
read so that a server without ``TCP_NODELAY`` cannot stall a stream ~40 ms on
Nagle + delayed ACK, and (3) does no parsing on the hot path: it records only
``(time, body bytes so far)``; SSE events are split and JSON-decoded when the
response is complete, each event getting the time of the read that delivered
its last byte.  ``transport="httpx"`` does the same over a shared
``httpx.AsyncClient`` (``aiter_raw``) with user-space stamps, and is used for
https URLs; it is much later under load (``benchmarks/loadgen_accuracy.py``).
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import math
import random
import socket
import struct
import sys
import time
from dataclasses import dataclass, field
from typing import Callable
from urllib.parse import urlsplit

from specc.run.datasets import Prompt

__all__ = ["RequestRecord", "LoadResult", "run_load", "summarize", "percentile",
           "API_PATHS", "METRIC_KEYS"]

log = logging.getLogger(__name__)

API_PATHS = {"chat": "/v1/chat/completions", "completions": "/v1/completions",
             "generate": "/generate"}
WARMUP_MAX_TOKENS = 8

_STATS = ("ttft", "itl", "tpot", "e2e_latency")
_PCTS = (("median", 50.0), ("p90", 90.0), ("p95", 95.0), ("p99", 99.0))
METRIC_KEYS: tuple[str, ...] = (
    "completed", "failed", "duration", "total_input_tokens", "total_output_tokens",
    "request_throughput", "input_throughput", "output_throughput", "total_throughput",
    *[f"{s}_{x}_ms" for x in _STATS for s in ("mean", "median", "std", "p90", "p95", "p99")],
    "per_stream_output_throughput", "median_per_stream_output_throughput",
    "concurrency", "mean_concurrency", "max_concurrent_requests",
)


@dataclass
class RequestRecord:
    ok: bool = False
    error: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0          # as reported by the engine (usage / meta_info), else chunks
    requested_output_tokens: int = 0
    ttft: float = 0.0               # s, send -> first non-empty content chunk
    itls: list[float] = field(default_factory=list)   # s, gaps between content chunks
    e2e_latency: float = 0.0        # s, send -> end of stream
    start: float = 0.0              # epoch s, just before the request is written
    first_token_t: float = 0.0      # epoch s
    end: float = 0.0                # epoch s
    chunk_times: list[float] = field(default_factory=list)  # epoch s of content chunks
    chunk_count: int = 0            # non-empty content chunks
    rid: str | None = None          # response id (OpenAI "id", SGLang meta_info.id)
    status: int = 0                 # HTTP status, 0 if none
    index: int = -1                 # position in the prompt list (-1 for warm-up)

    @property
    def tpot(self) -> float | None:
        if self.ok and self.output_tokens > 1:
            return (self.e2e_latency - self.ttft) / (self.output_tokens - 1)
        return None


@dataclass
class LoadResult:
    records: list[RequestRecord]
    duration_s: float
    metrics: dict[str, float]
    warmup_records: list[RequestRecord]
    max_in_flight: int = 0
    server_gone: bool = False       # connection refused: new requests were not sent


# =========================================================================== metrics

def percentile(sorted_vals: list[float], p: float) -> float:
    """numpy's default (linear) percentile of an already sorted list."""
    n = len(sorted_vals)
    if n == 0:
        return 0.0
    pos = (n - 1) * p / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, n - 1)
    frac = pos - lo
    return sorted_vals[lo] + (sorted_vals[hi] - sorted_vals[lo]) * frac


def _stats_ms(name: str, vals: list[float], out: dict[str, float]) -> None:
    v = sorted(x * 1000.0 for x in vals)
    n = len(v)
    mean = sum(v) / n if n else 0.0
    out[f"mean_{name}_ms"] = mean
    out[f"median_{name}_ms"] = percentile(v, 50.0)
    out[f"std_{name}_ms"] = math.sqrt(sum((x - mean) ** 2 for x in v) / n) if n else 0.0
    for label, p in _PCTS[1:]:
        out[f"{label}_{name}_ms"] = percentile(v, p)


def summarize(records: list[RequestRecord], duration_s: float, *,
              concurrency: int | None = None, max_in_flight: int | None = None
              ) -> dict[str, float]:
    """bench_serving's metrics over the successful records (pure function).

    ``concurrency`` is the configured cap; without one it reports the measured
    mean in-flight count (sum of e2e latencies / duration, as bench_serving's
    ``concurrency``), which is always in ``mean_concurrency``.
    """
    ok = [r for r in records if r.ok]
    dur = duration_s if duration_s > 0 else 0.0
    m: dict[str, float] = {}
    m["completed"] = len(ok)
    m["failed"] = len(records) - len(ok)
    m["duration"] = dur
    tin = sum(r.input_tokens for r in ok)
    tout = sum(r.output_tokens for r in ok)
    m["total_input_tokens"] = tin
    m["total_output_tokens"] = tout

    def rate(x: float) -> float:
        return x / dur if dur > 0 else 0.0

    m["request_throughput"] = rate(len(ok))
    m["input_throughput"] = rate(tin)
    m["output_throughput"] = rate(tout)
    m["total_throughput"] = rate(tin + tout)
    itls = [x for r in ok for x in r.itls]
    tpots = [t for t in (r.tpot for r in ok) if t is not None]
    _stats_ms("ttft", [r.ttft for r in ok], m)
    _stats_ms("itl", itls, m)
    _stats_ms("tpot", tpots, m)
    _stats_ms("e2e_latency", [r.e2e_latency for r in ok], m)
    per_stream = sorted((r.output_tokens - 1) / (r.e2e_latency - r.ttft) for r in ok
                        if r.output_tokens > 1 and r.e2e_latency > r.ttft)
    m["per_stream_output_throughput"] = sum(per_stream) / len(per_stream) if per_stream else 0.0
    m["median_per_stream_output_throughput"] = percentile(per_stream, 50.0)
    mean_conc = rate(sum(r.e2e_latency for r in ok))
    m["mean_concurrency"] = mean_conc
    m["concurrency"] = float(concurrency) if concurrency else mean_conc
    if max_in_flight is not None:
        m["max_concurrent_requests"] = max_in_flight
    return m


# =========================================================================== stream parsing

def _finish(rec: RequestRecord, api: str, status: int, body: bytes | bytearray,
            ts: list[float], offs: list[int], fail: str | None) -> None:
    """Fill ``rec`` from a complete (or broken) response body and its read times."""
    rec.status = status
    if ts:
        rec.end = ts[-1]
    elif not rec.end:
        rec.end = time.time()
    if status != 200:
        text = bytes(body[:300]).decode("utf-8", "replace").strip().replace("\n", " ")
        rec.error = fail or f"HTTP {status}: {text[:200]}"
        return
    chunk_times: list[float] = []
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
            text = obj.get("text") or ""
            if len(text) > prev_len:
                prev_len = len(text)
                chunk_times.append(ts[k])
            continue
        if rec.rid is None:
            rec.rid = obj.get("id")
        usage = obj.get("usage")
        if usage and usage.get("completion_tokens") is not None:
            usage_tokens = usage["completion_tokens"]
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
    rec.chunk_times = chunk_times
    rec.chunk_count = len(chunk_times)
    rec.output_tokens = usage_tokens if usage_tokens is not None else len(chunk_times)
    if chunk_times:
        rec.first_token_t = chunk_times[0]
        rec.ttft = chunk_times[0] - rec.start
        rec.itls = [b - a for a, b in zip(chunk_times, chunk_times[1:])]
    rec.e2e_latency = rec.end - rec.start
    if fail:
        rec.error = fail
    elif err:
        rec.error = err
    elif not done:
        rec.error = "stream ended without [DONE]"
    elif not chunk_times:
        rec.error = "no output tokens"
    elif rec.output_tokens < rec.requested_output_tokens:
        rec.error = (f"short output: {rec.output_tokens} of "
                     f"{rec.requested_output_tokens} tokens (ignore_eos set)")
    else:
        rec.ok = True


def _payload(api: str, model: str, text: str, max_tokens: int) -> bytes:
    if api == "generate":
        body = {"text": text, "sampling_params": {"max_new_tokens": max_tokens,
                                                  "ignore_eos": True, "temperature": 0},
                "stream": True}
    else:
        body = {"model": model, "max_tokens": max_tokens, "stream": True,
                "stream_options": {"include_usage": True}, "ignore_eos": True,
                "temperature": 0}
        if api == "chat":
            body["messages"] = [{"role": "user", "content": text}]
        else:
            body["prompt"] = text
    return json.dumps(body, separators=(",", ":")).encode()


# =========================================================================== fast transport

class _ServerGone(Exception):
    pass


_HEAD, _CHUNKED, _LENGTH, _CLOSE, _DONE = range(5)
_QUICKACK = getattr(socket, "TCP_QUICKACK", None)   # Linux only


class _Conn(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection; stamps every socket read."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.waiter: asyncio.Future | None = None
        self.buf = bytearray()
        self.body = bytearray()
        self.ts: list[float] = []
        self.offs: list[int] = []
        self.state = _DONE
        self.status = 0
        self.remaining = 0
        self.keepalive = True
        self.got_bytes = False
        self.quickack = None

    # -- lifecycle
    def connection_made(self, transport) -> None:
        self.transport = transport
        sock = transport.get_extra_info("socket")
        self.quickack = None
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                if _QUICKACK is not None:
                    sock.setsockopt(socket.IPPROTO_TCP, _QUICKACK, 1)
                    self.quickack = sock.setsockopt
            except OSError:
                self.quickack = None

    def connection_lost(self, exc) -> None:
        self.closed = True
        if self.state == _CLOSE:
            self.state = _DONE
            self._wake(None)
        elif self.waiter is not None and not self.waiter.done():
            self._wake(exc or ConnectionResetError("connection closed by server"))

    def _wake(self, exc) -> None:
        w = self.waiter
        if w is not None and not w.done():
            if exc is None:
                w.set_result(None)
            else:
                w.set_exception(exc)

    def start(self, data: bytes, waiter: asyncio.Future) -> float:
        self.waiter = waiter
        self.buf = bytearray()
        self.body = bytearray()
        self.ts = []
        self.offs = []
        self.state = _HEAD
        self.status = 0
        self.got_bytes = False
        t = time.time()
        self.transport.write(data)
        return t

    # -- hot path
    def data_received(self, data: bytes) -> None:
        t = time.time()
        self.feed(data, t)

    def feed(self, data: bytes, t: float) -> None:
        if self.quickack is not None:
            # Linux clears TCP_QUICKACK after use: re-arm it, so that our delayed ACK
            # never meets a server's Nagle algorithm (a ~40 ms stall per stream start
            # on a reused connection when the server lacks TCP_NODELAY).
            self.quickack(socket.IPPROTO_TCP, _QUICKACK, 1)
        self.got_bytes = True
        body = self.body
        n0 = len(body)
        state = self.state
        if state == _CHUNKED and not self.buf:
            self.buf = bytearray(data)
        elif state == _CLOSE or state == _LENGTH:
            body += data
        else:
            self.buf += data
        if state == _HEAD:
            state = self._head()
            if state is None:
                return
        if state == _CHUNKED:
            state = self._chunks()
        elif state == _LENGTH and len(body) >= self.remaining:
            state = _DONE
        if len(body) != n0:
            self.ts.append(t)
            self.offs.append(len(body))
        self.state = state
        if state == _DONE:
            if not self.ts:
                self.ts.append(t)
                self.offs.append(len(body))
            self._wake(None)

    def _head(self):
        buf = self.buf
        i = buf.find(b"\r\n\r\n")
        if i < 0:
            return None
        lines = bytes(buf[:i]).decode("latin-1").split("\r\n")
        try:
            self.status = int(lines[0].split(" ", 2)[1])
        except (IndexError, ValueError):
            self.state = _DONE
            self._wake(ConnectionError(f"bad HTTP status line {lines[0][:80]!r}"))
            return None
        headers = {}
        for ln in lines[1:]:
            k, _, v = ln.partition(":")
            headers[k.strip().lower()] = v.strip().lower()
        self.keepalive = headers.get("connection") != "close"
        rest = buf[i + 4:]
        if "chunked" in headers.get("transfer-encoding", ""):
            self.buf = rest
            return _CHUNKED
        self.buf = bytearray()
        self.body += rest
        if "content-length" in headers:
            self.remaining = int(headers["content-length"])
            return _DONE if len(self.body) >= self.remaining else _LENGTH
        self.keepalive = False
        return _CLOSE

    def _chunks(self):
        buf = self.buf
        body = self.body
        p = 0
        n = len(buf)
        while True:
            j = buf.find(b"\r\n", p)
            if j < 0:
                break
            size = int(bytes(buf[p:j]).split(b";", 1)[0], 16)
            if size == 0:
                if buf.find(b"\r\n", j + 2) >= 0:  # end of (empty) trailers
                    self.buf = bytearray()
                    return _DONE
                break
            if n - (j + 2) < size + 2:
                break
            body += buf[j + 2:j + 2 + size]
            p = j + 4 + size
        if p:
            del buf[:p]
        return _CHUNKED


_SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35 if sys.platform == "linux" else None)
_ANCSIZE = socket.CMSG_SPACE(16) if hasattr(socket, "CMSG_SPACE") else 0
_TIMESPEC = struct.Struct("qq")
_RECV_SIZE = 1 << 18


class _SockConn(_Conn):
    """A ``_Conn`` read with ``recvmsg`` + ``SO_TIMESTAMPNS``: each read is stamped
    with the kernel's receive time of its last segment, so the client's own
    scheduling delays (2 cores shared with the server) do not enter the figures."""

    def __init__(self, sock: socket.socket, loop) -> None:
        super().__init__()
        self.sock = sock
        self.loop = loop
        self.transport = self
        self.connection_made(self)
        loop.add_reader(sock.fileno(), self._readable)

    # the transport methods _Conn uses
    def get_extra_info(self, name, default=None):
        return self.sock if name == "socket" else default

    def write(self, data: bytes) -> None:
        try:
            n = self.sock.send(data)
        except (BlockingIOError, InterruptedError):
            n = 0
        except OSError as e:
            self._lost(e)
            return
        if n < len(data):
            self.loop.create_task(self._send_rest(data[n:]))

    async def _send_rest(self, data: bytes) -> None:
        try:
            await self.loop.sock_sendall(self.sock, data)
        except OSError as e:
            self._lost(e)

    def close(self) -> None:
        self._lost(None)

    def is_closing(self) -> bool:
        return self.closed

    def _lost(self, exc) -> None:
        if self.closed:
            return
        try:
            self.loop.remove_reader(self.sock.fileno())
        except (ValueError, OSError):
            pass
        self.sock.close()
        self.connection_lost(exc)

    def _readable(self) -> None:
        try:
            data, anc, _, _ = self.sock.recvmsg(_RECV_SIZE, _ANCSIZE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            self._lost(e)
            return
        if not data:
            self._lost(None)
            return
        if anc:
            sec, ns = _TIMESPEC.unpack_from(anc[0][2])
            t = sec + ns * 1e-9
        else:
            t = time.time()
        self.feed(data, t)


class _FastClient:
    def __init__(self, base_url: str, timeout_s: float, kernel_timestamps: bool = True) -> None:
        self.kernel_ts = kernel_timestamps and _SO_TIMESTAMPNS is not None and _ANCSIZE > 0
        u = urlsplit(base_url)
        self.host = u.hostname or "127.0.0.1"
        self.port = u.port or 80
        self.prefix = u.path.rstrip("/")
        self.hosthdr = f"{self.host}:{self.port}".encode()
        self.timeout_s = timeout_s
        self.idle: list[_Conn] = []
        self.all: set[_Conn] = set()

    async def _connect(self) -> _Conn:
        loop = asyncio.get_running_loop()
        try:
            if not self.kernel_ts:
                _, conn = await asyncio.wait_for(
                    loop.create_connection(_Conn, self.host, self.port), self.timeout_s)
            else:
                infos = await loop.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM,
                                               proto=socket.IPPROTO_TCP)
                fam, typ, proto, _, addr = infos[0]
                sock = socket.socket(fam, typ, proto)
                try:
                    sock.setblocking(False)
                    sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
                    await asyncio.wait_for(loop.sock_connect(sock, addr), self.timeout_s)
                except BaseException:
                    sock.close()
                    raise
                conn = _SockConn(sock, loop)
        except ConnectionRefusedError:
            raise _ServerGone("connection refused") from None
        self.all.add(conn)
        return conn

    async def request(self, rec: RequestRecord, api: str, payload: bytes) -> None:
        head = b"POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n" \
               b"Accept: text/event-stream\r\nContent-Length: %d\r\n\r\n" % (
                   (self.prefix + API_PATHS[api]).encode(), self.hosthdr, len(payload))
        data = head + payload
        loop = asyncio.get_running_loop()
        for attempt in (0, 1):
            conn = None
            while self.idle:
                c = self.idle.pop()
                if not c.closed:
                    conn = c
                    break
            reused = conn is not None
            if conn is None:
                t_conn = time.time()
                conn = await self._connect()
            waiter = loop.create_future()
            t = conn.start(data, waiter)
            # a fresh connection's set-up counts towards TTFT, as for any client
            rec.start = t if reused else t_conn
            try:
                await asyncio.wait_for(waiter, self.timeout_s)
            except asyncio.TimeoutError:
                conn.transport.close()
                self.all.discard(conn)
                rec.end = time.time()
                _finish(rec, api, conn.status or 200, conn.body, conn.ts, conn.offs,
                        f"timeout after {self.timeout_s:g} s")
                return
            except (ConnectionError, OSError) as e:
                self.all.discard(conn)
                if reused and not conn.got_bytes and attempt == 0:
                    continue  # stale keep-alive connection: retry once on a fresh one
                rec.end = time.time()
                if conn.status == 0:
                    rec.error = f"connection error: {e or type(e).__name__}"
                    return
                _finish(rec, api, conn.status, conn.body, conn.ts, conn.offs,
                        "stream broken: " + (str(e) or type(e).__name__))
                return
            if conn.keepalive and not conn.closed:
                conn.waiter = None
                self.idle.append(conn)
            else:
                conn.transport.close()
                self.all.discard(conn)
            _finish(rec, api, conn.status, conn.body, conn.ts, conn.offs, None)
            return

    async def aclose(self) -> None:
        for c in list(self.all):
            if c.transport is not None:
                c.transport.close()
        self.all.clear()
        self.idle.clear()


# =========================================================================== httpx transport

class _HttpxClient:
    def __init__(self, base_url: str, timeout_s: float, concurrency: int) -> None:
        import httpx
        self.httpx = httpx
        n = max(concurrency, 1)
        self.client = httpx.AsyncClient(
            base_url=base_url.rstrip("/"), http2=False,
            timeout=httpx.Timeout(timeout_s, connect=min(timeout_s, 30.0)),
            limits=httpx.Limits(max_connections=n, max_keepalive_connections=n,
                                keepalive_expiry=30.0))

    async def request(self, rec: RequestRecord, api: str, payload: bytes) -> None:
        httpx = self.httpx
        body = bytearray()
        ts: list[float] = []
        offs: list[int] = []
        status = 0
        _time = time.time
        rec.start = _time()
        try:
            async with self.client.stream(
                    "POST", API_PATHS[api], content=payload,
                    headers={"Content-Type": "application/json",
                             "Accept": "text/event-stream"}) as resp:
                status = resp.status_code
                async for chunk in resp.aiter_raw():
                    t = _time()
                    body += chunk
                    ts.append(t)
                    offs.append(len(body))
        except httpx.ConnectError as e:
            if "refused" in str(e).lower() or isinstance(e.__cause__, ConnectionRefusedError):
                raise _ServerGone("connection refused") from None
            rec.error = f"connection error: {e}"
            rec.end = _time()
            return
        except httpx.TimeoutException as e:
            rec.end = _time()
            _finish(rec, api, status or 200, body, ts, offs,
                    f"timeout ({type(e).__name__})")
            return
        except (httpx.HTTPError, OSError) as e:
            rec.end = _time()
            if status == 0:
                rec.error = f"connection error: {type(e).__name__}: {e}"
                return
            _finish(rec, api, status, body, ts, offs,
                    f"stream broken: {type(e).__name__}: {e}")
            return
        _finish(rec, api, status, body, ts, offs, None)

    async def aclose(self) -> None:
        await self.client.aclose()


# =========================================================================== driver

async def run_load(base_url: str, prompts: list[Prompt], *, api: str = "chat",
                   model: str, concurrency: int | None, request_rate: float = float("inf"),
                   warmup: int = 1, seed: int = 0, timeout_s: float = 600.0,
                   on_request_done: Callable[[RequestRecord], None] | None = None,
                   transport: str = "auto", kernel_timestamps: bool = True,
                   disable_gc: bool = True) -> LoadResult:
    """Run one benchmark point; per-request failures become ``ok=False`` records.

    If the server refuses connections (it is gone), no further requests are
    sent: the unsent ones are recorded as failed with ``error="not sent: ..."``
    and ``LoadResult.server_gone`` is set.
    """
    if api not in API_PATHS:
        raise ValueError(f"unknown api {api!r} (expected one of {', '.join(API_PATHS)})")
    if concurrency is not None and concurrency < 1:
        raise ValueError(f"concurrency must be >= 1 or None, got {concurrency}")
    if not request_rate > 0:
        raise ValueError(f"request_rate must be > 0, got {request_rate}")
    if transport == "auto":
        transport = "fast" if urlsplit(base_url).scheme == "http" else "httpx"
    if transport == "fast":
        client = _FastClient(base_url, timeout_s, kernel_timestamps)
    elif transport == "httpx":
        client = _HttpxClient(base_url, timeout_s, concurrency or max(len(prompts), 1))
    else:
        raise ValueError(f"unknown transport {transport!r}")

    state = {"in_flight": 0, "max": 0, "gone": None}

    async def one(rec: RequestRecord, payload: bytes) -> RequestRecord:
        if state["gone"]:
            rec.error = f"not sent: {state['gone']}"
            return rec
        state["in_flight"] += 1
        if state["in_flight"] > state["max"]:
            state["max"] = state["in_flight"]
        try:
            await client.request(rec, api, payload)
        except _ServerGone as e:
            state["gone"] = str(e)
            rec.error = str(e)
            rec.end = time.time()
        except Exception as e:  # never raise for one request
            log.exception("load generator: request failed unexpectedly")
            rec.error = f"client error: {type(e).__name__}: {e}"
        finally:
            state["in_flight"] -= 1
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
        for i in range(warmup if prompts else 0):
            p = prompts[i % len(prompts)]
            n = min(p.output_tokens, WARMUP_MAX_TOKENS)
            rec = RequestRecord(input_tokens=p.input_tokens, requested_output_tokens=n)
            try:
                await client.request(rec, api, _payload(api, model, p.text, n))
            except _ServerGone as e:
                state["gone"] = str(e)
                rec.error = str(e)
            warm.append(rec)
            if state["gone"]:
                break

        # -- measured run
        if disable_gc and gc_was:
            gc.collect()
            gc.disable()
        sem = asyncio.Semaphore(concurrency) if concurrency else None
        payloads = [_payload(api, model, p.text, p.output_tokens) for p in prompts]
        records = [RequestRecord(input_tokens=p.input_tokens,
                                 requested_output_tokens=p.output_tokens, index=i)
                   for i, p in enumerate(prompts)]

        async def gated(rec: RequestRecord, payload: bytes) -> RequestRecord:
            if sem is None:
                return await one(rec, payload)
            async with sem:
                return await one(rec, payload)

        rng = random.Random(seed)
        tasks = []
        t0 = time.time()
        next_t = t0
        loop = asyncio.get_running_loop()
        for rec, payload in zip(records, payloads):
            if state["gone"]:
                rec.error = f"not sent: {state['gone']}"
                continue
            tasks.append(loop.create_task(gated(rec, payload)))
            if math.isfinite(request_rate):
                next_t += rng.expovariate(request_rate)
                delay = next_t - time.time()
                if delay > 0:
                    await asyncio.sleep(delay)
        if tasks:
            await asyncio.gather(*tasks)
        t1 = time.time()
    finally:
        if disable_gc and gc_was:
            gc.enable()
        await client.aclose()
    duration = t1 - t0
    return LoadResult(records=records, duration_s=duration,
                      metrics=summarize(records, duration, concurrency=concurrency,
                                        max_in_flight=state["max"]),
                      warmup_records=warm, max_in_flight=state["max"],
                      server_gone=bool(state["gone"]))
