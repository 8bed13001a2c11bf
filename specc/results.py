"""results.jsonl: the result row, its one reader and the one speedup.

One line per finished point, appended, flushed and fsynced as it finishes,
keyed by the plan's stable benchmark ids, so a rerun into the same run dir
skips finished points and never duplicates a row.  The executor
(``ResultLog``), the report and ``inv status`` all read it through
``parse_rows``: a line that is not a row (bad JSON, no benchmark id, an
unknown status) is skipped with one warning naming its line, never a traceback.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from specc.files import RECORDS_BYTES, append_durable, atomic_write, read_bounded, read_text

STATUSES = ("ok", "failed")
_FIELDS = ("benchmark", "server", "status", "reason", "metrics", "params")
# what makes a baseline point the matched one: the same workload at the same concurrency
MATCH_PARAMS = ("concurrency", "api", "dataset", "dataset_path", "input_len", "output_len",
                "range_ratio", "num_prompts", "request_rate", "seed",
                # the same prompts, sampling and lengths (issue 10)
                "categories", "hf_dataset", "hf_subset", "hf_split", "temperature", "ignore_eos",
                # the same conversations and shared prefixes (issue 21)
                "multi_turn", "shared_prefix_len", "shared_prefix_groups")


class RowError(ValueError):
    """A results.jsonl line that is not a result row; the message says why."""


@dataclass(frozen=True, slots=True)
class ResultRow:
    """One finished benchmark point: what the executor writes and everyone reads (report,
    compare, the run's outcome), read only through ``from_json``: frozen, so a reader
    never changes what another one sees. ``metrics`` are bench_serving's names (open by
    design: docs/run-dir.md lists specc's own); ``extra`` the row's other fields as written."""

    benchmark: str
    server: str | None
    status: str                          # "ok" | "failed"
    reason: str | None = None            # why it failed; None when ok
    metrics: dict[str, Any] = field(default_factory=dict)   # bench_serving's names (docs/run-dir.md)
    params: dict[str, Any] = field(default_factory=dict)    # the plan's benchmark params
    extra: dict[str, Any] = field(default_factory=dict)     # finished_at, started_at, ...

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def metric(self, name: str) -> float | None:
        """A metric as a finite number, or None (absent, null, text, inf, nan, bool)."""
        v = self.metrics.get(name)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            return None
        return float(v)

    def to_json(self) -> dict[str, Any]:
        return {"benchmark": self.benchmark, "server": self.server, "status": self.status,
                "reason": self.reason, "metrics": self.metrics, "params": self.params,
                **self.extra}

    @classmethod
    def from_json(cls, obj: Any) -> ResultRow:
        """The row a parsed line holds; RowError when it holds none."""
        if not isinstance(obj, dict):
            raise RowError(f"not a JSON object but {type(obj).__name__}")
        bid = obj.get("benchmark")
        if not isinstance(bid, str) or not bid:
            raise RowError("benchmark: no benchmark id")
        status = obj.get("status")
        if status not in STATUSES:
            raise RowError(f"status: {status!r} is neither 'ok' nor 'failed'")
        parts = {}
        for name in ("metrics", "params"):
            value = obj.get(name)
            if value is not None and not isinstance(value, dict):
                raise RowError(f"{name}: expected an object, got {type(value).__name__}")
            parts[name] = dict(value or {})
        for name in ("server", "reason"):
            value = obj.get(name)
            if value is not None and not isinstance(value, str):
                raise RowError(f"{name}: expected a string or null, got {type(value).__name__}")
        return cls(benchmark=bid, server=obj.get("server"), status=status,
                   reason=obj.get("reason"), **parts,
                   extra={k: v for k, v in obj.items() if k not in _FIELDS})


class _NotFinite(ValueError):
    pass


def _no_constant(name: str):
    raise _NotFinite(name)


def _finite_float(text: str) -> float:
    v = float(text)
    if not math.isfinite(v):
        raise _NotFinite(text)
    return v


def loads_row(line: str):
    """A results line's JSON: plain JSON only (specc never writes NaN or Infinity, so a
    line holding one was edited by hand; _NotFinite). RecursionError is a ValueError here."""
    try:
        return json.loads(line, parse_constant=_no_constant, parse_float=_finite_float)
    except RecursionError:
        raise ValueError("nested too deep") from None


def finite(obj, path: str = "", bad: list | None = None):
    """``obj`` with every NaN or Infinity replaced by None; their paths go in ``bad``."""
    if isinstance(obj, float) and not math.isfinite(obj):
        if bad is not None:
            bad.append(path or "value")
        return None
    if isinstance(obj, dict):
        return {k: finite(v, f"{path}.{k}" if path else str(k), bad) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v, f"{path}[{i}]", bad) for i, v in enumerate(obj)]
    return obj


def parse_rows(text: str, name: str = "results.jsonl") -> tuple[dict[str, ResultRow], list[str]]:
    """Rows keyed by benchmark id (the last line for an id wins), and one warning per
    line that is not a row."""
    rows: dict[str, ResultRow] = {}
    warnings: list[str] = []
    lines = text.splitlines()
    # the last non-blank line is the only one an interrupted write can have cut
    last = max((i for i, s in enumerate(lines) if s.strip()), default=-1)
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            obj = loads_row(line)
        except _NotFinite as e:
            warnings.append(f"{name}: ignored line {i + 1}: it holds {e} (specc never writes "
                            "NaN or Infinity; edited by hand?)")
            continue
        except ValueError:
            if i == last:
                warnings.append(f"{name}: ignored an unparseable last line (line {i + 1}; "
                                "truncated by an interrupted write?)")
            else:
                warnings.append(f"{name}: ignored unparseable line {i + 1}")
            continue
        try:
            row = ResultRow.from_json(obj)
        except RowError as e:
            warnings.append(f"{name}: ignored line {i + 1}: not a result row ({e})")
            continue
        rows[row.benchmark] = row
    return rows, warnings


def read_rows(path: Path) -> tuple[dict[str, ResultRow], list[str]]:
    """``parse_rows`` of a results.jsonl file; none and no warnings when it does not exist."""
    path = Path(path)
    try:
        text = read_text(path, RECORDS_BYTES)
    except FileNotFoundError:
        return {}, []
    return parse_rows(text, path.name)


def speedup(row: ResultRow, baseline: ResultRow | None) -> float | None:
    """Output throughput / the matched baseline's, at the same concurrency and dataset.

    None when either point failed, either throughput is unknown, or the two rows'
    params say they ran different workloads (not a matched baseline)."""
    if baseline is None or not (row.ok and baseline.ok):
        return None
    for k in MATCH_PARAMS:
        if k in row.params and k in baseline.params and row.params[k] != baseline.params[k]:
            return None
    out, base = row.metric("output_throughput"), baseline.metric("output_throughput")
    if out is None or base is None or base <= 0:
        return None
    return round(out / base, 4)


def with_speedup(row: dict, baseline_row: dict | None) -> dict:
    """Set ``row["metrics"]["speedup"]`` (in place) when ``speedup`` knows it; returns row."""
    if not baseline_row:
        return row
    try:
        value = speedup(ResultRow.from_json(row), ResultRow.from_json(baseline_row))
    except RowError:
        return row
    if value is not None:
        row.setdefault("metrics", {})["speedup"] = value
    return row


def _is_row(line: str) -> bool:
    try:
        ResultRow.from_json(loads_row(line))
    except (ValueError, RowError):
        return False
    return True


class ResultLog:
    """The executor's view of results.jsonl: rows as written (dicts), appended durably."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.rows: dict[str, dict] = {}
        self.warnings: list[str] = []
        self.not_rows: list[str] = []   # lines that are not rows: kept as written on rewrite
        self._load()

    def _load(self) -> None:
        try:
            data = read_bounded(self.path, RECORDS_BYTES)   # UnreadableFile: a FIFO, too big
        except FileNotFoundError:
            return
        cut = []
        if data and not data.endswith(b"\n"):
            # a line cut by a killed writer: drop it, it is the point that was in flight
            data = data[: data.rfind(b"\n") + 1]
            try:
                with open(self.path, "r+b") as f:
                    f.truncate(len(data))
            except OSError:
                pass   # a read-only run dir: ignored in memory all the same
            cut = [f"{self.path.name}: dropped a truncated last line (the point in flight when "
                   "the writer stopped; it runs again)"]
        text = data.decode("utf-8", "replace")
        rows, warnings = parse_rows(text, self.path.name)
        self.not_rows = [ln for ln in text.splitlines() if ln.strip() and not _is_row(ln)]
        self.warnings = warnings + cut
        self.rows = {k: r.to_json() for k, r in rows.items()}
        for w in self.warnings:
            print(f"warning: {w}", file=sys.stderr)

    def finished(self, benchmark_id: str) -> bool:
        """A point with a row (ok or failed) is finished: a rerun skips it."""
        return benchmark_id in self.rows

    def drop_failed(self) -> int:
        """Forget failed rows (rewriting the file atomically) so a rerun retries them."""
        failed = [k for k, r in self.rows.items() if r.get("status") != "ok"]
        if not failed:
            return 0
        for k in failed:
            del self.rows[k]
        self.rewrite()
        return len(failed)

    def rewrite(self) -> None:
        """Write the rows known now, atomically (temp file, fsync, rename); lines that are
        not rows (another tool's, a newer specc's) stay, as written."""
        atomic_write(self.path, "".join(ln + "\n" for ln in self.not_rows) + "".join(
            json.dumps(r, ensure_ascii=False, allow_nan=False, default=str) + "\n"
            for r in self.rows.values()))

    def get(self, benchmark_id: str) -> dict | None:
        return self.rows.get(benchmark_id)

    def append(self, row: dict | ResultRow) -> None:
        """Append one row (checked: a malformed row is a bug, raised as RowError). A NaN
        or Infinity that reached the row is written as null, its path in ``not_finite``:
        results.jsonl holds plain JSON only, and one bad figure never stops a sweep."""
        if isinstance(row, ResultRow):
            row = row.to_json()
        else:
            ResultRow.from_json(row)
        bad: list[str] = []
        row = cast(dict, finite(row, bad=bad))
        if bad:
            row["not_finite"] = bad
            print(f"warning: {row['benchmark']}: {', '.join(bad)} not a finite number, "
                  "written as null", file=sys.stderr)
        line = json.dumps(row, ensure_ascii=False, allow_nan=False, default=str) + "\n"
        append_durable(self.path, line)
        self.rows[row["benchmark"]] = row
