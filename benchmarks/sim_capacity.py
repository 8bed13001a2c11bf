"""How many concurrent streams one ``specc.sim`` process sustains on this machine.

For each concurrency level, start ``python -m specc.sim`` (Kimi-K2.5 facts, TP 8 by
default; ``--model llama3-8b``: Llama-3.1-8B at TP 1 on an H200, the ``llama3_tune``
grid's target; no speculation by default, so every decode step sends one chunk per
stream: the heaviest chunk rate) with ``SPECC_SIM_TRUTH``, drive that many streaming
``/generate`` requests with a minimal raw-asyncio HTTP client (so the client
spends as little of the shared CPU as possible), and read the sim's ground
truth: for every chunk, ``t`` (when the sim handed it to the transport) versus
``due`` (when the performance model says the step finished).  Drift = t - due.
And the simulator's own cost: its process's CPU seconds (user + system, from
/proc) over the level divided by the decode steps it ran (its truth log's ``step``
events), against the modelled step time: the share of one core it needs to keep
its schedule (it must stay well under 1 on a shared 2-core machine).

    .venv/bin/python benchmarks/sim_capacity.py [--levels 16,32,64,128,256] [--seconds 4]
        [--model kimi|llama3-8b] [--api generate|chat] [--spec] [--budget-ms 1.0]

Prints median / p99 / max drift (ms), emitted tokens/s, CPU ms per step and its share
of the step per level, and the highest level whose p99 drift is within the budget.
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
#: conf/model_pair/llama3_8b_eagle3.yaml's facts (target, draft).
LLAMA = {"architectures": ["LlamaForCausalLM"], "max_position_embeddings": 131072,
         "vocab_size": 128256, "hidden_size": 4096, "num_attention_heads": 32,
         "num_key_value_heads": 8, "num_hidden_layers": 32, "weight_gb": 16.1,
         "active_params_b": 8}
LLAMA_DRAFT = {"architectures": ["LlamaForCausalLMEagle3"], "max_position_embeddings": 2048,
               "vocab_size": 128256, "draft_vocab_size": 32000, "hidden_size": 4096,
               "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 1,
               "weight_gb": 0.85, "active_params_b": 0.4}
KIMI_DRAFT = {"max_position_embeddings": 262144, "weight_gb": 6, "active_params_b": 3,
              "num_hidden_layers": 1}
#: name -> (model path, TP, target facts, draft facts, EAGLE-3 setting, extra flags); the
#: Llama draft was trained on 2048 positions: served at that context, as llama3_tune does.
MODELS = {"kimi": ("sim/kimi-k2.5", 8, KIMI, KIMI_DRAFT, (3, 1, 4), []),
          "llama3-8b": ("sim/llama3.1-8b", 1, LLAMA, LLAMA_DRAFT, (3, 4, 8),
                        ["--context-length", "2048"])}


def cpu_s(pid: int) -> float:
    """The process's user + system CPU seconds (/proc/<pid>/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def one_stream(port: int, max_new: int, i: int, api: str = "generate") -> int:
    if api == "chat":   # as specc's load generator asks (per-chunk usage)
        path = b"/v1/chat/completions"
        body = json.dumps({"model": "m", "max_tokens": max_new, "stream": True,
                           "stream_options": {"include_usage": True,
                                              "continuous_usage_stats": True},
                           "ignore_eos": True, "messages": [
                               {"role": "user", "content": f"prompt number {i}"}]}).encode()
    else:
        path = b"/generate"
        body = json.dumps({"text": f"prompt number {i}", "stream": True, "sampling_params":
                           {"max_new_tokens": max_new, "ignore_eos": True}}).encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Connection: close\r\nContent-Length: %d\r\n\r\n" % (path, len(body)) + body)
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


async def drive(port: int, c: int, max_new: int, api: str = "generate") -> None:
    await asyncio.gather(*(one_stream(port, max_new, i, api) for i in range(c)))


