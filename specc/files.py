"""File writes and reads every stage shares: atomic replace, durable appends, and bounded
reads of files a user (or anyone) may have put in a run dir.

Every text written here goes through `specc.secrets.scrub` first: no secret reaches a
file specc writes, whoever put it in the text (a server echoing an Authorization header
into an error body, a config value)."""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import BinaryIO


def atomic_write(path: Path | str, data: str | bytes | Iterable[str], *,
                 mode: int | None = None, written: Callable[[BinaryIO], None] | None = None
                 ) -> None:
    """Write to a temp file beside `path`, fsync it, then rename over `path`: a reader sees
    the old file or the new one, never half of one, even after a crash or a full disk.

    `data` may be an iterable of str chunks (a plan of 10^5 points is written as it is
    encoded, never held whole in memory). `written`: called with the file, open for
    reading too, once it is in place (plan.json's reviewed copy is copied from it, not
    written a second time)."""
    from specc.secrets import scrub

    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    chunks = [data] if isinstance(data, (str, bytes)) else data
    try:
        with open(tmp, "w+b") as f:
            for chunk in chunks:
                f.write(scrub(chunk).encode("utf-8") if isinstance(chunk, str) else chunk)
            f.flush()
            os.fsync(f.fileno())
            if mode is not None:
                os.chmod(tmp, mode)
            os.replace(tmp, path)
            if written is not None:
                written(f)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


class RecordWriteError(OSError):
    """A run-dir record could not be written (full disk, read-only): the sweep must stop,
    not record the point as failed (a rerun would then skip it)."""


def append_durable(path: Path | str, line: str) -> None:
    """Append one line with a single write(2) and fsync it: lost only if the machine dies
    before the call returns. A write that fails or falls short (the disk filled up
    mid-line) is cut back off and raised, so the file never ends in half of this line."""
    from specc.secrets import scrub

    raw = scrub(line).encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        size = os.fstat(fd).st_size
        try:
            written = os.write(fd, raw)
            if written != len(raw):
                raise OSError(errno.ENOSPC, f"{os.strerror(errno.ENOSPC)} (wrote {written} "
                              f"of {len(raw)} bytes)", str(path))
            os.fsync(fd)
        except OSError:
            try:
                os.ftruncate(fd, size)
            except OSError:
                pass
            raise
    finally:
        os.close(fd)


# --- bounded reads ---------------------------------------------------------------------

#: Caps on what specc reads from a run dir: far above any real file, far below memory.
PLAN_BYTES = 1 << 30           # plan.json (10^5 points is ~200 MB)
STATE_BYTES = 64 << 20         # state.json, the lock file, Slurm's jobs and states
RECORDS_BYTES = 2 << 30        # results.jsonl, requests/<point>.jsonl
LOG_TAIL_BYTES = 8 << 20       # the end of a server log `specc logs` prints


class UnreadableFile(ValueError):
    """A file specc reads is not one it can read safely (not a regular file, over its cap,
    not JSON, nested too deep); the message is one line naming the path."""


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def _mib(n: int) -> str:
    return f"{n / 2**20:.0f} MiB" if n >= 2**20 else f"{n} bytes"


def read_bounded(path: Path | str, limit: int, *, tail: bool = False) -> bytes:
    """A file's bytes, read safely: opened non-blocking (a FIFO must not hang a reader),
    checked to be a regular file on the open descriptor (a directory, /dev/zero), and at
    most `limit` bytes (over it: UnreadableFile, or with `tail` the last `limit` bytes).
    FileNotFoundError when there is no such file; UnreadableFile for anything else."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as e:
        if e.errno == errno.ENOTDIR:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(path)) from None
        why = "a symlink loop" if e.errno == errno.ELOOP else e.strerror
        raise UnreadableFile(f"{path}: cannot be read ({why})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnreadableFile(f"{path}: {_kind(st.st_mode)}, not a regular file")
        if st.st_size > limit:
            if not tail:
                raise UnreadableFile(f"{path}: {st.st_size} bytes, over the {_mib(limit)} "
                                     "specc reads from such a file")
            os.lseek(fd, st.st_size - limit, os.SEEK_SET)
        chunks, size = [], 0
        while size <= limit:   # a file that grows while read stops at the cap
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit and not tail:
            raise UnreadableFile(f"{path}: over the {_mib(limit)} specc reads from such a file")
        return b"".join(chunks)[:limit]
    except OSError as e:
        raise UnreadableFile(f"{path}: cannot be read ({e.strerror})") from None
    finally:
        os.close(fd)


def read_text(path: Path | str, limit: int, *, tail: bool = False) -> str:
    """`read_bounded`, decoded as UTF-8 (bad bytes replaced: a reader reports them)."""
    return read_bounded(path, limit, tail=tail).decode("utf-8", "replace")


def parse_json(text: str | bytes, where: str = "<json>"):
    """json.loads with its two escapes closed: UnreadableFile (one line) for text that is not
    JSON, and for nesting deeper than the parser's recursion (RecursionError otherwise)."""
    import json

    try:
        return json.loads(text)
    except RecursionError:
        raise UnreadableFile(f"{where}: JSON nested too deeply to read") from None
    except ValueError as e:
        raise UnreadableFile(f"{where}: not JSON ({e})") from None


def load_json(path: Path | str, limit: int):
    """A JSON file read by `read_bounded` and `parse_json`."""
    return parse_json(read_bounded(path, limit), str(path))


# --- text for a terminal ---------------------------------------------------------------


#: Control characters (C0 but tab and newline, DEL, C1) and the bidi overrides that reorder
#: what a terminal shows: from data (a run dir's name, a server's text) they could move the
#: cursor, retitle the window or hide a line.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_CONTROL_OR_NEWLINE = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _escape(m) -> str:
    c = ord(m.group(0))
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def printable(text: str) -> str:
    """``text`` with every control character but tab and newline written as its escape
    (ESC as \\x1b): what specc prints of data reaches a terminal as text."""
    return _CONTROL.sub(_escape, text)


def one_line(text) -> str:
    """``printable``, newlines and tabs escaped too: a cell of a table, a name in a line."""
    return _CONTROL_OR_NEWLINE.sub(_escape, str(text))
