"""PNG plots (matplotlib, imported lazily: only reports need it)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from specc.report.model import PointRow, Report, _conc_text, _num, _sort_num, _workload_text

def make_plots(report: Report, plot_dir: Path) -> dict[str, Path]:
    """Write the PNG plots; never raises. Fills report.plots / report.plot_notes."""
    try:
        # lazy: only reports need matplotlib; the Agg canvas needs no display and no pyplot state
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except Exception as e:  # pragma: no cover - depends on the environment
        report.plot_notes.append(f"plots skipped: matplotlib unavailable ({type(e).__name__}: {e})")
        return report.plots
    for name, fn in (("throughput_vs_concurrency", _plot_throughput),
                     ("speedup_heatmap", _plot_heatmap),
                     ("speedup_by_category", _plot_categories),
                     ("acceptance_by_position", _plot_positions)):
        try:
            fig = fn(report, Figure)
            if fig is None:
                continue
            FigureCanvasAgg(fig)
            plot_dir.mkdir(parents=True, exist_ok=True)
            path = plot_dir / f"{name}.png"
            fig.savefig(path, dpi=110)
            report.plots[name] = path
        except Exception as e:
            report.plot_notes.append(f"plot {name} failed: {type(e).__name__}: {e}")
    return report.plots


def _plot_throughput(report: Report, Figure):
    ok = [r for r in report.rows if r.status == "ok" and r.output_tps is not None
          and (_num(r.concurrency) or 0) > 0]
    if not ok:
        report.plot_notes.append("throughput_vs_concurrency: no successful points to plot")
        return None
    multi_workload = len({r.workload for r in ok}) > 1
    multi_job = len({r.job for r in ok}) > 1
    lines: dict[tuple, list[PointRow]] = {}
    for r in ok:
        lines.setdefault((r.job or "", r.workload, not r.is_baseline, r.label), []).append(r)
    # fixed margins: constrained layout costs a second draw pass (~0.3 s a figure)
    fig = Figure(figsize=(8, 5))
    fig.subplots_adjust(left=0.1, right=0.97, bottom=0.11, top=0.92)
    ax = fig.add_subplot(1, 1, 1)
    for key in sorted(lines, key=lambda k: (k[0], str(k[1]), k[2], k[3])):
        pts = sorted(lines[key], key=lambda r: _num(r.concurrency) or 0.0)   # all > 0 (ok)
        name = key[3]
        if multi_job and key[0]:
            name = f"{key[0]}: {name}"
        if multi_workload:
            name = f"{name} ({_workload_text(key[1])})"
        style = dict(color="black", linestyle="--", linewidth=2) if not key[2] else {}
        # error bars: each point's 95% interval (report/intervals.py), none when unknown
        ivs = [r.intervals.get("output_throughput") for r in pts]
        yerr = [[max(0.0, r.output_tps - iv.lo) if iv is not None and iv.lo is not None else 0.0
                 for r, iv in zip(pts, ivs)],
                [max(0.0, iv.hi - r.output_tps) if iv is not None and iv.hi is not None else 0.0
                 for r, iv in zip(pts, ivs)]]
        ax.errorbar([_num(r.concurrency) for r in pts], [r.output_tps for r in pts], yerr=yerr,
                    marker="o", label=name, capsize=3, **style)
    ax.set_xscale("log", base=2)
    concs = sorted({_num(r.concurrency) or 0.0 for r in ok})   # all > 0 (ok)
    from matplotlib.ticker import NullLocator
    ax.set_xticks(concs)
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticklabels([_conc_text(c) for c in concs])
    ax.set_xlabel("concurrency (log2)")
    ax.set_ylabel("output tokens/s")
    ax.set_title(f"{report.experiment}: output throughput vs concurrency")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small", loc="best")
    return fig


def _plot_heatmap(report: Report, Figure):
    from matplotlib.colors import TwoSlopeNorm

    cells: dict[tuple, dict[tuple, tuple[float, Any, Any]]] = {}
    workloads: dict[tuple, tuple] = {}
    for r in report.rows:
        sp = r.speedup
        n_steps, topk = r.server_params.num_steps, r.server_params.topk
        if r.is_baseline or r.status != "ok" or sp is None or n_steps is None or topk is None:
            continue
        key = (str(r.workload), _sort_num(r.concurrency))
        workloads[key] = (r.workload, r.concurrency)
        panel = cells.setdefault(key, {})
        cur = panel.get((n_steps, topk))
        if cur is None or sp > cur[0]:
            panel[(n_steps, topk)] = (sp, r.server_params.num_draft_tokens, r.speedup_iv)
    if not cells:
        report.plot_notes.append("speedup_heatmap: no speculative points with a speedup")
        return None
    keys = sorted(cells)
    multi_workload = len({k[0] for k in keys}) > 1
    all_sp = [v[0] for p in cells.values() for v in p.values()]
    lo, hi = min(all_sp + [0.99]), max(all_sp + [1.01])
    norm = TwoSlopeNorm(vmin=min(lo, 0.999), vcenter=1.0, vmax=max(hi, 1.001))
    n = len(keys)
    width = max(4.5, 3.4 * n + 1.2)
    fig = Figure(figsize=(width, 3.8))   # fixed margins, no layout engine: one draw pass
    fig.subplots_adjust(left=0.75 / width, right=1 - 0.35 / width, bottom=0.15,
                        top=0.78 if multi_workload else 0.83, wspace=0.25)
    im = None
    for i, key in enumerate(keys):
        panel = cells[key]
        steps = sorted({s for s, _ in panel}, key=_sort_num)
        topks = sorted({k for _, k in panel}, key=_sort_num)
        data = [[panel.get((s, k), (math.nan, None))[0] for k in topks] for s in steps]
        ax = fig.add_subplot(1, n, i + 1)
        im = ax.imshow(data, cmap="RdYlGn", norm=norm, aspect="auto")
        ax.set_xticks(range(len(topks)))
        ax.set_xticklabels([str(k) for k in topks])
        ax.set_yticks(range(len(steps)))
        ax.set_yticklabels([str(s) for s in steps])
        ax.set_xlabel("topk")
        if i == 0:
            ax.set_ylabel("num_steps")
        workload, conc = workloads[key]
        title = f"concurrency {_conc_text(conc)}"
        if multi_workload:
            title += f"\n{_workload_text(workload)}"
        ax.set_title(title, fontsize="medium")
        for yi, s in enumerate(steps):
            for xi, k in enumerate(topks):
                v = panel.get((s, k))
                if v is not None:
                    txt = f"{v[0]:.2f}x" + (f"\nd{v[1]}" if v[1] is not None else "")
                    if v[2] is not None and v[2].lo is not None:   # the 95% interval
                        txt += f"\n[{v[2].lo:.2f}, {v[2].hi:.2f}]"
                    ax.text(xi, yi, txt, ha="center", va="center", fontsize="small")
    fig.suptitle(f"{report.experiment}: speedup vs baseline (best over num_draft_tokens)", fontsize="medium")
    if im is not None:
        fig.colorbar(im, ax=fig.axes, shrink=0.8, label="speedup")
    return fig


def _plot_categories(report: Report, Figure):
    """Per category, the best speculative setting's paired speedup with its 95% interval,
    one panel per concurrency (workload)."""
    from specc.report.intervals import tied

    panels = []
    for g in report.groups():
        best, _ = tied(g)
        if best is None or not best.categories:
            continue
        cats = [(c, f["speedup"]) for c, f in best.categories.items() if f.get("speedup")]
        if cats and [c for c, _ in cats] != ["-"]:
            panels.append((g, best, cats))
    if not panels:
        report.plot_notes.append("speedup_by_category: no per-category speedups (prompt sets "
                                 "with categories and matched baselines give them)")
        return None
    n = len(panels)
    width = max(5.0, 3.6 * n + 1.0)
    fig = Figure(figsize=(width, 4.2))
    fig.subplots_adjust(left=0.8 / width, right=1 - 0.3 / width, bottom=0.3, top=0.85,
                        wspace=0.3)
    for i, (g, best, cats) in enumerate(panels):
        ax = fig.add_subplot(1, n, i + 1)
        xs = range(len(cats))
        vals = [iv.value for _, iv in cats]
        lo = [max(0.0, iv.value - iv.lo) if iv.lo is not None else 0.0 for _, iv in cats]
        hi = [max(0.0, iv.hi - iv.value) if iv.hi is not None else 0.0 for _, iv in cats]
        ax.bar(xs, vals, yerr=[lo, hi], capsize=3, color="tab:blue", alpha=0.8)
        ax.axhline(1.0, color="black", linewidth=1, linestyle="--")
        ax.set_xticks(list(xs))
        ax.set_xticklabels([c for c, _ in cats], rotation=45, ha="right", fontsize="small")
        if i == 0:
            ax.set_ylabel("speedup (95% interval)")
        ax.set_title(f"c={_conc_text(g.concurrency)}: {best.label}", fontsize="small")
        ax.grid(True, axis="y", alpha=0.3)
    fig.suptitle(f"{report.experiment}: speedup by prompt category (best setting)",
                 fontsize="medium")
    return fig


def _plot_positions(report: Report, Figure):
    """Acceptance rate per draft position (where the engine counts it: vLLM), one line per
    speculative point."""
    pts = [r for r in report.rows if r.status == "ok" and r.accept_per_position]
    if not pts:
        return None   # SGLang and the simulator count acceptance per request, not position
    fig = Figure(figsize=(7, 4.5))
    fig.subplots_adjust(left=0.11, right=0.97, bottom=0.12, top=0.9)
    ax = fig.add_subplot(1, 1, 1)
    for r in pts:
        ys = r.accept_per_position or []   # not empty (pts)
        ax.plot(range(1, len(ys) + 1), ys, marker="o",
                label=f"{r.label} @ c={_conc_text(r.concurrency)}")
    ax.set_xlabel("draft position")
    ax.set_ylabel("acceptance rate")
    ax.set_ylim(0, 1.02)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="x-small", loc="best")
    ax.set_title(f"{report.experiment}: acceptance by draft position", fontsize="medium")
    return fig
