"""How many concurrent streams one ``specc.sim`` process sustains on this machine.

For each concurrency level, start ``python -m specc.sim`` (Kimi-K2.5 facts, TP 8,
no speculation by default, so every decode step sends one chunk per stream:
the heaviest chunk rate) with ``SPECC_SIM_TRUTH``, drive that many streaming
``/generate`` requests with a minimal raw-asyncio HTTP client (so the client
spends as little of the shared CPU as possible), and read the sim's ground
truth: for every chunk, ``t`` (when the sim handed it to the transport) versus
``due`` (when the performance model says the step finished).  Drift = t - due.

    .venv/bin/python benchmarks/sim_capacity.py [--levels 16,32,64,128,256] [--seconds 4]
        [--spec] [--budget-ms 1.0]

Prints median / p99 / max drift (ms) and emitted tokens/s per level, and the
highest level whose p99 drift is within the budget.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KIMI = {"architectures": ["DeepseekV3ForCausalLM"], "num_hidden_layers": 61, "hidden_size": 7168,
        "n_routed_experts": 384, "num_experts_per_tok": 8, "weight_gb": 554.0,
        "active_params_b": 32.0, "total_params_b": 1000.0, "max_position_embeddings": 262144}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def one_stream(port: int, max_new: int, i: int) -> int:
    body = json.dumps({"text": f"prompt number {i}", "stream": True,
                       "sampling_params": {"max_new_tokens": max_new, "ignore_eos": True}}).encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Connection: close\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    await writer.drain()
    n = 0
    while True:
        data = await reader.read(1 << 16)
        if not data:
            break
        n += len(data)
    writer.close()
    return n


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


async def drive(port: int, c: int, max_new: int) -> None:
    await asyncio.gather(*(one_stream(port, max_new, i) for i in range(c)))


def run_level(c: int, seconds: float, spec: bool) -> dict:
    port = free_port()
    with tempfile.TemporaryDirectory() as td:
        truth = Path(td) / "truth.jsonl"
        argv = [sys.executable, "-m", "specc.sim", "--model-path", "sim/kimi-k2.5", "--tp-size", "8",
                "--port", str(port), "--sim-time-scale", "0.001",
                "--max-running-requests", str(max(c, 1)), "--sim-target-facts", json.dumps(KIMI)]
        if spec:
            argv += ["--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3",
                     "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4",
                     "--sim-draft-facts", json.dumps({"max_position_embeddings": 262144,
                                                      "weight_gb": 6, "active_params_b": 3,
                                                      "num_hidden_layers": 1})]
        env = dict(os.environ, SPECC_SIM_TRUTH=str(truth))
        env.pop("SPECC_SIM_FAULT", None)
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                if truth.exists() and '"ready"' in truth.read_text():
                    break
                time.sleep(0.05)
            else:
                raise RuntimeError("sim did not become ready")
            sys.path.insert(0, str(ROOT))
            from specc.perf import model as perf
            step = perf.decode_step_s(perf.model_cost(KIMI, tp=8), c)
            max_new = max(20, int(seconds / step))
            asyncio.run(drive(port, c, max_new))
            time.sleep(0.3)   # let the truth writer flush
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(5)
        events = [json.loads(l) for l in truth.read_text().splitlines() if l.strip()]
    toks = [e for e in events if e["event"] == "token"]
    decode = [e for e in toks if not e["first"]]
    drift_ms = [(e["t"] - e["due"]) * 1e3 for e in decode]
    t0 = min(e["t"] for e in toks)
    t1 = max(e["t"] for e in toks)
    ntok = sum(e["n"] for e in toks)
    return {"concurrency": c, "chunks": len(toks), "tokens": ntok,
            "tokens_per_s": ntok / (t1 - t0) if t1 > t0 else 0.0,
            "median_ms": statistics.median(drift_ms), "p99_ms": pct(drift_ms, 0.99),
            "max_ms": max(drift_ms), "model_step_ms": step * 1e3}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--levels", default="16,32,64,128,256")
    ap.add_argument("--seconds", type=float, default=4.0, help="generation time per level")
    ap.add_argument("--spec", action="store_true", help="EAGLE3 3/1/4 instead of no speculation")
    ap.add_argument("--budget-ms", type=float, default=1.0)
    ap.add_argument("--json", help="also write the rows to this file")
    a = ap.parse_args()
    rows = []
    print(f"{'conc':>5} {'step ms':>8} {'tok/s':>9} {'chunks':>7} {'median ms':>10} "
          f"{'p99 ms':>8} {'max ms':>8}")
    for c in (int(x) for x in a.levels.split(",")):
        r = run_level(c, a.seconds, a.spec)
        rows.append(r)
        print(f"{c:>5} {r['model_step_ms']:>8.2f} {r['tokens_per_s']:>9.0f} {r['chunks']:>7} "
              f"{r['median_ms']:>10.3f} {r['p99_ms']:>8.3f} {r['max_ms']:>8.2f}", flush=True)
    ok = [r["concurrency"] for r in rows if r["p99_ms"] <= a.budget_ms]
    best = max(ok) if ok else None
    print(f"highest concurrency with p99 drift <= {a.budget_ms} ms: {best}")
    med = [r["concurrency"] for r in rows if r["median_ms"] <= a.budget_ms]
    print(f"highest concurrency with median drift <= {a.budget_ms} ms: {max(med) if med else None}")
    print(f"load average during the run: {os.getloadavg()}  (other processes on the same cores "
          "preempt the sim; p99 drift mostly measures that)")
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