def run_level(c: int, seconds: float, spec: bool, model: str = "kimi",
              api: str = "generate") -> dict:
    port = free_port()
    path, tp, facts, draft, (steps, topk, ndt), extra = MODELS[model]
    with tempfile.TemporaryDirectory() as td:
        truth = Path(td) / "truth.jsonl"
        argv = [sys.executable, "-m", "specc.sim", "--model-path", path, "--tp-size", str(tp),
                "--port", str(port), "--sim-time-scale", "0.001", "--sim-gpu", "H200",
                "--max-running-requests", str(max(c, 1)), "--sim-target-facts", json.dumps(facts),
                *extra]
        if spec:
            argv += ["--speculative-algorithm", "EAGLE3", "--speculative-num-steps", str(steps),
                     "--speculative-eagle-topk", str(topk), "--speculative-num-draft-tokens",
                     str(ndt), "--sim-draft-facts", json.dumps(draft)]
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
            cost = perf.model_cost(facts, tp=tp, gpu="H200")
            spec_cfg = perf.SpecConfig(steps, topk, ndt, 0.7) if spec else None
            step = perf.decode_step_s(cost, c, spec_cfg, perf.draft_cost(draft, tp=tp, gpu="H200")
                                      if spec else None)
            max_new = max(20, int(seconds / step))
            cpu0 = cpu_s(proc.pid)
            asyncio.run(drive(port, c, max_new, api))
            cpu1 = cpu_s(proc.pid)
            time.sleep(0.3)   # let the truth writer flush
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(5)
        events = [json.loads(ln) for ln in truth.read_text().splitlines() if ln.strip()]
    toks = [e for e in events if e["event"] == "token"]
    decode = [e for e in toks if not e["first"]]
    drift_ms = [(e["t"] - e["due"]) * 1e3 for e in decode]
    t0 = min(e["t"] for e in toks)
    t1 = max(e["t"] for e in toks)
    ntok = sum(e["n"] for e in toks)
    steps_run = [e for e in events if e["event"] == "step"]
    decode_steps = [e for e in steps_run if not e["prefill"]]
    cpu_per_step = (cpu1 - cpu0) / max(1, len(steps_run))
    mean_step = (statistics.mean(b["due"] - a["due"] for a, b in zip(decode_steps, decode_steps[1:]))
                 if len(decode_steps) > 1 else step)
    return {"concurrency": c, "chunks": len(toks), "tokens": ntok,
            "tokens_per_s": ntok / (t1 - t0) if t1 > t0 else 0.0,
            "median_ms": statistics.median(drift_ms), "p99_ms": pct(drift_ms, 0.99),
            "max_ms": max(drift_ms), "model_step_ms": step * 1e3, "steps": len(steps_run),
            "cpu_ms_per_step": cpu_per_step * 1e3, "cpu_share": cpu_per_step / mean_step,
            "late_max_ms": max((e["late_s"] for e in steps_run), default=0.0) * 1e3}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--levels", default="16,32,64,128,256")
    ap.add_argument("--seconds", type=float, default=4.0, help="generation time per level")
    ap.add_argument("--spec", action="store_true",
                    help="EAGLE3 (Kimi 3/1/4, Llama 3/4/8) instead of no speculation")
    ap.add_argument("--model", choices=sorted(MODELS), default="kimi")
    ap.add_argument("--api", choices=("generate", "chat"), default="generate",
                    help="chat: /v1/chat/completions as specc's load generator sends it")
    ap.add_argument("--budget-ms", type=float, default=1.0)
    ap.add_argument("--json", help="also write the rows to this file")
    a = ap.parse_args()
    rows = []
    print(f"{'conc':>5} {'step ms':>8} {'tok/s':>9} {'chunks':>7} {'median ms':>10} "
          f"{'p99 ms':>8} {'max ms':>8} {'steps':>6} {'cpu ms/step':>12} {'cpu share':>10}")
    for c in (int(x) for x in a.levels.split(",")):
        r = run_level(c, a.seconds, a.spec, a.model, a.api)
        rows.append(r)
        print(f"{c:>5} {r['model_step_ms']:>8.2f} {r['tokens_per_s']:>9.0f} {r['chunks']:>7} "
              f"{r['median_ms']:>10.3f} {r['p99_ms']:>8.3f} {r['max_ms']:>8.2f} "
              f"{r['steps']:>6} {r['cpu_ms_per_step']:>12.3f} {r['cpu_share']:>10.2f}",
              flush=True)
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
