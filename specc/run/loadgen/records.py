"""What one request produced (RequestRecord) and what one benchmark point did (LoadResult)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class RequestRecord:
    ok: bool = False
    error: str | None = None
    input_tokens: int = 0
    # as reported by the engine (usage / meta_info), else what the stream proves; tokens
    # without text (a UTF-8 character cut short, special tokens) are among them
    output_tokens: int = 0
    requested_output_tokens: int = 0
    ttft: float = 0.0               # s, send -> first non-empty content chunk
    # s, per-token ITL as bench_serving computes it: each chunk's gap spread over its tokens
    itls: list[float] = field(default_factory=list)
    chunk_gaps: list[float] = field(default_factory=list)  # s, between content chunks
    e2e_latency: float = 0.0        # s, send -> end of stream
    start: float = 0.0              # epoch s, just before the request is written
    first_token_t: float = 0.0      # epoch s
    end: float = 0.0                # epoch s
    chunk_times: list[float] = field(default_factory=list)  # epoch s of content chunks
    chunk_count: int = 0            # non-empty content chunks
    # new tokens each content chunk brought, when the server counts them per chunk
    # (/generate's meta_info, OpenAI usage with continuous_usage_stats); else empty
    chunk_tokens: list[int] = field(default_factory=list)
    rid: str | None = None          # response id (OpenAI "id", SGLang meta_info.id)
    status: int = 0                 # HTTP status, 0 if none
    index: int = -1                 # position in the prompt list (-1 for warm-up)
    ignore_eos: bool = True         # asked for exactly requested_output_tokens
    # verify passes the engine reports for this request (SGLang /generate meta_info
    # spec_verify_ct): accept length = output tokens / verify passes
    verify_ct: int | None = None
    # multi-turn: the answer's text is kept (the next turn carries it), else not held
    keep_answer: bool = False
    answer: str | None = None
    # s from the start of the point: when the schedule (a rate, a trace) said to send it
    # (None: closed loop, no schedule), and when it was sent (None: never sent)
    scheduled_s: float | None = None
    sent_at_s: float | None = None

    @property
    def lateness_s(self) -> float | None:
        """Sent minus due: the load generator's (and the concurrency cap's) delay."""
        if self.scheduled_s is None or self.sent_at_s is None:
            return None
        return self.sent_at_s - self.scheduled_s

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
    t0: float = 0.0                 # epoch s the measured run started
