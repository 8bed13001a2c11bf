"""One executor per run dir: an exclusive lock on `run_dir/.lock` for a command's lifetime.

Two executors on one run dir would each take the other's live servers for
leftovers of an earlier run and append a second row per point. `specc run`,
`execute=true` and `specc down` hold `fcntl.flock` on `run_dir/.lock` while they
run; the file says who holds it (pid, host, start time, command). The kernel
drops a flock when its holder dies, so a SIGKILLed executor never blocks the
next one; the file's text outlives it but means nothing without the flock.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import sys
import time
from contextlib import contextmanager
from pathlib import Path

LOCK_NAME = ".lock"
#: Run dirs this process holds the lock of (a second flock on a new descriptor would
#: refuse its own holder).
_HELD: set[str] = set()
#: Which job of a multirun compiled into the run dir (two jobs' subdirs may collide).
JOB_FILE = ".sweep-job.json"


class RunDirBusy(Exception):
    """Another live process holds the run dir's lock; the message names it."""


class RunDirUnwritable(Exception):
    """The run dir cannot be written (read-only, permissions, missing); the message says how."""


def _holder(fd: int) -> str:
    """Who holds the lock, from the lock file's text (best effort)."""
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        info = json.loads(os.read(fd, 65536).decode("utf-8", "replace"))
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(info["started_at"])))
        return (f"pid {int(info['pid'])} on {info.get('host', '?')} since {since} "
                f"({info.get('command', '?')})")
    except (OSError, ValueError, KeyError, TypeError):
        return "another process (its lock file says nothing readable)"


def _regular(fd: int, path: Path) -> int:
    """fd, when it is a regular file's (a FIFO or device named .lock is not a lock)."""
    import stat

    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file", str(path))
    return fd


def _open(path: Path) -> tuple[int, bool]:
    """(fd, writable): read-write if possible; read-only is enough for a flock."""
    try:
        return _regular(os.open(path, os.O_RDWR | os.O_CREAT | os.O_NONBLOCK, 0o644), path), True
    except OSError as e:
        if e.errno not in (errno.EROFS, errno.EACCES, errno.EPERM) or not path.exists():
            raise
        return _regular(os.open(path, os.O_RDONLY | os.O_NONBLOCK), path), False


@contextmanager
def locked(run_dir: Path | str, *, command: str = "", need_write: bool = True,
           hand_down: bool = False):
    """Hold the run dir's lock; RunDirBusy if a live process holds it, RunDirUnwritable if
    `need_write` and the run dir cannot be written (an executor must record what it runs).
    `hand_down`: code this process runs inside takes the lock as held (compile, then the
    executor of `execute=true`); otherwise a second taker is refused, this process too."""
    run_dir = Path(run_dir)
    key = os.path.realpath(run_dir)
    if key in _HELD:   # this process holds it already (compile, then execute=true)
        yield
        return
    path = run_dir / LOCK_NAME
    try:
        fd, writable = _open(path)
    except OSError as e:
        raise RunDirUnwritable(f"cannot create {path}: {e.strerror}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RunDirBusy(f"run dir {run_dir} is in use by {_holder(fd)}; wait for it to "
                             "finish, or stop it (kill -TERM <pid> tears its servers down) "
                             "and run again") from None
        if need_write:
            problem = unwritable(run_dir) if writable else "the lock file is read-only"
            if problem:
                raise RunDirUnwritable(f"cannot write in run dir {run_dir}: {problem}")
        if writable:
            info = {"pid": os.getpid(), "host": socket.gethostname(), "started_at": time.time(),
                    "command": command or " ".join(sys.argv)[:300]}
            try:
                os.ftruncate(fd, 0)
                from specc.secrets import scrub   # the command line may hold a secret

                os.pwrite(fd, scrub(json.dumps(info) + "\n").encode(), 0)
            except OSError:
                pass   # a full disk: the lock holds all the same; only its label is missing
        if hand_down:
            _HELD.add(key)
        try:
            yield
        finally:
            _HELD.discard(key)
    finally:
        os.close(fd)   # releases the flock


def unwritable(run_dir: Path) -> str | None:
    """Why files cannot be created in run_dir (None when they can): tried, not guessed
    (root ignores mode bits but not a read-only mount)."""
    probe = Path(run_dir) / f".write-test.{os.getpid()}"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as e:
        return e.strerror
    os.close(fd)
    os.unlink(probe)
    return None


def busy(run_dir: Path | str) -> str | None:
    """The RunDirBusy message when a live process holds run_dir's lock now, else None.
    For the compiler, which must not rewrite plan.json under a running executor."""
    path = Path(run_dir) / LOCK_NAME
    try:
        fd = _regular(os.open(path, os.O_RDONLY | os.O_NONBLOCK), path)
    except OSError:
        return None   # no lock file: nobody ever held it
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return (f"run dir {run_dir} is in use by {_holder(fd)}; wait for it to finish, or "
                "choose another hydra.run.dir")
    finally:
        os.close(fd)
    return None


