"""When each request arrived, on the scheduler's clock, whatever the HTTP side costs.

Issue 27: a wave of 128 requests sent at once was admitted in different prefill batches
from run to run (``#new-seq`` 1, 88, 39 in one; 1, 1, 1, 92, 34 in the other), because a
request joined the first step that began after the simulator had *parsed* it, and parsing
128 requests is CPU the simulator competes for on a busy machine. Here a request's
arrival is the kernel's receive time of its first bytes (``SO_TIMESTAMPNS``, inherited by
every accepted connection from the listening socket; read with ``MSG_PEEK`` just before
the transport reads them): the earliest the server could know of it, set by the client
alone. A step that begins at modelled time T admits the requests that arrived by T
(``Scheduler.run``), and first waits for any whose bytes came by T but which the HTTP side
has not queued yet: still in the listen backlog, unread in a socket, or being parsed
(``overdue``). The wait delays that step's computation, not its deadline, so it shows as
that step's lateness only when it runs past it; a wait cut off at ``WAIT_MAX_S`` counts
whole (``Scheduler._await_arrivals``).

Connections move IDLE (no request on it) -> OPEN (its first bytes read: arrival known, not
queued yet) -> BUSY (queued, or a route that queues nothing) -> IDLE when the response
ends. Without kernel timestamps (not Linux, or a transport without the read hook) a
request's arrival is when its first bytes were read.
"""

from __future__ import annotations

import select
import socket
import struct
import sys
import time

#: SO_TIMESTAMPNS (Linux's number where the socket module lacks the name).
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35 if sys.platform == "linux" else None)
_ANCSIZE = socket.CMSG_SPACE(16) if hasattr(socket, "CMSG_SPACE") else 0
_TIMESPEC = struct.Struct("qq")
#: The longest a step waits for requests that arrived before it began to be queued (real
#: s). Parsing a wave of 128 on a busy 2-core machine takes a few hundred ms; longer means
#: a client stalled mid-request, and the step goes on without it, counted as that late.
WAIT_MAX_S = 1.0
#: How often a waiting step looks again (real s): the HTTP side runs in between.
WAIT_POLL_S = 0.001
#: The routes whose requests the scheduler queues (the others hold no step back).
GENERATION_PATHS = frozenset(("/generate", "/v1/completions", "/v1/chat/completions"))

IDLE, OPEN, BUSY = 0, 1, 2


def _wall_minus_monotonic() -> float:
    """time.time() - time.monotonic(), the kernel stamp's clock to the scheduler's: the
    tightest of three bracketed reads, so that being preempted between two reads (a busy
    machine) does not date a request earlier than it came."""
    best_width, best = float("inf"), 0.0
    for _ in range(3):
        w0 = time.time()
        m = time.monotonic()
        w1 = time.time()
        if w1 - w0 < best_width:
            best_width, best = w1 - w0, (w0 + w1) / 2 - m
    return best


class Conn:
    """One accepted connection: its socket and the arrival of its current request."""

    __slots__ = ("sock", "fd", "state", "arrival", "not_before")

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.fd = sock.fileno()
        self.state = IDLE
        self.arrival: float | None = 0.0   # monotonic s: the current request's first
        #                                      bytes (None: a step gave up waiting for it)
        self.not_before = 0.0      # a step gave up waiting for it: no arrival before this


