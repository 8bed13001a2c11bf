"""How the 95% interval narrows with requests, measured on the simulator.

    .venv/bin/python benchmarks/stats_precision.py [--requests 1024] [--concurrency 1 16]
                                                    [--output-len 64]

Starts two simulated SGLang servers (Llama-3.1-8B shapes, TP 1): a baseline and
EAGLE-3 (3 steps, topk 1, 4 draft tokens), sends both the same sequence of
``--requests`` prompts from specc's shipped set (round-robin over its 8
categories, temperature 0, EOS ignored) through specc's load generator, and
prints, for the first 16, 64, 256, ... requests of that sequence, the relative
half-width of the throughput interval (baseline and speculative) and of the
paired speedup interval. The first n requests of the sequence are what an
n-request point sends; at concurrency c the prefix's duration runs from its
first request's start to its last request's end.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

COMMON = ["--model-path", "meta-llama/Llama-3.1-8B-Instruct", "--tp-size", "1",
          "--context-length", "2048", "--sim-time-scale", "0.002"]
SPEC = ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path",
        "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "--speculative-num-steps", "3",
        "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(args: list[str]) -> tuple[subprocess.Popen, str]:
    port = _port()
    proc = subprocess.Popen([sys.executable, "-m", "specc.sim", "--port", str(port), *args],
                            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit(f"simulator on {url} not ready")


def _lines(res, prompts):
    from specc.requestlog import lines_for

    return lines_for(res.records, prompts, repeat=0, attempt=0.0)


def _prefix(lines, n):
    part = [x for x in lines if x["i"] < n]
    dur = max(x["start"] + x["e2e_latency"] for x in part) - min(x["start"] for x in part)
    return part, dur


async def _measure(url_b, url_s, n, conc, out_len):
    from specc.prompts.datasets import load_prompts
    from specc.run.loadgen import run_load

    prompts = load_prompts("specc", num=n, input_len=1, output_len=out_len)
    ids = [("rid", f"p{i:05d}/{p.category}/{p.id}") for i, p in enumerate(prompts)]
    kw = dict(api="generate", model="m", concurrency=conc, warmup=1, request_ids=ids)
    base, spec = await asyncio.gather(run_load(url_b, prompts, **kw),
                                      run_load(url_s, prompts, **kw))
    return _lines(base, prompts), _lines(spec, prompts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=1024)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 16])
    ap.add_argument("--output-len", type=int, default=64)
    args = ap.parse_args()
    from specc import stats

    os.environ.pop("SPECC_SIM_FAULT", None)
    procs = []
    try:
        pb, url_b = _start(COMMON)
        procs.append(pb)
        ps, url_s = _start(COMMON + SPEC)
        procs.append(ps)
        sizes = [n for n in (16, 64, 256, 1024, 4096) if n <= args.requests]
        print("| concurrency | requests | baseline tok/s | +- | EAGLE-3 tok/s | +- | "
              "speedup [95% interval] | +- |")
        print("|---|---|---|---|---|---|---|---|")
        for conc in args.concurrency:
            t0 = time.time()
            base, spec = asyncio.run(_measure(url_b, url_s, args.requests, conc,
                                              args.output_len))
            for n in sizes:
                b, bd = _prefix(base, n)
                s, sd = _prefix(spec, n)
                fb = stats.point_figures(b, bd)
                fs = stats.point_figures(s, sd, base=b, base_duration=bd)
                tb, ts, sp = fb["output_throughput"], fs["output_throughput"], fs["speedup"]
                print(f"| {conc} | {n} | {tb.value:.1f} | {tb.half_width * 100:.2f}% | "
                      f"{ts.value:.1f} | {ts.half_width * 100:.2f}% | {stats.fmt_speedup(sp)} "
                      f"| {sp.half_width * 100:.2f}% |", flush=True)
            print(f"(concurrency {conc}: {time.time() - t0:.0f} s for {args.requests} requests "
                  f"per server)", file=sys.stderr)
    finally:
        for p in procs:
            p.kill()
            p.wait(5)


if __name__ == "__main__":
    main()
