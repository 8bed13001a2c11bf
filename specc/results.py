"""results.jsonl: one line per finished point, appended, flushed and fsynced as it finishes.

Keyed by the plan's stable benchmark ids, so a rerun into the same run dir
skips finished points and never duplicates a row.
"""

from __future__ import annotations

import json
from pathlib import Path

from specc.files import append_durable, atomic_write


class ResultLog:
    def __init__(self, path: Path):
        self.path = Path(path)
        self.rows: dict[str, dict] = {}
        self._load()

    def _load(self) -> None:
        if not self.path.exists():
            return
        data = self.path.read_bytes()
        if data and not data.endswith(b"\n"):
            # a line cut by a killed writer: drop it, it is the point that was in flight
            data = data[: data.rfind(b"\n") + 1]
            with open(self.path, "r+b") as f:
                f.truncate(len(data))
        for line in data.decode("utf-8", "replace").splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue
            self.rows[row["benchmark"]] = row

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
        """Write the rows known now, atomically (temp file, fsync, rename)."""
        atomic_write(self.path, "".join(json.dumps(r, ensure_ascii=False, allow_nan=False,
                                                   default=str) + "\n" for r in self.rows.values()))

    def get(self, benchmark_id: str) -> dict | None:
        return self.rows.get(benchmark_id)

    def append(self, row: dict) -> None:
        line = json.dumps(row, ensure_ascii=False, allow_nan=False, default=str) + "\n"
        append_durable(self.path, line)
        self.rows[row["benchmark"]] = row
