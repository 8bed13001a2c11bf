"""compare.npz: what `specc compare` reads of a run, in one file: a columnar copy of its
requests/ and its points as compare reads them from plan.json, results.jsonl,
report.json and manifest.json (docs/run-dir.md).

A 10^4-point run has 10^4 request files; compare read and parsed each of them, and
results.jsonl line by line, every time (two thirds of its time). The copy holds each
point's ok requests of its latest attempt (repeat, place, prompt id, output tokens,
latency, TTFT) as numpy columns -- exactly what read_requests gives -- the digest of
the files it was built from (listing_digest) and its own (SELF). A file appended to,
rewritten, added or removed since makes the copy stale; a copy edited since it was
written fails its own digest; a stale, edited or unreadable copy is never used: it is built again from the files (and rewritten
where the run dir can be written). A run writes it when it finishes (as it adds itself
to the results index); compare writes it the first time it needs it.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import re
from itertools import compress
from operator import add
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from specc import requestlog as reqlog
from specc.files import PLAN_BYTES, RECORDS_BYTES, UnreadableFile, atomic_write, read_bounded
from specc.manifest import MANIFEST_BYTES

FILE = "compare.npz"
#: Part of the digest: a copy written in another layout is stale, never misread.
FORMAT = 3
_COLUMNS = ("offsets", "repeat", "place", "code", "tokens", "latency", "ttft")


# --------------------------------------------------------------------------- one file

_STR = r'"(?:[^"\\]|\\.)*"'
_NUM = r'-?[0-9][0-9.eE+-]*'
#: One request line exactly as requestlog.lines_for writes it (its keys, in its order,
#: compact separators), capturing what compare reads: attempt, repeat, place, prompt id,
#: ok, output tokens, TTFT, latency. A file whose every line matches is read without
#: building a dict per line; any other file goes through json (the same result, slower).
_LINE = re.compile(
    r'^\{"attempt":(%s),"repeat":(\d+),"i":(\d+),"id":(%s|null),(?:"turn":\d+,)?'  # noqa: UP031  a regex: % leaves its braces as they are
    r'"category":(?:%s|null),'
    r'"ok":(true|false),"error":(?:%s|null),"input_tokens":(?:\d+|null),'
    r'"output_tokens":(\d+),"ttft":(%s),"e2e_latency":(%s),"start":(?:%s|null),'
    r'"verify_ct":(?:\d+|null)(?:,"sent_at_s":(?:%s|null),"lateness_s":(?:%s|null))?\}\n'
    % (_NUM, _STR, _STR, _STR, _NUM, _NUM, _NUM, _NUM, _NUM), re.M)


def _read_fast(text: str) -> dict | None:
    """read_requests' records from the lines of ``text`` when every line is one _LINE
    matches; None otherwise."""
    if not text.endswith("\n"):
        return None
    lines = _LINE.findall(text)
    if len(lines) != text.count("\n"):
        return None
    try:   # column by column: the conversions run in C, not a Python loop per line
        attempt, rep, idx, pid, ok, tok, ttft, lat = zip(*lines)
        attempt, ttft, lat = (list(map(float, c)) for c in (attempt, ttft, lat))  # type: ignore[assignment]  # the texts as numbers
        tok, rep, idx = (list(map(int, c)) for c in (tok, rep, idx))  # type: ignore[assignment]  # the texts as numbers
    except ValueError:   # a number the loose pattern let through: json decides
        return None
    pids = [None if p == "null" else (json.loads(p) if "\\" in p else p[1:-1]) for p in pid]
    rows: Iterable = zip(zip(rep, idx, pids), zip(tok, lat, ttft))
    finite = all(map(math.isfinite, map(add, lat, ttft)))   # as json's: of the sum
    if not (finite and ok.count("true") == len(ok) and len(set(attempt)) <= 1):
        last = max(attempt)
        rows = compress(rows, [a == last and o == "true" and math.isfinite(x + y)
                               for a, o, x, y in zip(attempt, ok, lat, ttft)])
    return dict(rows)


def read_requests(run_dir: Path, benchmark: str) -> tuple[dict, float]:
    """A point's ok requests of its latest attempt, as ({(repeat, place, prompt id):
    (output tokens, latency, TTFT)}, their summed latency): only what compare uses.
    Lines as the executor writes them are read by one regular expression a file
    (_read_fast); any other file by one json.loads, and a file with a bad line by the
    careful line-by-line reader."""
    path = os.path.join(run_dir, reqlog.DIR, benchmark + ".jsonl")
    try:   # bounded: a FIFO or /dev/zero linked there is no records, never a hang
        text = read_bounded(path, RECORDS_BYTES).decode("utf-8", "replace")
    except (OSError, UnreadableFile):
        return {}, 0.0
    out = _read_fast(text)
    if out is None:
        out = _read_json(text, run_dir, benchmark)
    return out, sum(x[1] for x in out.values())


def _read_json(text: str, run_dir: Path, benchmark: str) -> dict:
    try:
        rows = json.loads("[" + text.strip().replace("\n", ",") + "]")
    except ValueError:   # a cut or foreign line
        rows = reqlog.read(run_dir, benchmark)
    rows = [r for r in rows if type(r) is dict and "i" in r]
    if not rows:
        return {}
    last = max(r.get("attempt", 0) for r in rows)
    out = {}
    for r in rows:
        if r.get("attempt", 0) == last and r.get("ok"):
            try:   # finite numbers only: a hand-edited line is left out, not a traceback
                tok, lat, ttft = r["output_tokens"], r["e2e_latency"], r["ttft"]
                if math.isfinite(lat + ttft + tok):
                    out[(r.get("repeat", 0), r["i"], r.get("id"))] = (tok, lat, ttft)
            except (KeyError, TypeError):
                continue
    return out


# --------------------------------------------------------------------------- the copy

class Columns:
    """Every point's requests as read_requests gives them, as columns: point ``j``'s rows
    are ``offsets[j]:offsets[j + 1]``; ``code`` indexes ``ids`` (-1: no prompt id)."""

    # the numpy arrays of _COLUMNS, set by name in __init__
    offsets: Any
    repeat: Any
    place: Any
    code: Any
    tokens: Any
    latency: Any
    ttft: Any

    def __init__(self, benchmarks, ids, **cols):
        self.benchmarks = list(benchmarks)
        self.row_of = {b: j for j, b in enumerate(self.benchmarks)}
        self.ids = list(ids)
        for name in _COLUMNS:
            setattr(self, name, cols[name])
        import numpy as np

        # (an empty point's start may be the end: clipped, and zeroed below)
        self.latency_sums = np.add.reduceat(
            self.latency, np.minimum(self.offsets[:-1], len(self.latency) - 1)) if len(
            self.latency) else np.zeros(len(self.benchmarks))
        empty = self.offsets[:-1] == self.offsets[1:]
        self.latency_sums[empty] = 0.0   # reduceat gives the next row's value there
        self._offsets = self.offsets.tolist()   # Python numbers: looked up per point
        self.latency_sum = dict(zip(self.benchmarks, self.latency_sums.tolist()))

    def span(self, benchmark: str) -> tuple[int, int]:
        j = self.row_of.get(benchmark)
        return (0, 0) if j is None else (self._offsets[j], self._offsets[j + 1])

    def records(self, benchmark: str) -> dict:
        """read_requests' dict of one point (the slow path, for points matched by key)."""
        lo, hi = self.span(benchmark)
        keys = zip(self.repeat[lo:hi].tolist(), self.place[lo:hi].tolist(),
                   [None if c < 0 else self.ids[c] for c in self.code[lo:hi].tolist()])
        return dict(zip(keys, zip(self.tokens[lo:hi].tolist(), self.latency[lo:hi].tolist(),
                                  self.ttft[lo:hi].tolist())))


