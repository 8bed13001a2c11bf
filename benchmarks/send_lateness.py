"""How late does a load generator send at 100 requests/s? specc's next to `vllm bench serve`.

Starts ``python -m specc.sim`` on a free port and sends ``--num`` Poisson arrivals at
``--rate`` requests/s (no concurrency cap, /v1/completions, ``--output-len`` tokens
each, ignore_eos) with each client in turn, ``--repeats`` times, then prints the
median and p99 of each send's lateness: when the request went out minus when its
schedule said.

- specc: ``run_load``; each record's ``lateness_s`` (sent = just before the request
  is written to the socket).
- vLLM 0.33.0's ``vllm bench serve`` (``vllm.benchmarks.serve.main``, its own code),
  run in a second Python where vllm and pandas import. Its schedule is read from its
  own draws (``np.random.gamma``, cumulated and rescaled as its ``get_request`` does,
  from the ``time.time()`` it starts at), its send time is its own ``start_time``
  (``time.perf_counter()`` just before ``session.post``), taken as epoch seconds.
  With no tokenizer here (``--skip-tokenizer-init``) it sends max_tokens 1, so
  ``--extra-body`` sets the same max_tokens as specc's.

A Python for vLLM, from the drift check's venv of the released wheel
(tests/drift/venvs.py) plus pandas (its custom dataset reads JSONL with it)::

    ~/.cache/specc-drift/vllm-0.33.0/bin/python -m venv /tmp/vlbench
    ls -d ~/.cache/specc-drift/vllm-0.33.0/lib/python3.11/site-packages \\
        > /tmp/vlbench/lib/python3.11/site-packages/drift_vllm.pth
    /tmp/vlbench/bin/pip install pandas

    .venv/bin/python benchmarks/send_lateness.py --vllm-python /tmp/vlbench/bin/python
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


# --------------------------------------------------------------------------- vLLM's side
# (runs in the vLLM Python: stdlib, numpy and vllm only)

def vllm_driver(url: str, dataset: str, num: int, rate: float, output_len: int) -> None:
    """``vllm bench serve`` in this process, its schedule and send times recorded; prints
    one JSON list: each request's lateness in seconds, in schedule order."""
    import time

    import numpy
    import vllm.benchmarks.serve as serve
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    draws, calls, sent, state = [], [], [], {"on": False}

    class _Random:   # numpy.random, its gamma draws recorded
        def __getattr__(self, k):
            return getattr(numpy.random, k)

        def gamma(self, *a, **kw):
            x = numpy.random.gamma(*a, **kw)
            if state["on"]:
                draws.append(float(x))
            return x

    class _Numpy:
        random = _Random()

        def __getattr__(self, k):
            return getattr(numpy, k)

    class _Time:     # time, its time() calls recorded: get_request's first is its start
        def __getattr__(self, k):
            return getattr(time, k)

        def time(self):
            t = time.time()
            if state["on"]:
                calls.append(t)
            return t

    serve.np, serve.time = _Numpy(), _Time()
    original = serve.get_request

    async def get_request(*a, **kw):
        state["on"] = True
        async for item in original(*a, **kw):
            yield item

    serve.get_request = get_request
    for key, func in list(serve.ASYNC_REQUEST_FUNCS.items()):
        async def timed(*a, _func=func, **kw):
            if not state["on"]:       # the initial test request
                return await _func(*a, **kw)
            slot = len(sent)          # tasks start in the order they were created
            sent.append(None)
            out = await _func(*a, **kw)
            sent[slot] = out.start_time
            return out
        serve.ASYNC_REQUEST_FUNCS[key] = timed

    parser = FlexibleArgumentParser()
    serve.add_cli_args(parser)
    args = parser.parse_args([
        "--backend", "openai", "--base-url", url, "--endpoint", "/v1/completions",
        "--model", "m", "--dataset-name", "custom", "--dataset-path", dataset,
        "--num-prompts", str(num), "--request-rate", str(rate), "--burstiness", "1",
        "--seed", "0", "--skip-tokenizer-init", "--ignore-eos", "--disable-tqdm",
        "--extra-body", json.dumps({"max_tokens": output_len})])
    epoch = time.time() - time.perf_counter()
    serve.main(args)
    if len(draws) != num or len(sent) != num or None in sent or not calls:
        raise SystemExit(f"vllm bench serve did not run as read: {len(draws)} draws, "
                         f"{len(sent)} sends for {num} requests")
    due, total = [], 0.0
    for x in draws:
        total += x
        due.append(total)
    scale = (num / rate) / due[-1]      # get_request's rescaling (no ramp)
    start = calls[0]
    print(json.dumps([epoch + s - (start + d * scale) for s, d in zip(sent, due)]))


