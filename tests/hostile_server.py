"""A misbehaving LLM server for the trust-boundary tests: a real process on a real port.

    python tests/hostile_server.py --port P --mode MODE[,MODE...]
    HOSTILE_MODE=MODE python tests/hostile_server.py - <the simulator's flags>

(The second form stands in for `python -m specc.sim` in a plan's launch command: the
plan's flags still pass specc's preflight, which parses argv[3:] with the engine's parser.)

It speaks SGLang's endpoints (/v1/chat/completions, /v1/completions, /generate
streamed; /metrics, /server_info, /health_generate, /flush_cache) with raw asyncio
sockets, so that it can break HTTP itself. Without a mode it is well behaved: one
token per chunk, the running usage on every chunk (continuous_usage_stats), an
accept length of 2.0 in its counters. Modes (the test says which):

  usage_scale:F       the final usage is F x the tokens streamed (per-chunk counts honest)
  usage_huge          the final usage is 10^12
  usage_text          completion_tokens is the string "16"
  no_chunk_usage      no per-chunk usage, only the final one
  verify_ct_one       /generate: spec_verify_ct stays 1 (16 tokens in one verify pass)
  choices_dict        "choices" is an object, not a list
  metrics_nan         /metrics: the verify-pass counter reads NaN
  metrics_inf         /metrics: the generated-tokens counter reads +Inf
  metrics_reset       /metrics: the counters go back between the point's two reads
  metrics_huge        /metrics: 10^12 tokens are generated during the point
  metrics_tiny        /metrics: the verify-pass counter moves by 1e-9 over the point
  metrics_flood       /metrics: an endless answer
                      (with a metrics_ mode, /server_info answers 404 unless info_ok)
  info_ok             /server_info answers honestly even with a metrics_ mode
  info_nan            /server_info: avg_spec_accept_length is NaN (and no /metrics)
  info_deep           /server_info: 200,000 nested arrays (and no /metrics)
  bad_content_length  answers carry Content-Length "abc", no chunking
  bad_chunk_size      the first chunk's size line is "zz"
  flood               after the first token, an endless stream of data lines
  deep_json           a stream event that nests 200,000 arrays
  echo_401            401 with the request's Authorization header in the body

Prints SGLang's ready line once listening (the executor's readiness reads it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys

TOKENS_PER_VERIFY = 2      # the accept length the honest counters give


class Server:
    def __init__(self, modes: dict[str, float | None]) -> None:
        self.modes = modes
        self.generated = 0          # tokens generated since start
        self.metric_reads = 0

    # ------------------------------------------------------------------ HTTP plumbing
    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {}
                for ln in lines[1:]:
                    k, _, v = ln.partition(":")
                    if k:
                        headers[k.strip().lower()] = v.strip()
                n = int(headers.get("content-length") or 0)
                body = await reader.readexactly(n) if n else b""
                keep = await self.route(method, path.split("?")[0], headers, body, writer)
                await writer.drain()
                if not keep:
                    break
        except (asyncio.IncompleteReadError, ConnectionError, ValueError):
            pass
        finally:
            try:
                writer.close()
            except Exception:
                pass

    @staticmethod
    def send(writer, status: int, body: bytes, ctype="application/json", extra=b"") -> bool:
        writer.write(b"HTTP/1.1 %d X\r\nContent-Type: %s\r\nContent-Length: %d\r\n%s\r\n"
                     % (status, ctype.encode(), len(body), extra) + body)
        return True

    # ------------------------------------------------------------------ routes
    async def route(self, method, path, headers, body, writer) -> bool:
        m = self.modes
        if path in ("/health", "/health_generate"):
            return self.send(writer, 200, b"")
        if path == "/flush_cache":
            return self.send(writer, 200, b"Cache flushed.", "text/plain")
        if path == "/metrics":
            if "info_nan" in m or "info_deep" in m:
                return self.send(writer, 404, b"")
            if "metrics_flood" in m:
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                             b"Transfer-Encoding: chunked\r\n\r\n")
                line = b"# " + b"x" * 65000 + b"\n"
                while True:                 # until the client hangs up
                    writer.write(b"%x\r\n%s\r\n" % (len(line), line))
                    await writer.drain()
            return self.send(writer, 200, self.metrics().encode(), "text/plain")
        if path in ("/server_info", "/get_server_info"):
            if any(k.startswith("metrics_") for k in m) and "info_ok" not in m:
                return self.send(writer, 404, b"")   # the counters are all there is
            if "info_deep" in m:
                return self.send(writer, 200, b"[" * 200_000 + b"]" * 200_000)
            avg = "NaN" if "info_nan" in m else str(float(TOKENS_PER_VERIFY))
            return self.send(writer, 200, ('{"internal_states": [{"avg_spec_accept_length": '
                                           + avg + "}]}").encode())
        api = {"/v1/chat/completions": "chat", "/v1/completions": "completions",
               "/generate": "generate"}.get(path)
        if api is None:
            return self.send(writer, 404, b'{"detail": "Not Found"}')
        if "echo_401" in m:
            auth = headers.get("authorization", "")
            return self.send(writer, 401, json.dumps(
                {"error": f"Unauthorized: bad header Authorization: {auth}"}).encode())
        req = json.loads(body)
        if api == "generate":
            n = int((req.get("sampling_params") or {}).get("max_new_tokens") or 16)
        else:
            n = int(req.get("max_tokens") or 16)
        await self.stream(writer, api, n)
        return "bad_content_length" not in m

    def metrics(self) -> str:
        m = self.modes
        self.metric_reads += 1
        second = self.metric_reads % 2 == 0      # the point's read after its load
        gen = float(self.generated)
        verify = gen / TOKENS_PER_VERIFY
        if "metrics_nan" in m:
            verify = float("nan")
        if "metrics_inf" in m and second:
            gen = float("inf")
        if "metrics_reset" in m and not second:
            gen, verify = gen + 1e6, verify + 5e5
        if "metrics_huge" in m and second:
            gen += 1e12
        if "metrics_tiny" in m:
            verify = 5.0 + (1e-9 if second else 0.0)
        out = []
        for name, v in (("sglang:generation_tokens_total", gen),
                        ("sglang:spec_verify_calls_total", verify)):
            out.append(f"# TYPE {name} counter\n{name}{{model_name=\"m\"}} {_prom(v)}\n")
        return "".join(out)

    async def stream(self, writer, api: str, n: int) -> None:
        m = self.modes
        events = []
        chunk_usage = "no_chunk_usage" not in m
        for i in range(1, n + 1):
            self.generated += 1
            events.append(self.event(api, i, chunk_usage))
            if "deep_json" in m and i == 1:
                events.append(b"[" * 200_000 + b"]" * 200_000)
        final = n
        if "usage_scale" in m:
            final = int(n * (m["usage_scale"] or 4))
        if "usage_huge" in m:
            final = 10 ** 12
        if "usage_text" in m:
            final = str(n)
        if api != "generate":
            events.append(json.dumps({"id": "cmpl-h", "choices": [],
                                      "usage": {"completion_tokens": final}}).encode())
        elif final != n:
            events.append(json.dumps({"text": "t" * n, "meta_info": {
                "id": "h", "completion_tokens": final}}).encode())
        events.append(b"[DONE]")
        sse = [b"data: " + e + b"\n\n" for e in events]
        if "bad_content_length" in m:
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                         b"Content-Length: abc\r\n\r\n" + b"".join(sse))
            return
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n")
        if "bad_chunk_size" in m:
            writer.write(b"zz\r\n" + sse[0] + b"\r\n")
            await writer.drain()
            await asyncio.sleep(3600)      # a client that waits for more waits its timeout
            return
        for i, e in enumerate(sse):
            writer.write(b"%x\r\n%s\r\n" % (len(e), e))
            await writer.drain()
            if "flood" in m and i == 0:
                line = b"data: " + b"x" * 65000 + b"\n\n"
                frame = b"%x\r\n%s\r\n" % (len(line), line)
                while True:                 # until the client hangs up
                    writer.write(frame)
                    await writer.drain()
        writer.write(b"0\r\n\r\n")

    def event(self, api: str, i: int, chunk_usage: bool) -> bytes:
        if api == "generate":
            verify = 1 if "verify_ct_one" in self.modes else max(1, i // TOKENS_PER_VERIFY)
            ev = {"text": "t" * i, "meta_info": {"id": "h", "completion_tokens": i,
                                                 "spec_verify_ct": verify}}
            return json.dumps(ev).encode()
        if api == "chat":
            choice = {"index": 0, "delta": {"content": "t"}}
        else:
            choice = {"index": 0, "text": "t"}
        ev = {"id": "cmpl-h", "choices": [choice],
              "usage": {"completion_tokens": i} if chunk_usage else None}
        if "choices_dict" in self.modes:
            ev["choices"] = choice
        return json.dumps(ev).encode()


def _prom(v: float) -> str:
    if v != v:
        return "NaN"
    if v in (float("inf"), float("-inf")):
        return "+Inf" if v > 0 else "-Inf"
    return repr(v)


def parse_modes(text: str) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for part in filter(None, (text or "").split(",")):
        name, _, arg = part.partition(":")
        out[name] = float(arg) if arg else None
    return out


async def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--mode", default=os.environ.get("HOSTILE_MODE", ""))
    args, _ = ap.parse_known_args(argv)
    srv = Server(parse_modes(args.mode))
    server = await asyncio.start_server(srv.handle, args.host, args.port, limit=1 << 20)
    print("The server is fired up and ready to roll!", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    try:
        asyncio.run(main(sys.argv[1:]))
    except KeyboardInterrupt:
        pass
