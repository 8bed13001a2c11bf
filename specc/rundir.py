"""One door to a run dir: `RunDir.open(path)` and its typed, bounded readers.

Every command that reads a run dir after the fact (`specc report`, `compare`, `index`,
`history`, `status`, the manifest, the Slurm driver's status) reads it here: the Plan
through `Plan.load_checked` (and its digest: a plan edited after it was reviewed is
refused, unless the caller ran it so), results.jsonl, state.json, manifest.json,
report.json and tune.json each through its one strict reader, every byte through
`specc.files.read_bounded` (regular files only, a cap per file). So a plan.json that is
truncated, not JSON or edited is the same one line in every command:

    error PLAN_UNREADABLE at RUN/plan.json: <why> (fix: ...)
    error PLAN_EDITED at RUN/plan.json: <why> (fix: ...)

No module outside this one and the records' own readers (specc.plan, specc.state,
specc.manifest, specc.results) opens plan.json, state.json, manifest.json or tune.json
(tests/test_rundir.py scans specc/ for it).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specc.files import PLAN_BYTES, STATE_BYTES, UnreadableFile, parse_json, read_bounded
from specc.plan import OLD_JOBS_FILE, Plan, PlanError, digest_check
from specc.results import ResultRow, read_rows
from specc.state import StateError, read_state

if TYPE_CHECKING:   # read when asked: `specc status` never reads the manifest
    from specc.manifest import Manifest

PLAN_JSON = "plan.json"
STATE_JSON = "state.json"
RESULTS_JSONL = "results.jsonl"
REPORT_JSON = "report.json"
#: search=tune's decision (written by specc.run.tune, read here).
TUNE_JSON = "tune.json"
#: search=tune's decision as one launch command (written by specc.run.deploy).
DEPLOY_JSON = "deploy.json"


class RunDirError(ValueError):
    """A run dir's file cannot be used (exit 2): `code` (PLAN_UNREADABLE, PLAN_EDITED,
    RUN_DIR_INVALID, RUN_DIR_FILE), the file, why, and the fix. str() is its one line."""

    def __init__(self, code: str, path: Path | str, why: str, hint: str):
        self.code, self.path, self.why, self.hint = code, str(path), why, hint
        super().__init__(f"error {code} at {path}: {why} (fix: {hint})")


_RESTORE = "compile the experiment again, or restore the file"


def plan_problem(path: Path | str) -> RunDirError | None:
    """Why plan.json at `path` is not the plan that was compiled and reviewed (None: it is):
    not a regular file, over its cap, not JSON, truncated, or edited since (its digest).
    Reads and hashes the bytes without building the Plan (`specc history` checks each
    run it shows)."""
    try:
        raw = read_bounded(path, PLAN_BYTES)
        data = parse_json(raw, str(path))
    except (OSError, UnreadableFile) as e:
        why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        return RunDirError("PLAN_UNREADABLE", path, _without(why, path), _RESTORE)
    if not isinstance(data, dict):
        return RunDirError("PLAN_UNREADABLE", path, "not a JSON object", _RESTORE)
    said = data.get("digest")
    recorded, unedited = digest_check(raw)
    problem = _edited(path, recorded or (said if isinstance(said, str) else None), unedited)
    if problem is not None and _accepted(Path(path).parent) == hashlib.sha256(raw).hexdigest():
        return None
    return problem


def _without(why: str, path: Path | str) -> str:
    """A reader's message without the path it starts with (the line names it once)."""
    for prefix in (f"{path}: ", f"{path} ", "plan.json: "):
        if why.startswith(prefix):
            return why[len(prefix):]
    return why


def _edited(path: Path | str, recorded: str | None, unedited: bool) -> RunDirError | None:
    """PLAN_EDITED when plan.json records a digest its bytes no longer match. A plan that
    records none (written by hand, or by a specc before digests) was never reviewed as
    compiled: it is read as it is (`specc run` refuses to run it without --accept-edited)."""
    if unedited or recorded is None:
        return None
    why = f"edited after it was compiled and reviewed (review.md names {recorded})"
    return RunDirError("PLAN_EDITED", path, why, "compile the experiment again, or restore "
                       "the reviewed plan.json")