#: The run's own files compare reads beside requests/ (a change to one makes the copy
#: stale), each with the cap of its own reader (specc.rundir, specc.results, specc.manifest).
SOURCES = {"plan.json": PLAN_BYTES, "results.jsonl": RECORDS_BYTES, "report.json": PLAN_BYTES,
           "manifest.json": MANIFEST_BYTES}


def _content(path: str, limit: int) -> str | None:
    """A source file's sha256 (read by the bounded reader, up to its own reader's cap: a
    file that reader refuses is "unreadable" without reading a byte of it, as is a FIFO or
    /dev/zero); None when there is none."""
    try:
        return hashlib.sha256(read_bounded(path, limit)).hexdigest()
    except FileNotFoundError:
        return None
    except UnreadableFile:
        return "unreadable"


def listing_digest(run_dir: Path) -> tuple[str, list[str]]:
    """The digest of what compare reads of a run as it is now, and the point ids requests/
    holds, sorted. SOURCES by their content (sha256); requests/*.jsonl by name, size,
    mtime and ctime in ns: an edit, or a `touch -d` that puts an old mtime back, sets the
    ctime to now (hashing 10^4 request files cost more than the rest of compare)."""
    entries = []
    try:
        with os.scandir(os.path.join(run_dir, reqlog.DIR)) as it:
            for e in it:
                if e.name.endswith(".jsonl") and e.is_file():
                    st = e.stat()
                    entries.append((e.name, st.st_size, st.st_mtime_ns, st.st_ctime_ns))
    except OSError:
        pass
    entries.sort()
    files = [[name, _content(os.path.join(run_dir, name), limit)] for name, limit in SOURCES.items()]
    h = hashlib.sha256(json.dumps([FORMAT, files, entries]).encode()).hexdigest()
    return h, [name[:-len(".jsonl")] for name, *_ in entries]