class Arrivals:
    """Every connection's state, and whether a step beginning at T must wait for one."""

    def __init__(self) -> None:
        self.by_fd: dict[int, Conn] = {}
        self.open: dict[Conn, None] = {}     # bytes read, not queued yet (insertion-ordered)
        self.poll = select.poll()            # the listening socket and the IDLE connections
        self.listen_fd: int | None = None
        self.stamped = SO_TIMESTAMPNS is not None and _ANCSIZE > 0

    # -- the listening socket -------------------------------------------------------------
    def listening(self, sock: socket.socket) -> None:
        """Watch ``sock``'s backlog; its accepted connections inherit kernel timestamps."""
        if self.stamped:
            try:
                sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)  # type: ignore[arg-type]  # stamped: Linux
            except OSError:
                self.stamped = False
        self.listen_fd = sock.fileno()
        self.poll.register(self.listen_fd, select.POLLIN)

    def accepted(self, sock: socket.socket) -> None:
        """A connection left the backlog: watched from now, before its protocol exists."""
        old = self.by_fd.pop(sock.fileno(), None)    # a closed connection's fd, reused
        if old is not None:
            self.open.pop(old, None)
        c = Conn(sock)
        self.by_fd[c.fd] = c
        self._watch(c)

    # -- a connection's requests -----------------------------------------------------------
    def conn(self, sock) -> Conn | None:
        """The connection of a transport's socket (None: not accepted through ``accepted``)."""
        try:
            c = self.by_fd.get(sock.fileno())
        except (OSError, ValueError):
            return None
        return c

    def reading(self, c: Conn, stamp: float | None = None) -> None:
        """Its transport is about to read: bytes on an IDLE connection start a request,
        which arrived when the kernel received them (``stamp``: already known)."""
        if c.state != IDLE:
            return
        if stamp is None:
            stamp = self.first_bytes(c.sock)
            if stamp is None:      # EOF or an error: no request
                return
        self._unwatch(c)
        c.state = OPEN
        c.arrival = max(stamp, c.not_before)
        self.open[c] = None

    def queued(self, c: Conn | None) -> None:
        """Its request is in the scheduler's queue (or needs none): holds no step back."""
        if c is not None and c.state == OPEN:
            self.open.pop(c, None)
            c.state = BUSY

    def done(self, c: Conn | None) -> None:
        """Its response ended: the connection may carry another request."""
        if c is not None and c.state != IDLE and self.by_fd.get(c.fd) is c:
            self.open.pop(c, None)
            c.state = IDLE
            self._watch(c)

    def lost(self, c: Conn | None) -> None:
        if c is not None and self.by_fd.get(c.fd) is c:
            del self.by_fd[c.fd]
            self.open.pop(c, None)
            if c.state == IDLE:
                self._unwatch(c)
            c.state = BUSY

    # -- what a step waits for ---------------------------------------------------------------
    def earliest(self) -> float | None:
        """The earliest arrival among requests read but not queued."""
        return min((c.arrival for c in self.open if c.arrival is not None), default=None)

    def overdue(self, t: float) -> bool:
        """Whether a request that arrived by ``t`` (monotonic s) is not queued yet."""
        for c in self.open:
            if c.arrival is not None and c.arrival <= t:
                return True
        for fd, _ in self.poll.poll(0):
            if fd == self.listen_fd:
                return True                      # not even accepted: wait for the loop
            idle = self.by_fd.get(fd)
            if idle is None:
                continue
            s = self.first_bytes(idle.sock)
            if s is None:
                if idle.sock.fileno() < 0:       # closed without a protocol: forget it
                    self.lost(idle)
                continue
            if max(s, idle.not_before) <= t:
                return True
        return False

    def give_up(self, t: float) -> None:
        """A step stopped waiting for what arrived by ``t``: a request still being read or
        parsed is no longer dated by its bytes (the scheduler dates it when it is queued,
        and no step waits for it again); unread bytes count as arriving now."""
        for c in self.open:
            if c.arrival is not None and c.arrival <= t:
                c.arrival = None
        now = time.monotonic()
        for c in self.by_fd.values():
            if c.state == IDLE:
                c.not_before = now

    def first_bytes(self, sock: socket.socket) -> float | None:
        """When the kernel received the unread bytes at the head of ``sock`` (monotonic s),
        None if there are none (or EOF). Without a kernel stamp: now."""
        try:
            if self.stamped:
                data, anc, _, _ = sock.recvmsg(1, _ANCSIZE, socket.MSG_PEEK | socket.MSG_DONTWAIT)
            else:
                data, anc = sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT), []
        except (BlockingIOError, InterruptedError, OSError, ValueError):
            return None
        if not data:
            return None
        now = time.monotonic()
        if anc:
            sec, ns = _TIMESPEC.unpack_from(anc[0][2])
            return min(now, sec + ns * 1e-9 - _wall_minus_monotonic())
        return now

    def _watch(self, c: Conn) -> None:
        try:
            self.poll.register(c.fd, select.POLLIN)
        except (OSError, ValueError):
            pass

    def _unwatch(self, c: Conn) -> None:
        try:
            self.poll.unregister(c.fd)
        except (KeyError, OSError, ValueError):
            pass


class Listener(socket.socket):
    """The listening socket: hands each accepted connection to ``arrivals`` at once (the
    event loop makes its protocol a turn or two later)."""

    arrivals: Arrivals | None = None

    def accept(self):
        conn, addr = super().accept()
        if self.arrivals is not None:
            self.arrivals.accepted(conn)
        return conn, addr


def stamping_protocol(base: type, arrivals: Arrivals) -> type:
    """uvicorn's HTTP protocol ``base``, telling ``arrivals`` when a request's first bytes
    are read and when the connection is gone; each request's scope carries its ``Conn``
    (``specc.sim.conn``)."""

    class Stamping(base):
        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            c = self._arrival_conn = arrivals.conn(transport.get_extra_info("socket"))
            if c is None:
                return
            read = getattr(transport, "_read_ready_cb", None)   # asyncio's selector transport
            if read is not None and arrivals.stamped:
                def read_ready(_read=read, _c=c) -> None:
                    if _c.state == IDLE:
                        arrivals.reading(_c)     # peek the kernel's stamp, then read
                    _read()
                transport._read_ready_cb = read_ready

        def data_received(self, data: bytes) -> None:
            c = self._arrival_conn
            if c is not None and c.state == IDLE:    # no read hook: stamped on reading
                arrivals.reading(c, time.monotonic())
            super().data_received(data)

        def handle_events(self) -> None:
            super().handle_events()
            scope = self.scope
            if scope is not None and "specc.sim.conn" not in scope:
                scope["specc.sim.conn"] = self._arrival_conn

        def connection_lost(self, exc) -> None:
            arrivals.lost(self._arrival_conn)
            super().connection_lost(exc)

    Stamping.__name__ = Stamping.__qualname__ = "Stamping" + base.__name__
    return Stamping
