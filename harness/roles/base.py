"""Roles: jobs an LLM can do (rewrite, decide, hyde, grade, rerank, answer, judge). Each role
has an `llm` implementation (a prompt file, a strict output schema, a call through the LLM
layer) and an `offline` one that needs no model. The backend of a role is the model name or
`offline`, part of every arm id that uses it. An LLM call that fails falls back to the offline
implementation, and the outcome says so (error and fallback), so no offline result is ever
reported as a model's."""
from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, Field

from harness.corpus.memo import Reused
from harness.llm.cache import LLMCache
from harness.llm.endpoint import EndpointConfig
from harness.llm.failures import count_key, kind_of
from harness.llm.ledger import CallRecord, RoleTimeout, SpendCap, check_priced, load_prices
from harness.roles.fields import instruction, merged as _merged, subset as _subset
from harness.roles.prompts import Prompt, load_prompt
from harness.strict import Strict
from harness.unmeasured import Unmeasured
from harness.threads import off_loop

ROLES = ("rewrite", "decide", "hyde", "grade", "rerank", "answer", "judge", "relevance")
OFFLINE = "offline"
NOT_MEASURED = Unmeasured.NOT_MEASURED.said("no judge endpoint")  # a judged row's status without a judge endpoint


class RoleEndpoint(EndpointConfig):
    prompt: str | None = None  # a packaged prompt ("grade.v1") or a file ("prompts/grade.md"); default ROLE.v1
    # the fields of the role's reply the model writes (None: all); the rest from its offline
    # implementation (harness/roles/fields.py; checked against the role's output by the config)
    fields: list[str] | None = None


class CacheConfig(Strict):
    folder: str = ".cache/llm"
    mode: str = "readwrite"


class LLMConfig(Strict):
    """`llm:` in a run config. A role without an endpoint runs offline."""

    roles: dict[str, RoleEndpoint] = Field(default_factory=dict)
    cache: CacheConfig = Field(default_factory=CacheConfig)
    prices: str | None = None
    # what one run may spend on requests the cache did not answer; past it the run stops (exit 3)
    max_cost_usd: float | None = Field(default=None, ge=0)


def step_cache(config: dict, folder: str | None = None, mode: str | None = None) -> LLMCache:
    """The LLM cache of a step after the replay (the judge, relevance labels): the run config's
    `llm.cache`, with `folder` and `mode` over it when given."""
    cache = (config.get("llm") or {}).get("cache") or {}
    default = CacheConfig()
    return LLMCache(folder or cache.get("folder") or default.folder, mode or cache.get("mode") or default.mode)


@dataclass
class Outcome:
    """What a role returned, and how: the backend that produced it, the call record of an LLM
    call (None offline), and the fallback reason when the LLM failed and offline stood in."""

    value: Any
    backend: str
    record: CallRecord | None = None
    fallback: str | None = None
    ms: float = 0.0
    offline_fields: tuple[str, ...] = ()  # a role asked for fewer fields: the ones its offline implementation wrote


