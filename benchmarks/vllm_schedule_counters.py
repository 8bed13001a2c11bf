"""Does vLLM's CPU build run each band's K of a batch-size schedule? Its own counters say.

    .venv/bin/python benchmarks/vllm_schedule_counters.py ['[[1,1,1],[2,65536,3]]' ...]

Needs `specc cpu-engine` and `specc tiny-models` (cached). For each schedule (the
`num_speculative_tokens_per_batch_size` list specc deploys, docs/tune.md "Deploy"),
starts `vllm serve` of the cpu-engine venv on the tiny pair (EAGLE-3, --enforce-eager,
num_speculative_tokens the largest K), sends greedy requests of 64 tokens at concurrency
1 (2 requests) and 4 (8 requests) and prints, from /metrics before and after each,
vLLM's drafts, draft tokens per draft and accepted tokens. At concurrency 1 the running
batch is 1: the draft tokens per draft are the first range's K. Measured
(docs/real-engine.md): `[[1,1,1],[2,65536,3]]` 1.00 and 2.98 per draft; `[[1,1,3],
[2,65536,0]]` 3.00 at 1 and, at 4, drafts only at the batch-1 steps.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

DEFAULT = ("[[1,1,1],[2,65536,3]]", "[[1,1,3],[2,65536,0]]")
COUNTERS = ("num_drafts", "num_draft_tokens", "num_accepted_tokens")


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _counters(base: str) -> dict[str, float]:
    text = urllib.request.urlopen(base + "/metrics", timeout=10).read().decode()
    out = {}
    for name in COUNTERS:
        m = re.search(rf"^vllm:spec_decode_{name}_total\{{[^}}]*\}} ([0-9.e+]+)", text, re.M)
        out[name] = float(m.group(1)) if m else 0.0
    return out


def measure(schedule: list, vllm: Path, target: Path, draft: Path, log: Path) -> None:
    port, base = _port(), ""
    cfg = {"max_model_len": 2048, "method": "eagle3", "model": str(draft),
           "num_speculative_tokens": max(k for _, _, k in schedule),
           "num_speculative_tokens_per_batch_size": schedule}
    argv = [str(vllm), "serve", str(target), "--host", "127.0.0.1", "--port", str(port),
            "--max-model-len", "2048", "--speculative-config", json.dumps(cfg),
            "--enforce-eager"]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "auto"}
    base = f"http://127.0.0.1:{port}"
    t0 = time.monotonic()
    with open(log, "w") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
    try:
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"vllm serve exited {proc.returncode}: see {log}")
            try:
                if urllib.request.urlopen(base + "/health", timeout=2).status == 200:
                    break
            except OSError:
                pass
            time.sleep(1)
        print(f"{json.dumps(schedule)}: ready after {time.monotonic() - t0:.0f} s")

        def request(i: int) -> int:
            body = json.dumps({"model": str(target), "prompt": f"Question {i} about the sea?",
                               "max_tokens": 64, "temperature": 0, "ignore_eos": True})
            req = urllib.request.Request(base + "/v1/completions", body.encode(),
                                         {"Content-Type": "application/json"})
            answer = json.loads(urllib.request.urlopen(req, timeout=300).read())
            return int(answer["usage"]["completion_tokens"])

        for c in (1, 4):
            before = _counters(base)
            with ThreadPoolExecutor(c) as pool:
                tokens = sum(pool.map(request, range(2 * c)))
            d = {k: v - before[k] for k, v in _counters(base).items()}
            per = d["num_draft_tokens"] / d["num_drafts"] if d["num_drafts"] else 0.0
            print(f"  concurrency {c}: {tokens} tokens; {d['num_drafts']:.0f} drafts of "
                  f"{per:.2f} tokens, {d['num_accepted_tokens']:.0f} accepted")
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


def main() -> int:
    from specc.cpu import engine_venv, models

    python = engine_venv.ensure()
    pair = models.default_dir()
    models.ensure(python, pair)
    work = Path(tempfile.mkdtemp(prefix="specc-vllm-schedule-"))
    for i, text in enumerate(sys.argv[1:] or DEFAULT):
        measure(json.loads(text), python.parent / "vllm", pair / "target", pair / "draft",
                work / f"server-{i}.log")
    print(f"load average {os.getloadavg()[0]:.1f}; server logs in {work}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
