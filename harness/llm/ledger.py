"""The cost ledger: tokens, cost (from a YAML price table; unknown models cost None, not 0) and
latency per call; summed per role and per trace row."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import yaml

DEFAULT_PRICES = Path(__file__).with_name("prices.yaml")


def load_prices(path: str | Path | None = None) -> dict[str, dict[str, float]]:
    return yaml.safe_load(Path(path or DEFAULT_PRICES).read_text(encoding="utf-8")) or {}


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
    attempts: int = 0  # HTTP attempts including retries: depends on the weather, not on the arm
    error: str | None = None
    fallback: str | None = None
    prompt_hash: str | None = None


@dataclass
class Ledger:
    calls: list[CallRecord] = field(default_factory=list)

    def add(self, rec: CallRecord) -> None:
        self.calls.append(rec)

    def summary(self) -> dict:
        costs = [c.cost_usd for c in self.calls]
        return {
            "calls": len(self.calls),
            "prompt_tokens": sum(c.prompt_tokens for c in self.calls),
            "completion_tokens": sum(c.completion_tokens for c in self.calls),
            "cost_usd": None if any(x is None for x in costs) else float(sum(costs)),
            "cache_hits": sum(1 for c in self.calls if c.cache_hit),
            "prompt_hashes": {c.role: c.prompt_hash for c in self.calls if c.prompt_hash},
            "ms_by_role": {r: sum(c.latency_ms for c in self.calls if c.role == r) for r in {c.role for c in self.calls}},
            "errors": [f"{c.role}: {c.error}" for c in self.calls if c.error],
        }
