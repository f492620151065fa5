"""What the arms share beyond the retrieval pipeline (pipeline.py): the LLM statistics of a
round, from the outcomes of its role calls."""
from __future__ import annotations

from harness.arms.result import LLMStats


def llm_stats(outcomes) -> LLMStats:
    """Calls, tokens, cost, cache hits, prompt hashes and failed calls of a round's role outcomes
    (offline outcomes have no record and count nothing)."""
    recs = [o.record for o in outcomes if o is not None and o.record is not None]
    costs = [r.cost_usd for r in recs]
    return LLMStats(
        calls=sum(r.requests for r in recs),
        prompt_tokens=sum(r.prompt_tokens for r in recs),
        completion_tokens=sum(r.completion_tokens for r in recs),
        cost_usd=(None if any(c is None for c in costs) else float(sum(costs))) if recs else None,
        cache_hits=sum(1 for r in recs if r.cache_hit),
        prompt_hashes={r.role: r.prompt_hash for r in recs if r.prompt_hash},
        # calls that failed after their retries (a reply the arm refused, e.g. an empty rewrite, is not one)
        failed=sum(1 for o in outcomes if o is not None and o.record is not None and o.record.error and o.value is None),
        repairs=sum(r.repairs for r in recs),
        repair_notes=[f"{r.role}: {r.repair_reason}" for r in recs if r.repairs],
    )
