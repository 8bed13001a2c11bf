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
from dataclasses import dataclass, field
from pathlib import Path

from specc import stats
from specc.results import read_rows
from specc.run import requests as reqlog

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
    s = {k: v for k, v in server_params.items() if k not in NOT_SERVER}
    b = {k: v for k, v in bench_params.items() if k not in NOT_MEASURED}
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
    manifest = {}
    for name in ("manifest.json", "report.json"):
        try:
            obj = json.loads((d / name).read_text())
        except (OSError, ValueError):
            continue
        manifest = obj.get("manifest", obj) if name == "report.json" else obj
        if isinstance(manifest, dict) and manifest:
            break
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
        ivs = row.extra.get("intervals") or {}
        points[key] = Point(key=key, label=label, benchmark=b["id"], status=row.status,
                            metrics=row.metrics, intervals=ivs if isinstance(ivs, dict) else {},
                            baseline=b.get("baseline"),
                            basis=row.extra.get("basis") if isinstance(row.extra.get("basis"),
                                                                        dict) else {})
    return Run(d, manifest if isinstance(manifest, dict) else {}, points, planned, warnings)


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


def _columns(reqs: list[dict]):
    ok = [r for r in reqs if r.get("ok") and isinstance(r.get("e2e_latency"), (int, float))
          and isinstance(r.get("ttft"), (int, float))]
    return {(r.get("repeat", 0), r.get("i"), r.get("id")): r for r in ok}


def _paired(a: dict, b: dict, dur_a: float, dur_b: float) -> dict:
    """Relative changes b/a - 1 with paired-bootstrap intervals over shared prompts."""
    shared = [k for k in a if k in b]
    if len(shared) < 2 or dur_a <= 0 or dur_b <= 0:
        return {}
    out = {}
    ta = [a[k]["output_tokens"] for k in shared]
    la = [a[k]["e2e_latency"] for k in shared]
    tb = [b[k]["output_tokens"] for k in shared]
    lb = [b[k]["e2e_latency"] for k in shared]
    scale = (sum(r["e2e_latency"] for r in b.values()) / dur_b) / (
        sum(r["e2e_latency"] for r in a.values()) / dur_a)
    iv = stats.paired_ratio_interval(tb, lb, ta, la, scale=scale)
    out["output_throughput"] = iv
    for name, col in (("ttft", lambda r: r["ttft"]),
                      ("itl", lambda r: (r["e2e_latency"] - r["ttft"]) / (r["output_tokens"] - 1)
                       if r["output_tokens"] > 1 else None)):
        pairs = [(col(a[k]), col(b[k])) for k in shared]
        pairs = [(x, y) for x, y in pairs if x is not None and y is not None]
        if len(pairs) >= 2 and sum(x for x, _ in pairs) > 0:
            out[name] = stats.paired_ratio_interval([y for _, y in pairs], [1.0] * len(pairs),
                                                    [x for x, _ in pairs], [1.0] * len(pairs))
    return {k: {"change": iv.value - 1, "lo": None if iv.lo is None else iv.lo - 1,
                "hi": None if iv.hi is None else iv.hi - 1, "basis": f"paired, {iv.n} prompts"}
            for k, iv in out.items()}


def _independent(pa: Point, pb: Point, name: str, metric: str) -> dict | None:
    """b/a - 1 from each run's figure and interval, taken as independent (delta method)."""
    va, vb = pa.metrics.get(metric), pb.metrics.get(metric)
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
               for v in (va, vb)) or va <= 0:
        return None
    change = vb / va - 1
    sa, sb = _se(pa.intervals.get(metric)), _se(pb.intervals.get(metric))
    if sa is None or sb is None or vb <= 0:
        return {"change": change, "lo": None, "hi": None, "basis": "no interval"}
    # log ratio: var = (sa/va)^2 + (sb/vb)^2; back to a relative change
    s = math.hypot(sa / va, sb / vb)
    return {"change": change, "lo": math.exp(math.log(vb / va) - 1.96 * s) - 1,
            "hi": math.exp(math.log(vb / va) + 1.96 * s) - 1, "basis": "independent"}


