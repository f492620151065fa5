"""A scripted, OpenAI-compatible HTTP test server (aiohttp in its own thread, 127.0.0.1).

``TestServer(*, host="127.0.0.1", port=0, script=None, default_reply="OK",
embedding_dim=8, latency=0.0, models=(...), seed=0, retry_after="1",
hang_seconds=30.0)``; ``start()``/``stop()`` or a ``with`` block; ``srv.base_url``.

    with TestServer(embedding_dim=8, latency=0.0, seed=0) as srv:   # port 0 = free port
        srv.add_rule({"standalone": "holiday days"}, user="how many")
        srv.add_rule(lambda req: f"seed={req.get('seed')}", prompt_hash=prompt_hash(SYSTEM))
        srv.add_rule([{"name": "Answer", "arguments": {"x": 1}}], model="tool-model")
        client = openai.OpenAI(base_url=srv.base_url, api_key="k", max_retries=0)

Endpoints (also without ``/v1``): ``POST /v1/chat/completions`` (no streaming),
``POST /v1/embeddings`` (unit vectors hashed from the text, :meth:`TestServer.embed`,
float or base64), ``GET /v1/models``.

``add_rule(reply, *, user=, system=, prompt_hash=, model=, when=, fault=,
fault_rate=1.0, fault_times=None) -> Rule``: all given matchers must hold (substring
of the last user message / of the system+developer text; prefix of that text's
sha256, see :func:`prompt_hash`; equal ``model``; ``when(request_json)``). First
match wins; ``Rule.hits`` counts. A reply is a ``str`` (content), ``dict`` (JSON
content), ``list`` of ``{"name", "arguments"}`` (``tool_calls``) or a callable
``(request_json) -> str | dict | list``. No match: ``"{}"`` if ``response_format``
is ``json_schema``/``json_object``, else ``srv.script.default_reply``
(``srv.script`` is a :class:`Script`; one can be shared by several servers).

Faults (``FAULTS``): ``"429"`` (``Retry-After: srv.retry_after``),
``"429_no_retry_after"``, ``"500"``, ``"hang"`` (sleep ``srv.hang_seconds``, then
reply), ``"reset"`` (TCP RST), ``"invalid_json"`` (content/arguments cut off),
``"bad_schema"`` (valid JSON, wrong fields/types), ``"empty_choices"``, ``"length"`` (the reply
as scripted, with ``finish_reason: length``: a model cut at max_tokens).
``set_faults(*kinds, rate=1.0, seed=None, times=None, retry_after=None,
hang_seconds=None)`` hits every POST (``invalid_json``/``bad_schema`` alter chat
replies only; ``empty_choices`` also empties embedding ``data``); ``set_faults()``
clears; a rule's own ``fault`` applies when the global draw did not fire. A seeded ``random.Random`` draws; ``times`` caps the
injections ("fail twice, then succeed"). ``srv.latency`` (s) delays every call.

Observability (thread-safe): ``srv.requests`` (list of :class:`Recorded`, with
``authorization``/``api-key`` headers as ``"***"``), ``srv.calls``,
``srv.in_flight``, ``srv.peak_in_flight``, ``srv.reset_stats()``.
"""
from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import random
import socket
import struct
import threading
import time
import uuid
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Callable

from aiohttp import web
from harness.errors import BadInput

__all__ = ["FAULTS", "Recorded", "Rule", "Script", "TestServer", "prompt_hash"]

FAULTS = ("429", "429_no_retry_after", "500", "hang", "reset", "invalid_json", "bad_schema", "empty_choices", "length")
Reply = Any  # str | dict | list[dict] | Callable[[dict], str | dict | list]


