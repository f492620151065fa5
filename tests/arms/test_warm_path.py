"""The warm path's cheaper forms give what the plain forms gave: the LLM statistics of a round
(one pass over the outcomes) against the sums they replaced, written inline here."""
from __future__ import annotations

import random

from harness.arms.common import llm_stats
from harness.arms.result import LLMStats
from harness.llm.ledger import CallRecord
from harness.roles.base import Outcome


def _reference(outcomes) -> LLMStats:
    recs = [o.record for o in outcomes if o is not None and o.record is not None]
    costs = [r.cost_usd for r in recs]
    return LLMStats(
        calls=sum(r.requests for r in recs), prompt_tokens=sum(r.prompt_tokens for r in recs),
        completion_tokens=sum(r.completion_tokens for r in recs),
        cost_usd=(None if any(c is None for c in costs) else float(sum(costs))) if recs else None,
        cache_hits=sum(1 for r in recs if r.cache_hit),
        prompt_hashes={r.role: r.prompt_hash for r in recs if r.prompt_hash},
        failed=sum(1 for o in outcomes if o is not None and o.record is not None and o.record.error and o.value is None),
        repairs=sum(r.repairs for r in recs), repair_notes=[f"{r.role}: {r.repair_reason}" for r in recs if r.repairs])


def _outcome(rng: random.Random):
    if rng.random() < 0.15:
        return None
    if rng.random() < 0.2:
        return Outcome(value="x", backend="offline")
    rec = CallRecord(role=rng.choice(["rewrite", "grade", "answer"]), model="m", prompt_tokens=rng.randint(0, 900),
                     completion_tokens=rng.randint(0, 90), cost_usd=rng.choice([None, 0.0, 1e-6, 0.1, 0.3]),
                     cache_hit=rng.random() < 0.5, requests=rng.randint(0, 2), repairs=rng.randint(0, 1),
                     repair_reason=rng.choice([None, "invalid JSON"]), error=rng.choice([None, None, "", "timeout"]),
                     prompt_hash=rng.choice([None, "", "ab12", "cd34"]))
    return Outcome(value=rng.choice([None, "v"]), backend="m", record=rec)


def test_llm_stats_equal_the_sums_they_replaced():
    rng = random.Random(7)
    for n in list(range(6)) * 300:
        outcomes = [_outcome(rng) for _ in range(n)]
        got, want = llm_stats(outcomes), _reference(outcomes)
        assert got == want, outcomes
        assert type(got.cost_usd) is type(want.cost_usd) and type(got.cache_hits) is int and type(got.failed) is int


def test_to_json_writes_what_the_encoder_writes():
    import json

    from harness.store.traces import to_json

    for v in [[], {}, "", 0, 0.0, None, False, True, [1, "ü"], {"b": None, "a": [{}]}, (), set(), [[]], {"": {}}]:
        assert to_json(v) == json.dumps(v, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
