"""`specc compare RUN_A RUN_B [...]`: did it get worse, or is that noise? (docs/compare.md)

Points are matched by what they measure -- the server's model pair, parallelism and
speculative setting, and the client parameters -- never by ids. Per matched point, the
relative change (B / A - 1) of output throughput, speedup, mean TTFT and mean ITL, each
with a 95% interval: paired by prompt where both runs sent the same prompts (their
requests/ records), else from each run's own intervals, taken as independent. A change is
a regression only beyond both the noise within the runs (its interval excludes zero) and
the noise between runs (it is worse than the floor: specc/report/noise.py). Beside the
provenance, the likely causes: the machine's state and the config keys that differ
(specc/report/causes.py).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeGuard

from specc import stats
from specc.manifest import ManifestError, parse_manifest
from specc.plan import BenchParams, ServerParams
from specc.report import causes, columns
from specc.rundir import PLAN_JSON, RunDir, plan_problem

#: Client parameters that change how many requests a point sends, or how long it may
#: wait, but not what it measures.
NOT_MEASURED = frozenset({"timeout_s", "request_id_field", "min_requests", "max_requests",
                          "target_ci", "min_output_tokens"})
#: Server parameters that say where it ran, not what it is.
NOT_SERVER = frozenset({"host", "port"})
#: figure -> (better when higher, its name in results.jsonl metrics / intervals)
FIGURES = {"output_throughput": (True, "output_throughput"),
           "speedup": (True, "speedup"),
           "ttft": (False, "mean_ttft_ms"),
           "itl": (False, "mean_tpot_ms")}
#: --threshold: None, the noise floor (history's or the default: specc/report/noise.py).
DEFAULT_THRESHOLD = None
#: Points bootstrapped together: a (points x resamples) block stays some 8-32 MiB.
CHUNK = 1024
#: The provenance fields compared first: the usual cause of a change.
PROVENANCE = (("engine", ("engine", "name")), ("engine release", ("engine", "reported_release")),
              ("pinned release", ("engine", "pinned_release")), ("GPU", ("gpu", "name")),
              ("GPU count", ("gpu", "count")), ("driver", ("gpu", "driver")),
              ("CUDA", ("gpu", "cuda")), ("specc", ("specc", "version")),
              ("specc commit", ("specc", "commit")), ("python", ("python",)),
              ("host", ("host",)), ("config sha256", ("config_sha256",)))


class CompareError(ValueError):
    """Input compare cannot use (exit 2); the message is one line saying what and how to fix."""


@dataclass
class Point:
    key: str
    label: str
    benchmark: str
    status: str
    metrics: dict
    intervals: dict
    baseline: str | None
    duration: float = 0.0               # summed over its repeats: the throughput's divisor
    finished_at: float | None = None


@dataclass
class Run:
    path: Path
    manifest: dict
    points: dict[str, Point]      # by key: what it measures
    planned: dict[str, str]       # key -> label, every point of the plan
    warnings: list[str]
    requests: columns.Columns | None = None   # every point's request records

    def as_json(self) -> dict:
        """What the columnar copy keeps of the run's files (columns.write's ``meta``); a
        point names its key by its place in ``planned``."""
        place = {k: i for i, k in enumerate(self.planned)}
        return {"manifest": self.manifest, "warnings": self.warnings,
                "planned": [[k, label] for k, label in self.planned.items()],
                "points": [[place[p.key], p.label, p.benchmark, p.status, p.metrics,
                            p.intervals, p.baseline, p.duration, p.finished_at]
                           for p in self.points.values()]}

    @classmethod
    def from_json(cls, path: Path, meta: dict, requests) -> Run:
        """The run as_json kept; TypeError for anything else."""
        planned, points = meta["planned"], {}
        if not all(isinstance(x, list) and len(x) == 2 and all(isinstance(y, str) for y in x)
                   for x in planned):
            raise TypeError("planned")
        for x in meta["points"]:
            i, label, bench, status, metrics, ivs, base, dur, when = x
            if not (type(i) is int and 0 <= i < len(planned) and isinstance(label, str)
                    and isinstance(bench, str) and status in ("ok", "failed")
                    and isinstance(metrics, dict) and isinstance(ivs, dict)
                    and (base is None or isinstance(base, str)) and _number(dur)
                    and (when is None or _number(when))):
                raise TypeError("point")
            points[planned[i][0]] = Point(planned[i][0], *x[1:])
        return cls(path, dict(meta["manifest"]), points, dict(planned),
                   list(meta["warnings"]), requests)


def _key(server_params: dict, bench_params: dict) -> str:
    """What a point measures. A client key set to null is left out: a key a later specc
    added (null: what it did before) matches a plan written before it existed."""
    s = {k: v for k, v in server_params.items() if k not in NOT_SERVER}
    b = {k: v for k, v in bench_params.items() if k not in NOT_MEASURED and v is not None}
    return json.dumps([s, b], sort_keys=True, default=str)


def point_key(server: ServerParams, bench: BenchParams) -> str:
    """What a point measures, from its typed params (the key compare matches points by and
    the index keys a configuration's history by)."""
    return _key(server.to_json(), bench.to_json())


def load_run(path: Path | str, *, save: bool = True) -> Run:
    """A run dir's points by what they measure, with its request records; CompareError for
    what cannot be read, RunDirError for a plan.json that is not the reviewed plan. From
    the run's columnar copy (columns.FILE) when it was built from these very files; else
    from the files, and the copy (re)written with ``save`` where the run dir takes it."""
    d = Path(path)
    if not os.path.lexists(d / PLAN_JSON):
        raise CompareError(f"{d}: no plan.json here (not a run dir); give a run dir "
                           "(outputs/<experiment>/<stamp>)")
    res_path = d / "results.jsonl"
    if not res_path.is_file():
        raise CompareError(f"{res_path}: missing (the run finished no point); run it first")
    digest, benchmarks = columns.listing_digest(d)
    cached = columns.read(d, digest)
    if cached is not None:
        problem = plan_problem(d / PLAN_JSON)   # the copy was made from a reviewed plan.json
        if problem is not None:                 # with these bytes; still, never trust it
            raise problem
        try:
            return Run.from_json(d, cached[1], cached[0])
        except (KeyError, TypeError, ValueError):
            pass   # not what write() wrote: read the files
    run = _read_files(RunDir.open(d))
    run.requests = columns.build(d, benchmarks)
    if save:
        try:
            columns.write(d, run.requests, run.as_json(), digest)
        except (OSError, TypeError, ValueError):
            pass   # a read-only run dir (or a value JSON cannot hold): read again next time
    return run


def _read_files(run_dir: RunDir) -> Run:
    d, plan = run_dir.path, run_dir.plan
    res_path = d / "results.jsonl"
    rows, warnings = run_dir.results()
    if not rows and res_path.stat().st_size:
        raise CompareError(f"{res_path}: corrupt (no line is a result row: "
                           f"{warnings[0] if warnings else 'empty'}); rerun the sweep")
    report = run_dir.report_json()
    manifest = _manifest(run_dir, report)
    # the intervals report.json holds (the speedup's, from requests/) beside the row's own
    report_rows = {r.get("benchmark"): r for r in report.get("rows") or [] if isinstance(r, dict)}
    points: dict[str, Point] = {}
    planned: dict[str, str] = {}
    for b in plan.benchmarks:
        key = point_key(plan.server(b.server).params, b.params)
        label = plan.point_label(b)
        planned[key] = label
        row = rows.get(b.id)
        if row is None:
            continue
        ivs = dict(row.extra.get("intervals") or {}) if isinstance(
            row.extra.get("intervals"), dict) else {}
        rep = report_rows.get(b.id) or {}
        for _, metric in FIGURES.values():
            if metric not in ivs and _number(rep.get(f"{metric}_lo")) and _number(
                    rep.get(f"{metric}_hi")):
                ivs[metric] = [rep[f"{metric}_lo"], rep[f"{metric}_hi"]]
        t = row.extra.get("finished_at")
        points[key] = Point(key=key, label=label, benchmark=b.id, status=row.status,
                            metrics=row.metrics, intervals=ivs, baseline=b.baseline,
                            duration=_duration(row), finished_at=t if _number(t) else None)
    return Run(d, manifest, points, planned, warnings)


def _manifest(run_dir: RunDir, report: dict) -> dict:
    """The run's manifest through its one reader (manifest.json, else report.json's copy),
    as JSON; {} when it has none. CompareError naming the file and field when it is bad."""
    try:
        found = run_dir.manifest()
        if found is None and "manifest" in report:
            found = parse_manifest(report["manifest"], str(run_dir.path / "report.json"),
                                   "manifest")
    except ManifestError as e:
        raise CompareError(f"{e}; rerun the report (specc report RUN_DIR), or delete it") \
            from None
    return {} if found is None else found.to_json()


def _duration(row) -> float:
    """A point's duration summed over its repeats (results.jsonl basis.repeats), else its
    duration metric; 0 when neither is there."""
    basis = row.extra.get("basis") if isinstance(row.extra.get("basis"), dict) else {}
    reps = basis.get("repeats") or []
    d = sum(x["duration"] for x in reps if isinstance(x, dict) and _number(
        x.get("duration"))) if isinstance(reps, list) else 0.0
    v = row.metrics.get("duration")
    return float(d or (float(v) if _number(v) else 0.0))


# --------------------------------------------------------------------------- reading

def strict_json(result: dict) -> str:
    """``result`` as strict JSON: a non-finite number (JSON has none; `compare --json` is
    read by other programs) as null, with a warning that says how many."""
    try:   # compact: json's C encoder (indent= takes its Python one, 4x slower)
        return json.dumps(result, allow_nan=False)
    except ValueError:
        return json.dumps(_nulled(result), allow_nan=False)


def _nulled(result: dict) -> dict:
    count = 0

    def clean(x):
        nonlocal count
        if isinstance(x, float) and not math.isfinite(x):
            count += 1
            return None
        if isinstance(x, dict):
            return {k: clean(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [clean(v) for v in x]
        return x

    out = clean(result)
    if count:
        out.setdefault("warnings", []).append(
            f"{count} figures were not finite numbers (a NaN or infinity in the run's "
            "records): shown as null")
    return out


def _dig(obj, path):
    for k in path:
        obj = obj.get(k) if isinstance(obj, dict) else None
    return obj


def provenance_diff(runs: list[Run]) -> list[dict]:
    """The provenance fields whose values differ between the runs (first: the usual cause)."""
    out = []
    for name, path in PROVENANCE:
        values = [_dig(r.manifest, path) for r in runs]
        if len({json.dumps(v, sort_keys=True, default=str) for v in values}) > 1:
            out.append({"field": name, "values": values})
    ds = [sorted((x.get("path") or x.get("dataset") or "?", x.get("sha256") or "")
                 for x in (r.manifest.get("datasets") or [])) for r in runs]
    if len({json.dumps(x) for x in ds}) > 1:
        out.append({"field": "datasets", "values": [
            ", ".join(f"{p} {h[:12]}" for p, h in x) or None for x in ds]})
    return out


# --------------------------------------------------------------------------- figures

def _se(iv) -> float | None:
    """The standard error a 95% interval implies (normal approximation)."""
    if not isinstance(iv, (list, tuple)) or len(iv) != 2 or None in iv:
        return None
    return (float(iv[1]) - float(iv[0])) / (2 * 1.959963984540054)


def _number(v) -> TypeGuard[float]:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _shared(ra: Run, rb: Run, keys: list[str], ca, cb) -> list[tuple]:
    """The points both runs have request records for, with at least two prompts in common:
    (point key, a's rows, b's rows of the shared prompts in a's order, throughput scale,
    the shared prompts' signature). A point whose prompts match one for one in order (a
    rerun of the same sweep) is matched by whole blocks; any other by prompt key."""
    import numpy as np

    cand: dict[int, list] = {}   # prompts a side -> [(key, start a, start b, scale)]
    slow: list = []
    for k in keys:
        pa, pb = ra.points[k], rb.points[k]
        (a0, a1), (b0, b1) = ca.span(pa.benchmark), cb.span(pb.benchmark)
        da, db = pa.duration, pb.duration
        if min(a1 - a0, b1 - b0) < 2 or da <= 0 or db <= 0:
            continue
        # each side's in-flight factor over all its requests: throughput = C * tokens / latency
        scale = (cb.latency_sum[pb.benchmark] / db) / (ca.latency_sum[pa.benchmark] / da)
        (cand.setdefault(a1 - a0, []) if a1 - a0 == b1 - b0 else slow).append(
            (k, a0, b0, scale, pa.benchmark, pb.benchmark))
    code_in_a = {x: i for i, x in enumerate(ca.ids)}   # b's prompt ids as a's codes
    b_codes = np.array([code_in_a.get(x, -2) for x in cb.ids] + [-1], np.int64)[cb.code]
    out = []
    for n, group in cand.items():
        ra_, rb_ = (np.array([g[i] for g in group])[:, None] + np.arange(n) for i in (1, 2))
        same = ((ca.repeat[ra_] == cb.repeat[rb_]) & (ca.place[ra_] == cb.place[rb_])
                & (ca.code[ra_] == b_codes[rb_])).all(axis=1)
        sig = np.stack([ca.repeat[ra_], ca.place[ra_], ca.code[ra_]], axis=-1)
        for j, g in enumerate(group):
            if same[j]:
                out.append((g[0], ra_[j], rb_[j], g[3], sig[j].tobytes()))
            else:
                slow.append(g)
    for k, a0, b0, scale, bench_a, bench_b in slow:
        rows_b = {key: i for i, key in enumerate(cb.records(bench_b), b0)}
        pairs = [(i, rows_b[key]) for i, key in enumerate(ca.records(bench_a), a0)
                 if key in rows_b]
        if len(pairs) >= 2:
            rows_a, rows_b_ = (np.array(x) for x in zip(*pairs))
            sig = np.stack([ca.repeat[rows_a], ca.place[rows_a], ca.code[rows_a]], axis=-1)
            out.append((k, rows_a, rows_b_, scale, sig.tobytes()))
    return out


def _paired_batch(items: list[tuple], ca, cb, figs: dict) -> dict:
    """Paired changes for many points at once, into ``figs[point key]``. ``items`` as
    _shared gives them. Points with the same number of shared prompts share one
    bootstrap draw (stats.paired_ratio_resamples)."""
    import numpy as np

    groups: dict[int, list[tuple]] = {}
    for it in items:
        groups.setdefault(len(it[1]), []).append(it)
    chunks = [(n, g[i:i + CHUNK]) for n, g in groups.items() for i in range(0, len(g), CHUNK)]
    resampled: dict[str, tuple] = {}   # point key -> (value, resamples, shared signature)
    for n, group in chunks:
        # (points, prompts, [tokens, latency, TTFT]) per side, the shared prompts in order
        rows_a, rows_b = np.stack([it[1] for it in group]), np.stack([it[2] for it in group])
        sa = np.stack([ca.tokens[rows_a], ca.latency[rows_a], ca.ttft[rows_a]], axis=-1)
        sb = np.stack([cb.tokens[rows_b], cb.latency[rows_b], cb.ttft[rows_b]], axis=-1)
        scale = np.array([it[3] for it in group])
        v, res = stats.paired_ratio_resamples(sb[:, :, 0], sb[:, :, 1], sa[:, :, 0],
                                              sa[:, :, 1])
        v, res = v * scale, res * scale[:, None].astype(res.dtype)
        figures = {"output_throughput": (v, res)}
        ones = np.ones(sa.shape[:2])
        figures["ttft"] = stats.paired_ratio_resamples(sb[:, :, 2], ones, sa[:, :, 2], ones)
        # ITL: (latency - TTFT) / (tokens - 1), where both sides have two tokens or more
        with np.errstate(divide="ignore", invalid="ignore"):
            ia, ib = ((s[:, :, 1] - s[:, :, 2]) / (s[:, :, 0] - 1) for s in (sa, sb))
        valid = ((sa[:, :, 0] > 1) & (sb[:, :, 0] > 1)).astype(float)
        ia, ib = (np.where(valid > 0, x, 0.0) for x in (ia, ib))
        figures["itl"] = stats.paired_ratio_resamples(ib, valid, ia, valid)
        basis = f"paired, {n} prompts"
        for name, (val, rs) in figures.items():
            lo, hi = stats.resampled_percentiles(rs)
            for it, x, low, high in zip(group, val.tolist(), lo.tolist(), hi.tolist()):
                if math.isfinite(x):
                    figs[it[0]][name] = _change(x, low, high, basis)
        for j, it in enumerate(group):
            resampled[it[0]] = (v[j], res[j], it[4], n)
    return resampled


def _change(ratio, lo, hi, basis: str) -> dict:
    ok = math.isfinite(lo) and math.isfinite(hi)
    return {"change": float(ratio) - 1, "lo": float(lo) - 1 if ok else None,
            "hi": float(hi) - 1 if ok else None, "basis": basis if ok else "no interval"}


def _independent(pa: Point, pb: Point, metric: str) -> dict | None:
    """b/a - 1 from each run's figure and interval, taken as independent (delta method on
    the log ratio; each interval's standard error from its width)."""
    va, vb = pa.metrics.get(metric), pb.metrics.get(metric)
    if not (_number(va) and _number(vb)) or va <= 0:
        return None
    change = vb / va - 1
    sa, sb = _se(pa.intervals.get(metric)), _se(pb.intervals.get(metric))
    if sa is None or sb is None or vb <= 0:
        return {"change": change, "lo": None, "hi": None, "basis": "no interval"}
    s = math.hypot(sa / va, sb / vb)
    return {"change": change, "lo": math.exp(math.log(vb / va) - 1.96 * s) - 1,
            "hi": math.exp(math.log(vb / va) + 1.96 * s) - 1, "basis": "independent"}


def _flag(figs: dict, threshold, gated=tuple(FIGURES)) -> list[str]:
    """Which of the ``gated`` figures regressed: the interval excludes zero and the change
    is worse (lower throughput or speedup, higher TTFT or ITL) than the floor: ``threshold``
    a fraction for every figure, or {figure: (floor, where it comes from)}."""
    out = []
    for name, f in figs.items():
        floor, source = threshold.get(name, (0.0, "")) if isinstance(threshold, dict) else (
            threshold, "--threshold")
        f["floor"], f["floor_from"] = floor, source
        if name not in gated:
            f["regression"] = False
            continue
        worse = -f["change"] if FIGURES[name][0] else f["change"]
        excludes_zero = f["lo"] is not None and (f["lo"] > 0 or f["hi"] < 0)
        f["regression"] = bool(excludes_zero and worse > floor)
        if f["regression"]:
            out.append(name)
    return out


def compare_pair(ra: Run, rb: Run, keys: list[str], threshold,
                 gated=tuple(FIGURES)) -> list[dict]:
    """Every matched point of two runs: each figure's change, interval, regression.
    ``threshold``: a fraction, or {key: {figure: (floor, where from)}} (noise.floors)."""
    import numpy as np

    figs: dict[str, dict] = {k: {} for k in keys}
    ca, cb = ra.requests, rb.requests
    batch = _shared(ra, rb, keys, ca, cb)
    resampled = _paired_batch(batch, ca, cb, figs) if batch else {}
    key_of = {p.benchmark: k for k, p in ra.points.items()}
    speedups = []   # speedup change = throughput change / its baseline's, on the same draws
    for k in keys:
        mine, base = resampled.get(k), resampled.get(key_of.get(ra.points[k].baseline or ""))
        if mine is not None and base is not None and mine[2] == base[2]:
            speedups.append((k, mine, base))
    for i in range(0, len(speedups), CHUNK):
        part = speedups[i:i + CHUNK]
        lo, hi = stats.resampled_percentiles(np.stack([m[1] / b[1] for _, m, b in part]))
        for (k, mine, base), low, high in zip(part, lo.tolist(), hi.tolist()):
            figs[k]["speedup"] = _change(float(mine[0] / base[0]), low, high,
                                         f"paired, {mine[3]} prompts")
    out = []
    for k in keys:
        pa, pb = ra.points[k], rb.points[k]
        for name, (_, metric) in FIGURES.items():
            if name not in figs[k]:
                got = _independent(pa, pb, metric)
                if got is not None:
                    figs[k][name] = got
        out.append({"point": pa.label, "a": pa.benchmark, "b": pb.benchmark,
                    "figures": figs[k], "regressed": _flag(
                        figs[k], threshold[k] if isinstance(threshold, dict) else threshold,
                        gated)})
    return out


def compare_runs(paths: list, threshold: float | None = DEFAULT_THRESHOLD,
                 figures: tuple = tuple(FIGURES)) -> dict:
    """Compare every later run against the first; CompareError for bad input.
    ``figures``: the ones that can flag a regression (all are shown)."""
    unknown = [f for f in figures if f not in FIGURES]
    if unknown or not figures:
        raise CompareError(f"--figures: {', '.join(unknown) or 'none given'} unknown; choose "
                           f"from {', '.join(FIGURES)}")
    if threshold is not None and not 0 <= threshold < 1:
        raise CompareError(f"--threshold {threshold}: a fraction in [0, 1) (0.05 = 5%)")
    if len(paths) < 2:
        raise CompareError("compare needs two run dirs or more: specc compare RUN_A RUN_B")
    resolved = [Path(p).resolve() for p in paths]
    for i, p in enumerate(resolved):
        if p in resolved[:i]:
            raise CompareError(f"{paths[i]}: given twice (a run compared with itself shows "
                               "nothing); give two different run dirs")
    runs = [load_run(p) for p in paths]
    a = runs[0]
    out: dict[str, Any] = {"threshold": threshold, "figures": list(figures),
           "runs": [str(r.path) for r in runs],
           "provenance": provenance_diff(runs) + causes.config_diff(resolved),
           "machine": causes.machine_diff([r.manifest for r in runs]),
           "comparisons": [], "warnings": []}
    for r in runs:
        out["warnings"] += [f"{r.path}: {w}" for w in r.warnings]
    for b in runs[1:]:
        shared = sorted(set(a.planned) & set(b.planned), key=lambda k: a.planned[k])
        if not shared:
            raise CompareError(f"{a.path} and {b.path} share no point (no model pair, "
                               "speculative setting and client parameters in common); "
                               "compare runs of the same sweep")
        done = [k for k in shared if k in a.points and k in b.points
                and a.points[k].status == "ok" and b.points[k].status == "ok"]
        done_set = set(done)
        missing = [f"{a.planned[k]}: " + ", ".join(
            f"{r.path.name} {'has no result' if k not in r.points else 'failed'}"
            for r in (a, b) if k not in r.points or r.points[k].status != "ok")
            for k in shared if k not in done_set]
        rows = compare_pair(a, b, done, _floors(a, b, done, threshold), figures)
        out["comparisons"].append({"a": str(a.path), "b": str(b.path), "points": rows,
                                   "missing": missing,
                                   "regressed": [r["point"] for r in rows if r["regressed"]]})
    return out


def _floors(a: Run, b: Run, keys: list[str], threshold):
    """The floor a change must pass to be flagged: --threshold for every figure when given,
    else per point and figure the spread over the project index's earlier runs of it, or
    the measured default (noise.floors)."""
    if threshold is not None:
        return threshold
    from specc.report import indexpath, noise

    return noise.floors(keys, [a.path, b.path], FIGURES, indexpath.for_run(a.path))


# --------------------------------------------------------------------------- text

def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:+.1f}%"


def _table(rows: list[list[str]], headers: list[str]) -> str:
    """tabulate's "simple" table of text cells, left-aligned (the same text; tabulate
    took a second over 10^4 rows)."""
    widths = [max([len(h) + 2] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in (
        headers, ["-" * w for w in widths], *rows))


def render(result: dict) -> str:
    """The provenance differences, then one table per comparison."""
    from specc.files import one_line

    lines = []
    if result["provenance"]:
        lines.append("Provenance differs (the usual cause of a change):")
        for d in result["provenance"]:
            lines.append(f"  {d['field']}: " + " -> ".join(one_line(v) for v in d["values"]))
    else:
        lines.append("Provenance: no difference recorded")
    lines += _machine_lines(result.get("machine") or [])
    for c in result["comparisons"]:
        lines.append(f"\n{one_line(c['a'])} -> {one_line(c['b'])}  ({_verdict_rule(result['threshold'], c)})")
        rows = []
        for p in c["points"]:
            cells = [one_line(p["point"])]
            for name in FIGURES:
                f = p["figures"].get(name)
                cells.append("-" if f is None else f"{_pct(f['change'])} "
                             f"[{_pct(f['lo'])}, {_pct(f['hi'])}]"
                             + (" REGRESSION" if f.get("regression") else ""))
            rows.append(cells)
        lines.append(_table(rows, ["point", "output tok/s", "speedup", "TTFT (mean)",
                                   "ITL (mean)"]))
        for m in c["missing"]:
            lines.append(f"missing: {one_line(m)}")
        lines.append(f"regressed: {one_line(', '.join(c['regressed']))}" if c["regressed"]
                     else "no regression beyond noise")
    for w in result["warnings"]:
        lines.append(f"warning: {one_line(w)}")
    return "\n".join(lines)


def _machine_lines(diffs: list[dict]) -> list[str]:
    if not diffs:
        return []
    return ["Machine state differed (a likely cause: no interval within a run covers it):",
            *(f"  {d['cause']}" for d in diffs)]


def _verdict_rule(threshold, comparison: dict) -> str:
    """The rule the table's REGRESSION marks follow, and where its floor came from."""
    if threshold is not None:
        return f"regression: interval excludes 0 and worse than {100 * threshold:.0f}%"
    seen: dict[str, set] = {}
    for p in comparison["points"]:
        for name, f in p["figures"].items():
            if "floor" in f:
                seen.setdefault(f["floor_from"], set()).add(
                    name if f["floor_from"].startswith("history") else
                    f"{name} {100 * f['floor']:.0f}%")
    where = "; ".join(f"{src}: {', '.join(sorted(v))}" for src, v in sorted(seen.items()))
    return ("regression: interval excludes 0 and worse than the between-run noise floor"
            + (f" -- {where}" if where else ""))
