"""`specc compare RUN_A RUN_B [...]`: did it get worse, or is that noise? (docs/compare.md)

Points are matched by what they measure -- the server's model pair, parallelism and
speculative setting, and the client parameters -- never by ids. Per matched point, the
relative change (B / A - 1) of output throughput, speedup, mean TTFT and mean ITL, each
with a 95% interval: paired by prompt where both runs sent the same prompts (their
requests/ records), else from each run's own intervals, taken as independent. A change is
a regression only when its interval excludes zero and it is worse than the threshold.
"""

from __future__ import annotations

import json
import math
import os
import re
from itertools import compress
from operator import add
from dataclasses import dataclass, field
from pathlib import Path

from specc import stats
from specc.manifest import ManifestError, parse_manifest, read_manifest
from specc.results import read_rows
from specc import requestlog as reqlog

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
DEFAULT_THRESHOLD = 0.05
#: Points bootstrapped together: a (points x resamples) block stays a few MiB.
CHUNK = 256
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
    basis: dict = field(default_factory=dict)


@dataclass
class Run:
    path: Path
    manifest: dict
    points: dict[str, Point]      # by key: what it measures
    planned: dict[str, str]       # key -> label, every point of the plan
    warnings: list[str]


def _key(server_params: dict, bench_params: dict) -> str:
    """What a point measures. A client key set to null is left out: a key a later specc
    added (null: what it did before) matches a plan written before it existed."""
    s = {k: v for k, v in server_params.items() if k not in NOT_SERVER}
    b = {k: v for k, v in bench_params.items() if k not in NOT_MEASURED and v is not None}
    return json.dumps([s, b], sort_keys=True, default=str)


