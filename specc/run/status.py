"""`specc status --run DIR`: each server's state and the points done.

Imports nothing heavy (no invoke, psutil only when a recorded server may still run, the
Slurm driver only for a Slurm run), so that `specc status` runs it without invoke
(specc/__main__.py; invoke took 0.2 s to import and recompiled every module it imported
later, its `--write-pyc` being off): the same text and exit code as the task in
specc/tasks.py, which calls it too (tests/test_status_fast.py compares the two).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from specc import exits
from specc.files import one_line, printable
from specc.rundir import RunDir, RunDirError, StateError, compiled_for_slurm


class Refused(Exception):
    """Nothing to show: the line to print on stderr and the exit code (the tasks raise
    invoke's Exit with both)."""

    def __init__(self, line: str, code: int = exits.INVALID):
        super().__init__(line)
        self.line, self.code = line, code


def named_run(run: str, flag: str = "--run") -> Path:
    """`--run DIR`, or `--run latest`: the run dir under ./outputs/ last compiled into or
    run (its lock's time), said on stderr so the user sees which."""
    if run != "latest":
        return Path(run)
    from specc.run import rundir

    found = rundir.latest()
    if found is None:
        raise Refused(f"error RUN_DIR_INVALID at {flag}: no run dir under ./{rundir.OUTPUTS}/ "
                      "for 'latest' (fix: run this where you ran `specc`, or give the run dir)")
    print(f"run dir: {rundir.shown(found)} (latest)", file=sys.stderr)
    return found


def run_dir(run: str) -> Path:
    """A run dir is a folder holding the plan.json specc compiled into it: anything else
    (`--run /tmp`, a typo) is refused before a file is read or written there."""
    d = named_run(run)
    if not d.is_dir():
        raise Refused(f"error RUN_DIR_INVALID at --run: no run dir at {run!r}")
    if not os.path.lexists(d / "plan.json"):   # a FIFO there is refused when read
        raise Refused(f"error RUN_DIR_INVALID at --run: {run!r} holds no plan.json, so it is not "
                      "a run dir (fix: the folder `specc` compiled into, e.g. "
                      "outputs/<date>/<time>)")
    return d


def open_run(d: Path, *, edited_ok: bool = False) -> RunDir:
    """The run dir through its one door (specc.rundir.RunDir); Refused with its one line."""
    try:
        return RunDir.open(d, edited_ok=edited_ok)
    except RunDirError as e:
        raise Refused(one_line(e)) from None


def show(run: str) -> None:
    """Print each server's state (pid alive, phase, port) and the points done; Refused
    when the run dir or a file in it cannot be read."""
    d = run_dir(run)
    rd = open_run(d)
    try:
        state = rd.state()
    except StateError as e:
        raise Refused(f"error STATE_UNREADABLE: {e} (`specc down` or `specc run` moves it "
                      "aside)") from None
    rows = []
    slurm_run = compiled_for_slurm(d, rd.plan)
    if slurm_run:   # a job per server: Slurm's view, not local pids
        from specc.run import slurm

        print(printable(slurm.status_text(d)))
    for sid, s in ({} if slurm_run else state.get("servers", {})).items():
        alive = _alive(s)
        since = s.get("phase_started_at")
        rows.append([sid, s.get("status"), phase(s, alive),
                     f"{time.time() - since:.0f}s" if since and alive else "",
                     s.get("pid"), "yes" if alive else "no", s.get("port"),
                     (s.get("reason") or "")[:80]])
    if not slurm_run:
        rows = [[one_line(c) if isinstance(c, str) else c for c in r] for r in rows]
        table = "no servers started yet"
        if rows:
            from tabulate import tabulate

            table = tabulate(rows, headers=["server", "status", "phase", "in phase", "pid",
                                            "alive", "port", "reason"], tablefmt="simple")
        print(printable(table))
    total = len(rd.plan.benchmarks)
    try:
        res, skipped = rd.results()
    except RunDirError as e:
        raise Refused(one_line(e)) from None
    for w in skipped:   # a line specc cannot read: said, never a traceback
        print(f"warning: {one_line(w)}", file=sys.stderr)
    ok = sum(r.status == "ok" for r in res.values())
    print(f"points: {len(res)}/{total} finished ({ok} ok, {len(res) - ok} failed)")


def _alive(entry: dict) -> bool:
    """specc.run.lifecycle.is_leftover, without importing the launcher."""
    from specc.run.ownership import launched_group

    return launched_group(entry)[0] == "alive"


def phase(entry: dict, alive: bool) -> str:
    """What a server is doing now: its startup phase while its process lives; once it is
    gone, how it ended (a stopped server is not in `warmup`, whatever it last logged)."""
    now = entry.get("phase") or ""
    if alive:
        return now
    code = entry.get("exit_code")
    stop = entry.get("stop")
    if stop == "gone" and exit_text(code):   # it had exited before the stop: say how
        stop = None
    end = ", ".join(x for x in (stop, exit_text(code)) if x)
    status = entry.get("status")
    if status == "stopped":
        return f"stopped ({end})" if end else "stopped"
    if status == "failed":
        where = f" in {now}" if now and now not in ("ready", "failed") else ""
        return f"failed{where}" + (f" ({end})" if end else "")
    return f"not running (last {now or status or 'seen'}; its executor is gone)"


def exit_text(code) -> str:
    """A process's return code as people say it: exit code 1, signal SIGTERM."""
    if not isinstance(code, int) or isinstance(code, bool):
        return ""
    if code < 0:
        import signal

        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


def main(argv: list[str]) -> int | None:
    """`specc status` run here, without invoke, for the command lines it takes
    (`--run DIR`, `-r DIR`, `--run=DIR`); None for anything else (invoke parses it and says
    what is wrong, as before)."""
    if len(argv) == 2 and argv[0] in ("--run", "-r") and not argv[1].startswith("-"):
        run = argv[1]
    elif len(argv) == 1 and argv[0].startswith("--run=") and len(argv[0]) > len("--run="):
        run = argv[0][len("--run="):]
    else:
        return None
    try:
        show(run)
    except Refused as e:
        print(e.line, file=sys.stderr)
        return e.code
    return exits.OK
