"""The fast transport: a small keep-alive HTTP/1.1 client on asyncio sockets that
stamps every read with the kernel's receive time and does no parsing on the hot path."""

from __future__ import annotations

import asyncio
import socket
import struct
import sys
import time
from typing import Any
from urllib.parse import urlsplit

from specc.run.answers import BadAnswer, body_cap, short
from specc.run.loadgen.records import RequestRecord
from specc.run.loadgen.sse import API_PATHS, finish


class ServerGone(Exception):
    """Connection refused: the server is gone, so run_load sends nothing more."""


class BadResponse(Exception):
    """The server's response broke HTTP framing or the body's byte cap: the request
    fails at once with this reason (the connection is dropped, never reused)."""


#: A response's status line and headers may take this many bytes.
HEAD_CAP = 64 << 10


_HEAD, _CHUNKED, _LENGTH, _CLOSE, _DONE = range(5)
_QUICKACK = getattr(socket, "TCP_QUICKACK", None)   # Linux only


class _Conn(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection; stamps every socket read."""

    def __init__(self) -> None:
        self.transport: Any = None   # an asyncio.Transport, or the connection itself (_SockConn)
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
        self.cap = body_cap(0)

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

    def start(self, data: bytes, waiter: asyncio.Future, cap: int) -> float:
        self.waiter = waiter
        self.cap = cap
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
        try:
            self._feed(data, t)
        except BadAnswer as e:
            # the framing is wrong: nothing later in this connection can be trusted
            self.state = _DONE
            self.keepalive = False
            self._wake(BadResponse(str(e)))
            self.transport.close()

    def _feed(self, data: bytes, t: float) -> None:
        if self.state == _DONE:
            return      # bytes past the end of a response: not ours to read
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
        if len(body) > self.cap or len(self.buf) > self.cap + HEAD_CAP:
            raise BadAnswer(f"response body past {self.cap} bytes (the cap for the tokens "
                            "asked for)")
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
            if len(buf) > HEAD_CAP:
                raise BadAnswer(f"response headers past {HEAD_CAP} bytes")
            return None
        lines = bytes(buf[:i]).decode("latin-1").split("\r\n")
        code = lines[0].split(" ", 2)[1:2]
        if not lines[0].startswith("HTTP/") or not code or not (
                code[0].isdigit() and len(code[0]) == 3):
            raise BadAnswer(f"bad HTTP status line {short(lines[0])}")
        self.status = int(code[0])
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
            value = headers["content-length"]
            if not value.isdigit() or len(value) > 18:
                raise BadAnswer(f"bad Content-Length {short(value)}")
            self.remaining = int(value)
            if self.remaining > self.cap:
                raise BadAnswer(f"Content-Length {value} past the body cap of {self.cap} bytes")
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
                if n - p > 1024:
                    raise BadAnswer("chunk size line longer than 1024 bytes")
                break
            size = _chunk_size(bytes(buf[p:j]))
            if len(body) + size > self.cap:
                raise BadAnswer(f"response body past {self.cap} bytes (the cap for the tokens "
                                "asked for)")
            if size == 0:
                if buf.find(b"\r\n", j + 2) >= 0:  # end of (empty) trailers
                    self.buf = bytearray()
                    return _DONE
                break
            if n - (j + 2) < size + 2:
                break
            if buf[j + 2 + size:j + 4 + size] != b"\r\n":
                raise BadAnswer(f"chunk of {size} bytes not followed by CRLF (bad chunk size)")
            body += buf[j + 2:j + 2 + size]
            p = j + 4 + size
        if p:
            del buf[:p]
        return _CHUNKED


_HEX = frozenset(b"0123456789abcdefABCDEF")


def _chunk_size(line: bytes) -> int:
    """A chunk-size line's size; BadAnswer unless it is hex digits (extensions after ';')."""
    token = line.split(b";", 1)[0].strip()
    if not token or len(token) > 15 or not _HEX.issuperset(token):
        raise BadAnswer(f"bad chunk size {short(token)}")
    return int(token, 16)


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


def header_lines(headers: dict[str, str] | None) -> bytes:
    """Extra request header lines, checked: a CR or LF would split the request."""
    out = b""
    for k, v in (headers or {}).items():
        if any(c in f"{k}{v}" for c in "\r\n") or ":" in k:
            raise ValueError(f"header {k!r}: name or value holds a line break or a colon")
        out += f"{k}: {v}\r\n".encode("latin-1")
    return out


class FastClient:
    def __init__(self, base_url: str, timeout_s: float, kernel_timestamps: bool = True,
                 headers: dict[str, str] | None = None) -> None:
        self.kernel_ts = kernel_timestamps and _SO_TIMESTAMPNS is not None and _ANCSIZE > 0
        u = urlsplit(base_url)
        self.host = u.hostname or "127.0.0.1"
        self.port = u.port or 80
        self.prefix = u.path.rstrip("/")
        self.hosthdr = f"{self.host}:{self.port}".encode()
        self.extra = header_lines(headers)
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
                    sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)  # type: ignore[arg-type]  # kernel_timestamps: Linux
                    await asyncio.wait_for(loop.sock_connect(sock, addr), self.timeout_s)
                except BaseException:
                    sock.close()
                    raise
                conn = _SockConn(sock, loop)
        except ConnectionRefusedError:
            raise ServerGone("connection refused") from None
        self.all.add(conn)
        return conn

    async def preconnect(self, n: int) -> None:
        """Open connections until ``n`` are idle, before a point starts: a wave of
        requests is then one write each, not a TCP handshake each in turn. On a busy
        machine the handshakes spread a wave of 128 over ~12 ms, which split it into
        different prefill batches from run to run (-6.7% throughput at c=128). A
        connection that fails to open is left to the request that would have used it."""
        want = n - len(self.idle)
        if want <= 0:
            return
        opened = await asyncio.gather(*(self._connect() for _ in range(want)),
                                      return_exceptions=True)
        self.idle.extend(c for c in opened if isinstance(c, _Conn))

    async def request(self, rec: RequestRecord, api: str, payload: bytes) -> None:
        head = b"POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n" \
               b"Accept: text/event-stream\r\n%sContent-Length: %d\r\n\r\n" % (
                   (self.prefix + API_PATHS[api]).encode(), self.hosthdr, self.extra,
                   len(payload))
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
            t = conn.start(data, waiter, body_cap(rec.requested_output_tokens))
            # a fresh connection's set-up counts towards TTFT, as for any client
            rec.start = t if reused else t_conn
            try:
                await asyncio.wait_for(waiter, self.timeout_s)
            except TimeoutError:
                conn.transport.close()
                self.all.discard(conn)
                rec.end = time.time()
                finish(rec, api, conn.status or 200, conn.body, conn.ts, conn.offs,
                       f"timeout after {self.timeout_s:g} s")
                return
            except BadResponse as e:
                self.all.discard(conn)
                rec.end = time.time()
                # nothing in a misframed response is read as an answer
                finish(rec, api, conn.status or 200, b"", [], [], f"bad response: {e}")
                return
            except (ConnectionError, OSError) as e:
                self.all.discard(conn)
                if reused and not conn.got_bytes and attempt == 0:
                    continue  # stale keep-alive connection: retry once on a fresh one
                rec.end = time.time()
                if conn.status == 0:
                    rec.error = f"connection error: {e or type(e).__name__}"
                    return
                finish(rec, api, conn.status, conn.body, conn.ts, conn.offs,
                       "stream broken: " + (str(e) or type(e).__name__))
                return
            if conn.keepalive and not conn.closed:
                conn.waiter = None
                self.idle.append(conn)
            else:
                conn.transport.close()
                self.all.discard(conn)
            finish(rec, api, conn.status, conn.body, conn.ts, conn.offs, None)
            return

    async def aclose(self) -> None:
        for c in list(self.all):
            if c.transport is not None:
                c.transport.close()
        self.all.clear()
        self.idle.clear()
