"""One async LLM client over the openai SDK for OpenAI, Azure OpenAI (v1 API) and any
OpenAI-compatible server. Structured output (json_schema, strict), one repair attempt,
retries with exponential backoff and jitter honouring Retry-After, a concurrency bound shared
by the whole replay, optional requests/tokens per minute budgets, the cache (looked up before
the SDK, filled at the HTTP transport), and a ledger record per call. A failed call never
raises: the record carries the error and the caller falls back.

The request is serialised once (that text is also its cache key's) and sent with the SDK's
public `post` (its auth, base URL, timeouts and error classes), so the SDK does not walk the
typed parameters of `chat.completions.create` on every call; the reply is parsed by
`ChatCompletion` the same way whether it came from the endpoint or from the cache."""
from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import random
import time
from urllib.parse import urlparse
from dataclasses import dataclass
from typing import Any

import httpx2
import openai
from pydantic import BaseModel, ValidationError

from openai.types.chat import ChatCompletion

from harness.errors import BadInput
from harness.llm.endpoint import EndpointConfig  # noqa: F401  (the client's endpoint; defined without the SDK)
from harness.llm.failures import CUT, cut_error
from harness.llm.cache import LLMCache, canonical_json, key_of_json, prompt_hash
from harness.llm.ledger import TIME_BUDGET, CallRecord, RoleTimeout, SpendCap, StopRun, cost_usd, in_budget, load_prices
from harness.llm.schema import response_format
from harness.llm.transport import (CACHE_HEADER, LATENCY_HEADER, PENDING, ROLE_HEADER, CachingTransport, Pending,
                                   aiohttp_transport)

CHAT_PATH = "/chat/completions"


@dataclass
class StructuredResult:
    value: BaseModel | None
    record: CallRecord
    raw: str | None = None


class _Budget:
    """Requests and tokens per minute, as a sliding window. `room` waits (without a request slot)
    until the window would take a request; `take` stamps it, once the request holds its slot."""

    def __init__(self, rpm: int | None, tpm: int | None, window: float = 60.0):
        self.rpm, self.tpm, self.window = rpm, tpm, window
        self.events: list[tuple[float, int]] = []

    def _wait(self, tokens: int) -> float:
        """Seconds until the window has room for a request of `tokens` (0: now)."""
        if not self.rpm and not self.tpm:
            return 0.0
        now = time.monotonic()
        self.events = [(t, n) for t, n in self.events if now - t < self.window]
        ok_r = not self.rpm or len(self.events) < self.rpm
        ok_t = not self.tpm or sum(n for _, n in self.events) + tokens <= self.tpm or not self.events
        return 0.0 if ok_r and ok_t else max(0.01, self.window - (now - self.events[0][0]))

    async def room(self, tokens: int) -> None:
        while (wait := self._wait(tokens)) > 0:
            await asyncio.sleep(wait)

    def take(self, tokens: int) -> bool:
        if self._wait(tokens) > 0:
            return False
        if self.rpm or self.tpm:
            self.events.append((time.monotonic(), tokens))
        return True


def _retry_after(err: Exception) -> float | None:
    resp = getattr(err, "response", None)
    if resp is None:
        return None
    v = resp.headers.get("retry-after")
    try:
        return float(v) if v is not None else None
    except ValueError:
        return None


RETRYABLE = (openai.RateLimitError, openai.InternalServerError, openai.APITimeoutError, openai.APIConnectionError)


