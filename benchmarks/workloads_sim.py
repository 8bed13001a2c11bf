"""What the workloads of docs/workloads.md do on the simulator (Llama-3.1-8B-shaped, TP 1,
EAGLE-3 3 steps): TTFT of a group's first request and of the rest with a shared system
prompt; TTFT and input tokens per turn of 2-turn conversations, prefix cache on and off;
accept length by prompt length. Prints medians.

    .venv/bin/python benchmarks/workloads_sim.py [--prefix 4000] [--groups 4] [--requests 32]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from specc.prompts import Prompt, by_turn  # noqa: E402
from specc.prompts.datasets import load_prompts  # noqa: E402
from specc.run.loadgen import run_load  # noqa: E402
from specc.stats import INPUT_BUCKETS, bucket_name  # noqa: E402

SPEC = ["--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3",
        "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"]


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Sim:
    def __init__(self, *extra: str):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("SPECC_SIM_")}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "specc.sim", "--model-path", "sim/llama", "--port",
             str(self.port), "--sim-time-scale", "0.001", "--context-length", "32768", *SPEC,
             *extra], cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise RuntimeError("sim not ready")

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def med_ms(xs) -> float:
    return statistics.median(xs) * 1e3 if xs else float("nan")


def shared_prefix(args) -> None:
    prompts = load_prompts("random", num=args.requests, input_len=64, output_len=16, seed=1,
                           shared_prefix_len=args.prefix, shared_prefix_groups=args.groups)
    print(f"## shared prefix: {args.requests} requests, {args.groups} groups, system prompt "
          f"{args.prefix} tokens, concurrency 1")
    for label, extra in (("prefix cache", ()), ("--disable-radix-cache", ("--disable-radix-cache",))):
        sim = Sim(*extra)
        try:
            res = asyncio.run(run_load(sim.url, prompts, api="generate", model="m",
                                       concurrency=1, warmup=0))
        finally:
            sim.close()
        first = [r.ttft for r in res.records if r.index < args.groups]
        rest = [r.ttft for r in res.records if r.index >= args.groups]
        print(f"{label:24s} TTFT median: first of a group {med_ms(first):7.1f} ms, "
              f"the rest {med_ms(rest):7.1f} ms")


def multi_turn(args) -> None:
    words = "the of and to in is was for on that with as by at from".split()
    convs = [Prompt(" ".join(words[(i + j) % len(words)] for j in range(1000)), 1000, 128,
                    id=f"c{i}", later=("And now say it again, shorter.",))
             for i in range(args.requests // 2)]
    prompts = by_turn(convs)
    print(f"## multi-turn: {len(convs)} conversations of 2 turns, 1000-token first turn, "
          f"128-token answers, concurrency 4")
    for label, extra in (("prefix cache", ()), ("--disable-radix-cache", ("--disable-radix-cache",))):
        sim = Sim(*extra)
        try:
            res = asyncio.run(run_load(sim.url, prompts, api="chat", model="m", concurrency=4,
                                       warmup=0))
        finally:
            sim.close()
        for turn in (1, 2):
            rs = [r for r in res.records if prompts[r.index].turn == turn and r.ok]
            print(f"{label:24s} turn {turn}: input tokens {statistics.median(r.input_tokens for r in rs):6.0f}, "
                  f"TTFT median {med_ms([r.ttft for r in rs]):6.1f} ms")


def by_length(args) -> None:
    prompts = load_prompts("random", num=args.requests, input_len=16000, range_ratio=0.05,
                           output_len=128, seed=2)
    prompts = [replace(p, output_tokens=128) for p in prompts]   # range_ratio: inputs only
    sim = Sim("--disable-radix-cache")
    try:
        res = asyncio.run(run_load(sim.url, prompts, api="generate", model="m", concurrency=4,
                                   warmup=0))
    finally:
        sim.close()
    import numpy as np

    print(f"## accept length by prompt length: {args.requests} prompts of 800-16000 tokens, "
          "128 output tokens")
    rows: dict[int, list] = {}
    for r in res.records:
        if r.ok and r.verify_ct:
            k = int(np.searchsorted(INPUT_BUCKETS, r.input_tokens, side="right")) - 1
            rows.setdefault(k, []).append(r)
    for k in sorted(rows):
        rs = rows[k]
        acc = sum(r.output_tokens for r in rs) / sum(r.verify_ct for r in rs)
        print(f"{bucket_name(k):>8s}: {len(rs):3d} requests, accept length {acc:.2f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prefix", type=int, default=4000)
    ap.add_argument("--groups", type=int, default=4)
    ap.add_argument("--requests", type=int, default=32)
    args = ap.parse_args()
    shared_prefix(args)
    multi_turn(args)
    by_length(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