def build(run_dir: Path, benchmarks: list[str]) -> Columns:
    """The copy, from the request files themselves."""
    import numpy as np

    ids: dict = {}
    offsets, rep, place, code, tok, lat, ttft = [0], [], [], [], [], [], []
    for b in benchmarks:
        recs, _ = read_requests(run_dir, b)
        for (r, i, pid), (t, la, tt) in recs.items():
            rep.append(r)
            place.append(i)
            code.append(-1 if pid is None else ids.setdefault(pid, len(ids)))
            tok.append(t)
            lat.append(la)
            ttft.append(tt)
        offsets.append(len(rep))
    return Columns(benchmarks, list(ids),
                   offsets=np.array(offsets, np.int64), repeat=np.array(rep, np.int64),
                   place=np.array(place, np.int64), code=np.array(code, np.int64),
                   tokens=np.array(tok, float), latency=np.array(lat, float),
                   ttft=np.array(ttft, float))


def read(run_dir: Path, digest: str) -> tuple[Columns, dict] | None:
    """The run's copy and the ``meta`` written with it, when the copy was built from
    ``digest`` (listing_digest now) and is byte for byte what write() wrote (its own
    digest); None for a stale, absent, edited or unreadable one."""
    import zipfile

    import numpy as np

    try:
        data = read_bounded(Path(run_dir) / FILE, RECORDS_BYTES)
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            if not _members_sound(z):
                return None
        with np.load(io.BytesIO(data), allow_pickle=False) as f:
            if _text(f, "digest") != digest:
                return None
            cols = {n: f[n] for n in _COLUMNS}
            benchmarks, ids, meta = (_text(f, n) for n in ("benchmarks", "ids", "meta"))
        if not (isinstance(benchmarks, list) and isinstance(ids, list)
                and isinstance(meta, dict)):
            return None
        n, m = len(benchmarks), len(cols["repeat"])
        off = cols["offsets"]
        ok = (len(off) == n + 1 and all(len(cols[c]) == m for c in _COLUMNS[1:])
              and all(cols[c].dtype.kind == "i" for c in _COLUMNS[:4])
              and all(cols[c].dtype.kind == "f" for c in _COLUMNS[4:])
              and all(bool(np.isfinite(cols[c]).all()) for c in _COLUMNS[4:])
              and (n == 0 or (off[0] == 0 and off[-1] == m and bool((np.diff(off) >= 0).all())))
              and bool((cols["code"] < len(ids)).all()) and bool((cols["code"] >= -1).all()))
        return (Columns(benchmarks, ids, **cols), meta) if ok else None
    except (OSError, ValueError, KeyError, TypeError, UnreadableFile, zipfile.BadZipFile,
            EOFError):
        return None


