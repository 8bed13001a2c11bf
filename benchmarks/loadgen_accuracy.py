"""How close are the load generator's TTFT/ITL to the simulator's ground truth?

Starts ``python -m specc.sim`` with ``SPECC_SIM_TRUTH=<tmpfile>`` on a free port,
waits for ``GET /health`` 200, runs ``specc.run.loadgen.run_load`` at each
concurrency, then matches every measured content chunk to the simulator's
token events of the same request (``rid`` = the OpenAI response ``id`` /
SGLang ``meta_info.id``) and prints, per concurrency, the median and p99 of

- TTFT error: |measured first-chunk time - truth first-token time|  (the send
  time is the client's own, so this is exactly the TTFT error);
- chunk gap error: |measured chunk gap - truth gap|, per gap (``*_chunk_gap_ms``);
- ITL error: per decode chunk, |measured per-token ITL - truth gap / truth tokens|
  (``*_itl_ms``, bench_serving's per-token ITL; with ``--api chat`` on the
  simulator, whose OpenAI chunks carry no per-chunk usage, this includes the
  error of spreading tokens evenly over a stream's chunks), and how many chunks'
  token counts differ from the truth's;
- chunk error: |measured chunk time - truth time| over all chunks, and its
  signed median (the bias: positive = measured later than emitted);

plus the client's and the simulator's CPU use (fraction of one core).

    .venv/bin/python benchmarks/loadgen_accuracy.py [--concurrency 1 16 64]
        [--num 256] [--output-len 96] [--api chat] [--transport fast httpx] [--speculative]

``--speculative`` serves EAGLE-3 (3 steps, topk 1): chunks of 1-4 tokens.

The truth ``t`` is stamped by the simulator when it hands the chunk to its HTTP
stack, so part of every error is server-side (serialization, uvicorn, kernel);
the figures are an upper bound on the client's own error.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx  # noqa: E402

from specc.prompts.datasets import load_prompts  # noqa: E402
from specc.run.loadgen import percentile, run_load  # noqa: E402

SPEC_ARGS = ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "sim/draft",
             "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
             "--speculative-num-draft-tokens", "4"]

LLAMA_FACTS = {"architectures": ["LlamaForCausalLM"], "max_position_embeddings": 131072,
               "vocab_size": 128256, "hidden_size": 4096, "num_attention_heads": 32,
               "num_key_value_heads": 8, "num_hidden_layers": 32, "weight_gb": 16,
               "active_params_b": 8}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_sim(port: int, truth: str, args, log) -> subprocess.Popen:
    env = dict(os.environ, SPECC_SIM_TRUTH=truth)
    env.pop("SPECC_SIM_FAULT", None)
    if args.server_cmd:
        cmd = [a.replace("{port}", str(port)) for a in args.server_cmd.split()]
    else:
        cmd = [sys.executable, "-m", "specc.sim", "--model-path", args.model,
               "--port", str(port), "--sim-time-scale", "0.001",
               "--sim-target-facts", json.dumps(LLAMA_FACTS),
               *(SPEC_ARGS if args.speculative else []), *args.sim_args]
    return subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)


def wait_healthy(proc, url: str, timeout: float = 120.0) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode}")
        try:
            if httpx.get(url + "/health", timeout=10).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise SystemExit("server did not become healthy")


def read_truth(path: str) -> dict[str, list[tuple[float, int]]]:
    out: dict[str, list[tuple[float, int]]] = {}
    with open(path) as f:
        for line in f:
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            if ev.get("event") == "token":
                out.setdefault(str(ev["rid"]), []).append((ev["t"], ev.get("n", 1)))
    return out


def proc_cpu(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except OSError:
        return float("nan")


def q(vals: list[float], p: float) -> float:
    return percentile(sorted(vals), p)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 16, 64])
    ap.add_argument("--num", type=int, default=None,
                    help="prompts per point (default max(32, 4 x concurrency), at most 256)")
    ap.add_argument("--output-len", type=int, default=96)
    ap.add_argument("--input-len", type=int, default=64)
    ap.add_argument("--api", default="chat", choices=["chat", "completions", "generate"])
    ap.add_argument("--transport", nargs="+", default=["fast"], choices=["fast", "fast-user", "httpx"],
                    help="fast: asyncio socket client, kernel receive timestamps (default); "
                         "fast-user: same, time.time() in the read callback; httpx: httpx.AsyncClient")
    ap.add_argument("--speculative", action="store_true",
                    help="the simulator serves EAGLE-3: multi-token chunks")
    ap.add_argument("--model", default="meta-llama/Llama-3.1-8B-Instruct")
    ap.add_argument("--sim-args", nargs=argparse.REMAINDER, default=[],
                    help="extra arguments for python -m specc.sim (must come last)")
    ap.add_argument("--server-cmd", default=None,
                    help="another server command ('{port}' is replaced); default specc.sim")
    ap.add_argument("--json", default=None, help="also write the figures here")
    args = ap.parse_args()

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    tmp = tempfile.mkdtemp(prefix="specc-lg-acc-")
    truth_path = os.path.join(tmp, "truth.jsonl")
    log = open(os.path.join(tmp, "server.log"), "wb")
    proc = start_sim(port, truth_path, args, log)
    rows = []
    try:
        wait_healthy(proc, url)
        print(f"server ready on {url}; truth {truth_path}; {os.cpu_count()} cpus", flush=True)
        hdr = (f"{'transport':>9} {'conc':>4} {'ok':>4} {'chunks':>6} | "
               f"{'TTFT err ms med':>15} {'p99':>6} | {'gap err ms med':>14} {'p99':>6} | "
               f"{'ITL err ms med':>14} {'p99':>6} {'bad n':>5} | "
               f"{'chunk err med':>13} {'p99':>6} {'bias':>6} | {'client cpu':>10} "
               f"{'sim cpu':>7} | {'tok/chunk':>9} {'med ITL ms':>10} {'med gap ms':>10}")
        print(hdr)
        for transport in args.transport:
            for c in args.concurrency:
                n = args.num or min(256, max(32, 4 * c))
                prompts = load_prompts("random", num=n, input_len=args.input_len,
                                       output_len=args.output_len, range_ratio=0.75,
                                       seed=c)
                r0 = resource.getrusage(resource.RUSAGE_SELF)
                s0 = proc_cpu(proc.pid)
                w0 = time.time()
                res = asyncio.run(run_load(url, prompts, api=args.api, model=args.model,
                                           concurrency=c, warmup=1,
                                           transport=transport.split("-")[0],
                                           kernel_timestamps=transport != "fast-user"))
                wall = time.time() - w0
                r1 = resource.getrusage(resource.RUSAGE_SELF)
                cpu = (r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime) / wall
                scpu = (proc_cpu(proc.pid) - s0) / wall
                time.sleep(0.3)  # the simulator flushes its truth file every 100 ms
                truth = read_truth(truth_path)
                ttft_e, gap_e, itl_e, chunk_e, signed, unmatched = [], [], [], [], [], 0
                bad_n, all_ns = 0, []
                for r in res.records:
                    rid = str(r.rid)
                    # OpenAI ids are "chatcmpl-<rid>" / "cmpl-<rid>"; /generate gives <rid>
                    tt = truth.get(rid) or truth.get(rid.split("-", 1)[-1])
                    if not r.ok or not tt or len(tt) != len(r.chunk_times):
                        unmatched += 1
                        continue
                    tts = [t for t, _ in tt]
                    ns = [n for _, n in tt]
                    all_ns += ns
                    ttft_e.append(abs(r.chunk_times[0] - tts[0]) * 1e3)
                    for a, b in zip(r.chunk_times, tts):
                        chunk_e.append(abs(a - b) * 1e3)
                        signed.append((a - b) * 1e3)
                    if r.chunk_tokens:
                        bad_n += sum(a != b for a, b in zip(r.chunk_tokens, ns))
                    for i in range(1, len(tts)):
                        gap, true_gap = r.chunk_times[i] - r.chunk_times[i - 1], tts[i] - tts[i - 1]
                        gap_e.append(abs(gap - true_gap) * 1e3)
                        # the per-token value this chunk added to r.itls
                        per_token = gap / r.chunk_tokens[i] if r.chunk_tokens else r.itls[i - 1]
                        itl_e.append(abs(per_token - true_gap / ns[i]) * 1e3)
                if not ttft_e:
                    print(f"{transport:>9} {c:>4}: no request matched the truth "
                          f"({unmatched} unmatched; errors: "
                          f"{[r.error for r in res.records[:3]]})")
                    continue
                row = {"transport": transport, "concurrency": c, "api": args.api,
                       "completed": res.metrics["completed"], "matched": len(ttft_e),
                       "chunks": len(chunk_e),
                       "ttft_err_median_ms": q(ttft_e, 50), "ttft_err_p99_ms": q(ttft_e, 99),
                       "chunk_gap_err_median_ms": q(gap_e, 50) if gap_e else 0.0,
                       "chunk_gap_err_p99_ms": q(gap_e, 99) if gap_e else 0.0,
                       "itl_err_median_ms": q(itl_e, 50) if itl_e else 0.0,
                       "itl_err_p99_ms": q(itl_e, 99) if itl_e else 0.0,
                       "chunk_token_count_mismatches": bad_n,
                       "speculative": args.speculative,
                       "tokens_per_chunk": sum(all_ns) / len(all_ns),
                       "chunk_err_median_ms": q(chunk_e, 50), "chunk_err_p99_ms": q(chunk_e, 99),
                       "chunk_bias_median_ms": q(signed, 50),
                       "chunk_signed_p1_ms": q(signed, 1), "chunk_signed_p99_ms": q(signed, 99),
                       "client_cpu": cpu, "sim_cpu": scpu,
                       "median_itl_ms": res.metrics["median_itl_ms"],
                       "median_chunk_gap_ms": res.metrics["median_chunk_gap_ms"],
                       "median_ttft_ms": res.metrics["median_ttft_ms"]}
                rows.append(row)
                print(f"{transport:>9} {c:>4} {row['completed']:>4} {len(chunk_e):>6} | "
                      f"{row['ttft_err_median_ms']:>15.3f} {row['ttft_err_p99_ms']:>6.2f} | "
                      f"{row['chunk_gap_err_median_ms']:>14.3f} {row['chunk_gap_err_p99_ms']:>6.2f} | "
                      f"{row['itl_err_median_ms']:>14.3f} {row['itl_err_p99_ms']:>6.2f} {bad_n:>5} | "
                      f"{row['chunk_err_median_ms']:>13.3f} {row['chunk_err_p99_ms']:>6.2f} "
                      f"{row['chunk_bias_median_ms']:>6.3f} | {cpu:>10.2f} {scpu:>7.2f} | "
                      f"{row['tokens_per_chunk']:>9.2f} {row['median_itl_ms']:>10.2f} "
                      f"{row['median_chunk_gap_ms']:>10.2f} | signed p1 {row['chunk_signed_p1_ms']:.2f}"
                      f" p99 {row['chunk_signed_p99_ms']:.2f}", flush=True)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
