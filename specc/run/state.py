"""state.json: what the executor started, so nothing it started can outlive it unnoticed."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

from specc.files import atomic_write


class RunState:
    """Per server: pid, pgid, host, port, started_at, ready_at, status (+ phase, reason)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._lock = threading.Lock()
        try:
            self.data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            self.data = {}
        self.data.setdefault("servers", {})

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
        atomic_write(self.path, json.dumps(self.data, indent=2, sort_keys=True))