# --------------------------------------------------------------------------- specc's side

def _sim(port: int):
    import time

    import httpx

    proc = subprocess.Popen([sys.executable, "-m", "specc.sim", "--model-path", "m", "--port",
                             str(port), "--sim-time-scale", "0.001"], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            if httpx.get(url + "/health", timeout=5).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    proc.kill()
    raise SystemExit("the simulator did not start")


def _specc(url, prompts, rate) -> list[float]:
    import asyncio

    from specc.run.loadgen import run_load

    res = asyncio.run(run_load(url, prompts, api="completions", model="m", concurrency=None,
                               request_rate=rate, warmup=1, seed=0))
    bad = [r.error for r in res.records if not r.ok]
    if bad:
        raise SystemExit(f"specc: {len(bad)} requests failed (first: {bad[0]})")
    return [r.lateness_s for r in res.records]


def _pct(xs, p):
    from specc.run.loadgen import percentile

    return percentile(sorted(xs), p)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rate", type=float, default=100.0)
    ap.add_argument("--num", type=int, default=1000)
    ap.add_argument("--output-len", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--vllm-python", help="a Python where vllm 0.33.0 and pandas import")
    ap.add_argument("--vllm-driver", nargs=5, metavar=("URL", "JSONL", "NUM", "RATE", "OUT"),
                    help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.vllm_driver:
        url, dataset, num, rate, out = args.vllm_driver
        vllm_driver(url, dataset, int(num), float(rate), int(out))
        return

    import socket

    sys.path.insert(0, str(ROOT))
    from specc.prompts.datasets import load_prompts

    prompts = load_prompts("random", num=args.num, input_len=32, output_len=args.output_len,
                           seed=1)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc, url = _sim(port)
    results: dict[str, list[list[float]]] = {"specc": [], "vllm bench serve": []}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            dataset = Path(tmp) / "prompts.jsonl"
            dataset.write_text("".join(json.dumps({"prompt": p.text}) + "\n" for p in prompts))
            for _ in range(args.repeats):
                results["specc"].append(_specc(url, prompts, args.rate))
                if args.vllm_python:
                    run = subprocess.run(
                        [args.vllm_python, __file__, "--vllm-driver", url, str(dataset),
                         str(args.num), str(args.rate), str(args.output_len)],
                        capture_output=True, text=True, timeout=900)
                    if run.returncode:
                        raise SystemExit(f"vllm bench serve failed:\n{run.stderr[-3000:]}")
                    results["vllm bench serve"].append(json.loads(
                        run.stdout.strip().splitlines()[-1]))
    finally:
        proc.terminate()
        proc.wait(10)
    print(f"send lateness at {args.rate:g} requests/s (Poisson), {args.num} requests a run, "
          f"{args.output_len} output tokens each, no concurrency cap, on the simulator")
    print(f"{'client':<18} {'run':>3} {'median ms':>10} {'p99 ms':>9} {'max ms':>9} "
          f"{'late > 1 ms':>12}")
    for name, runs in results.items():
        for k, lat in enumerate(runs):
            late = sum(x > 1e-3 for x in lat) / len(lat)
            print(f"{name:<18} {k + 1:>3} {_pct(lat, 50) * 1e3:>10.3f} "
                  f"{_pct(lat, 99) * 1e3:>9.3f} {max(lat) * 1e3:>9.3f} {late:>11.1%}")
    if not args.vllm_python:
        print("(vllm bench serve not run: give --vllm-python)")


if __name__ == "__main__":
    main()
