"""The results index: one SQLite file that remembers every run's points, so
`specc history` can show one figure of one configuration over weeks of runs
(docs/history.md).

The run dirs stay the source of truth: the index holds what `specc compare` reads from
them (each point's figures and intervals, the run's manifest) and can be rebuilt from
them at any time (`specc index --rebuild`). Configurations are keyed by what they
measure -- compare's matching key, so a point keeps its history across specc versions
whose ids differ. Two runs finishing at once both get in: WAL, a busy timeout, one
short write transaction a run.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sys
import time
from pathlib import Path

from specc.report import indexpath
from specc.report.compare import FIGURES, CompareError, load_run
from specc.rundir import PLAN_JSON, plan_problem

#: Where the index lives unless --db says: specc/report/indexpath.py (beside the run dirs).
ENV = indexpath.ENV
SCHEMA = 1
_TABLES = """
CREATE TABLE IF NOT EXISTS runs (
  id INTEGER PRIMARY KEY, path TEXT UNIQUE NOT NULL, experiment TEXT, engine TEXT,
  finished_at REAL, indexed_at REAL NOT NULL, manifest TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS configs (
  id TEXT PRIMARY KEY, key TEXT UNIQUE NOT NULL, label TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS points (
  run INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  config TEXT NOT NULL REFERENCES configs(id), benchmark TEXT NOT NULL, label TEXT NOT NULL,
  status TEXT NOT NULL, finished_at REAL, PRIMARY KEY (run, config));
CREATE TABLE IF NOT EXISTS figures (
  run INTEGER NOT NULL, config TEXT NOT NULL, metric TEXT NOT NULL, value REAL NOT NULL,
  lo REAL, hi REAL, PRIMARY KEY (run, config, metric),
  FOREIGN KEY (run, config) REFERENCES points(run, config) ON DELETE CASCADE);
CREATE INDEX IF NOT EXISTS figures_by_config ON figures(config, metric);
"""


class IndexDbError(ValueError):
    """Input the index cannot use (exit 2); the message is one line with the fix."""


def default_path(run_dir: Path | str | None = None) -> Path | None:
    """The index a run dir goes into (``run_dir``), or the one `specc history` reads here
    (none given): the project's, beside its run dirs (indexpath); None when $SPECC_INDEX
    is `off`."""
    return indexpath.for_run(run_dir) if run_dir is not None else indexpath.for_here()


def pair_label(key: str, label: str) -> str:
    """A configuration's label with its model pair, so that two pairs never share one:
    `EAGLE3 s3 k1 d4 @ c=2 (Kimi-K2.5 + Kimi-K25-eagle3)`."""
    try:
        server = json.loads(key)[0]
    except (ValueError, IndexError, KeyError, TypeError):
        return label
    names = [str(server.get(k)).rstrip("/").rsplit("/", 1)[-1] for k in ("target", "draft")
             if isinstance(server, dict) and server.get(k)]
    return f"{label} ({' + '.join(names)})" if names else label


class NotAnIndex(IndexDbError):
    """A path that is not an index specc made: never written, rebuilt over or deleted."""


def _rebuild_hint(db: Path) -> str:
    return (f"rebuild it from the run dirs: specc index --rebuild --db {db} RUN_DIR... "
            "(or a folder holding run dirs, e.g. outputs/)")


def connect(db: Path):
    """The index at ``db``, created when absent; IndexDbError for a path that is not one
    (check_index_file: specc writes only to an index it made), or one it cannot read."""
    import sqlite3

    existing = check_index_file(db) is not None
    try:
        db.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(db, timeout=_TRY_S, isolation_level=None)
    except (OSError, sqlite3.Error) as e:
        raise IndexDbError(f"{db}: cannot open the results index ({e}); give a writable "
                           f"path with --db or ${ENV}") from None
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(_TRY_S * 1000)}")
        version, app, tables = _waiting(db, lambda: _snapshot(conn))
        if existing:   # read before a byte is written (even WAL's header)
            _check_ours(db, version, app, tables)
        _waiting(db, lambda: conn.execute("PRAGMA journal_mode = WAL"))
        conn.execute("PRAGMA foreign_keys = ON")
        if version == 0:   # new: made in one transaction (IF NOT EXISTS: a racing twin)
            _waiting(db, lambda: conn.executescript(
                f"BEGIN IMMEDIATE;{_TABLES}PRAGMA application_id = {APPLICATION_ID};"
                f"PRAGMA user_version = {SCHEMA};COMMIT;"))
        elif version != SCHEMA:
            raise IndexDbError(f"{db}: a results index of schema {version}, this specc reads "
                               f"{SCHEMA}; {_rebuild_hint(db)}")
        elif existing and app != APPLICATION_ID:   # made before the id
            _waiting(db, lambda: conn.execute(f"PRAGMA application_id = {APPLICATION_ID}"))
        conn.execute("SELECT 1 FROM runs, points, figures, configs LIMIT 1").fetchall()
    except sqlite3.Error as e:
        conn.close()
        raise IndexDbError(f"{db}: not a readable results index ({e}); "
                           f"{_rebuild_hint(db)}") from None
    except BaseException:
        conn.close()
        raise
    return conn


# --- what the index trusts: its own file, its own rows ------------------------------------

#: PRAGMA application_id of every index specc makes ("SPCC"): a file without it is never
#: written, rebuilt over or deleted.
APPLICATION_ID = 0x53504343
#: How long a locked index is waited for (a visible line says so), then one line and exit 2.
WAIT_S = 5.0
_TRY_S = 0.25
_SQLITE_MAGIC = b"SQLite format 3\x00"


def _application_id(conn) -> int:
    return conn.execute("PRAGMA application_id").fetchone()[0]


def check_index_file(db: Path) -> int | None:
    """None when ``db`` is absent (to create); the application_id of its SQLite header when
    it may be an index specc made (_check_ours decides, through SQLite); anything
    else -- a FIFO, a device, a directory, a text file, another program's SQLite database --
    is IndexDbError, one line naming it: specc never opens, rebuilds or deletes it (SQLite
    would write a journal beside a device node, and --rebuild deleted the file)."""
    import stat

    try:
        st = os.stat(db)
    except FileNotFoundError:
        if os.path.lexists(db):
            raise IndexDbError(f"{db}: a symlink to nothing; give --db (or ${ENV}) a file "
                               "path") from None
        return None
    except OSError as e:
        raise IndexDbError(f"{db}: cannot open the results index ({e.strerror}); give "
                           f"--db (or ${ENV}) another path") from None
    refuse = (f"specc writes its index only to a file it made, and leaves this one as it is; "
              f"give --db (or ${ENV}) a new path")
    if not stat.S_ISREG(st.st_mode):
        from specc.files import _kind

        raise NotAnIndex(f"{db}: {_kind(st.st_mode)}, not a results index; {refuse}")
    try:
        fd = os.open(db, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            head = os.read(fd, 100)
        finally:
            os.close(fd)
    except OSError as e:
        raise IndexDbError(f"{db}: cannot be read ({e.strerror}); {refuse}") from None
    if not head:   # what SQLite has made so far while a twin process creates the index
        return 0
    if len(head) < 100 or not head.startswith(_SQLITE_MAGIC):
        raise NotAnIndex(f"{db}: not an SQLite file, so not a results index; {refuse}")
    app = int.from_bytes(head[68:72], "big")
    if app in (APPLICATION_ID, 0):   # 0: the header not yet checkpointed, or made before
        return app                   # the id (_check_ours decides, through SQLite)
    raise NotAnIndex(f"{db}: an SQLite database of another program (application_id "
                     f"{app:#x}), not a results index; {refuse}")


def _snapshot(conn) -> tuple[int, int, set[str]]:
    """The schema version, application_id and tables, read in one transaction: read
    apart, a twin process's creating commit could fall between them (version 0 read
    before it, its tables after: an index taken for another program's database)."""
    conn.execute("BEGIN")
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        app = _application_id(conn)
        tables = {r[0] for r in
                  conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    finally:
        conn.execute("ROLLBACK")   # it only read
    return version, app, tables


def _check_ours(db: Path, version: int, app: int, tables: set[str]) -> None:
    """NotAnIndex unless the open database is one specc made: its application_id, or (an
    index made before the id) its schema version and tables, or nothing at all yet (a
    twin process is creating it)."""
    if app == APPLICATION_ID:
        return
    if app == 0 and (not tables and version == 0
                     or version == SCHEMA and {"runs", "points", "figures", "configs"} <= tables):
        return
    raise NotAnIndex(f"{db}: an SQLite database of another program (application_id {app:#x}, "
                     f"tables: {', '.join(sorted(tables)[:5]) or 'none'}), not a results "
                     "index; specc leaves it as it is; give --db (or "
                     f"${ENV}) a new path")


def _waiting(db: Path, step):
    """``step()``, retried while another process holds the index's lock: after the first
    try a line on stderr says so, after WAIT_S one line (IndexDbError) says who to wait for."""
    import sqlite3

    start, said = time.monotonic(), False
    while True:
        try:
            return step()
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) and "busy" not in str(e):
                raise
            if time.monotonic() - start >= WAIT_S:
                raise IndexDbError(f"{db}: locked by another process for {WAIT_S:g} s (a "
                                   "run adding itself, another `specc index`, an open sqlite3 "
                                   "shell); try again when it is done") from None
            if not said:
                print(f"waiting for the results index {db}: another process holds its lock "
                      f"(up to {WAIT_S:g} s)", file=sys.stderr, flush=True)
                said = True


def config_id(key: str) -> str:
    """A configuration's short name: the first 12 hex digits of its key's sha256."""
    return hashlib.sha256(key.encode()).hexdigest()[:12]


def _finite(v) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return None
    return float(v)


def _when(run) -> float | None:
    """When a run finished: its last point, else when results.jsonl was last written."""
    times = [p.finished_at for p in run.points.values() if p.finished_at is not None]
    if times:
        return max(times)
    try:
        return (run.path / "results.jsonl").stat().st_mtime
    except OSError:
        return None


def add_run(conn, run_dir: Path | str) -> int:
    """(Re)index one run dir: its earlier entry replaced in one transaction. Returns its
    points; IndexDbError when it is not a run dir compare could read."""
    try:
        run = load_run(run_dir)
    except CompareError as e:
        raise IndexDbError(str(e)) from None
    path = str(run.path.resolve())
    when = _when(run)
    m = run.manifest
    _waiting(Path(conn.execute("PRAGMA database_list").fetchone()[2]),
             lambda: conn.execute("BEGIN IMMEDIATE"))
    try:
        conn.execute("DELETE FROM runs WHERE path = ?", (path,))
        cur = conn.execute(
            "INSERT INTO runs (path, experiment, engine, finished_at, indexed_at, manifest) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (path, m.get("experiment"), (m.get("engine") or {}).get("name")
             if isinstance(m.get("engine"), dict) else None, when, time.time(),
             json.dumps(m, sort_keys=True, default=str)))
        rid = cur.lastrowid
        for key, p in run.points.items():
            cid = config_id(key)
            label = pair_label(key, p.label)
            conn.execute("INSERT INTO configs (id, key, label) VALUES (?, ?, ?) "
                         "ON CONFLICT(id) DO UPDATE SET label = excluded.label", (cid, key, label))
            conn.execute("INSERT INTO points VALUES (?, ?, ?, ?, ?, ?)",
                         (rid, cid, p.benchmark, label, p.status, p.finished_at or when))
            for metric, value in p.metrics.items():
                v = _finite(value)
                if v is None:
                    continue
                iv = p.intervals.get(metric)
                lo, hi = ((_finite(iv[0]), _finite(iv[1]))
                          if isinstance(iv, (list, tuple)) and len(iv) == 2 else (None, None))
                conn.execute("INSERT INTO figures VALUES (?, ?, ?, ?, ?, ?)",
                             (rid, cid, metric, v, lo, hi))
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return len(run.points)


def run_dirs(paths: list) -> list[Path]:
    """Each given path that is a run dir, and every run dir (a folder with plan.json and
    results.jsonl) below one that is not; IndexDbError for a path with none."""
    out: list[Path] = []
    for p in map(Path, paths):
        if (p / "plan.json").is_file():
            out.append(p)
            continue
        found = sorted(x.parent for x in p.rglob("plan.json")
                       if (x.parent / "results.jsonl").is_file()) if p.is_dir() else []
        if not found:
            raise IndexDbError(f"{p}: no run dir here or below (no plan.json beside a "
                               "results.jsonl); give run dirs (outputs/<experiment>/<stamp>) "
                               "or a folder holding them")
        out += found
    return out


def index_runs(paths: list, db: Path, *, rebuild: bool = False) -> dict:
    """Index run dirs into ``db``; with ``rebuild``, a fresh index of the runs the old one
    held (those still on disk) and the given ones. Returns {indexed: [[path, points]],
    gone: [paths the old index held that are no longer run dirs]}."""
    dirs = run_dirs(paths)
    for d in dirs:   # before the index is touched: a plan.json that is not the reviewed plan
        problem = plan_problem(d / PLAN_JSON)
        if problem is not None:
            raise problem
    gone: list[str] = []
    if rebuild:
        old = _old_runs(db)
        have = {str(d.resolve()) for d in dirs}
        for p in old:
            if p in have:
                continue
            if (Path(p) / PLAN_JSON).is_file() and plan_problem(Path(p) / PLAN_JSON) is None:
                dirs.append(Path(p))
            else:   # gone, or its plan.json no longer the one it ran (specc index names it)
                gone.append(p)
        _remove_index(db)
    if not dirs and not rebuild:
        raise IndexDbError("give run dirs to index (specc index RUN_DIR...), or --rebuild")
    conn = connect(db)
    try:
        indexed = [[str(d), add_run(conn, d)] for d in dirs]
    finally:
        conn.close()
    return {"db": str(db), "indexed": indexed, "gone": gone}


def _old_runs(db: Path) -> list[str]:
    """The run dirs an index specc made holds ([] for a corrupt one: only the runs given
    are known); IndexDbError for a path that is not its index (check_index_file)."""
    import sqlite3

    app = check_index_file(db)
    if app is None:
        return []
    try:
        conn = connect(db)
    except NotAnIndex:
        raise
    except IndexDbError as e:
        if app != APPLICATION_ID:   # unreadable, and nothing says specc made it
            raise NotAnIndex(f"{e}; its header does not say specc made it, so --rebuild "
                             "leaves it: move it aside") from None
        return []   # ours (its header says so) but unreadable: rebuilt from the runs given
    try:
        return [r[0] for r in conn.execute("SELECT path FROM runs ORDER BY id")
                if isinstance(r[0], str) and r[0]]
    except sqlite3.Error:
        return []
    finally:
        conn.close()


def _remove_index(db: Path) -> None:
    """Delete the index specc made at ``db`` and its WAL files -- only regular files (a
    FIFO or device named db-wal is refused, not removed)."""
    import stat

    for path in (db, Path(str(db) + "-wal"), Path(str(db) + "-shm")):
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            continue
        if not stat.S_ISREG(mode):
            raise IndexDbError(f"{path}: not a regular file, so not the index's own; specc "
                               "removes nothing it did not make (move it aside)")
        path.unlink(missing_ok=True)


def _metric_name(name: str) -> str:
    """compare's figure names (ttft, itl, ...) or a results.jsonl metric name."""
    return FIGURES[name][1] if name in FIGURES else name


def history(db: Path, point: str = "", metric: str = "output_throughput") -> dict:
    """One figure of one configuration, run by run, oldest first; without ``point``, the
    configurations the index knows."""
    import sqlite3

    if check_index_file(db) is None:
        raise IndexDbError(f"{db}: no results index yet; runs add themselves when they "
                           "finish, older ones with: specc index RUN_DIR...")
    conn = connect(db)
    try:
        out = _history(conn, db, point, metric)
        shown = ([r["run"] for r in out["runs"]] if "runs" in out else
                 [r[0] for r in conn.execute("SELECT path FROM runs ORDER BY id")])
    except sqlite3.Error as e:
        raise IndexDbError(f"{db}: not a readable results index ({e}); "
                           f"{_rebuild_hint(db)}") from None
    finally:
        conn.close()
    _check_plans(shown)
    return out


def _check_plans(paths) -> None:
    """The runs a history shows are the runs they were: each run dir still on disk must
    hold the plan.json it ran (the index outlives a run dir deleted since, not one whose
    plan was edited): RunDirError, the same line as every command's, for one that does not."""
    for p in paths:
        plan_file = Path(p) / PLAN_JSON if isinstance(p, str) and p else None
        if plan_file is None or not os.path.lexists(plan_file):
            continue
        problem = plan_problem(plan_file)
        if problem is not None:
            raise problem


def _history(conn, db: Path, point: str, metric: str) -> dict:
    skipped = 0
    configs = []
    for row in conn.execute(
            "SELECT c.id, c.label, c.key, COUNT(p.run) FROM configs c JOIN points p "
            "ON p.config = c.id GROUP BY c.id ORDER BY c.label, c.id"):
        key = _config_row(row)
        if key is None:
            skipped += 1
        else:
            configs.append((row[0], row[1], key, row[3]))
    if not point:
        return {"db": str(db), "configs": [{"id": i, "label": lab, "key": k, "runs": n}
                                           for i, lab, k, n in configs],
                "skipped": skipped}
    terms = key_terms(point)
    if terms is not None:   # what it measures: fields of its typed key
        chosen = [c for c in configs if _key_matches(c[2], terms)]
    else:   # an id, else a label as printed: resolved to the keys that carry it
        chosen = ([c for c in configs if point in (c[0], c[1])]
                  or [c for c in configs if point.lower() in c[1].lower()])
    if not chosen:
        raise IndexDbError(f"--point {point!r}: no configuration of that id, label or key in "
                           f"{db}; `specc history` lists them")
    if len(chosen) > 1:
        names = "; ".join(f"{c[0]} ({c[1]})" for c in chosen[:6])
        raise IndexDbError(f"--point {point!r} matches {len(chosen)} configurations: "
                           f"{names}{' ...' if len(chosen) > 6 else ''}; give one id")
    cid, label, key, _ = chosen[0]
    name = _metric_name(metric)
    known = [r[0] for r in conn.execute(
        "SELECT DISTINCT metric FROM figures WHERE config = ? ORDER BY metric", (cid,))
        if isinstance(r[0], str)]
    if name not in known:
        raise IndexDbError(f"--metric {metric!r}: {label} has no such figure; choose from "
                           f"{', '.join(known) or 'none (no ok point)'}")
    rows = conn.execute(
        "SELECT r.path, p.benchmark, p.status, p.finished_at, f.value, f.lo, f.hi, "
        "r.manifest FROM points p JOIN runs r ON r.id = p.run LEFT JOIN figures f "
        "ON f.run = p.run AND f.config = p.config AND f.metric = ? WHERE p.config = ? "
        "ORDER BY p.finished_at, r.path", (name, cid)).fetchall()
    runs = []
    for row in rows:
        got = _run_row(row)
        if got is None:
            skipped += 1
        else:
            runs.append(got)
    return {"db": str(db), "config": {"id": cid, "label": label, "key": key},
            "metric": name, "runs": runs, "skipped": skipped, "floor": _floor(name, runs)}


def key_terms(point: str) -> dict[str, str] | None:
    """`--point num_steps=3 topk=1 concurrency=2` (or comma-separated): field -> the value
    asked for, each a field of the points' typed key (ServerParams, BenchParams); None when
    ``point`` is not such a list (an id or a label: `EAGLE3 s3 @ c=2` has words without =)."""
    parts = [t for t in point.replace(",", " ").split() if t]
    if not parts or not all("=" in t and t.split("=", 1)[0].isidentifier() for t in parts):
        return None
    return dict(t.split("=", 1) for t in parts)


def _key_matches(key, terms: dict[str, str]) -> bool:
    """Whether a configuration's key (compare's [server params, client params]) holds every
    field of ``terms`` at the value asked for (a number equal as a number, else as JSON)."""
    if not (isinstance(key, list) and len(key) == 2 and all(isinstance(x, dict) for x in key)):
        return False
    fields = {**key[1], **key[0]}
    for name, want in terms.items():
        if name not in fields:
            return False
        have = fields[name]
        if isinstance(have, str):
            if have != want:
                return False
            continue
        try:
            if json.loads(want) != have:
                return False
        except ValueError:
            return False
    return True


#: finished_at past this (year 5138) is not a time a run finished: an edited row.
_LATEST = 1e11


def _config_row(row):
    """A configs row's key as JSON, or None for a row specc did not write (edited, foreign)."""
    cid, label, key, _ = row
    if not (isinstance(cid, str) and isinstance(label, str) and isinstance(key, str)):
        return None
    try:
        return json.loads(key)
    except (ValueError, RecursionError):
        return None


def _real(v, *, null: bool = True) -> bool:
    return (v is None and null) or (isinstance(v, (int, float)) and not isinstance(v, bool)
                                    and math.isfinite(v))


def _run_row(row) -> dict | None:
    """One history row as JSON, or None for a row specc did not write: a manifest that is
    not JSON, a time or figure that is not a finite number (finished_at=1e300)."""
    path, bench, status, when, value, lo, hi, manifest = row
    if not (isinstance(path, str) and isinstance(bench, str) and isinstance(status, str)
            and isinstance(manifest, str) and all(_real(x) for x in (value, lo, hi))
            and _real(when) and (when is None or 0 <= when <= _LATEST)):
        return None
    try:
        m = json.loads(manifest)
    except (ValueError, RecursionError):
        return None
    return {"run": path, "benchmark": bench, "status": status, "finished_at": when,
            "value": value, "lo": lo, "hi": hi,
            "engine_release": _dig(m, "engine", "reported_release"),
            "gpu": _dig(m, "gpu", "name"), "commit": _dig(m, "specc", "commit")}


def _floor(metric: str, runs: list[dict]) -> float | None:
    """The between-run noise floor these runs give `specc compare` for a figure (the
    spread of its ok values: noise.spread_floor); None for a metric compare does not
    judge, or fewer than noise.MIN_RUNS runs."""
    from specc.report import noise

    higher = {m: h for h, m in FIGURES.values()}.get(metric)
    if higher is None:
        return None
    return noise.spread_floor([r["value"] for r in runs if r["status"] == "ok"
                               and r["value"] is not None], higher)


def _dig(obj, *path):
    for k in path:
        obj = obj.get(k) if isinstance(obj, dict) else None
    return obj


def render_history(result: dict) -> str:
    """The history as a table; every text from the index (a run dir's name, a label) on
    one line with its control characters escaped."""
    from tabulate import tabulate

    from specc.files import one_line

    skipped = (f"\n({result['skipped']} rows of the index skipped: not as specc writes them "
               f"(edited, or another program's); specc index --rebuild rewrites it)"
               if result.get("skipped") else "")
    if "configs" in result:
        if not result["configs"]:
            return f"{result['db']}: no runs indexed yet (specc index RUN_DIR...){skipped}"
        return tabulate([[one_line(c["id"]), one_line(c["label"]), c["runs"]]
                         for c in result["configs"]],
                        headers=["config", "point", "runs"], tablefmt="simple") + (
            "\n(specc history --point CONFIG_OR_LABEL [--metric NAME])") + skipped
    fmt = "{:.4g}".format
    rows = [[time.strftime("%Y-%m-%d %H:%M", time.localtime(r["finished_at"]))
             if r["finished_at"] else "-", one_line(r["run"]),
             "-" if r["value"] is None else fmt(r["value"]),
             f"[{fmt(r['lo'])}, {fmt(r['hi'])}]" if r["lo"] is not None and r["hi"] is not None
             else ("failed" if r["status"] != "ok" else "no interval"),
             one_line(r["engine_release"] or "-"), one_line(r["gpu"] or "-")]
            for r in result["runs"]]
    c = result["config"]
    floor = result.get("floor")
    return (f"{one_line(c['label'])} ({one_line(c['id'])}): {result['metric']}, oldest first\n"
            + tabulate(rows, headers=["finished", "run", "value", "95% interval",
                                      "engine release", "GPU"], tablefmt="simple")
            + ("" if floor is None else f"\nbetween-run noise floor: {100 * floor:.1f}% "
               f"(specc compare flags a change of this figure only beyond it)") + skipped)
