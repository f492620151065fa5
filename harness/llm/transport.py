"""The HTTP transport under the openai SDK client: aiohttp (the SDK's own aiohttp transport,
`httpx_aiohttp`, as in `openai[aiohttp]`), with the LLM cache in front of it. It sits under the
SDK client, so calls that libraries build themselves through our client (Ragas via instructor)
are cached too. Only the method, path and JSON body are hashed; headers (Authorization,
api-key) are never hashed or stored.

Why aiohttp: httpcore's connection pool walks every connection for every queued request
(encode/httpcore#1035), a cost per call that grows with the concurrency; aiohttp's connector
does not (bench/results/latest.md). Its connection limit is sized to the run's concurrency.

The latency a call reports (LATENCY_HEADER) is taken around the HTTP exchange only: from
handing the request to aiohttp to the last byte of the reply. A cache hit reports the latency
stored with the reply. Replies go to the cache write-behind (`LLMCache.put_later`), so the event
loop never waits for SQLite; `aclose()` waits for the writes."""
from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import json
import ssl
import time
from dataclasses import dataclass

import aiohttp
import httpx2
import openai
from httpx_aiohttp.httpx2 import AiohttpTransport

from harness.errors import BadInput
from harness.llm.cache import LLMCache, prompt_hash, request_key
from harness.llm.ledger import StopRun

ROLE_HEADER = "x-harness-role"
CACHE_HEADER = "x-harness-cache"
LATENCY_HEADER = "x-harness-latency-ms"
@dataclass
class Pending:
    """A request whose reply the LLMClient validates before it may be cached: the transport hands
    the reply over here instead of writing it (an invalid reply is never cached). `key`: the
    cache key when the client looked the request up already (and missed)."""

    key: str | None = None
    model: str = ""
    role: str = ""
    body: bytes | None = None
    latency_ms: float = 0.0


PENDING: contextvars.ContextVar[Pending | None] = contextvars.ContextVar("harness_pending", default=None)


class ReplayMiss(StopRun, openai.OpenAIError, BadInput):
    """Replay mode and no cached reply: the run must not call out. Raised here, under the SDK's
    request: an OpenAIError, which the SDK propagates as it is (anything else it would wrap in
    APIConnectionError)."""


@dataclass
class TransportStats:
    http_calls: int = 0  # requests actually sent
    cache_hits: int = 0
    in_flight: int = 0
    peak_in_flight: int = 0


def _cacheable(body: bytes, request: dict | None = None) -> bool:
    """A reply worth keeping: not an error, with choices (or embeddings); when the request asked for
    JSON, its content parses as JSON (a library's own calls, e.g. Ragas', validate after us)."""
    try:
        obj = json.loads(body)
    except ValueError:
        return False
    if not isinstance(obj, dict) or "error" in obj:
        return False
    if "choices" not in obj:
        return "data" in obj
    if not obj["choices"]:
        return False
    if ((request or {}).get("response_format") or {}).get("type") in ("json_object", "json_schema"):
        try:
            json.loads((obj["choices"][0].get("message") or {}).get("content") or "")
        except (ValueError, TypeError):
            return False
    return True


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    """httpx's default TLS context (certifi), built once per process (building one is slow)."""
    return httpx2.create_ssl_context()


def aiohttp_transport(connections: int) -> AiohttpTransport:
    """The aiohttp transport with `connections` connections (kept alive between calls)."""
    return AiohttpTransport(verify=_ssl_context(),
                            limits=httpx2.Limits(max_connections=connections, max_keepalive_connections=connections))


@contextlib.contextmanager
def _connection_errors():
    """httpx_aiohttp 0.2.0 maps every aiohttp.ClientConnectionError (a refused connection, a
    reset, a server that hung up) to ConnectTimeout, so the SDK would report APITimeoutError for
    them (also noted in the review of openai-python#3594). Only real timeouts stay timeouts;
    the rest become the network errors httpx raises for them (the SDK: APIConnectionError)."""
    try:
        yield
    except httpx2.TimeoutException as e:
        cause = e.__cause__
        if isinstance(cause, aiohttp.ClientConnectionError) and not isinstance(cause, asyncio.TimeoutError):
            kind = httpx2.ConnectError if isinstance(cause, aiohttp.ClientConnectorError) else httpx2.ReadError
            raise kind(str(e) or type(cause).__name__) from cause
        raise


class CachingTransport(httpx2.AsyncBaseTransport):
    def __init__(self, inner: httpx2.AsyncBaseTransport, cache: LLMCache | None, kind: str):
        self.inner = inner
        self.cache = cache
        self.kind = kind
        self.stats = TransportStats()

    def _lookup(self, request: httpx2.Request) -> tuple[str | None, dict | None, httpx2.Response | None]:
        """(cache key, JSON body, cached response or None) of a POST; raises ReplayMiss in replay mode."""
        try:
            body = json.loads(request.content or b"{}")
        except ValueError:
            return None, None, None
        if not isinstance(body, dict):
            return None, None, None
        key = request_key(self.kind, request.url.path, body)
        hit = self.cache.get(key)
        if hit is not None:
            self.stats.cache_hits += 1
            return key, body, httpx2.Response(200, content=hit.body, request=request, headers={
                "content-type": "application/json", CACHE_HEADER: "hit", LATENCY_HEADER: f"{hit.latency_ms:.3f}"})
        if self.cache.mode == "replay":
            role = request.headers.get(ROLE_HEADER, "")
            raise ReplayMiss(f"cache miss in replay mode: role {role or '?'}, model {body.get('model')}, {_describe(body)}")
        return key, body, None

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        key = model = body = None
        pending = PENDING.get()
        if self.cache is not None and self.cache.mode != "off" and request.method == "POST":
            if pending is not None and pending.key is not None:
                key, model = pending.key, pending.model
            else:
                await request.aread()
                key, body, hit = self._lookup(request)
                if hit is not None:
                    return hit
                model = str(body.get("model", "")) if body is not None else ""
        self.stats.http_calls += 1
        self.stats.in_flight += 1
        self.stats.peak_in_flight = max(self.stats.peak_in_flight, self.stats.in_flight)
        t0 = time.perf_counter()
        try:
            with _connection_errors():
                resp = await self.inner.handle_async_request(request)
                content = await resp.aread()
        finally:
            self.stats.in_flight -= 1
        latency = (time.perf_counter() - t0) * 1000
        if key is not None and resp.status_code == 200:
            role = request.headers.get(ROLE_HEADER, "")
            if pending is not None:  # the client caches it once it has validated it (not parsed again here)
                pending.key, pending.model, pending.role, pending.body, pending.latency_ms = key, model, role, content, latency
            elif _cacheable(content, body):
                self.cache.put_later(key, content, latency, kind=self.kind, model=model, role=role)
        resp.headers[CACHE_HEADER] = "miss"  # the reply, read: its content is decoded and kept
        resp.headers[LATENCY_HEADER] = f"{latency:.3f}"
        return resp

    async def aclose(self) -> None:
        try:
            await self.inner.aclose()
        finally:
            if self.cache is not None:
                self.cache.flush()


def _describe(body: dict) -> str:
    msgs = body.get("messages") or []
    if msgs:
        sys_txt = next((m.get("content") for m in msgs if m.get("role") == "system"), "") or ""
        last = str(msgs[-1].get("content", ""))[:80]
        return f"prompt {prompt_hash(str(sys_txt))}, last message {last!r}"
    return "request " + json.dumps(body)[:80]