def claim_for_job(run_dir: Path | str, sweep_id: str, overrides: list[str]) -> str | None:
    """Record that this multirun job owns run_dir; the RUN_DIR_TAKEN message when another job
    of the same sweep (same id, other overrides) compiled into it first, else None. A rerun
    of the same command is the same job, and a later sweep may reuse the dir."""
    path = Path(run_dir) / JOB_FILE
    try:
        held = json.loads(path.read_text()) if path.is_file() else None
    except (OSError, ValueError):
        held = None
    if (isinstance(held, dict) and held.get("sweep") == sweep_id
            and held.get("overrides") != list(overrides)):
        return (f"run dir {run_dir} already holds another job of this sweep "
                f"({' '.join(map(str, held.get('overrides') or [])) or 'no overrides'}); "
                "nothing was written (fix: make hydra.sweep.subdir unique per job, e.g. "
                "its default ${hydra.job.num})")
    from specc.files import atomic_write

    atomic_write(path, json.dumps({"sweep": sweep_id, "overrides": list(overrides)}) + "\n")
    return None


# -- finding run dirs: `--run latest`, resume --------------------------------------------
#: Where `specc` compiles to (hydra.run.dir's default, relative to the current directory).
OUTPUTS = Path("outputs")


def shown(path: Path | str) -> str:
    """A path as a user would type it here: relative to the current directory when inside
    it, shell-quoted."""
    import shlex

    p = Path(path)
    try:
        p = p.resolve().relative_to(Path.cwd().resolve())
    except (OSError, ValueError):
        pass
    return shlex.quote(str(p))


def resume_command(run_dir: Path | str) -> str:
    """The one command that carries on a run where it stopped (finished points are kept)."""
    return f"specc run --plan {shown(Path(run_dir) / 'plan.json')}"


def _last_used(run_dir: Path) -> float:
    """When the run dir was last compiled into or run: its lock file's time (every compile,
    executor and `specc down` rewrites it), else its plan.json's."""
    for name in (LOCK_NAME, "plan.json"):
        try:
            return os.stat(run_dir / name).st_mtime
        except OSError:
            continue
    return 0.0


def latest(root: Path | str = OUTPUTS) -> Path | None:
    """The run dir under `root` (up to three deep: outputs/<experiment>/<stamp>, a multirun's
    outputs/multirun/<stamp>/<job>) last compiled into or run; None when there is none."""
    root = Path(root)
    if not root.is_dir():
        return None
    found = [p.parent for depth in ("*", "*/*", "*/*/*")   # never into requests/ and such
             for p in root.glob(f"{depth}/plan.json") if p.is_file()]
    return max(found, key=lambda d: (_last_used(d), str(d)), default=None)


def progress_of(run_dir: Path, plan) -> tuple[int, int, str | None]:
    """(points finished, points that count, why the run is unfinished or None). An executor
    must have started here (state.json or results.jsonl); search=tune counts the points of
    the servers it started and is unfinished until its search stopped on its own."""
    from specc.results import read_rows
    from specc.rundir import StateError, state_of, tune_decision

    run_dir = Path(run_dir)
    try:
        ran = bool(state_of(run_dir).get("executor"))
    except StateError:
        ran = True   # something was started; the executor says what is wrong with it
    if not ran and not (run_dir / "results.jsonl").exists():
        return 0, len(plan.benchmarks), None
    try:   # read only: another executor may be appending to it now
        rows, _ = read_rows(run_dir / "results.jsonl")
    except (OSError, ValueError):   # an unreadable results.jsonl: the executor names it
        return 0, len(plan.benchmarks), "its results.jsonl cannot be read"
    done = sum(b.id in rows for b in plan.benchmarks)
    if plan.search is not None:
        tune = tune_decision(run_dir) or {}
        if not tune.get("stopped"):
            return done, len(plan.benchmarks), "the search had not finished"
        return done, done, None
    left = len(plan.benchmarks) - done
    return done, len(plan.benchmarks), (f"{left} point(s) not run" if left else None)


def unfinished_runs(run_dir: Path | str, digest: str, plan) -> list[tuple[Path, str, str | None]]:
    """Other run dirs beside `run_dir` holding the same plan (same digest, unedited) whose
    run did not finish, last used first: (dir, what is left, who runs it now or None)."""
    from specc.rundir import PLAN_JSON, plan_problem, recorded_digest

    run_dir = Path(run_dir)
    here = os.path.realpath(run_dir)
    try:
        siblings = [d for d in run_dir.parent.iterdir()
                    if d.is_dir() and os.path.realpath(d) != here]
    except OSError:
        return []
    out = []
    for d in siblings:
        if recorded_digest(d) != digest:
            continue   # another plan
        done, total, why = progress_of(d, plan)   # first: a run dir only compiled into
        if why is None:                           # (every earlier compile of this plan) is
            continue                              # not read whole, 68 MB at 10^5 points
        if plan_problem(d / PLAN_JSON) is not None:
            continue   # this plan edited since (its digest no longer matches)
        out.append((d, f"{done} of {total} points finished; {why}", busy(d)))
    return sorted(out, key=lambda x: (_last_used(x[0]), str(x[0])), reverse=True)