def _speedup_iv(run: Run, p: Point):
    """A point's speedup interval from its and its baseline's requests (None without)."""
    if not p.baseline:
        return None
    base = next((q for q in run.points.values() if q.benchmark == p.baseline), None)
    if base is None:
        return None
    mine, theirs = reqlog.read(run.path, p.benchmark), reqlog.read(run.path, base.benchmark)
    if not mine or not theirs:
        return None
    figs = stats.point_figures(mine, _dur(p), base=theirs, base_duration=_dur(base))
    iv = figs.get("speedup")
    return None if iv is None or iv.lo is None else [iv.lo, iv.hi]


def _dur(p: Point) -> float:
    reps = p.basis.get("repeats") or []
    d = sum(x.get("duration") or 0.0 for x in reps if isinstance(x, dict))
    v = p.metrics.get("duration")
    return d or (float(v) if isinstance(v, (int, float)) else 0.0)


def compare_points(ra: Run, rb: Run, pa: Point, pb: Point, threshold: float) -> dict:
    """One matched point: each figure's change, interval, and whether it regressed."""
    figs: dict = {}
    req_a, req_b = reqlog.read(ra.path, pa.benchmark), reqlog.read(rb.path, pb.benchmark)
    if req_a and req_b:
        figs.update(_paired(_columns(req_a), _columns(req_b), _dur(pa), _dur(pb)))
    for name, (_, metric) in FIGURES.items():
        if name in figs:
            continue
        if name == "speedup" and pa.metrics.get("speedup") is not None:
            for run, p in ((ra, pa), (rb, pb)):
                if "speedup" not in p.intervals:
                    iv = _speedup_iv(run, p)
                    if iv:
                        p.intervals["speedup"] = iv
        got = _independent(pa, pb, name, metric)
        if got is not None:
            figs[name] = got
    regressed = []
    for name, f in figs.items():
        higher_better = FIGURES[name][0]
        worse = -f["change"] if higher_better else f["change"]
        excludes_zero = f["lo"] is not None and (f["lo"] > 0 or f["hi"] < 0)
        f["regression"] = bool(excludes_zero and worse > threshold)
        if f["regression"]:
            regressed.append(name)
    return {"point": pa.label, "a": pa.benchmark, "b": pb.benchmark, "figures": figs,
            "regressed": regressed}


def compare_runs(paths: list, threshold: float = DEFAULT_THRESHOLD) -> dict:
    """Compare every later run against the first; CompareError for bad input."""
    if len(paths) < 2:
        raise CompareError("compare needs two run dirs or more: specc compare RUN_A RUN_B")
    resolved = [Path(p).resolve() for p in paths]
    for i, p in enumerate(resolved):
        if p in resolved[:i]:
            raise CompareError(f"{paths[i]}: given twice (a run compared with itself shows "
                               "nothing); give two different run dirs")
    runs = [load_run(p) for p in paths]
    a = runs[0]
    out = {"threshold": threshold, "runs": [str(r.path) for r in runs],
           "provenance": provenance_diff(runs), "comparisons": [], "warnings": []}
    for r in runs:
        out["warnings"] += [f"{r.path}: {w}" for w in r.warnings]
    for b in runs[1:]:
        shared = sorted(set(a.planned) & set(b.planned), key=lambda k: a.planned[k])
        if not shared:
            raise CompareError(f"{a.path} and {b.path} share no point (no model pair, "
                               "speculative setting and client parameters in common); "
                               "compare runs of the same sweep")
        missing = [a.planned[k] + (f" (not in {a.path.name})" if k not in a.points else
                                   f" (not in {b.path.name})")
                   for k in shared
                   if k not in a.points or k not in b.points
                   or a.points[k].status != "ok" or b.points[k].status != "ok"]
        rows = [compare_points(a, b, a.points[k], b.points[k], threshold) for k in shared
                if k in a.points and k in b.points and a.points[k].status == "ok"
                and b.points[k].status == "ok"]
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
