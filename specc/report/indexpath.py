"""Where a project's results index lives (docs/history.md): beside its run dirs.

`$SPECC_INDEX` (a file; `off`: runs do not add themselves) when set. Else a run adds
itself to the index of the folder that holds it: the nearest folder at or above the run
dir that already has an index file, else the nearest one named `outputs` (Hydra's run
dirs are `outputs/<experiment>/<stamp>` under the project), else the run dir's parent.
`specc history` and `specc index` look from the current directory up for an index, in a
folder or its `outputs/`: the project's. So two projects keep two histories, and a
project's history moves with its outputs.

The upward search stops at the project's boundary: a folder holding `.git`, the home
folder, and below any folder anyone may write into (/tmp, /var/tmp, /dev/shm). An index
in /tmp would otherwise gather every later run under /tmp, any user's, and another user
could plant one there to feed `specc compare` a noise floor.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Literal

ENV = "SPECC_INDEX"
INDEX_FILE = "specc-index.sqlite"
OUTPUTS = "outputs"


def from_env() -> Path | None | Literal[False]:
    """$SPECC_INDEX: its path; None when `off`; False when unset."""
    env = os.environ.get(ENV, "").strip()
    if not env:
        return False
    return None if env.lower() == "off" else Path(env).expanduser()


def _shared(d: Path) -> bool:
    """A folder anyone may write into (world-writable, as /tmp): not a project's."""
    try:
        return bool(d.stat().st_mode & stat.S_IWOTH)
    except OSError:
        return True


def _project_chain(start: Path) -> list[Path]:
    """``start`` and the folders above it, up to the project's boundary (module doc)."""
    home = Path.home().resolve() if os.environ.get("HOME") else None
    chain: list[Path] = []
    for d in (start, *start.parents):
        if _shared(d):
            break
        chain.append(d)
        if d == home or (d / ".git").exists():
            break
    return chain


def for_run(path: Path | str) -> Path | None:
    """The index a run dir (or a folder holding run dirs) goes into; None when
    $SPECC_INDEX is off."""
    env = from_env()
    if env is not False:
        return env
    start = Path(path).resolve()
    chain = _project_chain(start)
    for d in chain:
        if (d / INDEX_FILE).is_file():
            return d / INDEX_FILE
    for d in chain:
        if d.name == OUTPUTS:
            return d / INDEX_FILE
    holder = start.parent if (start / "plan.json").is_file() else start
    return (holder if holder in chain else start) / INDEX_FILE


def for_here(cwd: Path | str | None = None) -> Path | None:
    """The index `specc history` reads from ``cwd`` (default: the current directory): the
    nearest at or above it, in the folder or its outputs/; else where this project's runs
    would put it (./outputs/). None when $SPECC_INDEX is off."""
    env = from_env()
    if env is not False:
        return env
    start = Path(cwd or os.getcwd()).resolve()
    for d in _project_chain(start):
        for cand in (d / INDEX_FILE, d / OUTPUTS / INDEX_FILE):
            if cand.is_file():
                return cand
    return (start if start.name == OUTPUTS else start / OUTPUTS) / INDEX_FILE
