"""Does specc's per-token ITL equal SGLang bench_serving's on the same stream?

Records real /generate streams from a speculative ``python -m specc.sim`` (chunks
of 1-4 tokens) with the time each SSE event arrived, then replays every stream
through (a) bench_serving's own ``async_request_sglang_generate``, taken from the
released wheel's source (``sglang/benchmark/serving.py``; its HTTP session and
clock are replaced by the recording) and (b) specc's ``loadgen.sse.finish``, and
compares the two ``itl`` lists value by value.  Needs the wheel, not sglang's
dependencies:

    pip download --no-deps sglang==0.5.23 -d /tmp/sgl
    .venv/bin/python benchmarks/itl_vs_bench_serving.py /tmp/sgl/sglang-0.5.23-*.whl
"""

from __future__ import annotations

import ast
import asyncio
import json
import socket
import subprocess
import sys
import tempfile
import time
import types
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx  # noqa: E402

from specc.run.loadgen.records import RequestRecord  # noqa: E402
from specc.run.loadgen.sse import finish  # noqa: E402

SOURCE = "sglang/benchmark/serving.py"
SPEC_ARGS = ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "sim/draft",
             "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
             "--speculative-num-draft-tokens", "4"]


def bench_serving_function(wheel: str):
    """async_request_sglang_generate from the wheel, with stand-ins for what it imports."""
    src = zipfile.ZipFile(wheel).read(SOURCE).decode()
    tree = ast.parse(src)
    wanted = {"RequestFuncInput", "RequestFuncOutput", "async_request_sglang_generate"}
    nodes = [n for n in tree.body if getattr(n, "name", None) in wanted]
    assert {n.name for n in nodes} == wanted, f"{SOURCE} changed: {wanted - {n.name for n in nodes}}"
    clock = {"now": 0.0}
    module = types.ModuleType("bench_serving_replay")   # dataclasses look their module up
    sys.modules[module.__name__] = module
    ns = module.__dict__
    ns.update({
        "json": json, "sys": sys, "traceback": __import__("traceback"),
        "time": types.SimpleNamespace(perf_counter=lambda: clock["now"]),
        "orjson": types.SimpleNamespace(loads=json.loads),
        "args": types.SimpleNamespace(temperature=0.0, disable_ignore_eos=False, top_p=1.0,
                                      disable_stream=False, return_logprob=False,
                                      return_routed_experts=False, logprob_start_len=-1,
                                      top_logprobs_num=0, token_ids_logprob=None,
                                      cache_report=False),
        "get_request_headers": dict, "_ROUTING_KEY_HEADER": "X", "tqdm": object,
        "_record_server_prompt_len": lambda data, output: None,
    })
    exec("from dataclasses import dataclass, field\n"
         "from typing import Any, Dict, List, Optional, Union\n", ns)
    exec(compile(ast.Module(body=nodes, type_ignores=[]), SOURCE, "exec"), ns)
    return ns, clock


class Replay:
    """An aiohttp session stand-in that plays one recorded stream, moving the clock."""

    def __init__(self, events, clock):
        self.events, self.clock = events, clock

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        return False

    def post(self, **kwargs):
        return self

    @property
    def status(self):
        return 200

    @property
    def content(self):
        async def lines():
            for t, line in self.events:
                self.clock["now"] = t
                yield line
        return lines()


def record_streams(url: str, n: int) -> list[tuple[float, list[tuple[float, bytes]]]]:
    """(send time, [(arrival time, SSE line)]) per /generate request, one at a time."""
    out = []
    with httpx.Client(timeout=60) as c:
        for i in range(n):
            body = {"text": f"prompt {i} " * 8, "stream": True,
                    "sampling_params": {"max_new_tokens": 48, "ignore_eos": True}}
            st = time.time()
            events = []
            with c.stream("POST", url + "/generate", json=body) as r:
                for line in r.iter_lines():
                    events.append((time.time(), line.encode() + b"\n"))
            out.append((st, events))
    return out


def main() -> None:
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    ns, clock = bench_serving_function(sys.argv[1])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tempfile.TemporaryFile()
    proc = subprocess.Popen([sys.executable, "-m", "specc.sim", "--model-path", "m", "--port",
                             str(port), "--sim-time-scale", "0.001", *SPEC_ARGS],
                            stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                if httpx.get(url + "/health", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        streams = record_streams(url, 20)
    finally:
        proc.terminate()
        proc.wait(10)
    values = differ = multi = 0
    worst = 0.0
    for st, events in streams:
        clock["now"] = st
        ns["_create_bench_client_session"] = lambda events=events: Replay(events, clock)
        inp = ns["RequestFuncInput"](prompt="p", api_url=url + "/generate", prompt_len=8,
                                     output_len=48, model="m", lora_name=None, image_data=None,
                                     extra_request_body={})
        theirs = asyncio.run(ns["async_request_sglang_generate"](inp)).itl
        body = b"".join(line for _, line in events)
        offs, pos = [], 0
        for _, line in events:
            pos += len(line)
            offs.append(pos)
        rec = RequestRecord(start=st, requested_output_tokens=48)
        finish(rec, "generate", 200, body, [t for t, _ in events], offs, None)
        ours = rec.itls
        multi += sum(n > 1 for n in rec.chunk_tokens)
        values += len(theirs)
        if len(ours) != len(theirs):
            differ += 1
            continue
        worst = max([worst] + [abs(a - b) for a, b in zip(ours, theirs)])
    print(f"{len(streams)} streams, {multi} multi-token chunks, {values} bench_serving ITL values; "
          f"streams whose ITL lists differ in length: {differ}; largest value difference: "
          f"{worst * 1e3:.6f} ms")
    if differ or worst > 1e-9:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
