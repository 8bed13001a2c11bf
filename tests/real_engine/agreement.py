"""specc's client and `vllm bench serve` on one running vLLM CPU server (the cpu-engine venv).

Shared by tests/real_engine/test_vllm_bench_agreement.py and
benchmarks/real_engine_vs_vllm_bench.py. The server is started from the launch command
and environment of a plan specc compiled (`specc +experiment=tiny_cpu ...`), so both
clients measure what specc would run. The prompts are one file, read by both sides:
specc as `benchmark.dataset_path` (its own JSON-lines format), bench as a ShareGPT file
(`--dataset-name sharegpt`: the `custom` dataset needs pandas, which the venv lacks).
The prompts end in "?", after which the tiny target's answers open with text: every
first token has text, so "time to first token" means the same to both clients (on
answers that open with text-less tokens, specc's TTFT is the first text a user sees,
bench's the first chunk, text or not: docs/real-engine.md).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
NUM_PROMPTS = 48
OUTPUT_LEN = 32
CONCURRENCY = 4
#: The issue's bar for |specc / bench - 1| (the benchmark prints each figure against it).
TOLERANCE = 0.05
SUBJECTS = ("a lighthouse", "the tide", "a glacier", "a beehive", "a compass", "a violin",
            "a volcano", "a library", "a river delta", "a windmill", "a comet", "a forest fire")
ASKS = ("How does {} work?", "Why does {} matter to the people near it?",
        "What would change if {} disappeared?", "Who first studied {}?")


#: `vllm bench serve` for as many rounds as lines on stdin (each line: the result file's
#: name): its own parser and `main`, vLLM imported once; "ok" on stdout after each.
BENCH_DRIVER = """
import contextlib, sys
from vllm.benchmarks.serve import add_cli_args, main
from vllm.utils.argparse_utils import FlexibleArgumentParser
parser = FlexibleArgumentParser()
add_cli_args(parser)
out = sys.stdout
for line in sys.stdin:
    args = parser.parse_args(sys.argv[1:])   # afresh: main() rewrites some of them
    args.result_filename = line.strip()
    with contextlib.redirect_stdout(sys.stderr):
        main(args)
    print("ok", file=out, flush=True)
