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
import time
from pathlib import Path

from specc.report import indexpath
from specc.report.compare import FIGURES, CompareError, load_run

#: Where the index lives unless --db says: specc/report/indexpath.py (beside the run dirs).
ENV = indexpath.ENV
SCHEMA = 1
BUSY_MS = 30_000
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


def _rebuild_hint(db: Path) -> str:
    return (f"rebuild it from the run dirs: specc index --rebuild --db {db} RUN_DIR... "
            "(or a folder holding run dirs, e.g. outputs/)")


def connect(db: Path):
    """The index at ``db``, created when absent; IndexDbError for a file that is not one."""
    import sqlite3

    try:
        db.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(db, timeout=BUSY_MS / 1000, isolation_level=None)
    except (OSError, sqlite3.Error) as e:
        raise IndexDbError(f"{db}: cannot open the results index ({e}); give a writable "
                           f"path with --db or ${ENV}") from None
    try:
        conn.execute(f"PRAGMA busy_timeout = {BUSY_MS}")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA foreign_keys = ON")
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version == 0:   # new: made in one transaction (IF NOT EXISTS: a racing twin)
            conn.executescript(f"BEGIN IMMEDIATE;{_TABLES}PRAGMA user_version = {SCHEMA};"
                               "COMMIT;")
        elif version != SCHEMA:
            raise IndexDbError(f"{db}: a results index of schema {version}, this specc reads "
                               f"{SCHEMA}; {_rebuild_hint(db)}")
        conn.execute("SELECT 1 FROM runs, points, figures, configs LIMIT 1").fetchall()
    except sqlite3.Error as e:
        conn.close()
        raise IndexDbError(f"{db}: not a readable results index ({e}); "
                           f"{_rebuild_hint(db)}") from None
    return conn


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
    conn.execute("BEGIN IMMEDIATE")
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
    gone: list[str] = []
    if rebuild:
        old = []
        try:
            conn = connect(db) if db.exists() else None
            if conn is not None:
                old = [r[0] for r in conn.execute("SELECT path FROM runs ORDER BY id")]
                conn.close()
        except IndexDbError:
            pass   # a corrupt index: only the runs given are known
        for suffix in ("", "-wal", "-shm"):
            Path(str(db) + suffix).unlink(missing_ok=True)
        have = {str(d.resolve()) for d in dirs}
        for p in old:
            if p in have:
                continue
            if (Path(p) / "plan.json").is_file():
                dirs.append(Path(p))
            else:
                gone.append(p)
    if not dirs and not rebuild:
        raise IndexDbError("give run dirs to index (specc index RUN_DIR...), or --rebuild")
    conn = connect(db)
    try:
        indexed = [[str(d), add_run(conn, d)] for d in dirs]
    finally:
        conn.close()
    return {"db": str(db), "indexed": indexed, "gone": gone}


def _metric_name(name: str) -> str:
    """compare's figure names (ttft, itl, ...) or a results.jsonl metric name."""
    return FIGURES[name][1] if name in FIGURES else name


def history(db: Path, point: str = "", metric: str = "output_throughput") -> dict:
    """One figure of one configuration, run by run, oldest first; without ``point``, the
    configurations the index knows."""
    if not db.exists():
        raise IndexDbError(f"{db}: no results index yet; runs add themselves when they "
                           "finish, older ones with: specc index RUN_DIR...")
    conn = connect(db)
    try:
        configs = conn.execute(
            "SELECT c.id, c.label, c.key, COUNT(p.run) FROM configs c JOIN points p "
            "ON p.config = c.id GROUP BY c.id ORDER BY c.label, c.id").fetchall()
        if not point:
            return {"db": str(db), "configs": [{"id": i, "label": lab, "key": json.loads(k),
                                                "runs": n} for i, lab, k, n in configs]}
        chosen = ([c for c in configs if point in (c[0], c[1])]
                  or [c for c in configs if point.lower() in c[1].lower()])
        if not chosen:
            raise IndexDbError(f"--point {point!r}: no configuration of that id or label in "
                               f"{db}; `specc history` lists them")
        if len(chosen) > 1:
            names = "; ".join(f"{c[0]} ({c[1]})" for c in chosen[:6])
            raise IndexDbError(f"--point {point!r} matches {len(chosen)} configurations: "
                               f"{names}{' ...' if len(chosen) > 6 else ''}; give one id")
        cid, label, key, _ = chosen[0]
        name = _metric_name(metric)
        known = [r[0] for r in conn.execute(
            "SELECT DISTINCT metric FROM figures WHERE config = ? ORDER BY metric", (cid,))]
        if name not in known:
            raise IndexDbError(f"--metric {metric!r}: {label} has no such figure; choose from "
                               f"{', '.join(known) or 'none (no ok point)'}")
        rows = conn.execute(
            "SELECT r.path, p.benchmark, p.status, p.finished_at, f.value, f.lo, f.hi, "
            "r.manifest FROM points p JOIN runs r ON r.id = p.run LEFT JOIN figures f "
            "ON f.run = p.run AND f.config = p.config AND f.metric = ? WHERE p.config = ? "
            "ORDER BY p.finished_at, r.path", (name, cid)).fetchall()
    finally:
        conn.close()
    runs = []
    for path, bench, status, when, value, lo, hi, manifest in rows:
        m = json.loads(manifest)
        runs.append({"run": path, "benchmark": bench, "status": status, "finished_at": when,
                     "value": value, "lo": lo, "hi": hi,
                     "engine_release": _dig(m, "engine", "reported_release"),
                     "gpu": _dig(m, "gpu", "name"), "commit": _dig(m, "specc", "commit")})
    return {"db": str(db), "config": {"id": cid, "label": label, "key": json.loads(key)},
            "metric": name, "runs": runs, "floor": _floor(name, runs)}


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
    from tabulate import tabulate

    if "configs" in result:
        if not result["configs"]:
            return f"{result['db']}: no runs indexed yet (specc index RUN_DIR...)"
        return tabulate([[c["id"], c["label"], c["runs"]] for c in result["configs"]],
                        headers=["config", "point", "runs"], tablefmt="simple") + (
            "\n(specc history --point CONFIG_OR_LABEL [--metric NAME])")
    fmt = "{:.4g}".format
    rows = [[time.strftime("%Y-%m-%d %H:%M", time.localtime(r["finished_at"]))
             if r["finished_at"] else "-", r["run"],
             "-" if r["value"] is None else fmt(r["value"]),
             f"[{fmt(r['lo'])}, {fmt(r['hi'])}]" if r["lo"] is not None and r["hi"] is not None
             else ("failed" if r["status"] != "ok" else "no interval"),
             r["engine_release"] or "-", r["gpu"] or "-"] for r in result["runs"]]
    c = result["config"]
    floor = result.get("floor")
    return (f"{c['label']} ({c['id']}): {result['metric']}, oldest first\n"
            + tabulate(rows, headers=["finished", "run", "value", "95% interval",
                                      "engine release", "GPU"], tablefmt="simple")
            + ("" if floor is None else f"\nbetween-run noise floor: {100 * floor:.1f}% "
               f"(specc compare flags a change of this figure only beyond it)"))
