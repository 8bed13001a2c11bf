"""File writes and reads every stage shares: atomic replace, durable appends, and bounded
reads of files a user (or anyone) may have put in a run dir.

Every text written here goes through `specc.secrets.scrub` first: no secret reaches a
file specc writes, whoever put it in the text (a server echoing an Authorization header
into an error body, a config value)."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterable
from pathlib import Path


def atomic_write(path: Path | str, data: str | bytes | Iterable[str], *,
                 mode: int | None = None) -> None:
    """Write to a temp file beside `path`, fsync it, then rename over `path`: a reader sees
    the old file or the new one, never half of one, even after a crash or a full disk.

    `data` may be an iterable of str chunks (a plan of 10^5 points is written as it is
    encoded, never held whole in memory)."""
    from specc.secrets import scrub

    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    chunks = [data] if isinstance(data, (str, bytes)) else data
    try:
        with open(tmp, "wb") as f:
            for chunk in chunks:
                f.write(scrub(chunk).encode("utf-8") if isinstance(chunk, str) else chunk)
            f.flush()
            os.fsync(f.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
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
