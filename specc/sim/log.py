"""SGLang's log line format: ``[%Y-%m-%d %H:%M:%S<prefix>] message``.

The scheduler's prefix is `` TP<rank>`` only when tp_size > 1
(srt/managers/scheduler.py ``run_scheduler_process``); the HTTP server and
uvicorn lines have none (srt/utils/common.py ``configure_logger``,
``set_uvicorn_logging_configs``).
"""

from __future__ import annotations

import sys
from datetime import datetime


def ts() -> str:
    return datetime.now().strftime("%Y-%m-%d %H:%M:%S")


def log(msg: str, rank: int | None = None) -> None:
    tag = f" TP{rank}" if rank is not None else ""
    sys.stdout.write(f"[{ts()}{tag}] {msg}\n")
    sys.stdout.flush()
