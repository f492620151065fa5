"""The cost ledger: tokens, cost (from a YAML price table; unknown models cost None, not 0) and
latency per call; summed per role and per trace row."""
from __future__ import annotations

from dataclasses import dataclass
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
    repairs: int = 0  # replies that failed validation and were asked again
    repair_reason: str | None = None  # why the first reply failed (invalid JSON, a schema violation)
    attempts: int = 0  # HTTP attempts including retries: depends on the weather, not on the arm
    error: str | None = None
    fallback: str | None = None
    prompt_hash: str | None = None
