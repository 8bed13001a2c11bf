"""The bench_serving driver: the plan's client command runs from the run dir and its
last JSON line (bench_serving's format, `Infinity` included) becomes the point's metrics.

SGLang's real client needs ~6 GB of dependencies (torch among them), so CI runs a
stand-in process that writes what bench_serving writes; the real one was run by
hand against the simulator (docs/simulator.md, "SGLang's own client").
"""

from __future__ import annotations

import asyncio
import json
import socket

import invoke

from specc.run.point import run_point
from specc.plan import BenchParams, Benchmark, CacheFlush, Server, ServerParams

from conftest import bench_params, server_params

LINE = {"backend": "sglang", "request_rate": float("inf"), "completed": 8, "duration": 1.5,
        "total_input_tokens": 512, "total_output_tokens": 256, "request_throughput": 5.3,
        "input_throughput": 341.3, "output_throughput": 170.6, "total_throughput": 512.0,
        "mean_ttft_ms": 21.0, "median_ttft_ms": 20.0, "p99_ttft_ms": 35.0, "mean_itl_ms": 6.0,
        "median_itl_ms": 4.4, "p99_itl_ms": 22.5, "accept_length": 2.54}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _point(tmp_path, script: str, num_prompts: int = 8, extra=()):
    server = Server(id="s", label="x", baseline=False,
                    params=ServerParams.read(server_params(), "params"), host="127.0.0.1",
                    port=_free_port(), gpus=(0,), wave=0, argv=(), env={}, log="servers/s.log",
                    readiness=None, cache_flush=CacheFlush(unavailable="not needed here"),
                    acceptance=None)
    out = "bench_serving/b.jsonl"   # relative: the driver must run from the run dir
    bench = Benchmark(id="b", server="s", baseline=None,
                      params=BenchParams.read(bench_params(num_prompts=num_prompts, concurrency=4,
                                                           flush_cache=False), "params"),
                      argv=("python", "-c", script, out, *extra))
    return asyncio.run(run_point(server, bench, run_dir=tmp_path, ctx=invoke.Context()))


def test_ingests_the_clients_last_json_line(tmp_path, monkeypatch):
    monkeypatch.chdir("/")
    script = ("import json,sys; f=open(sys.argv[1],'a'); "
              f"f.write(json.dumps({{'completed': 1}})+'\\n'); f.write({json.dumps(json.dumps(LINE))}+'\\n')")
    row = _point(tmp_path, script)
    assert row["status"] == "ok", row["reason"]
    m = row["metrics"]
    assert m["output_throughput"] == 170.6 and m["median_itl_ms"] == 4.4
    assert m["bench_serving_accept_length"] == 2.54
    assert (tmp_path / "bench_serving" / "b.jsonl").exists()


def test_a_failing_client_fails_the_point_with_its_own_words(tmp_path):
    row = _point(tmp_path, "import sys; sys.exit('cannot reach the server')")
    assert row["status"] == "failed"
    assert "bench_serving exited 1" in row["reason"] and "cannot reach the server" in row["reason"]


def test_fewer_completed_than_prompts_is_a_failed_point(tmp_path):
    short = dict(LINE, completed=6)
    script = f"import sys; open(sys.argv[1],'a').write({json.dumps(json.dumps(short))}+'\\n')"
    row = _point(tmp_path, script)
    assert row["status"] == "failed" and row["reason"].startswith("2/8 requests failed")



def test_an_openai_backends_itl_is_a_chunk_gap_and_the_random_source_is_local(tmp_path):
    """--backend vllm: bench_serving appends one gap per chunk (its OpenAI client), so its
    ITL is reported as a chunk gap; its random dataset reads the ShareGPT-format source
    the run wrote first (else it would download ShareGPT)."""
    from specc.plan import BENCH_SERVING_RANDOM_SOURCE

    script = ("import json,sys; src=json.load(open(sys.argv[sys.argv.index('--dataset-path')+1]));"
              "assert len(src) > 10 and all(len(c['conversations']) >= 2 for c in src);"
              f"open(sys.argv[1],'a').write({json.dumps(json.dumps(LINE))}+'\\n')")
    row = _point(tmp_path, script, extra=("--backend", "vllm", "--dataset-name", "random",
                                           "--dataset-path", BENCH_SERVING_RANDOM_SOURCE))
    assert row["status"] == "ok", row["reason"]
    m = row["metrics"]
    assert m["median_chunk_gap_ms"] == 4.4 and m["p99_chunk_gap_ms"] == 22.5
    assert not any("itl" in k for k in m)
    assert (tmp_path / BENCH_SERVING_RANDOM_SOURCE).exists()


def test_bench_serving_on_vllm_with_the_random_dataset_gets_a_local_path(compose, tmp_path):
    from specc.compile.emit import plan_sh
    from specc.compile.pipeline import compile_config
    from specc.plan import BENCH_SERVING_RANDOM_SOURCE

    result = compile_config(compose([
        "+experiment=eagle3_sweep", "engine=vllm",
        "model_pair=llama3_8b_eagle3", "model_pair.context_length=2048",
        "benchmark.driver=bench_serving", "benchmark.dataset=random"]))
    assert result.ok, [d.line() for d in result.diagnostics if d.severity == "error"]
    argv = list(result.plan.benchmarks[0].argv)
    assert argv[argv.index("--backend") + 1] == "vllm"
    assert argv[argv.index("--dataset-path") + 1] == BENCH_SERVING_RANDOM_SOURCE
    assert f"python -m specc.prompts.datasets --sharegpt-source {BENCH_SERVING_RANDOM_SOURCE}" \
        in plan_sh(result.plan)