class LLMClient:
    """`connections`: the HTTP connections kept to the endpoint (the run's concurrency: every
    call in flight has one, none waits for another's)."""

    def __init__(self, endpoint: EndpointConfig, cache: LLMCache | None = None,
                 semaphore: asyncio.Semaphore | None = None, prices: dict | None = None, seed: int | None = None,
                 connections: int = 16, spend: SpendCap | None = None):
        self.endpoint = endpoint
        self.spend = spend  # llm.max_cost_usd: shared by the run's clients
        self.cache = cache
        self.semaphore = semaphore
        self.prices = prices if prices is not None else load_prices()
        self.seed = seed
        self.transport = CachingTransport(aiohttp_transport(connections), cache, endpoint.kind)
        key_env = endpoint.key_env()
        key = os.environ.get(key_env) if key_env else None
        if not key:
            if endpoint.kind == "openai-compatible" or (cache is not None and cache.mode == "replay"):
                key = "none"  # replay mode never sends a request: CI without the secret (a fork's pull request)
            else:
                raise BadInput(f"{endpoint.kind} endpoint: set {key_env} in the environment "
                                 "(or replay the LLM cache: --llm-cache replay)")
        self.sdk = openai.AsyncOpenAI(
            api_key=key, base_url=endpoint.resolved_base_url(), max_retries=0, timeout=endpoint.timeout,
            http_client=httpx2.AsyncClient(transport=self.transport, timeout=endpoint.timeout))
        self.path = urlparse(str(self.sdk.base_url)).path.rstrip("/") + CHAT_PATH  # as the transport sees it
        self.budget = _Budget(endpoint.rpm, endpoint.tpm)
        # what every request body repeats, serialised once (canonical_json's `known`: the same objects)
        self._constants = {k: (v, canonical_json(v)) for k, v in
                           (("model", endpoint.model), ("temperature", endpoint.temperature), ("max_tokens", endpoint.max_tokens))}

    @property
    def name(self) -> str:
        return self.endpoint.model

    @property
    def stats(self):
        return self.transport.stats

    async def aclose(self) -> None:
        await self.sdk.close()

    def _cached(self, sent_json: str):
        """A cached reply looked up before the SDK builds a request (the transport would find the
        same entry: same key), so a warm run pays neither request building nor HTTP. Returns
        (Call or None, the key of a miss the transport may fill without looking it up again)."""
        if self.cache is None or self.cache.mode in ("off", "refresh"):
            return None, None
        key = key_of_json(self.endpoint.kind, self.path, sent_json)
        hit = self.cache.get(key)
        if hit is None:
            return None, (key if self.cache.mode != "replay" else None)  # replay: the transport names the miss
        self.transport.stats.cache_hits += 1
        repaired = None
        if _REPAIRED_BYTES in hit.body:  # a repaired exchange: its marker is not part of the reply
            obj = json.loads(hit.body)
            repaired = obj.pop(REPAIRED, None)
            completion = ChatCompletion.model_validate(obj)
        else:  # parsed and validated in one pass (pydantic-core), as a reply from the endpoint is
            completion = _completion(hit.body)
        if (budget := TIME_BUDGET.get()) is not None:  # held to the role's time budget as its live exchanges were
            budget.charge((hit.latency_ms + float((repaired or {}).get("latency_ms") or 0)) / 1000)
        return Call(completion, {CACHE_HEADER: "hit", LATENCY_HEADER: f"{hit.latency_ms:.3f}"}, 1, None, repaired), key

    async def _after_same(self, sent_json: str, key: str, flights: list) -> tuple["Call | None", str | None]:
        """A request identical to one in flight (two arms asking the same rewrite at once) waits
        for it and takes its reply from the cache, as a warm run would; when that one was not kept
        (invalid, failed) it is sent. Otherwise this request is registered in flight in `flights`
        until its caller has settled it (`_settle`)."""
        slot = (id(asyncio.get_running_loop()), key)
        while (sent := self.cache.in_flight.get(slot)) is not None:
            await in_budget(sent.wait())
            cached, key = self._cached(sent_json)
            if cached is not None:
                return cached, key
        self.cache.in_flight[slot] = asyncio.Event()
        flights.append(slot)
        return None, key

    def _settle(self, flights: list) -> None:
        """The requests of one structured call are kept or dropped: whoever waits on them looks again."""
        for slot in flights:
            if (sent := self.cache.in_flight.pop(slot, None)) is not None:
                sent.set()

    async def _create(self, role: str, body: dict, known: dict[str, tuple[object, str]], flights: list) -> "Call":
        """One chat completion with retries; a reply from the endpoint comes with what the cache
        needs to keep it (`Call.pending`), once the caller has validated it. `known`: values of
        `body` serialised before (canonical_json's), the role's response_format; `flights`: where
        a request sent is registered in flight (see _after_same)."""
        sent = {k: v for k, v in body.items() if k != "extra_body"} | (body.get("extra_body") or {})
        sent_json = canonical_json(sent, known)  # the request as sent and as keyed: serialised once
        cached, key = self._cached(sent_json)
        if cached is not None:
            return cached
        if key is not None:
            cached, key = await self._after_same(sent_json, key, flights)
            if cached is not None:
                return cached
        payload = sent_json.encode()
        pending = Pending(key=key, model=str(sent.get("model", "")))
        token = PENDING.set(pending)
        try:
            completion, headers, attempts = await self._send(
                role, payload, sum(len(str(m.get("content", ""))) for m in body["messages"]) // 4 + body.get("max_tokens", 0))
        finally:
            PENDING.reset(token)
        if self.spend is not None and headers.get(CACHE_HEADER) != "hit":  # the endpoint answered: paid for
            u = completion.usage
            cached = getattr(getattr(u, "prompt_tokens_details", None), "cached_tokens", 0) or 0 if u else 0
            self.spend.add(cost_usd(self.prices, self.endpoint.model, u.prompt_tokens if u else 0,
                                    u.completion_tokens if u else 0, cached))
        return Call(completion, headers, attempts, pending if pending.body is not None else None)

    def _keep(self, call: "Call", first: "Call | None" = None, reason: str | None = None) -> None:
        """Cache a validated reply under its request's key; after a repair, also under the first
        request's key, with what the first exchange cost and why it failed, so a replay of the
        first request takes the same path (two requests, one repair) without the invalid reply."""
        if self.cache is None or call.pending is None or call.pending.key is None:
            return
        if "error" in (call.completion.model_extra or {}):  # an error body beside valid choices: never kept
            return
        p = call.pending
        self.cache.put_later(p.key, p.body, p.latency_ms, kind=self.endpoint.kind, model=p.model, role=p.role)
        if first is not None and first.pending is not None and first.pending.key is not None:
            usage = first.completion.usage.model_dump() if first.completion.usage is not None else {}
            marked = {**json.loads(p.body), REPAIRED: {"reason": reason, "usage": usage,
                                                       "latency_ms": first.pending.latency_ms}}
            self.cache.put_later(first.pending.key, json.dumps(marked).encode(), p.latency_ms, kind=self.endpoint.kind,
                                 model=p.model, role=p.role)

    async def _send(self, role: str, payload: bytes, est_tokens: int):
        """POST the serialised request through the SDK, retrying 429/5xx/timeouts/connection errors."""
        attempts = 0
        while True:
            attempts += 1
            try:
                raw = await self._exchange(role, payload, est_tokens)
                return _completion(raw.content), raw.headers, attempts
            except RETRYABLE as e:  # anything else (ReplayMiss included) propagates unchanged
                if attempts > self.endpoint.max_retries:
                    raise
                wait = _retry_after(e)
                if wait is None:
                    wait = min(self.endpoint.backoff_max, self.endpoint.backoff_base * 2 ** (attempts - 1))
                    wait *= 0.5 + random.random()  # jitter
                await in_budget(asyncio.sleep(wait))

    async def _exchange(self, role: str, payload: bytes, est_tokens: int):
        """One HTTP exchange. Room in the rpm/tpm window is awaited without a request slot (the
        slots are shared by every role; a rate-limited one must not hold them), then stamped once
        the slot is held, so the request is sent when its stamp says; the spend cap is checked
        then too, so at most `concurrency` requests pass it unpaid."""
        while True:
            await self.budget.room(est_tokens)
            async with self.semaphore if self.semaphore is not None else contextlib.nullcontext():
                if not self.budget.take(est_tokens):  # another request took the room meanwhile
                    continue
                if self.spend is not None:
                    self.spend.check()
                return await in_budget(self.sdk.post(CHAT_PATH, cast_to=httpx2.Response, content=payload,
                                                     options={"headers": {ROLE_HEADER: role}}))

    async def structured(self, role: str, system: str, user: str, schema: type[BaseModel],
                         seed: int | None = None, repair: bool = True) -> StructuredResult:
        ep = self.endpoint
        messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        rec = CallRecord(role=role, model=ep.model, prompt_hash=_prompt_hash(system))
        fmt = _format(schema, ep.max_string_length, ep.max_items)  # the role's schema, serialised once per process
        # the system message (the role's prompt) serialised once per process, as the schema is
        known = {**self._constants, "response_format": fmt,
                 "messages": (messages, "[" + _message_json("system", system) + "," + canonical_json(messages[1]) + "]")}
        body = {"model": ep.model, "messages": messages, "temperature": ep.temperature, "max_tokens": ep.max_tokens,
                "response_format": fmt[0]}
        s = seed if seed is not None else self.seed
        if s is not None:
            body["seed"] = s
        if ep.extra_body:
            body["extra_body"] = ep.extra_body
        flights: list = []
        try:
            return await self._attempts(role, body, known, messages, schema, rec, repair, flights)
        finally:
            self._settle(flights)

    async def _attempts(self, role: str, body: dict, known: dict, messages: list, schema: type[BaseModel],
                        rec: CallRecord, repair: bool, flights: list) -> StructuredResult:
        """The request, and one repair when its reply is invalid."""
        ep = self.endpoint
        raw_text, first = None, None
        for attempt in range(2 if repair else 1):
            try:
                call = await self._create(role, body, known, flights)
            except StopRun:  # a replay miss or the spend cap: stop the run, no fallback
                raise
            except RoleTimeout as e:  # the arm's budget: its fallback, with what the call had cost so far
                e.record = rec
                raise
            except Exception as e:  # recorded; the caller falls back
                rec.error = _err(e)
                return StructuredResult(None, rec, raw_text)
            self._account(rec, call)
            value, raw_text, rec.error = _parse(call.completion, schema, ep.max_tokens)
            if value is not None:
                self._keep(call, first, rec.repair_reason)
                return StructuredResult(value, rec, raw_text)
            if rec.error.startswith(CUT):  # never cached, never repaired: the model would run on again
                return StructuredResult(None, rec, raw_text)
            if attempt == 0:  # one repair attempt: show the model its reply and the problem
                first, rec.repairs, rec.repair_reason = call, 1, rec.error
            body = {**body, "messages": messages + [
                {"role": "assistant", "content": raw_text or ""},
                {"role": "user", "content": f"That reply was not valid ({rec.error}). Reply again with only JSON that matches the schema."}]}
        return StructuredResult(None, rec, raw_text)

    def _account(self, rec: CallRecord, call: "Call") -> None:
        rec.attempts += call.attempts
        rec.requests += 1
        _add_usage(rec, call.completion.usage)
        if call.repaired:  # a cached exchange that needed a repair: its first request counts too
            rec.requests += 1
            rec.repairs, rec.repair_reason = 1, call.repaired.get("reason")
            _add_usage(rec, call.repaired.get("usage") or {})
            rec.latency_ms += float(call.repaired.get("latency_ms") or 0)
        rec.cache_hit = call.headers.get(CACHE_HEADER) == "hit"
        try:
            rec.latency_ms += float(call.headers.get(LATENCY_HEADER, 0))
        except ValueError:
            pass
        rec.cost_usd = cost_usd(self.prices, self.endpoint.model, rec.prompt_tokens, rec.completion_tokens, rec.cached_tokens)


REPAIRED = "x_harness_repaired"  # in a cached reply: the exchange needed a repair (reason, first usage, latency)
_REPAIRED_BYTES = json.dumps(REPAIRED).encode()


@dataclass
class Call:
    completion: ChatCompletion
    headers: Any
    attempts: int
    pending: Pending | None = None  # a reply from the endpoint, kept once validated
    repaired: dict | None = None  # a cached reply that needed a repair: what the first exchange was


def _add_usage(rec: CallRecord, u) -> None:
    if u is None:
        return
    get = (lambda k: u.get(k)) if isinstance(u, dict) else (lambda k: getattr(u, k, None))
    rec.prompt_tokens += get("prompt_tokens") or 0
    rec.completion_tokens += get("completion_tokens") or 0
    details = get("prompt_tokens_details")
    cached = (details.get("cached_tokens") if isinstance(details, dict) else getattr(details, "cached_tokens", 0)) \
        if details else 0
    rec.cached_tokens += cached or 0


def _parse(completion: ChatCompletion, schema: type[BaseModel], max_tokens: int):
    """(value or None, reply text, error or None) of a completion against the role's schema; a
    reply stopped at max_tokens is cut, whether or not its text parses."""
    if not completion.choices:
        return None, None, "empty choices"
    raw = completion.choices[0].message.content or ""
    if completion.choices[0].finish_reason == "length":
        return None, raw, cut_error(completion.usage.completion_tokens if completion.usage else None, max_tokens)
    try:
        return schema.model_validate(json.loads(raw)), raw, None
    except json.JSONDecodeError as e:
        return None, raw, f"invalid JSON: {e.msg}"
    except ValidationError as e:
        return None, raw, "schema violation: " + "; ".join(
            f"{'.'.join(map(str, x['loc']))}: {x['msg']}" for x in e.errors()[:3])


@functools.lru_cache(maxsize=64)
def _message_json(role: str, content: str) -> str:
    """A message as canonical_json writes it, for the few texts sent on every call (role prompts)."""
    return canonical_json({"role": role, "content": content})


@functools.lru_cache(maxsize=64)
def _prompt_hash(text: str) -> str:
    return prompt_hash(text)


@functools.lru_cache(maxsize=256)
def _format(schema: type[BaseModel], max_string_length: int | None, max_items: int | None) -> tuple[dict, str]:
    """A role's response_format and its canonical JSON (the schema walk done once per schema)."""
    fmt = response_format(schema, max_string_length, max_items)
    return fmt, canonical_json(fmt)


def _completion(content: bytes) -> ChatCompletion:
    """A reply body as the SDK's ChatCompletion, validated (cold and cached replies alike)."""
    return ChatCompletion.model_validate_json(content)


def _err(e: Exception) -> str:
    name = type(e).__name__
    status = getattr(e, "status_code", None)
    msg = str(e).split("\n")[0][:200]
    return f"{name}{f' {status}' if status else ''}: {msg}"
