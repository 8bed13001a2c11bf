"""The bracketed SLO capacity against a dense grid of concurrencies, on the simulator.

    .venv/bin/python benchmarks/slo_capacity.py [--limit 80] [--acceptance 0.7] [--step 0.04]
                                               [--keep DIR]

Runs the `llama3_tune` experiment (Llama-3.1-8B at TP 1, 12 EAGLE-3 candidates, ladder
1, 8, 32, 128) through the real CLI with `search=tune` and `search.slo.p99_ttft_ms=LIMIT`:
the search brackets the capacity on the baseline and on the settings that could raise
the best speculative one, while each server is up. Then a `search=grid` run of the
baseline and the setting tune reported highest, at every concurrency of a dense grid
(steps of `--step`, at least 1, over the ladder gap holding either capacity) with the
same requests per point as a bracket probe (the p99's minimum: 563). The grid's capacity
is the highest concurrency of the unbroken run from the gap's bottom whose p99 TTFT
meets the limit (its value). The bar (issue 31): the bracketed capacity within 10% of
the grid's, for both servers.

The simulator runs in real time on this machine's CPU; when it falls behind its own
schedule a point is flagged (measured twice, then failed: `simulator fell behind its
schedule`). The bracket counts such a probe undecided; the grid's flagged points are
counted and shown, and the grid capacity is given with them and without them. The
grid's p99 by concurrency is printed too: on a busy machine it is not monotone, and the
bracket's verdicts (each at 95% within its probe) cannot see noise between probes.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

KEY = "p99_ttft_ms"


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def specc(args: list[str], run_dir: Path, cwd: Path) -> float:
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "specc", *args, "execute=true",
                           f"hydra.run.dir={run_dir}"], cwd=cwd, capture_output=True,
                          text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    wall = time.monotonic() - t0
    (cwd / f"{run_dir.name}.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode not in (0, 3):   # 3: some points failed (flagged): still read
        sys.exit(f"{run_dir.name} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    return wall


def dense(lo: int, hi: int, step: float) -> list[int]:
    out, c = [], float(lo)
    while c < hi:
        out.append(int(round(c)))
        c = max(c + 1, c * (1 + step))
    return sorted(set(out + [hi]))


def grid_capacity(rows: list[dict], server: str, limit: float, with_flagged: bool):
    """Highest concurrency of the unbroken run from the bottom meeting the limit, and the
    points flagged (the simulator behind its schedule) on the way."""
    pts = sorted((r["params"]["concurrency"], r) for r in rows if r["server"] == server)
    cap, flagged = None, []
    for c, r in pts:
        v = (r.get("metrics") or {}).get(KEY)
        if r["status"] != "ok":
            flagged.append(c)
            if not with_flagged or v is None:
                continue
        if v is None or v > limit:
            break
        cap = c
    return cap, flagged


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--limit", type=float, default=80.0, help="p99 TTFT limit, ms")
    ap.add_argument("--acceptance", type=float, default=0.7)
    ap.add_argument("--step", type=float, default=0.04, help="the dense grid's step")
    ap.add_argument("--keep", type=Path, default=None, help="run dirs go here (kept)")
    args = ap.parse_args()
    out = args.keep or Path(tempfile.mkdtemp(prefix="slo_capacity-"))
    out.mkdir(parents=True, exist_ok=True)
    port = free_port()
    common = ["+experiment=llama3_tune", "engine=sim", f"engine.sim.acceptance={args.acceptance}",
              f"engine.base_port={port}"]
    tune_dir = out / "tune"
    wall_tune = specc(common + ["search=tune", f"+search.slo.{KEY}={args.limit:g}"],
                      tune_dir, out)
    tune = json.loads((tune_dir / "tune.json").read_text())
    br = tune["slo"][KEY].get("bracket") or {}
    plan = json.loads((tune_dir / "plan.json").read_text())
    ladder = plan["search"]["concurrencies"]
    base_id = plan["search"]["baseline"]
    spec = br.get("speculative") or {}
    cands = {c["server"]: c for c in plan["search"]["candidates"]}
    who = {base_id: br.get("baseline") or {}}
    if spec.get("server"):
        who[spec["server"]] = spec
    caps = [r["capacity"] for r in who.values() if r.get("capacity")]
    if not caps:
        print(json.dumps(br, indent=1))
        sys.exit("no bracketed capacity to compare (see above)")
    lo = max([c for c in ladder if c <= min(caps)], default=1)
    hi = min([c for c in ladder if c > max(caps)], default=max(caps) * 2)
    conc = dense(lo, hi, args.step)
    setting = cands.get(spec.get("server"))
    ladder_text = ",".join(map(str, conc))
    sweep = (f"{{speculation:[{{num_steps:{setting['num_steps']},topk:{setting['topk']},"
             f"num_draft_tokens:{setting['num_draft_tokens']}}}],"
             f"benchmark.concurrency:[{ladder_text}]}}") if setting else \
        f"{{benchmark.concurrency:[{ladder_text}]}}"
    from specc.tune.bracket import min_requests

    grid_dir = out / "grid"
    wall_grid = specc(common + ["search=grid", f"sweep={sweep}",
                                f"benchmark.min_requests={min_requests(KEY)}"], grid_dir, out)
    rows = [json.loads(x) for x in (grid_dir / "results.jsonl").read_text().splitlines()]
    grid_ids = {r["server"] for r in rows}
    base_grid = next(s for s in grid_ids if "baseline" in s)
    spec_grid = next((s for s in grid_ids if s != base_grid), None)
    probes = sum(1 for _ in (tune_dir / "bracket.jsonl").open()) if \
        (tune_dir / "bracket.jsonl").exists() else 0
    flagged_probes = sum(json.loads(x)["status"] != "ok"
                         for x in (tune_dir / "bracket.jsonl").read_text().splitlines()) \
        if probes else 0
    print(f"\n== p99_ttft_ms <= {args.limit:g} ms, acceptance {args.acceptance:g} ==")
    print(f"tune: {tune['server_starts']} starts, {probes} bracket probes "
          f"({flagged_probes} flagged: the simulator behind its schedule), {wall_tune:.0f} s")
    print(f"dense grid: {len(conc)} concurrencies {conc[0]}..{conc[-1]} x 2 servers, "
          f"{wall_grid:.0f} s")
    print(f"bracket: {br.get('text')}")
    ok = True
    for role, sid, gid in (("baseline", base_id, base_grid),
                           ("speculative", spec.get("server"), spec_grid)):
        r = who.get(sid) if sid else None
        if not r or gid is None:
            continue
        g_ok, flagged = grid_capacity(rows, gid, args.limit, with_flagged=False)
        g_all, _ = grid_capacity(rows, gid, args.limit, with_flagged=True)
        meeting = [r["params"]["concurrency"] for r in rows if r["server"] == gid
                   and r["status"] == "ok" and (r.get("metrics") or {}).get(KEY) is not None
                   and r["metrics"][KEY] <= args.limit]
        cap = r.get("capacity")
        err = None if not (cap and g_ok) else abs(cap - g_ok) / g_ok
        label = "baseline" if role == "baseline" else (
            f"s{setting['num_steps']} k{setting['topk']} d{setting['num_draft_tokens']}")
        print(f"{label:<12} bracketed {cap} ({r.get('status')}, fails at {r.get('fails')}, "
              f"{r.get('probes')} probes; {KEY} at it {r.get('statistic')}) | dense grid "
              f"{g_ok} (ok points; {g_all} with the {len(flagged)} flagged "
              f"{flagged}; the highest meeting at all: {max(meeting, default=None)}) | "
              f"{'-' if err is None else f'{err:.1%}'} apart")
        ok &= err is not None and err <= 0.10
        # the grid itself, so its own noise shows: the loaded simulator's p99 is not
        # monotone in concurrency when the machine is busy
        print("  grid p99 TTFT by concurrency: " + ", ".join(
            f"{r['params']['concurrency']}: {(r.get('metrics') or {}).get(KEY, float('nan')):.0f}"
            + ("*" if r["status"] != "ok" else "")
            for r in sorted((r for r in rows if r["server"] == gid),
                            key=lambda r: r["params"]["concurrency"])) + "  (*: flagged)")
    print(f"\nrun dirs: {out}")
    print("meets the issue's bar (within 10%)" if ok else "MISSES the issue's bar (see above)")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
