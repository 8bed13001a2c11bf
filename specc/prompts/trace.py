"""Trace replay (``benchmark.dataset=trace``): each request sent when the trace says.

A trace is a JSONL or CSV file (CSV: a ``.csv`` name, a header row), one request a
line, in time order:

- ``timestamp``: milliseconds (mooncake's unit); the first row is sent at the
  start of the point, each later one ``(timestamp - first) / 1000`` s after it;
- ``input_length`` (tokens) or ``prompt`` (the text itself);
- ``output_length``: tokens to generate;
- ``hash_ids`` (optional, mooncake's): one id per 512-token block of the prompt;
  equal ids are equal blocks, so requests that share a prefix in the trace share
  it here and hit the server's prefix cache as they did in production.

mooncake's traces (``{"timestamp", "input_length", "output_length", "hash_ids"}``)
are read as they are. Prompt text built from lengths is words (one token each on
the simulator; an approximation on a real tokenizer, as for the random dataset).
Read through the same bounded line reader as the jsonl dataset, at compile time
(every problem, file:line) and at run time.
"""

from __future__ import annotations

import array
import collections
import csv
import functools
import json
import math
import os
import random
from dataclasses import dataclass

from specc.prompts import DatasetError, Prompt, count_tokens
from specc.prompts.datasets import _WORDS, MAX_PROBLEMS, _positive_int, bounded_lines, capped

#: Tokens per hash id in a mooncake trace (its block size).
BLOCK_TOKENS = 512


@dataclass(frozen=True)
class Row:
    where: str
    timestamp_ms: float
    output_tokens: int
    input_tokens: int | None = None     # None: the prompt's own words
    prompt: str | None = None
    hash_ids: tuple[int, ...] = ()


def _positive(value, where: str, key: str) -> int:
    if isinstance(value, str) and value.strip().isdigit():   # a CSV cell
        value = int(value)
    return _positive_int(value, where, key)


def _row(where: str, obj: dict) -> Row:
    ts = obj.get("timestamp")
    try:
        ts = float(ts) if isinstance(ts, (int, float, str)) and not isinstance(ts, bool) else None
    except ValueError:
        ts = None
    if ts is None or not math.isfinite(ts):
        raise DatasetError(f"{where}: needs a numeric \"timestamp\" (milliseconds), got "
                           f"{obj.get('timestamp')!r}")
    if ts < 0:
        raise DatasetError(f"{where}: timestamp {obj['timestamp']} is negative (milliseconds "
                           "from the trace's start)")
    out = _positive(obj.get("output_length"), where, "output_length")
    prompt = obj.get("prompt")
    if prompt not in (None, ""):
        if not isinstance(prompt, str) or not prompt.strip():
            raise DatasetError(f"{where}: \"prompt\" must be a non-empty string")
        return Row(where, ts, out, prompt=prompt)
    ids = obj.get("hash_ids") or ()
    if isinstance(ids, str):   # a CSV cell: a JSON list
        try:
            ids = json.loads(ids)
        except ValueError:
            ids = None
    if not isinstance(ids, (list, tuple)) or not all(
            isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise DatasetError(f"{where}: \"hash_ids\" must be a list of integers")
    return Row(where, ts, out, input_tokens=_positive(obj.get("input_length"), where,
                                                   "input_length"), hash_ids=tuple(ids))


def _objects(path: str):
    """(where, the line's fields or the DatasetError that says what is wrong with it)."""
    if path.lower().endswith(".csv"):
        yield from _csv_objects(path)
        return
    for where, line in bounded_lines(path, "trace"):
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError):
            yield where, DatasetError(f"{where}: bad JSON (one object a line)")
            continue
        yield where, obj if isinstance(obj, dict) else DatasetError(
            f"{where}: expected a JSON object, got {type(obj).__name__}")