"""


def prompts(n: int = NUM_PROMPTS) -> list[dict]:
    """n questions, each ending in "?" (specc's prompt-file format)."""
    out = []
    for i in range(n):
        q = ASKS[i % len(ASKS)].format(SUBJECTS[i // len(ASKS) % len(SUBJECTS)])
        out.append({"category": "question", "id": f"q-{i:03d}", "prompt": q[0].upper() + q[1:]})
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, timeout: float = 5.0) -> int:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status
    except OSError:
        return 0


@dataclass
class Served:
    work: Path
    plan_dir: Path
    server: dict
    bench_id: str
    proc: subprocess.Popen
    log: Path
    #: prompts per round, both sides
    num_prompts: int = NUM_PROMPTS
    #: (specc's figures, bench's) per round measured so far on this server
    pairs: list = field(default_factory=list)
    #: the process running `vllm bench serve` rounds (BENCH_DRIVER), once started
    bench: subprocess.Popen | None = None
    warmed: bool = False

    @classmethod
    def start(cls, work: Path, *, num_prompts: int = NUM_PROMPTS,
              ready_timeout_s: float = 900) -> Served:
        """Compile the plan (EAGLE-3 with 3 tokens, completions, concurrency 4), start its
        server as specc would (argv, env), wait for /health 200."""
        rows = prompts(num_prompts)
        (work / "prompts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        (work / "sharegpt.json").write_text(json.dumps([
            {"id": r["id"], "conversations": [{"from": "human", "value": r["prompt"]},
                                              {"from": "gpt", "value": "x " * OUTPUT_LEN}]}
            for r in rows]))
        plan_dir = work / "plan"
        port = free_port()
        argv = [sys.executable, "-m", "specc", "+experiment=tiny_cpu",
                "speculation={algorithm:EAGLE3,num_steps:3,topk:1,num_draft_tokens:4}",
                "sweep=null", "baseline=false", f"benchmark.concurrency={CONCURRENCY}",
                "benchmark.api=completions", "benchmark.dataset=specc",
                f"benchmark.dataset_path={work / 'prompts.jsonl'}",
                f"benchmark.num_prompts={num_prompts}", f"benchmark.min_requests={num_prompts}",
                "benchmark.warmup_requests=0", f"benchmark.output_len={OUTPUT_LEN}",
                f"engine.base_port={port}", f"hydra.run.dir={plan_dir}"]
        proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=300)
        if proc.returncode:
            raise RuntimeError(f"compile failed ({proc.returncode}): {proc.stderr[-2000:]}")
        plan = json.loads((plan_dir / "plan.json").read_text())
        (server,), (bench,) = plan["servers"], plan["benchmarks"]
        log = work / "server.log"
        env = {**os.environ, **{k: str(v) for k, v in server["env"].items()}}
        with open(log, "wb") as out:
            p = subprocess.Popen(server["argv"], env=env, stdout=out, stderr=subprocess.STDOUT,
                                 start_new_session=True)
        self = cls(work, plan_dir, server, bench["id"], p, log, num_prompts)
        end = time.monotonic() + ready_timeout_s
        while _get(self.url("/health")) != 200:
            if p.poll() is not None or time.monotonic() > end:
                self.stop()
                raise RuntimeError(f"server not ready (exit {p.poll()}): "
                                   f"{log.read_text(errors='replace')[-3000:]}")
            time.sleep(1)
        return self

    def url(self, path: str) -> str:
        return f"http://{self.server['host']}:{self.server['port']}{path}"

    def stop(self) -> None:
        if self.bench is not None and self.bench.poll() is None:
            self.bench.kill()
            self.bench.wait(30)
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(60)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.proc.wait(30)

    def specc_point(self, k: int | str) -> dict:
        """specc's own client: `python -m specc.run.point` on a fresh copy of the plan
        (it flushes the prefix cache first); its row's metrics and per-position rates."""
        d = self.work / f"specc-{k}"
        d.mkdir()
        shutil.copy(self.plan_dir / "plan.json", d / "plan.json")
        proc = subprocess.run([sys.executable, "-m", "specc.run.point", "--plan",
                               str(d / "plan.json"), "--benchmark", self.bench_id],
                              cwd=REPO, capture_output=True, text=True, timeout=900)
        if proc.returncode:
            raise RuntimeError(f"specc point failed ({proc.returncode}): "
                               f"{(proc.stdout + proc.stderr)[-2000:]}")
        row = json.loads((d / "results.jsonl").read_text().splitlines()[-1])
        return {**row["metrics"], "accept_per_position": row.get("accept_per_position")}

    def warm(self) -> None:
        """One run of each side, not kept: the first requests after a start are slower
        (measured: the first round's side 22% below its pair), and the bench process
        imports vLLM once here."""
        if not self.warmed:
            self.vllm_bench("warm")
            self.specc_point("warm")
            self.warmed = True

    def bench_argv(self) -> list[str]:
        """`vllm bench serve`'s arguments: the same prompts, lengths, concurrency, greedy."""
        return ["--backend", "vllm", "--base-url", self.url(""),
                "--endpoint", "/v1/completions", "--model", self.server["argv"][2],
                "--dataset-name", "sharegpt", "--dataset-path", str(self.work / "sharegpt.json"),
                "--disable-shuffle", "--sharegpt-output-len", str(OUTPUT_LEN), "--ignore-eos",
                "--num-prompts", str(self.num_prompts), "--max-concurrency", str(CONCURRENCY),
                "--temperature", "0", "--save-result", "--result-dir", str(self.work),
                "--percentile-metrics", "ttft,tpot,itl,e2el"]

    def vllm_bench(self, k: int | str) -> dict:
        """One run of `vllm bench serve` 0.32.0 (the server's own venv), the prefix cache
        flushed first as specc does. The runs go through one process that imported vLLM
        once (BENCH_DRIVER: `vllm bench serve`'s own parser and `main`): a fresh `vllm
        bench serve` spends ~10 s importing per round, so rounds were few and long, and
        the machine drifted between a pair's two sides."""
        req = urllib.request.Request(self.url("/reset_prefix_cache"), method="POST")
        urllib.request.urlopen(req, timeout=30).close()
        if self.bench is None or self.bench.poll() is not None:
            with open(self.work / "bench.log", "ab") as log:
                self.bench = subprocess.Popen(
                    [str(Path(self.server["argv"][0]).with_name("python")), "-c", BENCH_DRIVER,
                     *self.bench_argv()], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                    stderr=log, text=True, env={**os.environ, "VLLM_TARGET_DEVICE": "cpu"})
        name = f"bench-{k}.json"
        assert self.bench.stdin and self.bench.stdout
        self.bench.stdin.write(name + "\n")
        self.bench.stdin.flush()
        said = self.bench.stdout.readline().strip()
        if said != "ok":
            log = (self.work / "bench.log").read_text(errors="replace")
            raise RuntimeError(f"vllm bench serve failed ({said or 'exited'}): {log[-2000:]}")
        return json.loads((self.work / name).read_text())