def prompt_hash(text: str) -> str:
    """First 12 hex chars of the sha256 of ``text`` (a prompt-version id)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


def _texts(req: dict, *roles: str) -> list[str]:
    """Text of the messages with these roles (all messages if none given); content parts are joined."""
    def text(c: Any) -> str:
        return " ".join(p.get("text", "") for p in c if isinstance(p, dict)) if isinstance(c, list) else c or ""
    return [text(m.get("content")) for m in req.get("messages", []) if not roles or m.get("role") in roles]


@dataclass
class _FaultSpec:
    kinds: tuple[str, ...] = ()
    rate: float = 1.0
    times: int | None = None
    injected: int = 0

    def __post_init__(self) -> None:
        if unknown := set(self.kinds) - set(FAULTS):
            raise BadInput(f"unknown faults {sorted(unknown)}; expected some of {FAULTS}")

    def draw(self, rng: random.Random) -> str | None:
        exhausted = self.times is not None and self.injected >= self.times
        if not self.kinds or exhausted or rng.random() >= self.rate:
            return None
        self.injected += 1
        return rng.choice(self.kinds)


@dataclass
class Rule:
    reply: Reply = ""
    user: str | None = None
    system: str | None = None
    prompt_hash: str | None = None
    model: str | None = None
    when: Callable[[dict], bool] | None = None
    fault: _FaultSpec = field(default_factory=_FaultSpec)
    hits: int = 0

    def matches(self, req: dict) -> bool:
        system = "\n".join(_texts(req, "system", "developer"))
        users = _texts(req, "user")
        return ((self.user is None or (bool(users) and self.user in users[-1]))
                and (self.system is None or self.system in system)
                and (self.prompt_hash is None
                     or hashlib.sha256(system.encode("utf-8")).hexdigest().startswith(self.prompt_hash))
                and (self.model is None or self.model == req.get("model"))
                and (self.when is None or bool(self.when(req))))


class Script:
    """Ordered reply rules plus a default reply."""

    def __init__(self, default_reply: Reply = "OK"):
        self.default_reply = default_reply
        self.rules: list[Rule] = []

    def add(self, reply: Reply, *, user: str | None = None, system: str | None = None,
            prompt_hash: str | None = None, model: str | None = None,
            when: Callable[[dict], bool] | None = None, fault: str | None = None,
            fault_rate: float = 1.0, fault_times: int | None = None) -> Rule:
        rule = Rule(reply, user, system, prompt_hash, model, when,
                    _FaultSpec((fault,) if fault else (), fault_rate, fault_times))
        self.rules.append(rule)
        return rule

    def match(self, req: dict) -> Rule | None:
        return next((r for r in list(self.rules) if r.matches(req)), None)


@dataclass
class Recorded:
    method: str
    path: str
    json: Any
    headers: dict[str, str]
    time: float


def _corrupt(text: str, kind: str) -> str:
    """``invalid_json``: cut the JSON off; ``bad_schema``: wrong types plus an unknown field."""
    if kind == "invalid_json":
        return text[:-1] if text.startswith("{") and len(text) > 1 else '{"standalone": "x"'
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    wrong = {str: 12345, int: "NaN", float: "NaN", bool: "no", list: "not-a-list", dict: "not-an-object"}
    fields = {k: wrong.get(type(v), 0) for k, v in value.items()} if isinstance(value, dict) else {}
    return json.dumps({**fields, "unexpected_field": True})


def _error(status: int, message: str, etype: str, headers: dict | None = None) -> web.Response:
    body = {"error": {"message": message, "type": etype, "param": None, "code": None}}
    return web.json_response(body, status=status, headers=headers)


class TestServer:
    """OpenAI-compatible scripted server; see the module docstring."""

    __test__ = False  # not a pytest test class

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0, script: Script | None = None,
                 default_reply: Reply = "OK", embedding_dim: int = 8, latency: float = 0.0,
                 models: tuple[str, ...] = ("test-model", "test-embedding"), seed: int = 0,
                 retry_after: str | float = "1", hang_seconds: float = 30.0):
        self.host, self.port = host, port
        self.script = script if script is not None else Script(default_reply)
        self.embedding_dim, self.latency, self.models = embedding_dim, latency, models
        self.retry_after, self.hang_seconds = str(retry_after), hang_seconds
        self._faults, self._rng = _FaultSpec(), random.Random(seed)
        self._lock = threading.Lock()
        self._requests: list[Recorded] = []
        self._calls = self._in_flight = self._peak = 0
        self._thread: threading.Thread | None = None
        self._loop: Any = None  # the server's event loop and its stop event, while running
        self._stopping: Any = None

    # ---- scripting and faults ------------------------------------------------
    def add_rule(self, reply: Reply, **match: Any) -> Rule:
        return self.script.add(reply, **match)

    def set_faults(self, *kinds: str, rate: float = 1.0, seed: int | None = None, times: int | None = None,
                   retry_after: str | float | None = None, hang_seconds: float | None = None) -> None:
        spec = _FaultSpec(tuple(kinds), rate, times)
        with self._lock:
            self._faults, self._rng = spec, self._rng if seed is None else random.Random(seed)
            self.retry_after = self.retry_after if retry_after is None else str(retry_after)
            self.hang_seconds = self.hang_seconds if hang_seconds is None else hang_seconds

    # ---- observability -------------------------------------------------------
    def _stat(self, name: str) -> Any:
        with self._lock:
            value = getattr(self, name)
            return list(value) if isinstance(value, list) else value

    requests = property(lambda self: self._stat("_requests"), doc="Copy of the request log.")
    calls = property(lambda self: self._stat("_calls"), doc="Number of requests received.")
    in_flight = property(lambda self: self._stat("_in_flight"), doc="Requests being handled now.")
    peak_in_flight = property(lambda self: self._stat("_peak"), doc="Most requests handled at once.")

    def reset_stats(self) -> None:
        with self._lock:
            self._requests.clear()
            self._calls, self._peak = 0, self._in_flight

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    # ---- lifecycle -----------------------------------------------------------
    def start(self) -> TestServer:
        if self._thread is not None:
            raise RuntimeError("server already started")
        ready, failure = threading.Event(), []

        async def main() -> None:
            self._loop, self._stopping = asyncio.get_running_loop(), asyncio.Event()
            app = web.Application()
            for prefix in ("/v1", ""):
                app.router.add_post(prefix + "/chat/completions", partial(self._track, self._chat))
                app.router.add_post(prefix + "/embeddings", partial(self._track, self._embeddings))
                app.router.add_get(prefix + "/models", partial(self._track, self._models))
            runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
            try:
                await runner.setup()
                await web.TCPSite(runner, self.host, self.port, backlog=1024).start()
                self.port = runner.addresses[0][1]
                ready.set()
                await self._stopping.wait()
            except BaseException as exc:
                failure.append(exc)
            finally:
                ready.set()
                await runner.cleanup()

        self._thread = threading.Thread(target=asyncio.run, args=(main(),), name="openai-test-server", daemon=True)
        self._thread.start()
        ready.wait()
        if failure:
            self._thread.join()
            self._thread = None
            raise failure[0]
        return self

    def stop(self) -> None:
        if self._thread is None:
            return
        self._loop.call_soon_threadsafe(self._stopping.set)
        self._thread.join()
        self._thread = self._loop = self._stopping = None

    __enter__ = start

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # ---- request handling ----------------------------------------------------
    async def _sleep(self, seconds: float) -> None:
        """Sleep, but wake up early when the server stops."""
        if seconds > 0:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), seconds)

    async def _track(self, handler: Callable, request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json() if request.can_read_body else None
        except ValueError:
            body = None
        headers = {k.lower(): "***" if k.lower() in ("authorization", "api-key") else v
                   for k, v in request.headers.items()}
        with self._lock:
            self._requests.append(Recorded(request.method, request.path, body, headers, time.time()))
            self._calls += 1
            self._in_flight += 1
            self._peak = max(self._peak, self._in_flight)
        try:
            await self._sleep(self.latency)
            if request.method == "POST" and not isinstance(body, dict):
                return _error(400, "request body must be a JSON object", "invalid_request_error")
            return await handler(request, body)
        finally:
            with self._lock:
                self._in_flight -= 1

    def _draw(self, spec: _FaultSpec) -> str | None:
        with self._lock:
            return spec.draw(self._rng)

    async def _http_fault(self, request: web.Request, kind: str | None) -> web.StreamResponse | None:
        """The response for an HTTP-level fault; None means: build the normal reply."""
        if kind in ("429", "429_no_retry_after"):
            headers = {"Retry-After": self.retry_after} if kind == "429" else None
            return _error(429, "Rate limit reached (injected)", "rate_limit_error", headers)
        if kind == "500":
            return _error(500, "Internal server error (injected)", "server_error")
        if kind == "hang":
            await self._sleep(self.hang_seconds)
        elif kind == "reset" and request.transport is not None:
            sock = request.transport.get_extra_info("socket")
            if sock is not None:  # SO_LINGER 0: close() sends RST instead of FIN
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            request.transport.close()
            return web.Response(status=204)  # never reaches the client
        return None

    async def _chat(self, request: web.Request, req: dict) -> web.StreamResponse:
        if req.get("stream"):
            return _error(400, "streaming is not supported by the test server", "invalid_request_error")
        kind = self._draw(self._faults)
        rule = self.script.match(req)
        if rule is not None:
            rule.hits += 1
            kind = kind or self._draw(rule.fault)
        if (early := await self._http_fault(request, kind)) is not None:
            return early
        json_mode = (req.get("response_format") or {}).get("type") in ("json_schema", "json_object")
        reply = rule.reply if rule else "{}" if json_mode else self.script.default_reply
        reply = reply(req) if callable(reply) else reply
        message: dict[str, Any] = {"role": "assistant", "content": None, "refusal": None}
        if isinstance(reply, list):
            message["tool_calls"] = [{"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function", "function": {
                "name": c["name"],
                "arguments": c["arguments"] if isinstance(c["arguments"], str) else json.dumps(c["arguments"])}}
                for c in reply]
        else:
            message["content"] = reply if isinstance(reply, str) else json.dumps(reply)
        if kind in ("invalid_json", "bad_schema"):
            if message["content"] is not None:
                message["content"] = _corrupt(message["content"], kind)
            for call in message.get("tool_calls", []):
                call["function"]["arguments"] = _corrupt(call["function"]["arguments"], kind)
        out = message["content"] or " ".join(c["function"]["arguments"] for c in message.get("tool_calls", []))
        prompt_tokens = sum(len(t.split()) for t in _texts(req))
        completion_tokens = len(out.split())
        finish = "tool_calls" if "tool_calls" in message else "length" if kind == "length" else "stop"
        choices = [] if kind == "empty_choices" else [
            {"index": 0, "message": message, "finish_reason": finish, "logprobs": None}]
        return web.json_response({
            "id": f"chatcmpl-{uuid.uuid4().hex[:24]}", "object": "chat.completion", "created": int(time.time()),
            "model": req.get("model") or self.models[0], "choices": choices, "system_fingerprint": "fp_test",
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens}})

    def embed(self, text: str, dim: int | None = None) -> list[float]:
        """The deterministic unit-length pseudo-embedding served for ``text``."""
        dim = dim or self.embedding_dim
        raw = b"".join(hashlib.sha256(f"{i}:{text}".encode("utf-8")).digest() for i in range(dim // 8 + 1))
        vec = [struct.unpack_from(">I", raw, 4 * i)[0] / 2**31 - 1.0 for i in range(dim)]
        norm = sum(v * v for v in vec) ** 0.5 or 1.0
        return [v / norm for v in vec]

    async def _embeddings(self, request: web.Request, req: dict) -> web.StreamResponse:
        kind = self._draw(self._faults)
        if (early := await self._http_fault(request, kind)) is not None:
            return early
        inputs = req.get("input", [])
        if isinstance(inputs, str) or (isinstance(inputs, list) and inputs and isinstance(inputs[0], int)):
            inputs = [inputs]  # one string or one token array
        data = []
        for i, item in enumerate(inputs):
            vec: Any = self.embed(item if isinstance(item, str) else json.dumps(item), req.get("dimensions"))
            if req.get("encoding_format") == "base64":
                vec = base64.b64encode(struct.pack(f"<{len(vec)}f", *vec)).decode("ascii")
            data.append({"object": "embedding", "index": i, "embedding": vec})
        tokens = sum(len(x.split()) if isinstance(x, str) else len(x) for x in inputs)
        return web.json_response({
            "object": "list", "data": [] if kind == "empty_choices" else data,
            "model": req.get("model") or self.models[-1], "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})

    async def _models(self, request: web.Request, req: Any) -> web.StreamResponse:
        return web.json_response({"object": "list", "data": [
            {"id": m, "object": "model", "created": 0, "owned_by": "test"} for m in self.models]})