def load_run(path: Path | str) -> Run:
    """A run dir's points by what they measure; CompareError for what cannot be read."""
    d = Path(path)
    if not (d / "plan.json").is_file():
        raise CompareError(f"{d}: no plan.json here (not a run dir); give a run dir "
                           "(outputs/<experiment>/<stamp>)")
    try:
        plan = json.loads((d / "plan.json").read_text())
        servers = {s["id"]: s for s in plan["servers"]}
        benchmarks = list(plan["benchmarks"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise CompareError(f"{d / 'plan.json'}: corrupt ({type(e).__name__}: {e}); compile "
                           "the experiment again or restore the file") from None
    res_path = d / "results.jsonl"
    if not res_path.is_file():
        raise CompareError(f"{res_path}: missing (the run finished no point); run it first")
    rows, warnings = read_rows(res_path)
    if not rows and res_path.stat().st_size:
        raise CompareError(f"{res_path}: corrupt (no line is a result row: "
                           f"{warnings[0] if warnings else 'empty'}); rerun the sweep")
    report = _json_file(d / "report.json")
    manifest = _manifest(d, report)
    # the intervals report.json holds (the speedup's, from requests/) beside the row's own
    report_rows = {r.get("benchmark"): r for r in report.get("rows") or [] if isinstance(r, dict)}
    points: dict[str, Point] = {}
    planned: dict[str, str] = {}
    label_of_bench: dict[str, str] = {}
    for b in benchmarks:
        srv = servers.get(b.get("server"), {})
        key = _key(srv.get("params") or {}, b.get("params") or {})
        c = (b.get("params") or {}).get("concurrency")
        label = f"{srv.get('label') or b.get('server')} @ c={c}"
        planned[key] = label
        label_of_bench[b["id"]] = key
        row = rows.get(b["id"])
        if row is None:
            continue
        ivs = dict(row.extra.get("intervals") or {}) if isinstance(
            row.extra.get("intervals"), dict) else {}
        rep = report_rows.get(b["id"]) or {}
        for _, metric in FIGURES.values():
            if metric not in ivs and _number(rep.get(f"{metric}_lo")) and _number(
                    rep.get(f"{metric}_hi")):
                ivs[metric] = [rep[f"{metric}_lo"], rep[f"{metric}_hi"]]
        points[key] = Point(key=key, label=label, benchmark=b["id"], status=row.status,
                            metrics=row.metrics, intervals=ivs,
                            baseline=b.get("baseline"),
                            basis=row.extra.get("basis") if isinstance(row.extra.get("basis"),
                                                                        dict) else {})
    return Run(d, manifest, points, planned, warnings)


def _manifest(d: Path, report: dict) -> dict:
    """The run's manifest through its one reader (manifest.json, else report.json's copy),
    as JSON; {} when it has none. CompareError naming the file and field when it is bad."""
    try:
        found = read_manifest(d)
        if found is None and "manifest" in report:
            found = parse_manifest(report["manifest"], str(d / "report.json"), "manifest")
    except ManifestError as e:
        raise CompareError(f"{e}; rerun the report (specc report RUN_DIR), or delete it") \
            from None
    return {} if found is None else found.to_json()


def _json_file(path: Path) -> dict:
    try:
        obj = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return obj if isinstance(obj, dict) else {}


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


_STR = r'"(?:[^"\\]|\\.)*"'
_NUM = r'-?[0-9][0-9.eE+-]*'
#: One request line exactly as requestlog.lines_for writes it (its keys, in its order,
#: compact separators; the send times optional: older lines lack them), capturing what
#: compare reads: attempt, repeat, place, prompt id, ok, output tokens, TTFT, latency. A file whose every line matches is read without
#: building a dict per line; any other file goes through json (the same result, slower).
_LINE = re.compile(
    r'^\{"attempt":(%s),"repeat":(\d+),"i":(\d+),"id":(%s|null),"category":(?:%s|null),'
    r'"ok":(true|false),"error":(?:%s|null),"input_tokens":(?:\d+|null),'
    r'"output_tokens":(\d+),"ttft":(%s),"e2e_latency":(%s),"start":(?:%s|null),'
    r'"verify_ct":(?:\d+|null)(?:,"sent_at_s":(?:%s|null),"lateness_s":(?:%s|null))?\}\n'
    % (_NUM, _STR, _STR, _STR, _NUM, _NUM, _NUM, _NUM, _NUM), re.M)


def _read_fast(text: str) -> dict | None:
    """read_requests' records from the lines of ``text`` when every line is one _LINE
    matches; None otherwise."""
    if not text.endswith("\n"):
        return None
    lines = _LINE.findall(text)
    if len(lines) != text.count("\n"):
        return None
    try:   # column by column: the conversions run in C, not a Python loop per line
        attempt, rep, idx, pid, ok, tok, ttft, lat = zip(*lines)
        attempt, ttft, lat = (list(map(float, c)) for c in (attempt, ttft, lat))
        tok, rep, idx = (list(map(int, c)) for c in (tok, rep, idx))
    except ValueError:   # a number the loose pattern let through: json decides
        return None
    pids = [None if p == "null" else (json.loads(p) if "\\" in p else p[1:-1]) for p in pid]
    rows = zip(zip(rep, idx, pids), zip(tok, lat, ttft))
    finite = all(map(math.isfinite, map(add, lat, ttft)))   # as json's: of the sum
    if not (finite and ok.count("true") == len(ok) and len(set(attempt)) <= 1):
        last = max(attempt)
        rows = compress(rows, [a == last and o == "true" and math.isfinite(x + y)
                               for a, o, x, y in zip(attempt, ok, lat, ttft)])
    return dict(rows)


def read_requests(run_dir: Path, benchmark: str) -> tuple[dict, float]:
    """A point's ok requests of its latest attempt, as ({(repeat, place, prompt id):
    (output tokens, latency, TTFT)}, their summed latency): only what compare uses.
    Lines as the executor writes them are read by one regular expression a file
    (_read_fast); any other file by one json.loads, and a file with a bad line by the
    careful line-by-line reader."""
    path = os.path.join(run_dir, reqlog.DIR, benchmark + ".jsonl")
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return {}, 0.0
    out = _read_fast(text)
    if out is None:
        out = _read_json(text, run_dir, benchmark)
    return out, sum(x[1] for x in out.values())


def _read_json(text: str, run_dir: Path, benchmark: str) -> dict:
    try:
        rows = json.loads("[" + text.strip().replace("\n", ",") + "]")
    except ValueError:   # a cut or foreign line
        rows = reqlog.read(run_dir, benchmark)
    rows = [r for r in rows if type(r) is dict and "i" in r]
    if not rows:
        return {}
    last = max(r.get("attempt", 0) for r in rows)
    out = {}
    for r in rows:
        if r.get("attempt", 0) == last and r.get("ok"):
            try:   # finite numbers only: a hand-edited line is left out, not a traceback
                tok, lat, ttft = r["output_tokens"], r["e2e_latency"], r["ttft"]
                if math.isfinite(lat + ttft + tok):
                    out[(r.get("repeat", 0), r["i"], r.get("id"))] = (tok, lat, ttft)
            except (KeyError, TypeError):
                continue
    return out


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _paired_batch(items: list[tuple]) -> dict:
    """Paired changes for many points at once. ``items``: (figs dict to fill, a's requests,
    b's requests, a's duration, b's duration, shared keys, point key); each side's
    requests as read_requests gives them. Points with the same number of shared prompts
    share one bootstrap draw (stats.paired_ratio_resamples)."""
    import numpy as np

    groups: dict[int, list[tuple]] = {}
    for it in items:
        groups.setdefault(len(it[5]), []).append(it)
    chunks = [(n, g[i:i + CHUNK]) for n, g in groups.items() for i in range(0, len(g), CHUNK)]
    resampled: dict[str, tuple] = {}   # point key -> (value, resamples, shared keys)
    for n, group in chunks:
        # (points, prompts, [tokens, latency, TTFT]) per side, the shared prompts in order
        sa = np.array([[it[1][0][k] for k in it[5]] for it in group], float)
        sb = np.array([[it[2][0][k] for k in it[5]] for it in group], float)
        # each side's in-flight factor over all its requests: throughput = C * tokens / latency
        scale = np.array([(it[2][1] / it[4]) / (it[1][1] / it[3]) for it in group])
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
        for name, (val, rs) in figures.items():
            lo, hi = stats.resampled_percentiles(rs)
            for j, it in enumerate(group):
                if math.isfinite(val[j]):
                    it[0][name] = _change(val[j], lo[j], hi[j], f"paired, {n} prompts")
        for j, it in enumerate(group):
            resampled[it[6]] = (v[j], res[j], it[5])
    return resampled


def _change(ratio, lo, hi, basis: str) -> dict:
    ok = all(math.isfinite(x) for x in (lo, hi))
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


def _dur(p: Point) -> float:
    reps = p.basis.get("repeats") or []
    d = sum(x.get("duration") or 0.0 for x in reps if isinstance(x, dict))
    v = p.metrics.get("duration")
    return d or (float(v) if _number(v) else 0.0)


def _flag(figs: dict, threshold: float, gated=tuple(FIGURES)) -> list[str]:
    """Which of the ``gated`` figures regressed: the interval excludes zero and the change
    is worse than the threshold (lower throughput or speedup, higher TTFT or ITL)."""
    out = []
    for name, f in figs.items():
        if name not in gated:
            f["regression"] = False
            continue
        worse = -f["change"] if FIGURES[name][0] else f["change"]
        excludes_zero = f["lo"] is not None and (f["lo"] > 0 or f["hi"] < 0)
        f["regression"] = bool(excludes_zero and worse > threshold)
        if f["regression"]:
            out.append(name)
    return out


def compare_pair(ra: Run, rb: Run, keys: list[str], threshold: float,
                 gated=tuple(FIGURES)) -> list[dict]:
    """Every matched point of two runs: each figure's change, interval, regression."""
    import numpy as np

    figs = {k: {} for k in keys}
    batch = []
    for k in keys:
        pa, pb = ra.points[k], rb.points[k]
        req_a, req_b = read_requests(ra.path, pa.benchmark), read_requests(rb.path, pb.benchmark)
        shared = ([x for x in req_a[0] if x in req_b[0]] if req_a[0] and req_b[0] else [])
        if len(shared) >= 2 and _dur(pa) > 0 and _dur(pb) > 0:
            batch.append((figs[k], req_a, req_b, _dur(pa), _dur(pb), tuple(shared), k))
    resampled = _paired_batch(batch) if batch else {}
    key_of = {p.benchmark: k for k, p in ra.points.items()}
    speedups = []   # speedup change = throughput change / its baseline's, on the same draws
    for k in keys:
        mine, base = resampled.get(k), resampled.get(key_of.get(ra.points[k].baseline or ""))
        if mine is not None and base is not None and mine[2] == base[2]:
            speedups.append((k, mine, base))
    for i in range(0, len(speedups), CHUNK):
        part = speedups[i:i + CHUNK]
        lo, hi = stats.resampled_percentiles(np.stack([m[1] / b[1] for _, m, b in part]))
        for j, (k, mine, base) in enumerate(part):
            figs[k]["speedup"] = _change(mine[0] / base[0], lo[j], hi[j],
                                         f"paired, {len(mine[2])} prompts")
    out = []
    for k in keys:
        pa, pb = ra.points[k], rb.points[k]
        for name, (_, metric) in FIGURES.items():
            if name not in figs[k]:
                got = _independent(pa, pb, metric)
                if got is not None:
                    figs[k][name] = got
        out.append({"point": pa.label, "a": pa.benchmark, "b": pb.benchmark,
                    "figures": figs[k], "regressed": _flag(figs[k], threshold, gated)})
    return out


def compare_runs(paths: list, threshold: float = DEFAULT_THRESHOLD,
                 figures: tuple = tuple(FIGURES)) -> dict:
    """Compare every later run against the first; CompareError for bad input.
    ``figures``: the ones that can flag a regression (all are shown)."""
    unknown = [f for f in figures if f not in FIGURES]
    if unknown or not figures:
        raise CompareError(f"--figures: {', '.join(unknown) or 'none given'} unknown; choose "
                           f"from {', '.join(FIGURES)}")
    if not 0 <= threshold < 1:
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
    out = {"threshold": threshold, "figures": list(figures),
           "runs": [str(r.path) for r in runs],
           "provenance": provenance_diff(runs), "comparisons": [], "warnings": []}
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
        rows = compare_pair(a, b, done, threshold, figures)
        out["comparisons"].append({"a": str(a.path), "b": str(b.path), "points": rows,
                                   "missing": missing,
                                   "regressed": [r["point"] for r in rows if r["regressed"]]})
    return out


# --------------------------------------------------------------------------- text

def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:+.1f}%"


def render(result: dict) -> str:
    """The provenance differences, then one table per comparison."""
    from tabulate import tabulate

    lines = []
    if result["provenance"]:
        lines.append("Provenance differs (the usual cause of a change):")
        for d in result["provenance"]:
            lines.append(f"  {d['field']}: " + " -> ".join(str(v) for v in d["values"]))
    else:
        lines.append("Provenance: no difference recorded")
    for c in result["comparisons"]:
        lines.append(f"\n{c['a']} -> {c['b']}  (regression: interval excludes 0 and worse "
                     f"than {100 * result['threshold']:.0f}%)")
        rows = []
        for p in c["points"]:
            cells = [p["point"]]
            for name in FIGURES:
                f = p["figures"].get(name)
                cells.append("-" if f is None else f"{_pct(f['change'])} "
                             f"[{_pct(f['lo'])}, {_pct(f['hi'])}]"
                             + (" REGRESSION" if f.get("regression") else ""))
            rows.append(cells)
        lines.append(tabulate(rows, headers=["point", "output tok/s", "speedup", "TTFT (mean)",
                                             "ITL (mean)"], tablefmt="simple"))
        for m in c["missing"]:
            lines.append(f"missing: {m}")
        lines.append(f"regressed: {', '.join(c['regressed'])}" if c["regressed"]
                     else "no regression beyond noise")
    for w in result["warnings"]:
        lines.append(f"warning: {w}")
    return "\n".join(lines)
