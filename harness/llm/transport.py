"""An httpx transport that serves and fills the LLM cache. It sits under the openai SDK client,
so calls that libraries build themselves through our client (Ragas via instructor) are cached
too. Only the method, path and JSON body are hashed; headers (Authorization, api-key) are
never hashed or stored."""
from __future__ import annotations

import json
import time
from dataclasses import dataclass

import httpx
import openai

from harness.llm.cache import LLMCache, prompt_hash, request_key

ROLE_HEADER = "x-harness-role"
CACHE_HEADER = "x-harness-cache"
LATENCY_HEADER = "x-harness-latency-ms"


class ReplayMiss(openai.OpenAIError):
    """Replay mode and no cached reply: the run must not call out."""


@dataclass
class TransportStats:
    http_calls: int = 0  # requests actually sent
    cache_hits: int = 0
    in_flight: int = 0
    peak_in_flight: int = 0


def _cacheable(body: bytes) -> bool:
    try:
        obj = json.loads(body)
    except ValueError:
        return False
    if not isinstance(obj, dict) or "error" in obj:
        return False
    if "choices" in obj:
        return bool(obj["choices"])
    return "data" in obj


class CachingTransport(httpx.AsyncBaseTransport):
    def __init__(self, inner: httpx.AsyncBaseTransport, cache: LLMCache | None, kind: str):
        self.inner = inner
        self.cache = cache
        self.kind = kind
        self.stats = TransportStats()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        key = None
        role = request.headers.get(ROLE_HEADER, "")
        if self.cache is not None and self.cache.mode != "off" and request.method == "POST":
            await request.aread()
            try:
                body = json.loads(request.content or b"{}")
            except ValueError:
                body = None
            if isinstance(body, dict):
                key = request_key(self.kind, request.url.path, body)
                hit = self.cache.get(key)
                if hit is not None:
                    self.stats.cache_hits += 1
                    return httpx.Response(200, content=hit.body, request=request, headers={
                        "content-type": "application/json", CACHE_HEADER: "hit", LATENCY_HEADER: f"{hit.latency_ms:.3f}"})
                if self.cache.mode == "replay":
                    what = _describe(body)
                    raise ReplayMiss(f"cache miss in replay mode: role {role or '?'}, model {body.get('model')}, {what}")
        self.stats.http_calls += 1
        self.stats.in_flight += 1
        self.stats.peak_in_flight = max(self.stats.peak_in_flight, self.stats.in_flight)
        t0 = time.perf_counter()
        try:
            resp = await self.inner.handle_async_request(request)
            content = await resp.aread()
        finally:
            self.stats.in_flight -= 1
        latency = (time.perf_counter() - t0) * 1000
        if key is not None and resp.status_code == 200 and _cacheable(content):
            self.cache.put(key, content, latency, kind=self.kind, model=str(body.get("model", "")), role=role)
        headers = [(k, v) for k, v in resp.headers.multi_items() if k.lower() not in ("content-encoding", "content-length", "transfer-encoding")]
        headers += [(CACHE_HEADER, "miss"), (LATENCY_HEADER, f"{latency:.3f}")]
        return httpx.Response(resp.status_code, headers=headers, content=content, request=request)

    async def aclose(self) -> None:
        await self.inner.aclose()


def _describe(body: dict) -> str:
    msgs = body.get("messages") or []
    if msgs:
        sys_txt = next((m.get("content") for m in msgs if m.get("role") == "system"), "") or ""
        last = str(msgs[-1].get("content", ""))[:80]
        return f"prompt {prompt_hash(str(sys_txt))}, last message {last!r}"
    return "request " + json.dumps(body)[:80]
