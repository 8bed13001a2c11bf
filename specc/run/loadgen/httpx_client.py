"""The httpx transport (https URLs): the same records, user-space stamps, later under load."""

from __future__ import annotations

import time

from specc.run.answers import body_cap
from specc.run.loadgen.client import ServerGone
from specc.run.loadgen.records import RequestRecord
from specc.run.loadgen.sse import API_PATHS, finish

class HttpxClient:
    def __init__(self, base_url: str, timeout_s: float, concurrency: int,
                 headers: dict[str, str] | None = None) -> None:
        import httpx
        self.httpx = httpx
        self.headers = {"Content-Type": "application/json", "Accept": "text/event-stream",
                        **(headers or {})}
        n = max(concurrency, 1)
        self.client = httpx.AsyncClient(
            base_url=base_url.rstrip("/"), http2=False,
            timeout=httpx.Timeout(timeout_s, connect=min(timeout_s, 30.0)),
            limits=httpx.Limits(max_connections=n, max_keepalive_connections=n,
                                keepalive_expiry=30.0))

    async def request(self, rec: RequestRecord, api: str, payload: bytes) -> None:
        httpx = self.httpx
        body = bytearray()
        ts: list[float] = []
        offs: list[int] = []
        status = 0
        cap = body_cap(rec.requested_output_tokens)
        _time = time.time
        rec.start = _time()
        try:
            async with self.client.stream(
                    "POST", API_PATHS[api], content=payload,
                    headers=self.headers) as resp:
                status = resp.status_code
                async for chunk in resp.aiter_raw():
                    t = _time()
                    body += chunk
                    ts.append(t)
                    offs.append(len(body))
                    if len(body) > cap:
                        rec.end = t
                        finish(rec, api, status, body, ts, offs,
                               f"bad response: response body past {cap} bytes (the cap for "
                               "the tokens asked for)")
                        return
        except httpx.ConnectError as e:
            if "refused" in str(e).lower() or isinstance(e.__cause__, ConnectionRefusedError):
                raise ServerGone("connection refused") from None
            rec.error = f"connection error: {e}"
            rec.end = _time()
            return
        except httpx.TimeoutException as e:
            rec.end = _time()
            finish(rec, api, status or 200, body, ts, offs,
                   f"timeout ({type(e).__name__})")
            return
        except (httpx.HTTPError, OSError) as e:
            # httpx's RemoteProtocolError is a framing error (bad Content-Length, chunk size)
            rec.end = _time()
            if status == 0:
                rec.error = f"connection error: {type(e).__name__}: {e}"
                return
            finish(rec, api, status, body, ts, offs,
                   f"stream broken: {type(e).__name__}: {e}")
            return
        finish(rec, api, status, body, ts, offs, None)

    async def aclose(self) -> None:
        await self.client.aclose()
