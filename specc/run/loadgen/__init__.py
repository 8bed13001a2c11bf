"""specc's built-in benchmark load generator.

Streams requests to an engine's OpenAI-compatible endpoints (``/v1/chat/completions``,
``/v1/completions``) or SGLang's native ``/generate``, at a fixed concurrency cap
and/or a Poisson request rate, after a few sequential warm-up requests that are
excluded from the metrics.  Metrics are named as SGLang's ``bench_serving``
names them, with its meanings (see ``metrics``: ``itl`` is per token), plus
specc's per-stream decode tokens/s and the gap between chunks (``chunk_gap``).

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

Modules: ``records`` (RequestRecord, LoadResult), ``sse`` (request bodies and
the three APIs' streamed responses), ``metrics`` (bench_serving's aggregation),
``client`` (the fast transport), ``httpx_client``, ``run`` (``run_load``).
"""

from specc.run.loadgen.metrics import METRIC_KEYS, percentile, summarize
from specc.run.loadgen.records import LoadResult, RequestRecord
from specc.run.loadgen.run import run_load
from specc.run.loadgen.sse import API_PATHS

__all__ = ["RequestRecord", "LoadResult", "run_load", "summarize", "percentile",
           "API_PATHS", "METRIC_KEYS"]