def _csv_objects(path: str):
    """A CSV trace's rows by the csv module's rules over the bounded lines: a quoted cell
    may hold a newline (the row then spans lines; `where` is its first); the header names
    each column once."""
    wheres: list[str] = []

    def lines():
        for where, line in bounded_lines(path, "trace"):
            wheres.append(where)
            yield line if line.endswith("\n") else line + "\n"

    reader, header, used = csv.reader(lines()), None, 0
    while True:
        try:
            cells = next(reader)
        except StopIteration:
            return
        except csv.Error as e:
            where = wheres[used] if used < len(wheres) else path
            raise DatasetError(f"{where}: not CSV ({e})") from None
        where, used = wheres[used], len(wheres)
        if header is None:
            header = [c.strip() for c in cells]
            if "timestamp" not in header:
                raise DatasetError(f"{where}: a CSV trace starts with a header naming "
                                   "timestamp, input_length (or prompt), output_length")
            twice = sorted({c for c in header if header.count(c) > 1})
            if twice:
                raise DatasetError(f"{where}: the header names {', '.join(twice)} more than "
                                   "once: which column is meant? (name each column once)")
            continue
        if len(cells) != len(header):
            yield where, DatasetError(f"{where}: {len(cells)} cells, the header has "
                                      f"{len(header)}")
            continue
        yield where, dict(zip(header, cells))


def rows(path: str):
    """The trace's rows in order; the first problem raises DatasetError (file:line)."""
    last = None
    for where, obj in _objects(path):
        if isinstance(obj, DatasetError):
            raise obj
        row = _row(where, obj)
        _in_order(row, last)
        last = row
        yield row


def _in_order(row: Row, last: Row | None) -> None:
    if last is not None and row.timestamp_ms < last.timestamp_ms:
        raise DatasetError(f"{row.where}: timestamp {row.timestamp_ms:g} ms is before line "
                           f"{last.where.rsplit(':', 1)[-1]}'s ({last.timestamp_ms:g} ms): a "
                           "trace is replayed in order (sort it by timestamp)")


def check(path: str, *, context_length: int | None = None) -> list[str]:
    """What is wrong with a trace, one line each naming file:line (at most MAX_PROBLEMS)."""
    problems, last, n = [], None, 0
    try:
        for where, obj in _objects(path):
            try:
                if isinstance(obj, DatasetError):
                    raise obj
                row = _row(where, obj)
                _in_order(row, last)
                last = row
                n += 1
                need = (row.input_tokens or count_tokens(row.prompt)) + row.output_tokens  # type: ignore[arg-type]  # a row has a prompt or its length
                if context_length and need > context_length:
                    problems.append(f"{where}: {need} tokens (input + output) are over the "
                                    f"context length {context_length}")
            except DatasetError as e:
                problems.append(str(e))
            if len(problems) > MAX_PROBLEMS:
                break
        if n == 0 and not problems:
            problems.append(f"{path}: the trace has no requests")
    except DatasetError as e:
        problems.append(str(e))
    return capped(problems, path)


def count(path: str) -> int:
    """How many requests the trace holds (0 when it cannot be read: check says why); read
    once per compile however many points replay it."""
    try:
        stamp = os.stat(path).st_mtime_ns
    except OSError:
        return 0
    return _rows_in(path, stamp)


def span_s(path: str, num: int | None = None) -> float:
    """Seconds from the trace's first request to its ``num``-th (its last when None): how
    long its replay takes at the least (0 when it cannot be read: check says why)."""
    try:
        stamp = os.stat(path).st_mtime_ns
    except OSError:
        return 0.0
    return _span_in(path, stamp, num)


@functools.lru_cache(maxsize=16)
def _span_in(path: str, stamp: int, num: int | None) -> float:
    first = last = None
    try:
        for k, row in enumerate(rows(path)):
            if num is not None and k >= num:
                break
            first = row.timestamp_ms if first is None else first
            last = row.timestamp_ms
    except DatasetError:
        return 0.0
    return 0.0 if first is None else (last - first) / 1000


def longest_gap(path: str) -> tuple[float, str]:
    """The longest wait between two of the trace's requests in seconds, and the line of the
    later one (0 and the path when it cannot be read: check says why)."""
    try:
        stamp = os.stat(path).st_mtime_ns
    except OSError:
        return 0.0, path
    return _gap_in(path, stamp)


