"""HTTP routes, shaped like SGLang 0.5.23's (srt/entrypoints/http_server.py,
srt/entrypoints/openai/serving_chat.py, serving_completions.py)."""

from __future__ import annotations

import asyncio
import hmac
import json
import os
import time

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from specc.engines.sim import TIME_DILATION_PATH

from . import versions
from .args import Sim
from .log import log
from .scheduler import Req, Scheduler
from .stream import HeldText, SimStream
from .truth import started_epoch

#: SGLANG_HEALTH_CHECK_TIMEOUT (srt/entrypoints/http_server.py), seconds
HEALTH_CHECK_TIMEOUT_ENV = "SGLANG_HEALTH_CHECK_TIMEOUT"
#: SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION (srt/environ.py, default true): /health too generates
HEALTH_GENERATION_ENV = "SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION"
#: How often the health check looks for its generation's output: once a second in 0.5.23
#: (health_generate's `await asyncio.sleep(1)`), so a check answers after >= 1 s.
HEALTH_POLL_S = 1.0
#: Seconds replacing HEALTH_POLL_S (the simulator's own): the test suite starts hundreds
#: of servers, each of which waited that second to be found ready (tests/conftest.py).
HEALTH_POLL_ENV = "SPECC_SIM_HEALTH_POLL_S"


