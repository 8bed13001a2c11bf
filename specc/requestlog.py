"""Per-request records of a point (``requests/<benchmark id>.jsonl``) and adaptive stopping.

The statistics need each request, not a point's averages: the paired speedup
matches request ``i`` of a speculative point with request ``i`` of its
baseline, and categories, acceptance and intervals are all over requests. One
JSON line per request, appended (and fsynced) as each repeat of the point
finishes; every line carries the attempt (the point's start time), so a
retried point's lines follow the failed attempt's and the reader keeps the
latest attempt only.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from specc import stats
from specc.files import RecordWriteError, append_durable

DIR = "requests"


def path_for(run_dir: Path, benchmark_id: str) -> Path:
    return Path(run_dir) / DIR / f"{benchmark_id}.jsonl"


def lines_for(records, prompts, *, repeat: int, attempt: float) -> list[dict]:
    """One line per sent request: where it stood in the sequence, its prompt, what it did."""
    out = []
    for r in records:
        p = prompts[r.index]
        out.append({"attempt": attempt, "repeat": repeat, "i": r.index, "id": p.id,
                    "turn": p.turn, "category": p.category, "ok": r.ok, "error": r.error,
                    "input_tokens": r.input_tokens, "output_tokens": r.output_tokens,
                    "ttft": round(r.ttft, 6), "e2e_latency": round(r.e2e_latency, 6),
                    "start": round(r.start, 6), "verify_ct": r.verify_ct,
                    "sent_at_s": _round(r.sent_at_s), "lateness_s": _round(r.lateness_s)})
    return out


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 6)


def append(run_dir: Path, benchmark_id: str, lines: list[dict]) -> None:
    if not lines:
        return
    path = path_for(run_dir, benchmark_id)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        append_durable(path, "".join(json.dumps(x, separators=(",", ":")) + "\n" for x in lines))
    except OSError as e:
        raise RecordWriteError(e.errno, f"cannot append to {path}: {e.strerror or e}") from e


def read(run_dir: Path, benchmark_id: str) -> list[dict]:
    """The latest attempt's lines (empty when the point has none); unreadable lines skipped."""
    from specc.files import RECORDS_BYTES, UnreadableFile, read_text

    try:
        text = read_text(path_for(run_dir, benchmark_id), RECORDS_BYTES)
    except (FileNotFoundError, UnreadableFile):
        return []
    rows = []
    for line in text.splitlines():
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if isinstance(obj, dict) and "i" in obj:
            rows.append(obj)
    if not rows:
        return []
    last = max(r.get("attempt", 0) for r in rows)
    return [r for r in rows if r.get("attempt", 0) == last]


class Stopper:
    """Adaptive stopping for one run of a point: after every ``batch`` finished requests
    (and at least ``min_requests``), the throughput interval so far is checked against
    ``target_ci``; once it is tight enough, or ``max_requests`` have finished, no more
    requests are sent. The requests in flight finish: at most one batch beyond the target.
    """

    def __init__(self, *, target_ci: float | None, min_requests: int, max_requests: int,
                 batch: int, clock=time.time):
        self.target_ci = target_ci
        self.min_requests = min_requests
        self.max_requests = max_requests
        self.batch = max(1, batch)
        self.clock = clock
        self.done: list = []
        self.sent = 0
        self.reason: str | None = None
        self.interval: stats.Interval | None = None

    def keep_sending(self) -> bool:
        if self.reason is not None:
            return False
        self.sent += 1
        return True

    def on_done(self, rec) -> None:
        self.done.append(rec)
        n = len(self.done)
        if self.reason is not None or n < self.min_requests:
            return
        if not self.target_ci:
            return      # a fixed sample: the prompt list is exactly min_requests long
        if n % self.batch and n < self.max_requests:
            return
        ok = [r for r in self.done if r.ok]
        if len(ok) >= 2:
            t0 = min(r.start for r in self.done)
            t1 = max(r.end for r in self.done)
            if t1 > t0:
                self.interval = stats.throughput_interval(
                    [r.output_tokens for r in ok], [r.e2e_latency for r in ok], t1 - t0)
        self.reason = stats.stop_decision(self.interval, sent=n, target_ci=self.target_ci,
                                          min_requests=self.min_requests,
                                          max_requests=self.max_requests)