@dataclass
class RunDir:
    """A run dir, its plan read and checked; the other files read when asked."""

    path: Path
    plan: Plan
    #: The digest plan.json records (None: it records none).
    digest: str | None
    #: sha256 of plan.json's bytes as read (the manifest's plan_sha256).
    plan_sha256: str
    _rows: tuple[dict[str, ResultRow], list[str]] | None = field(default=None, repr=False)

    @classmethod
    def open(cls, path: Path | str, *, edited_ok: bool = False) -> RunDir:
        """The run dir at `path`. RunDirError (one line) when it holds no plan.json, or one
        that cannot be read, does not fit the schema, or was edited since it was compiled
        (unless `edited_ok`: the executor that ran it with --accept-edited)."""
        d = Path(path)
        plan_file = d / PLAN_JSON
        try:
            raw = read_bounded(plan_file, PLAN_BYTES)
        except FileNotFoundError:
            raise RunDirError("RUN_DIR_INVALID", d, "no plan.json here (not a run dir)",
                              "give a run dir (outputs/<experiment>/<stamp>)") from None
        except (OSError, UnreadableFile) as e:
            why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
            raise RunDirError("PLAN_UNREADABLE", plan_file, _without(why, plan_file),
                              _RESTORE) from None
        try:
            plan, recorded, unedited = Plan.from_bytes(raw, str(plan_file))
        except PlanError as e:
            raise RunDirError("PLAN_UNREADABLE", plan_file, _without(str(e), plan_file),
                              _RESTORE) from None
        sha = hashlib.sha256(raw).hexdigest()
        problem = None if edited_ok else _edited(plan_file, recorded, unedited)
        if problem is not None and _accepted(d) != sha:
            raise problem
        return cls(d, plan, recorded, sha)

    # -- the other files ------------------------------------------------------------
    def results(self) -> tuple[dict[str, ResultRow], list[str]]:
        """results.jsonl's rows by benchmark id, and a warning per line skipped."""
        if self._rows is None:
            try:
                self._rows = read_rows(self.path / RESULTS_JSONL)
            except UnreadableFile as e:
                raise RunDirError("RUN_DIR_FILE", self.path / RESULTS_JSONL,
                                  _without(str(e), self.path / RESULTS_JSONL),
                                  "move it aside") from None
        return self._rows

    def state(self) -> dict:
        """state.json as its reader checks it; StateError when it is not one."""
        return read_state(self.path / STATE_JSON)

    def manifest(self) -> Manifest | None:
        """manifest.json, or None; specc.manifest.ManifestError when it is not one."""
        from specc.manifest import read_manifest

        return read_manifest(self.path)

    def report_json(self) -> dict:
        """report.json, {} when absent or not a JSON object (it is only ever a copy of
        what the run's files say); RunDirError for a file specc will not read."""
        return _json_object(self.path / REPORT_JSON, PLAN_BYTES)

    def tune(self) -> dict | None:
        """search=tune's decision (tune.json), None when there is none or it is unreadable
        (a grid run, or one stopped before the search wrote it)."""
        return tune_decision(self.path)


#: The sha256 of a plan.json edited after review that `specc run --accept-edited` ran: the
#: run's own readers (report, compare, index) take those bytes, and no others.
ACCEPTED_EDIT = ".plan-accepted-edit"


def accept_edited(run_dir: Path | str) -> None:
    """Record that an executor runs the run dir's plan.json as it is now, edited since it
    was compiled (`specc run --accept-edited`, or a caller that hands the executor the plan):
    its bytes' sha256, so that the run's report, manifest and index take those bytes, and
    a later edit is refused again. Nothing is written for a plan that matches its digest."""
    from specc.files import atomic_write

    try:
        raw = read_bounded(Path(run_dir) / PLAN_JSON, PLAN_BYTES)
    except (OSError, UnreadableFile):
        return   # the executor holds the plan already; its readers will say what is wrong
    if not digest_check(raw)[1]:
        try:
            atomic_write(Path(run_dir) / ACCEPTED_EDIT, hashlib.sha256(raw).hexdigest() + "\n")
        except OSError:
            pass   # the run goes on; its report is then `specc report`'s PLAN_EDITED


