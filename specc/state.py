"""state.json: what the executor started, so nothing it started can outlive it unnoticed.

Read strictly: a state.json that is not JSON, not an object, or holds a field of
the wrong type is never taken for "nothing recorded" (the servers it names may
still run). The executor and `specc down` move it aside as
`state.json.corrupt-<stamp>` and stop with one line saying so; `specc status`
only reports it. Writes are atomic; a write that fails (full disk, read-only
dir) is remembered in `write_error` for the executor to act on, never raised
mid-teardown.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from pathlib import Path

from specc.files import atomic_write

#: Fields the executor and `specc down` act on, and the types they must have (None allowed).
_INT_FIELDS = ("pid", "pgid", "port", "attempt")
_NUM_FIELDS = ("started_at", "create_time", "ready_at", "failed_at", "stopped_at",
               "phase_started_at", "updated_at")
_STR_FIELDS = ("status", "host", "phase", "reason", "log", "stop", "stopped_by")


class StateError(Exception):
    """state.json cannot be used as it is; the message is one line naming the file."""


def _problem(data) -> str | None:
    """Why `data` (parsed state.json) is not a state file, or None."""
    if not isinstance(data, dict):
        return f"holds a JSON {type(data).__name__}, not an object"
    servers = data.get("servers", {})
    if not isinstance(servers, dict):
        return f"'servers' is a {type(servers).__name__}, not an object"
    if not isinstance(data.get("executor", {}), dict):
        return "'executor' is not an object"
    for sid, entry in servers.items():
        if not isinstance(entry, dict):
            return f"server {sid!r} is a {type(entry).__name__}, not an object"
        for k in _INT_FIELDS:
            v = entry.get(k)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
                return f"server {sid!r}: {k} is {v!r}, not a non-negative integer"
        for k in _NUM_FIELDS:
            v = entry.get(k)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))
                                  or not math.isfinite(v)):
                return f"server {sid!r}: {k} is {v!r}, not a number"
        for k in _STR_FIELDS:
            v = entry.get(k)
            if v is not None and not isinstance(v, str):
                return f"server {sid!r}: {k} is {v!r}, not a string"
    return None


def read_state(path: Path) -> dict:
    """The parsed, checked state.json ({"servers": {}} when there is none); StateError else."""
    from specc.files import STATE_BYTES, UnreadableFile, parse_json, read_bounded

    path = Path(path)
    try:
        text = read_bounded(path, STATE_BYTES).decode("utf-8")
    except FileNotFoundError:
        return {"servers": {}}
    except UnreadableFile as e:
        raise StateError(str(e)) from None
    except (OSError, UnicodeDecodeError) as e:
        raise StateError(f"{path} cannot be read ({getattr(e, 'strerror', None) or e})") from None
    try:
        data = parse_json(text, str(path))
    except ValueError as e:
        raise StateError(f"{path} is not JSON ({str(e).split(': ', 1)[-1]})") from None
    problem = _problem(data)
    if problem:
        raise StateError(f"{path} is not a specc state file: {problem}")
    data.setdefault("servers", {})
    return data


def move_aside(path: Path) -> Path | None:
    """Rename an unusable state.json to state.json.corrupt-<stamp> (kept for the user);
    None when even that fails (a read-only run dir)."""
    path = Path(path)
    aside = path.with_name(f"{path.name}.corrupt-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}")
    try:
        os.replace(path, aside)
    except OSError:
        return None
    return aside


def corrupt_line(path: Path, error: StateError) -> str:
    """The one line the executor and `specc down` stop with (after moving the file aside)."""
    aside = move_aside(path)
    where = (f"moved it aside to {aside.name}" if aside else "could not move it aside either")
    return (f"error STATE_UNREADABLE: {error}; {where}. The servers it recorded were not "
            "checked: stop any still running (their pids and ports are in that file; "
            "`ps -eo pid,pgid,args`), then run again with a fresh state")


class RunState:
    """Per server: pid, pgid, create_time, host, port, started_at, ready_at, status (+ phase,
    reason). Raises StateError when the existing state.json is unusable (see read_state)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._lock = threading.Lock()
        self.data = read_state(self.path)
        self.write_error: str | None = None

    @property
    def servers(self) -> dict[str, dict]:
        return self.data["servers"]

    def update(self, server_id: str, **fields) -> None:
        with self._lock:
            entry = self.servers.setdefault(server_id, {})
            entry.update(fields)
            entry["updated_at"] = time.time()
            self._write()

    def start(self, server_id: str, **fields) -> None:
        """A (re)launch: a fresh entry, so nothing of an earlier attempt (reason, failed_at,
        stopped_at) reads as this one's; `attempt` counts launches into this run dir."""
        with self._lock:
            attempt = self.servers.get(server_id, {}).get("attempt", 0) + 1
            self.servers[server_id] = {**fields, "attempt": attempt, "updated_at": time.time()}
            self._write()

    def set_executor(self, **fields) -> None:
        with self._lock:
            self.data["executor"] = fields
            self._write()

    def _write(self) -> None:
        try:
            atomic_write(self.path, json.dumps(self.data, indent=2, sort_keys=True))
        except OSError as e:   # kept in memory; the executor stops the sweep on it
            if self.write_error is None:
                self.write_error = f"cannot write {self.path}: {e.strerror or e}"