def _env_true(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() in ("1", "true", "yes", "on")


def health_poll_s() -> float:
    """$SPECC_SIM_HEALTH_POLL_S when it is a number in (0, HEALTH_POLL_S], else 0.5.23's."""
    try:
        value = float(os.environ.get(HEALTH_POLL_ENV, HEALTH_POLL_S))
    except ValueError:
        return HEALTH_POLL_S
    return value if 0 < value <= HEALTH_POLL_S else HEALTH_POLL_S


#: Paths SGLang 0.5.23 leaves open with --api-key (srt/utils/auth.py, decide_request_auth:
#: "to support k8s probes and Prometheus scraping without embedding secrets").
OPEN_PREFIXES = ("/health", "/ready", "/metrics")
#: json.dumps(obj, separators=(",", ":")), without building an encoder per call (hot path).
_compact = json.JSONEncoder(separators=(",", ":")).encode


def require_api_key(app, api_key: str):
    """SGLang 0.5.23's --api-key middleware: a request to any other path (OPTIONS aside)
    needs `Authorization: Bearer <key>`, else 401 {"error": "Unauthorized"}."""
    want = api_key.encode()

    async def asgi(scope, receive, send):
        if (scope["type"] == "http" and scope["method"] != "OPTIONS"
                and not scope["path"].startswith(OPEN_PREFIXES)):
            auth = dict(scope["headers"]).get(b"authorization", b"")
            scheme, _, token = auth.partition(b" ")
            if scheme.lower() != b"bearer" or not hmac.compare_digest(token, want):
                await JSONResponse({"error": "Unauthorized"}, status_code=401)(
                    scope, receive, send)
                return
        await app(scope, receive, send)

    return asgi


def echo_auth(app):
    """The `echo_auth` fault: a generation request is refused with the credential it carried
    echoed back, as a careless gateway does (specc must not write it anywhere)."""
    async def asgi(scope, receive, send):
        if scope["type"] == "http" and scope["path"] in ("/generate", "/v1/completions",
                                                          "/v1/chat/completions"):
            auth = dict(scope["headers"]).get(b"authorization", b"").decode("latin-1")
            await JSONResponse({"error": "Unauthorized", "authorization": auth},
                               status_code=401)(scope, receive, send)
            return
        await app(scope, receive, send)

    return asgi


class App:
    STARTING, READY = "starting", "ready"

    def __init__(self, sim: Sim, sched: Scheduler):
        self.sim = sim
        self.sched = sched
        self.status = self.STARTING
        self.ready_mono: float | None = None
        self.flap = 0
        self.port = sim.args.port
        routes = [
            Route("/health", self.health, methods=["GET"]),
            Route("/health_generate", self.health, methods=["GET"]),
            Route("/ping", self.ping, methods=["GET"]),
            Route("/get_model_info", self.get_model_info, methods=["GET"]),
            Route("/model_info", self.model_info, methods=["GET"]),
            Route("/get_server_info", self.get_server_info, methods=["GET"]),
            Route("/server_info", self.server_info, methods=["GET"]),
            Route("/v1/models", self.models, methods=["GET"]),
            Route("/flush_cache", self.flush_cache, methods=["GET", "POST"]),
            Route("/metrics", self.metrics, methods=["GET"]),
            Route(TIME_DILATION_PATH, self.time_dilation, methods=["GET", "POST"]),
            Route("/generate", self.generate, methods=["POST", "PUT"]),
            Route("/v1/completions", self.completions, methods=["POST"]),
            Route("/v1/chat/completions", self.chat, methods=["POST"]),
        ]
        self.app = Starlette(routes=routes)
        if sim.args.api_key:
            self.app = require_api_key(self.app, sim.args.api_key)
        if sim.fault is not None and sim.fault.name == "echo_auth":
            self.app = echo_auth(self.app)

    # -- readiness ------------------------------------------------------------------
    async def health(self, request: Request) -> Response:
        """0.5.23 ``health_generate`` (both paths): 503 while starting; else a
        1-token generation, polled once a second ($SPECC_SIM_HEALTH_POLL_S: more
        often): 200 as soon as the scheduler produced any output since the check
        began (so >= 1 s), 503 after
        $SGLANG_HEALTH_CHECK_TIMEOUT (20 s) without any.  ``/health`` answers at
        once only with SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION=false."""
        f = self.sim.fault
        if self.status != self.READY:
            return Response(status_code=503)
        if f is not None:
            if f.name == "health_503_forever":
                return Response(status_code=503)
            if f.name == "health_flap":
                self.flap += 1
                if self.flap % 2 == 0:
                    return Response(status_code=503)
            if f.name == "health_after":
                wait = f.arg if f.arg is not None else 30.0
                if time.monotonic() - (self.ready_mono or 0) < wait:
                    return Response(status_code=503)
        generates = self.sim.behaviour["health_generates"]
        if request.url.path == "/health":
            generates = generates and _env_true(HEALTH_GENERATION_ENV, True)
        if not generates:
            return Response(status_code=200)
        timeout = float(os.environ.get(HEALTH_CHECK_TIMEOUT_ENV, "20"))
        tic_wall, tic = time.time(), time.monotonic()
        poll = health_poll_s()
        r = self.sched.submit("health", 1, 1, True, False, health=True)
        try:
            while time.monotonic() < tic + timeout:
                await asyncio.sleep(poll)
                if self.sched.last_output_mono > tic:
                    return Response(status_code=200)
        finally:
            r.aborted = True
        last = self.sched.last_output_mono
        log(versions.render(self.sim.version, "health_failed", timeout=int(timeout),
                            tic=time.strftime("%H:%M:%S", time.localtime(tic_wall)),
                            last=time.strftime("%H:%M:%S", time.localtime(
                                time.time() - (time.monotonic() - last)))))
        return Response(status_code=503)

    async def ping(self, request: Request) -> Response:
        return PlainTextResponse("pong")

    # -- info -----------------------------------------------------------------------
    def _model_info(self) -> dict:
        return {"model_path": self.sim.args.model_path, "served_model_name": self.sim.served_name,
                "tokenizer_path": self.sim.args.tokenizer_path or self.sim.args.model_path,
                "is_generation": True, "preferred_sampling_params": None,
                "weight_version": "default", "has_image_understanding": False,
                "has_audio_understanding": False, "model_type": self.sim.target.get("model_type"),
                "architectures": self.sim.target.get("architectures")}

    async def model_info(self, request: Request) -> Response:
        return JSONResponse(self._model_info())

    def _deprecated(self, old: str, new: str) -> None:
        log(versions.render(self.sim.version, "deprecated_endpoint", old=old, new=new))

    async def get_model_info(self, request: Request) -> Response:
        self._deprecated("/get_model_info", "/model_info")
        return await self.model_info(request)

    async def get_server_info(self, request: Request) -> Response:
        self._deprecated("/get_server_info", "/server_info")
        return await self.server_info(request)

    async def models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{
            "id": self.sim.served_name, "object": "model", "created": int(started_epoch()),
            "owned_by": "sglang", "root": self.sim.served_name, "parent": None,
            "max_model_len": self.sim.context_length}]})

    def internal_state(self) -> dict:
        s = self.sched
        st = {"last_gen_throughput": s.last_gen_throughput, "memory_usage": {
            "weight": round(self.sim.weight_gb_per_gpu, 2), "kvcache": round(self.sim.kv_gb, 2),
            "token_capacity": self.sim.max_total_tokens, "graph": 1.73},
            "effective_max_running_requests_per_dp": self.sim.max_running}
        avg = s.avg_accept() if self.sim.spec is not None else None
        if avg is not None:   # folded every decode-log interval (internal_state.py)
            st["avg_spec_accept_length"] = avg
        return st

    async def server_info(self, request: Request) -> Response:
        info = {k: v for k, v in vars(self.sim.args).items() if not k.startswith("sim_")}
        info["port"] = self.port
        info["speculative_algorithm"] = self.sim.algorithm
        info["context_length"] = self.sim.args.context_length
        info["internal_states"] = [self.internal_state()]
        info["mem_fraction_static"] = self.sim.mem_fraction
        info["version"] = self.sim.version
        info["status"] = "Up" if self.status == self.READY else "Starting"
        info["sim"] = {"emulates": f"sglang {self.sim.version}", "acceptance": self.sim.args.sim_acceptance, "seed": self.sim.args.sim_seed,
                       "textless": self.sim.args.sim_textless,
                       "fault": str(self.sim.fault) if self.sim.fault else None,
                       "target_facts_source": self.sim.target_src,
                       "draft_facts_source": self.sim.draft_src,
                       "max_total_num_tokens": self.sim.max_total_tokens}
        return JSONResponse(info)

    async def flush_cache(self, request: Request) -> Response:
        """Empties the prefix cache; 400 while requests run or wait (0.5.23 http_server.py)."""
        if not self.sched.flush_cache():
            return PlainTextResponse("Flush cache failed.\n", status_code=400)
        return PlainTextResponse("Cache flushed.\nPlease check backend logs for more details. "
                                 "(When there are running or waiting requests, the operation "
                                 "will not be performed.)\n")

    async def time_dilation(self, request: Request) -> Response:
        """The simulator's own (no SGLang route): GET the factor every modelled duration is
        stretched by, POST ``{"factor": s}`` (s >= 1) to set it between points; 400 while
        requests run or wait."""
        if request.method == "POST":
            body = await self._json(request)
            if isinstance(body, Response):
                return body
            f = body.get("factor")
            if isinstance(f, bool) or not isinstance(f, (int, float)) or not 1 <= f <= 1000:
                return _error(400, "factor: a number from 1 to 1000")
            if not self.sched.set_dilation(float(f)):
                return _error(400, "time dilation not changed: requests are running or waiting")
        return JSONResponse({"factor": self.sched.dilation})

    async def metrics(self, request: Request) -> Response:
        if not self.sim.args.enable_metrics:
            return PlainTextResponse("Not Found", status_code=404)
        s, name = self.sched, self.sim.served_name
        # Labels as 0.5.23 sets them (srt/observability/metrics_collector.py):
        # the scheduler's carry its ranks, the tokenizer's is_streaming.
        sched = f'model_name="{name}",engine_type="unified",tp_rank="0",pp_rank="0",moe_ep_rank="0"'
        tok = f'model_name="{name}",engine_type="unified"'
        rows = [
            ("sglang:num_running_reqs", "gauge", "The number of running requests.",
             [(sched, len(s.running))]),
            ("sglang:num_queue_reqs", "gauge", "The number of requests in the waiting queue.",
             [(sched, len(s.waiting))]),
            ("sglang:gen_throughput", "gauge", "The generation throughput (token/s).",
             [(sched, s.last_gen_throughput)]),
            ("sglang:token_usage", "gauge", "The token usage.",
             [(sched, round(s._token_count() / max(1, self.sim.max_total_tokens), 2))]),
            ("sglang:spec_accept_length", "gauge",
             "Mean acceptance length of speculative decoding (accepted drafts + bonus token "
             "per forward).", [(sched, s.gauge_accept_length)]),
            ("sglang:spec_accept_rate", "gauge",
             "Speculative acceptance rate (`accepted drafts / proposed drafts` in batch).",
             [(sched, s.gauge_accept_rate)]),
            ("sglang:prompt_tokens_total", "counter", "Number of prefill tokens processed.",
             [(f'{tok},is_streaming="{str(k).lower()}"', v[0]) for k, v in s.finished.items()]),
            ("sglang:generation_tokens_total", "counter", "Number of generation tokens processed.",
             [(f'{tok},is_streaming="{str(k).lower()}"', v[1]) for k, v in s.finished.items()]),
            ("sglang:num_requests_total", "counter", "Number of requests processed.",
             [(f'{tok},is_streaming="{str(k).lower()}"', v[2]) for k, v in s.finished.items()]),
        ]
        if s.verify_calls_total:   # the labelled child exists once incremented
            rows.append(("sglang:spec_verify_calls_total", "counter",
                         "Number of speculative decoding verification calls.",
                         [(tok, s.verify_calls_total)]))
        out = []
        for metric, kind, help_, samples in rows:
            out.append(f"# HELP {metric} {help_}\n# TYPE {metric} {kind}\n")
            out.extend(f"{metric}{{{labels}}} {float(value)}\n" for labels, value in samples)  # type: ignore[attr-defined]  # a list of (labels, value)
        out.append(self._lateness_metrics(f'model_name="{name}"'))
        return Response("".join(out), media_type="text/plain; version=0.0.4; charset=utf-8")

    def _lateness_metrics(self, labels: str) -> str:
        """The simulator's own (no SGLang metric): how late its steps were delivered against
        their absolute schedule, a histogram a client reads before and after a point, and
        the worst since start (specc/engines/sim.py puts the recipe in the plan)."""
        sch = self.sched.schedule
        name = "specc_sim:step_lateness_seconds"
        out = [f"# HELP {name} How late each simulated step was delivered after its deadline "
               f"on the absolute schedule.\n# TYPE {name} histogram\n"]
        out += [f'{name}_bucket{{{labels},le="{le}"}} {float(n)}\n' for le, n in sch.histogram()]
        out.append(f"{name}_sum{{{labels}}} {sch.late_sum}\n{name}_count{{{labels}}} "
                   f"{float(sch.steps)}\n")
        worst = "specc_sim:step_lateness_max_seconds"
        out.append(f"# HELP {worst} The latest any simulated step was delivered since start.\n"
                   f"# TYPE {worst} gauge\n{worst}{{{labels}}} {sch.late_max}\n")
        return "".join(out)

    # -- generation -------------------------------------------------------------------
    async def _json(self, request: Request) -> dict | Response:
        try:
            body = await request.json()
        except Exception:
            return _error(400, "Invalid JSON body")
        if not isinstance(body, dict):
            return _error(400, "Request body must be a JSON object")
        return body

    def _check_len(self, prompt_tokens: int) -> Response | None:
        if prompt_tokens >= self.sim.context_length:
            return _error(400, f"The input ({prompt_tokens} tokens) is longer than the model's "
                               f"context length ({self.sim.context_length} tokens).")
        return None

    def _submit(self, key: str, ptoks: int, max_new: int, ignore_eos: bool, stream: bool,
                rid=None, tokens=None, history=None, arrival=None, conn=None) -> Req:
        r = self.sched.submit(key, ptoks, max_new, ignore_eos, stream, rid=rid,
                              tokens=tokens, history=history, arrival=arrival)
        self.sched.arrivals.queued(conn)   # no step waits for it any more
        return r

    def _held(self, key: str, r: Req) -> HeldText:
        """The tokens of ``r`` whose text the detokenizer holds back (HeldText)."""
        limit = r.limit()
        return HeldText(self.sim.args.sim_seed, key, limit, limit >= r.max_new, r.ignore_eos,
                        self.sim.args.sim_textless)

    def _text(self, key: str, r: Req) -> str:
        """A finished request's text: what the detokenizer ever showed."""
        return "".join(r.tokens[:self._held(key, r).visible(len(r.tokens))])

    def _meta(self, r: Req, final: bool) -> dict:
        m = {"id": r.rid, "finish_reason": r.finish_reason if final else None,
             "prompt_tokens": r.prompt_tokens, "completion_tokens": len(r.tokens),
             "cached_tokens": r.cached, "e2e_latency": time.time() - r.created}
        spec = self.sim.spec
        proposed = r.verify_ct * (spec.num_draft_tokens - 1) if spec is not None else 0
        if r.verify_ct > 0 and proposed > 0:
            # srt/managers/tokenizer_manager.py _calculate_spec_decoding_metrics:
            # completion tokens (incl. the prefill's first token) / verify calls
            m["spec_accept_rate"] = r.correct_drafts / proposed
            m["spec_accept_length"] = len(r.tokens) / r.verify_ct
            m["spec_num_correct_drafts"] = r.correct_drafts
            m["spec_num_proposed_drafts"] = proposed
            m["spec_verify_ct"] = r.verify_ct
        return m

    async def generate(self, request: Request) -> Response:
        body = await self._json(request)
        if isinstance(body, Response):
            return body
        sp = body.get("sampling_params") or {}
        if "text" in body and body["text"] is not None:
            text = body["text"]
            if isinstance(text, list):
                return _error(400, "batch requests are not supported by the simulator")
            key = str(text)
            words = key.split()
        elif "input_ids" in body:
            ids = body["input_ids"]
            if not isinstance(ids, list) or (ids and isinstance(ids[0], list)):
                return _error(400, "batch requests are not supported by the simulator")
            key, words = json.dumps(ids), ids
        else:
            return _error(400, "Either text or input_ids should be provided.")
        ptoks = len(words)
        if (e := self._check_len(ptoks)) is not None:
            return e
        max_new = int(sp.get("max_new_tokens") or 128)
        stream = bool(body.get("stream"))
        ignore_eos = bool(sp.get("ignore_eos", False))
        extra = {"tokens": words, "history": body.get("text", body.get("input_ids")),
                 **_arrival(request)}
        if not stream:
            r = self._submit(key, ptoks, max_new, ignore_eos, False, body.get("rid"), **extra)
            await r.done
            return JSONResponse({"text": self._text(key, r), "meta_info": self._meta(r, True)})

        def make_chunk(r: Req):
            held = self._held(key, r)

            def chunk(r: Req, final: bool) -> bytes:
                # cumulative text, grown only by tokens that show theirs; the count grows
                text = "".join(r.tokens[:held.visible(len(r.tokens))])
                return b"data: " + json.dumps({"text": text, "output_ids": [],
                                                "meta_info": self._meta(r, final)}).encode() + b"\n\n"
            return chunk
        return SimStream(self, lambda: self._submit(key, ptoks, max_new, ignore_eos, True,
                                                    body.get("rid"), **extra),
                         make_chunk)

    async def completions(self, request: Request) -> Response:
        body = await self._json(request)
        if isinstance(body, Response):
            return body
        prompt = body.get("prompt")
        if isinstance(prompt, list):
            if prompt and isinstance(prompt[0], int):
                key = json.dumps(prompt)
            elif len(prompt) == 1:
                key = str(prompt[0])
            else:
                return _error(400, "batch prompts are not supported by the simulator")
        elif isinstance(prompt, str):
            key = prompt
        else:
            return _error(400, "prompt is required")
        tokens = prompt if isinstance(prompt, list) and prompt and isinstance(prompt[0], int) \
            else key.split()
        return await self._openai(request, body, key, tokens, prompt, chat=False)

    async def chat(self, request: Request) -> Response:
        body = await self._json(request)
        if isinstance(body, Response):
            return body
        msgs = body.get("messages")
        if not isinstance(msgs, list) or not msgs:
            return _error(400, "messages is required")
        parts = []
        for m in msgs:
            c = m.get("content") if isinstance(m, dict) else None
            if isinstance(c, list):
                c = " ".join(p.get("text", "") for p in c if isinstance(p, dict))
            parts.append(str(c or ""))
        key = "\n".join(parts)
        return await self._openai(request, body, key, key.split(), msgs, chat=True)

    async def _openai(self, request: Request, body: dict, key: str, tokens: list, history,
                      chat: bool) -> Response:
        """``tokens``: the prompt's tokens (the prefix cache's key); ``history``: what the
        request carried (its messages, or its prompt), for the truth log."""
        ptoks = len(tokens)
        if (e := self._check_len(ptoks)) is not None:
            return e
        extra = {"tokens": tokens, "history": history, **_arrival(request)}
        report_cached = self.sim.args.enable_cache_report
        max_new = body.get("max_completion_tokens") or body.get("max_tokens") or (
            128 if chat else 16)
        stream = bool(body.get("stream"))
        ignore_eos = bool(body.get("ignore_eos", False))
        model = body.get("model") or self.sim.served_name
        created = int(time.time())
        obj = "chat.completion" if chat else "text_completion"

        def usage(r: Req) -> dict:
            # usage_processor.py: prompt_tokens_details only with --enable-cache-report
            return {"prompt_tokens": r.prompt_tokens, "total_tokens": r.prompt_tokens + len(r.tokens),
                    "completion_tokens": len(r.tokens), "prompt_tokens_details":
                    {"cached_tokens": r.cached} if report_cached else None}

        def reason(r: Req) -> str | None:
            return None if r.finish_reason is None else r.finish_reason["type"]

        def cid(r: Req) -> str:
            return ("chatcmpl-" if chat else "cmpl-") + r.rid

        if not stream:
            r = self._submit(key, ptoks, int(max_new), ignore_eos, False, body.get("rid"),
                             **extra)
            await r.done
            text = self._text(key, r)
            if chat:
                choice = {"index": 0, "message": {"role": "assistant", "content": text,
                                                  "reasoning_content": None, "tool_calls": None},
                          "logprobs": None, "finish_reason": reason(r), "matched_stop": None}
            else:
                choice = {"index": 0, "text": text, "logprobs": None,
                          "finish_reason": reason(r), "matched_stop": None}
            out = {"id": cid(r), "object": obj, "created": created, "model": model,
                   "choices": [choice], "usage": usage(r)}
            return JSONResponse(out)

        # openai/utils.py should_include_usage: continuous_usage_stats puts the running
        # usage (completion_tokens so far) on every content chunk
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        continuous = bool((body.get("stream_options") or {}).get("continuous_usage_stats"))
        obj_chunk = "chat.completion.chunk" if chat else "text_completion"

        def make_chunk(r: Req):
            state = {"sent": 0, "shown": 0}
            rid = cid(r)
            held = self._held(key, r)

            def sse(obj: dict) -> bytes:
                return b"data: " + _compact(obj).encode() + b"\n\n"

            def chat_chunk(delta: dict, finish=None, with_usage=False) -> bytes:
                """0.5.23's msgspec chunk (openai/sse_utils.py build_sse_content): StreamChunk
                and StreamDelta omit_defaults (no "usage", no null role/content), but
                reasoning_content is required (always there); StreamChoice keeps its nulls."""
                obj = {"id": rid, "object": obj_chunk, "created": created, "model": model,
                       "choices": [{"index": 0, "delta": {"reasoning_content": None, **delta},
                                    "logprobs": None, "finish_reason": finish,
                                    "matched_stop": None}]}
                if with_usage:
                    obj["usage"] = usage(r)
                return sse(obj)

            def chunk(r: Req, final: bool) -> bytes:
                # the text of the tokens shown since the last chunk (HeldText: a token
                # that completes no UTF-8 character brings none, the usage counts it)
                shown = held.visible(len(r.tokens))
                delta = "".join(r.tokens[state["shown"]:shown])
                first = state["sent"] == 0
                state["sent"], state["shown"] = len(r.tokens), shown
                if chat:   # serving_chat.py: a role-only chunk opens the stream, the finish
                    out = chat_chunk({"role": "assistant", "content": ""}) if first else b""
                    if delta:     # reason closes it in a chunk of its own (no content); a
                        # step that showed no text sends nothing
                        out += chat_chunk({"content": delta}, with_usage=continuous)
                    if final:
                        out += chat_chunk({}, finish=reason(r))
                        if include_usage:   # a pydantic chunk: its nulls stay
                            out += sse({"id": rid, "object": obj_chunk, "created": created,
                                        "model": model, "choices": [], "usage": usage(r)})
                    return out
                # serving_completions.py: pydantic chunks (nulls kept), the finish reason on
                # the last text chunk; the usage chunk dumped with exclude_none
                choice = {"index": 0, "text": delta, "logprobs": None,
                          "finish_reason": reason(r) if final else None, "matched_stop": None}
                out = sse({"id": rid, "object": obj_chunk, "created": created, "model": model,
                           "choices": [choice], "usage": usage(r) if continuous else None})
                if final and include_usage:
                    out += sse({"id": rid, "object": obj_chunk, "created": created,
                                "model": model, "choices": [],
                                "usage": {k: v for k, v in usage(r).items() if v is not None}})
                return out
            return chunk
        return SimStream(self, lambda: self._submit(key, ptoks, int(max_new), ignore_eos, True,
                                                    body.get("rid"), **extra),
                         make_chunk)


def _arrival(request: Request) -> dict:
    """When the request's first bytes came in, and its connection (arrivals.py)."""
    return {"arrival": request.scope.get("specc.sim.arrival"),
            "conn": request.scope.get("specc.sim.conn")}


def _error(code: int, msg: str) -> Response:
    return JSONResponse({"object": "error", "message": msg, "type": "BadRequestError",
                         "param": None, "code": code}, status_code=code)