#: The copy's members, each a 1-d array: the texts (uint8 JSON) and the columns, and
#: SELF, the sha256 of all the others' bytes.
SELF = "self"
_MEMBERS = frozenset(f"{n}.npy" for n in ("digest", "benchmarks", "ids", "meta", SELF,
                                          *_COLUMNS))


def _members_sound(z) -> bool:
    """Before numpy loads a byte of it: every member stored (no inflation), one of ours,
    a 1-d array of plain numbers whose header's shape is exactly the bytes it holds (a
    header claiming 10^12 elements allocates nothing), and SELF the digest of the rest."""
    import zipfile

    import numpy as np

    infos = z.infolist()
    if ({i.filename for i in infos} != _MEMBERS or len(infos) != len(_MEMBERS)
            or any(i.compress_type != zipfile.ZIP_STORED for i in infos)):
        return False
    h = hashlib.sha256()
    own = None
    for info in sorted(infos, key=lambda i: i.filename):
        shape, _, body = _member(z, info)
        if shape is None:
            return False
        if info.filename == f"{SELF}.npy":
            own = body
        else:
            h.update(info.filename.encode() + b"\0" + body)
    return own == np.frombuffer(h.hexdigest().encode(), np.uint8).tobytes()


def _no_constant(name: str):
    raise ValueError(f"{name} in {FILE}")   # never written: specc writes finite numbers


def _text(f, name: str):
    """A JSON text written by write(), as bytes (uint8); ValueError when it is not."""
    a = f[name]
    if a.dtype != "uint8" or a.ndim != 1:
        raise ValueError(f"{name}: not JSON bytes")
    return json.loads(a.tobytes().decode(), parse_constant=_no_constant)


def write(run_dir: Path, cols: Columns, meta: dict, digest: str) -> None:
    """Write the copy (atomically) with ``meta`` (JSON: what the caller read beside
    requests/); OSError when the run dir cannot be written."""
    import numpy as np

    buf = io.BytesIO()
    # the texts as UTF-8 JSON bytes (numpy's strings are 4 bytes a character, as wide as
    # the longest)
    texts = {n: np.frombuffer(json.dumps(v).encode(), np.uint8) for n, v in (
        ("digest", digest), ("benchmarks", cols.benchmarks), ("ids", cols.ids), ("meta", meta))}
    np.savez(buf, **texts, **{n: getattr(cols, n) for n in _COLUMNS})  # type: ignore[arg-type]  # numpy's stub reads ** as allow_pickle
    atomic_write(Path(run_dir) / FILE, _sealed(buf))


def _sealed(buf: io.BytesIO) -> bytes:
    """The npz in ``buf`` with SELF added: the sha256 of every other member's bytes (what
    _members_sound checks: a copy edited by hand is rebuilt, never trusted)."""
    import zipfile

    import numpy as np
    from numpy.lib import format as npy

    h = hashlib.sha256()
    with zipfile.ZipFile(buf) as z:
        for info in sorted(z.infolist(), key=lambda i: i.filename):
            h.update(info.filename.encode() + b"\0" + _member(z, info)[2])
    own = io.BytesIO()
    npy.write_array(own, np.frombuffer(h.hexdigest().encode(), np.uint8))
    with zipfile.ZipFile(buf, "a", compression=zipfile.ZIP_STORED) as z:
        z.writestr(f"{SELF}.npy", own.getvalue())
    return buf.getvalue()


def _member(z, info):
    """A member's (shape, dtype, bytes after its header); ValueError for one that is not
    an .npy array, None as the shape when its header claims more than it holds."""
    from numpy.lib import format as npy

    with z.open(info) as m:
        version = npy.read_magic(m)
        header = {(1, 0): npy.read_array_header_1_0,
                  (2, 0): npy.read_array_header_2_0}.get(version)
        if header is None:
            raise ValueError(f"{info.filename}: npy version {version}")
        shape, _, dtype = header(m)
        size = info.file_size - m.tell()
        if (len(shape) != 1 or dtype.hasobject or dtype.kind not in "iuf"
                or shape[0] * dtype.itemsize != size):
            return None, dtype, b""
        return shape, dtype, m.read()