@functools.lru_cache(maxsize=16)
def _gap_in(path: str, stamp: int) -> tuple[float, str]:
    gap, where, last = 0.0, path, None
    try:
        for row in rows(path):
            if last is not None and row.timestamp_ms - last > gap * 1000:
                gap, where = (row.timestamp_ms - last) / 1000, row.where
            last = row.timestamp_ms
    except DatasetError:
        pass
    return gap, where


@functools.lru_cache(maxsize=16)
def _rows_in(path: str, stamp: int) -> int:
    try:
        return sum(1 for _ in rows(path))
    except DatasetError:
        return 0


class Replay:
    """The first ``num`` requests of a trace, read and built as they are reached, never
    held whole: iterating yields (prompt, seconds after the start it is due), one row at a
    time, from the file (again on each pass: a repeat reads it anew). A 10^6-line trace
    built every prompt before the first send (3 GB); now the first goes out after one line
    is read, and memory holds what is in flight plus a bounded cache of shared blocks.
    Problems raise DatasetError (file:line) when reached; compile checked them all."""

    #: Shared blocks (hash ids) kept built: 512 words each, ~40 KB; a trace's prefixes
    #: are shared among neighbours, and a block not kept is rebuilt the same.
    BLOCKS = 1024

    def __init__(self, path: str, *, num: int):
        self.path, self.num = path, num
        self._lines = array.array("q")   # each reached row's line: 8 bytes a request

    def __iter__(self):
        first = None
        blocks: collections.OrderedDict[int, list[str]] = collections.OrderedDict()
        k = -1
        for k, row in enumerate(rows(self.path)):
            if k >= self.num:
                break
            first = row.timestamp_ms if first is None else first
            text = row.prompt or _text(row, k, blocks)
            line = row.where.rsplit(":", 1)[-1]
            if k == len(self._lines):
                self._lines.append(int(line))
            yield (Prompt(text=text, input_tokens=row.input_tokens or count_tokens(text),
                          output_tokens=row.output_tokens, id=line),
                   (row.timestamp_ms - first) / 1000.0)
        if k < 0:
            raise DatasetError(f"{self.path}: the trace has no requests")

    def __getitem__(self, i: int) -> Sent:
        """What a request line names of row ``i`` once it was reached: its line (its id)."""
        return Sent(id=str(self._lines[i]))


@dataclass(frozen=True)
class Sent:
    """A replayed row as its request line names it (`specc.requestlog.lines_for`): the text
    is not kept."""
    id: str
    turn: int = 1
    category: str | None = None


def load(path: str, *, num: int) -> tuple[list[Prompt], list[float]]:
    """The first ``num`` requests of the trace (all of them if it has fewer: a trace is never
    replayed twice over) and the seconds after the start at which each is due, as lists
    (the load generator streams them instead: `Replay`)."""
    pairs = list(Replay(path, num=num))
    return [p for p, _ in pairs], [d for _, d in pairs]


def _text(row: Row, k: int, blocks: collections.OrderedDict[int, list[str]]) -> str:
    """``input_tokens`` words: the hash ids' blocks (the same id, the same words: kept in
    `blocks`, the least recently used dropped past Replay.BLOCKS), then words of this row's
    own."""
    words: list[str] = []
    for h in row.hash_ids:
        block = blocks.get(h)
        if block is None:
            block = blocks[h] = random.Random(h).choices(_WORDS, k=BLOCK_TOKENS)
            if len(blocks) > Replay.BLOCKS:
                blocks.popitem(last=False)
        else:
            blocks.move_to_end(h)
        words += block
        if len(words) >= row.input_tokens:  # type: ignore[operator]  # no prompt: a length (_row)
            break
    if len(words) < row.input_tokens:  # type: ignore[operator]  # a row's own words: no accidental shared prefix
        words += random.Random(f"row{k}").choices(_WORDS, k=row.input_tokens - len(words))  # type: ignore[operator]
    return " ".join(words[:row.input_tokens])
