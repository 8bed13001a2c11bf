"""The simulated SGLang server process (``python -m specc.sim``): process main.

Startup runs synchronously in the main thread (startup.py: SGLang's scheduler
loads weights, allocates the KV cache and captures CUDA graphs before uvicorn
binds the port, so connections are refused until then); serving runs on one
asyncio loop: a uvicorn server (http.py, as SGLang: Starlette on uvicorn) plus
the scheduler task (scheduler.py).  Modules: args (flags, resolution), faults,
versions (strings per SGLang version), startup, scheduler, arrivals, http, stream, truth,
log.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import socket
import time

from . import rendezvous, truth, versions
from .args import Sim, UsageError, build_parser
from .arrivals import Listener, stamping_protocol
from .faults import TRUTH_ENV, FaultError, fault_from
from .http import App
from .log import log
from .scheduler import Scheduler
from .startup import Startup, print_traceback
from .stream import raw_send_wrapper

WARMUP_PROMPT = "The capital city of France is"   # srt/entrypoints/http_server.py


def _on_signal(signum, frame) -> None:  # noqa: ARG001
    truth.hard_exit(0)


async def serve(sim: Sim, sock: socket.socket) -> None:
    import uvicorn

    loop = asyncio.get_running_loop()
    sched = Scheduler(sim)
    app = App(sim, sched)
    app.port = sock.getsockname()[1]
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        lg = logging.getLogger(name)
        lg.handlers = [logging.NullHandler()]
        lg.propagate = False
    from uvicorn.protocols.http.h11_impl import H11Protocol

    f = sim.fault
    slow = (f.arg if f.arg is not None else 0.05) if f is not None and f.name == "slow_http" \
        else 0.0
    if isinstance(sock, Listener):
        sock.arrivals = sched.arrivals
        sched.arrivals.listening(sock)
    config = uvicorn.Config(raw_send_wrapper(app.app, sched.arrivals, slow), log_config=None,
                            access_log=False, lifespan="off", timeout_keep_alive=30,
                            loop="asyncio", http=stamping_protocol(H11Protocol, sched.arrivals),
                            timeout_graceful_shutdown=0.5, proxy_headers=False)  # type: ignore[arg-type]  # seconds, a float works
    server = uvicorn.Server(config)
    tasks = [asyncio.ensure_future(sched.run()), asyncio.ensure_future(truth.TRUTH.flusher())]
    v = sim.version
    log(versions.render(v, "uvicorn_started", pid=os.getpid()))
    log(versions.render(v, "uvicorn_waiting"))
    log(versions.render(v, "uvicorn_complete"))
    server_task = asyncio.ensure_future(server._serve(sockets=[sock]))
    await asyncio.sleep(0)
    log(versions.render(v, "uvicorn_running", host=sim.args.host, port=app.port))
    # Warm-up (SGLang's _wait_and_warmup): GET /model_info, then one
    # POST /generate with max_new_tokens 8; it counts towards the counters.
    truth.TRUTH.add({"event": "phase", "phase": "warmup", "t": time.time()})
    t0 = loop.time()
    f = sim.fault
    if f is not None and f.phase == "warmup":
        if f.name == "hang":
            await asyncio.Event().wait()
        await asyncio.sleep(sim.phase_s.get("warmup", 0.0) * 0.5)
        print_traceback(sim, "RuntimeError: simulated failure in phase warmup (specc.sim fault "
                             "crash@warmup)",
                        [("/sgl-workspace/sglang/python/sglang/srt/entrypoints/http_server.py",
                          2494, "_execute_server_warmup", "res = requests.post(")])
        truth.hard_exit(1)
    app._model_info()
    log(versions.render(v, "access", client="127.0.0.1", cport=app.port, method="GET",
                        path="/model_info", status="200 OK"))
    w = sched.submit(WARMUP_PROMPT, len(WARMUP_PROMPT.split()), 8, False, False, warmup=True)
    await w.done
    rest = sim.phase_s.get("warmup", 0.0) - (loop.time() - t0)
    if rest > 0:
        await asyncio.sleep(rest)
    log(versions.render(v, "access", client="127.0.0.1", cport=app.port, method="POST",
                        path="/generate", status="200 OK"))
    app.status = App.READY
    app.ready_mono = time.monotonic()
    truth.TRUTH.add({"event": "ready", "t": time.time(), "port": app.port})
    truth.TRUTH.flush()
    log(versions.render(v, "ready"))
    await server_task
    for t in tasks:
        t.cancel()


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        fault = fault_from(args)
    except FaultError as e:
        parser.error(f"invalid fault: {e}")
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    truth.TRUTH = truth.Truth(os.environ.get(TRUTH_ENV))
    try:
        sim = Sim(args, fault)
    except UsageError as e:
        parser.error(str(e))
    if fault is not None:
        log(f"specc.sim: fault injected: {fault}")
    if args.nnodes > 1:
        peers = rendezvous.join(sim)   # noqa: F841 (open while this server runs)
    Startup(sim).run()
    # Bind only now: connections were refused during the scheduler's phases.
    # proto=IPPROTO_TCP: asyncio then sets TCP_NODELAY on accepted connections, as
    # uvicorn's own bind does; without it small SSE chunks wait ~40 ms (Nagle).
    # A Listener: each accepted connection is watched from accept() on (arrivals.py).
    sock = Listener(socket.AF_INET6 if ":" in args.host else socket.AF_INET,
                    socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((args.host, args.port))
    except OSError as e:
        log(versions.render(sim.version, "bind_error", errno=e.errno, host=args.host,
                            port=args.port, strerror=e.strerror))
        truth.hard_exit(1)
    sock.listen(2048)
    sock.setblocking(False)
    # Startup objects are permanent: keep the cyclic GC from walking them (its
    # pauses would show up as token-timing drift).
    gc.collect()
    gc.freeze()
    gc.set_threshold(50000, 50, 100)
    try:
        asyncio.run(serve(sim, sock))
    finally:
        truth.TRUTH.flush()
    return 0