def _accepted(run_dir: Path) -> str | None:
    try:
        return read_bounded(run_dir / ACCEPTED_EDIT, 100).decode("ascii", "replace").strip()
    except (OSError, UnreadableFile):
        return None


def recorded_digest(run_dir: Path | str) -> str | None:
    """The digest plan.json's last line records, read from its tail only (a plan of 10^5
    points is tens of MB); checked against the whole file (plan_problem) only for a match."""
    try:
        tail = read_bounded(Path(run_dir) / PLAN_JSON, 200, tail=True)
    except (OSError, UnreadableFile):
        return None
    at = tail.rfind(b'"digest":"')
    return tail[at + 10:at + 10 + 71].decode("ascii", "replace") if at >= 0 else None


def compiled_for_slurm(run_dir: Path | str, plan: Plan) -> bool:
    """A run dir whose plan has Slurm jobs (its `cluster` record), or that an older specc
    compiled for Slurm (its jobs in slurm/cluster.json, not in the plan)."""
    return plan.cluster is not None or (Path(run_dir) / OLD_JOBS_FILE).exists()


def plan_bytes(path: Path | str) -> bytes:
    """plan.json's bytes as they are, bounded (OSError, UnreadableFile)."""
    return read_bounded(Path(path), PLAN_BYTES)


def plan_to_run(path: Path | str) -> tuple[bytes, Any, Plan]:
    """For the callers that check the seal on the very bytes they then run (`specc run`, the
    Slurm node driver): (the bytes, their JSON less its digest and seal, the Plan). OSError,
    or a ValueError (UnreadableFile, PlanError) that says why."""
    raw = plan_bytes(path)
    data = parse_json(raw, str(path))
    if isinstance(data, dict):
        data = {k: v for k, v in data.items() if k not in ("digest", "seal")}
    return raw, data, Plan.from_json(data)


def state_of(run_dir: Path | str) -> dict:
    """state.json of a run dir whose plan need not be read (`specc status` on Slurm, `down`)."""
    return read_state(Path(run_dir) / STATE_JSON)


def tune_decision(run_dir: Path | str) -> dict | None:
    """tune.json, bounded; None when absent, not a regular file or not a JSON object."""
    try:
        data = parse_json(read_bounded(Path(run_dir) / TUNE_JSON, STATE_BYTES), TUNE_JSON)
    except (OSError, UnreadableFile):
        return None
    return data if isinstance(data, dict) else None


def deploy_decision(run_dir: Path | str) -> dict | None:
    """deploy.json (search=tune's decision as one launch command), bounded; None when
    absent, not a regular file or not a JSON object."""
    try:
        data = parse_json(read_bounded(Path(run_dir) / DEPLOY_JSON, STATE_BYTES), DEPLOY_JSON)
    except (OSError, UnreadableFile):
        return None
    return data if isinstance(data, dict) else None


def _json_object(path: Path, limit: int) -> dict[str, Any]:
    try:
        raw = read_bounded(path, limit)
    except FileNotFoundError:
        return {}
    except UnreadableFile as e:
        raise RunDirError("RUN_DIR_FILE", path, _without(str(e), path),
                          "move it aside, or rewrite it: specc report RUN_DIR") from None
    try:
        obj = parse_json(raw, str(path))
    except UnreadableFile:
        return {}
    return obj if isinstance(obj, dict) else {}


__all__ = ["RunDir", "RunDirError", "StateError", "plan_problem",
           "plan_bytes", "plan_to_run", "compiled_for_slurm", "state_of", "tune_decision", "deploy_decision", "DEPLOY_JSON", "accept_edited", "TUNE_JSON"]
