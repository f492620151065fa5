"""The cost ledger: tokens, cost (from a YAML price table; unknown models cost None, not 0) and
latency per call; summed per role and per trace row. Also what a run may spend: the spend cap
(`llm.max_cost_usd`) and a role call's time budget (an arm's `budget_ms`)."""
from __future__ import annotations

import asyncio
import contextvars
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.errors import BadInput, Infrastructure
from harness.yamlpos import read_yaml

DEFAULT_PRICES = Path(__file__).with_name("prices.yaml")


def load_prices(path: str | Path | None = None) -> dict[str, dict[str, float]]:
    return read_yaml(Path(path or DEFAULT_PRICES), BadInput)[0] or {}


def cost_usd(prices: dict, model: str, prompt: int, completion: int, cached: int = 0) -> float | None:
    p = prices.get(model)
    if p is None:
        return None
    return ((prompt - cached) * p["input"] + cached * p.get("cached_input", p["input"]) + completion * p["output"]) / 1e6


@dataclass
class CallRecord:
    role: str
    model: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    cost_usd: float | None = None
    latency_ms: float = 0.0  # original latency (a cache hit reports the latency it had live)
    cache_hit: bool = False
    requests: int = 0  # distinct requests (the first and a repair): reproducible from the cache
    repairs: int = 0  # replies that failed validation and were asked again
    repair_reason: str | None = None  # why the first reply failed (invalid JSON, a schema violation)
    attempts: int = 0  # HTTP attempts including retries: depends on the weather, not on the arm
    error: str | None = None
    fallback: str | None = None
    prompt_hash: str | None = None


class StopRun(Exception):
    """Not a failed call but a reason to stop the run (no offline stand-in, no row): the run
    folder records why and `harness run --resume` continues it. Defined here, without the openai
    SDK, so that a run whose roles are all offline never imports it (about a second a process);
    what the transport raises under the SDK is also an openai.OpenAIError (ReplayMiss)."""


class BudgetExceeded(StopRun, Infrastructure):
    """llm.max_cost_usd reached: the run stops (exit 3); `--resume` continues from the cache."""


@dataclass
class SpendCap:
    """`llm.max_cost_usd`: what one run may spend on requests the cache did not answer (cached
    replies are free). Checked once a request has its slot, before it is sent; requests already
    in flight finish, so the spend can pass the cap by what those cost (at most `concurrency`
    calls).

    A run replayed by several processes (harness.run.parallel) shares one cap: `share(pool, slot)`
    gives each process a slot of one shared array of floats (multiprocessing.RawArray), which only
    that process writes (its own spend) and every process sums before a request, so the cap holds
    for the run's total, with the same margin (the requests in flight, at most `concurrency` in all)."""

    max_usd: float
    spent: float = 0.0  # this process's
    requests: int = 0
    pool: Any = None  # every process's spend, one slot each (None: this process is the run)
    slot: int = 0

    def share(self, pool: Any, slot: int) -> None:
        self.pool, self.slot = pool, slot
        pool[slot] = self.spent

    def total(self) -> float:
        """What the run has spent: this process's spend, or every process's in a shared cap."""
        return float(sum(self.pool)) if self.pool is not None else self.spent

    def check(self) -> None:
        total = self.total()
        if total >= self.max_usd:
            on = (f"on {self.requests} request(s) the cache did not answer" if self.pool is None else
                  f"across the run's worker processes (this one: {self.requests} request(s) the cache did not answer)")
            raise BudgetExceeded(f"budget exceeded: spent ${total:.4f} of llm.max_cost_usd ${self.max_usd:.4f} {on}; "
                                 "raise llm.max_cost_usd or refresh the cache by hand")

    def add(self, usd: float | None) -> None:
        self.requests += 1
        self.spent += usd or 0.0
        if self.pool is not None:
            self.pool[self.slot] = self.spent  # one writer per slot: no lock


def check_priced(prices: dict, models: dict[str, str]) -> None:
    """A spend cap needs a price for every model it pays for: {role: model} without one raises."""
    unpriced = {r: m for r, m in models.items() if m not in prices}
    if unpriced:
        raise BadInput("llm.max_cost_usd: no price for " + ", ".join(f"role {r} model {m!r}" for r, m in unpriced.items())
                         + " in the price table (llm.prices); a cap cannot count what it cannot price")


class RoleTimeout(Exception):
    """A role call ran out of its TimeBudget: the arm falls back (the LLM client does not record
    it as a failed call). `record`: the call's CallRecord, with what its finished exchanges cost
    (a first reply before a repair that ran out of time), set by the LLM client."""

    record: "CallRecord | None" = None


@dataclass
class TimeBudget:
    """A role call's own time (an arm's `budget_ms`), spent only by its HTTP exchanges and its
    retry pauses: never by the time a request waits for a request slot or the rpm/tpm budget
    (the replay keeps more turns in progress than slots, so that wait depends on the run, not on
    the endpoint). Set it in TIME_BUDGET around the call; past it the call raises RoleTimeout."""

    seconds: float
    used: float = 0.0

    async def spend(self, aw):
        """Await `aw` in what is left of the budget, charging the time it took."""
        if self.used >= self.seconds:
            if asyncio.iscoroutine(aw):
                aw.close()
            raise RoleTimeout
        t0 = time.perf_counter()
        try:
            return await asyncio.wait_for(aw, self.seconds - self.used)
        except asyncio.TimeoutError:
            raise RoleTimeout from None
        finally:
            self.used += time.perf_counter() - t0

    def charge(self, seconds: float) -> None:
        """Charge a cached reply's stored latency, as its live exchange was charged: a reply
        slower than what is left (cached by an arm or run without this budget) is cut off too."""
        if self.used + seconds > self.seconds:
            self.used = self.seconds
            raise RoleTimeout(f"the cached reply took {seconds * 1000:.0f} ms")
        self.used += seconds


TIME_BUDGET: contextvars.ContextVar[TimeBudget | None] = contextvars.ContextVar("harness_time_budget", default=None)


async def in_budget(aw):
    """`aw` within the current TIME_BUDGET, if one is set."""
    b = TIME_BUDGET.get()
    return await (b.spend(aw) if b is not None else aw)