@dataclass
class Roles:
    """The role backends of one run, or of one arm of it that names its own endpoints
    (`for_arm`): LLM clients per configured role, offline otherwise. An arm's roles share the
    run's cache, request slots, spend cap, prices, pinned prompts and clients: one client per
    role and endpoint, however many arms use it."""

    config: LLMConfig = field(default_factory=LLMConfig)
    concurrency: int = 16
    clients: dict[str, Any] = field(default_factory=dict)  # role -> harness.llm.client.LLMClient
    threads: Any = None  # harness.threads.CpuThreads: offline roles run there (None: inline)
    base_dir: str | None = None  # the run config's folder: prompt files are relative to it
    run: "Roles | None" = None  # the run's roles, for an arm's own (None: these are the run's)

    def __post_init__(self):
        run = self.run or self
        if run is self:
            self.pinned: dict[tuple, Prompt] = {}  # (role, prompt, fields) -> its prompt, pinned for the run
            self.failures: dict[str, int] = {}  # llm_failed.ROLE.KIND -> calls, every arm's (harness/llm/failures.py)
            self.pool: dict[tuple, Any] = {}  # (role, endpoint) -> its client, for every arm of the run
            self.semaphore, self.cache = None, None
            self.prices = load_prices(self.config.prices)
            self.spend = SpendCap(self.config.max_cost_usd) if self.config.max_cost_usd is not None else None
        else:
            self.pinned, self.pool, self.prices, self.spend = run.pinned, run.pool, run.prices, run.spend
            self.failures = run.failures
        if not self.config.roles:
            self.semaphore, self.cache = run.semaphore, run.cache
            return
        if run.semaphore is None:  # the first roles of the run with an endpoint
            run.semaphore = asyncio.Semaphore(run.concurrency)
            run.cache = LLMCache(run.config.cache.folder, run.config.cache.mode)
        self.semaphore, self.cache = run.semaphore, run.cache
        if self.spend is not None:
            check_priced(self.prices, {r: ep.model for r, ep in self.config.roles.items()})
        from harness.llm.client import LLMClient  # the openai SDK only for a run that calls a model (about a second)

        for role, ep in self.config.roles.items():
            key = (role, ep.model_dump_json(exclude={"prompt"}))
            if key not in self.pool:
                self.pool[key] = LLMClient(ep, self.cache, self.semaphore, self.prices, connections=self.concurrency,
                                           spend=self.spend)
            self.clients[role] = self.pool[key]

    def for_arm(self, endpoints: dict[str, "RoleEndpoint | None"]) -> "Roles":
        """The roles of an arm with its own endpoints per role (None: that role offline) over the
        run's; the run's roles themselves when it names none."""
        if not endpoints:
            return self
        roles = {r: ep for r, ep in {**self.config.roles, **endpoints}.items() if ep is not None}
        return Roles(self.config.model_copy(update={"roles": roles}), self.concurrency, threads=self.threads,
                     base_dir=self.base_dir, run=self)

    def backend(self, role: str) -> str:
        ep = self.config.roles.get(role)
        return ep.model if ep else OFFLINE

    def prompt(self, role: str) -> Prompt:
        """The system prompt of a role with an endpoint (roles/prompts.py), read once and kept for
        this run: a prompt file edited while the run goes on changes neither its calls nor its
        arm ids, so the traces, the manifest and the requests name the same prompt."""
        ep = self.config.roles.get(role)
        fields = tuple(ep.fields) if ep and ep.fields else None
        key = (role, ep.prompt if ep and ep.prompt else f"{role}.v1", fields)
        if key not in self.pinned:
            p = load_prompt(key[1], self.base_dir)
            if fields:  # the prompt names the fields asked for: its hash (and the arm id) too
                p = Prompt(p.name, p.text + instruction(fields), p.path)
            self.pinned[key] = p
        return self.pinned[key]

    def fields(self, role: str) -> tuple[str, ...] | None:
        """The fields a role's model is asked for, when its endpoint names fewer than all."""
        ep = self.config.roles.get(role)
        return tuple(ep.fields) if ep and ep.fields else None

    def prompts(self, roles) -> dict[str, str]:
        """`name@hash` of the prompt of each of `roles` that calls an LLM (offline roles have none)."""
        return {r: self.prompt(r).ref for r in roles if r in self.config.roles and r != "judge"}

    def prompt_hashes(self) -> dict[str, str | None]:
        """Prompt hash per configured role; None for the judge role (Ragas's prompts)."""
        return {r: (None if r == "judge" else self.prompt(r).hash) for r in self.config.roles}

    def http_calls(self) -> int:
        """HTTP calls of every client of the run (an arm's roles count the run's too)."""
        return sum(c.stats.http_calls for c in self.pool.values())

    async def aclose(self):
        """Close every client of the run (they are shared: call it once, on the run's roles)."""
        for c in self.pool.values():
            await c.aclose()

    async def call(self, role: str, user: str, schema: type[BaseModel], offline, seed: int | None = None) -> Outcome:
        """Ask the role's LLM if one is configured, else run `offline()`. A failed LLM call
        returns value None with the error on the record: the caller decides the fallback, and
        nothing offline is ever passed off as the model's answer. `Outcome.ms`: the LLM's HTTP
        exchanges (a cached reply: its stored latency), or the offline role's compute time;
        never time spent waiting for the concurrency bound or a worker."""
        client = self.clients.get(role)
        if client is None:
            value, ms = await off_loop(self.threads, offline)
            if isinstance(value, Reused):  # another arm of the run asked the same: what it cost then, a copy
                value, ms = value.value.model_copy(deep=True), value.ms
            return Outcome(value, OFFLINE, ms=ms)
        asked = self.fields(role)
        ask = schema if asked is None else _subset(schema, asked)
        try:
            res = await client.structured(role, self.prompt(role).text, user, ask, seed=seed)
        except RoleTimeout:
            self._failed(role, "timeout")
            raise
        if res.value is None:
            self._failed(role, res.record.error)
            return Outcome(None, client.name, res.record, fallback=f"{role} failed: {res.record.error}",
                           ms=res.record.latency_ms)
        if asked is None:
            return Outcome(res.value, client.name, res.record, ms=res.record.latency_ms)
        rest, _ = await off_loop(self.threads, offline)  # the fields the model was not asked for
        rest = rest.value.model_copy(deep=True) if isinstance(rest, Reused) else rest
        return Outcome(_merged(res.value, rest, asked), client.name, res.record, ms=res.record.latency_ms,
                       offline_fields=tuple(f for f in type(rest).model_fields if f not in asked))

    def _failed(self, role: str, error: str | None) -> None:
        key = count_key(role, kind_of(error))
        self.failures[key] = self.failures.get(key, 0) + 1
