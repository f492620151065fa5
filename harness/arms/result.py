"""What an arm reports for one round of one turn: `ArmResult`, with its typed `LLMStats` and
`Timings`. Each field carries its trace column's Arrow type (`col`): the trace row of the run
stage (harness/run/traces.py) is derived from these and the replay's `TurnKey`, so adding a field
is one edit. It lives with the arms, below the run stage that stores it."""
from __future__ import annotations

from dataclasses import dataclass, field, fields

import pyarrow as pa

CANDIDATE = pa.struct([("doc_id", pa.string()), ("score", pa.float64()), ("rank", pa.int32()), ("lane", pa.string())])
_STR_LIST = pa.list_(pa.string())


def col(arrow: pa.DataType, default=None, factory=None, json: bool = False, name: str | None = None):
    """A field of the trace row: its Arrow type, whether it is stored as JSON text, and its column
    name when it differs from the field's."""
    meta = {"arrow": arrow, "json": json, "column": name}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


@dataclass
class Timings:
    """Milliseconds per stage of a round: each LLM exchange (or the stored latency of a cached
    reply) and each piece of compute, never the time it queued behind other turns. Columns ms_*."""

    rewrite: float | None = col(pa.float64())
    retrieve: float | None = col(pa.float64())
    grade: float | None = col(pa.float64())
    answer: float | None = col(pa.float64())
    decide: float | None = col(pa.float64())
    rerank: float | None = col(pa.float64())
    support: float | None = col(pa.float64())
    total: float | None = col(pa.float64())  # the turn's stages summed over its rounds (final row)

    def add(self, **ms: float | None) -> None:
        for k, v in ms.items():
            setattr(self, k, v)

    def stages(self) -> float:
        return sum(getattr(self, f.name) or 0.0 for f in fields(self) if f.name != "total")


@dataclass
class LLMStats:
    """The LLM calls of a round."""

    calls: int = col(pa.int32(), 0, name="llm_calls")
    prompt_tokens: int = col(pa.int64(), 0)
    completion_tokens: int = col(pa.int64(), 0)
    cost_usd: float | None = col(pa.float64())  # None: a model without a price made a call
    cache_hits: int = col(pa.int32(), 0)
    prompt_hashes: dict = col(pa.string(), factory=dict, json=True)  # {role: hash}
    failed: int = col(pa.int32(), 0, name="llm_failed")  # calls that failed after their retries
    repairs: int = col(pa.int32(), 0, name="llm_repairs")  # replies that failed validation and were asked again
    repair_notes: list[str] = col(_STR_LIST, factory=list, name="llm_repair_notes")  # "role: why the reply failed"


@dataclass
class ArmResult:
    """What an arm reports for one round of one turn (arms without rounds report one)."""

    issued_queries: list[str] = col(_STR_LIST, factory=list)
    lanes: list[str] = col(_STR_LIST, factory=list)
    applied_filters: list[dict] = col(pa.string(), factory=list, json=True)
    candidates: list[dict] = col(pa.list_(CANDIDATE), factory=list)  # {doc_id, score, rank, lane}
    ranking: list[str] = col(_STR_LIST, factory=list)  # the arm's result list
    must_keep: list[str] = col(_STR_LIST, factory=list)
    proposed_filters: list[dict] = col(pa.string(), factory=list, json=True)
    filter_violations: list[str] = col(_STR_LIST, factory=list)  # entitlement fields a model proposed
    fallback_reason: str | None = col(pa.string())
    not_applicable: str | None = col(pa.string())  # the arm cannot run on this turn (e.g. no reference rewrite)
    verdict: str | None = col(pa.string())
    verdict_reason: str | None = col(pa.string())
    answer: str | None = col(pa.string())
    answer_doc_ids: list[str] = col(_STR_LIST, factory=list)
    abstained: bool | None = col(pa.bool_())
    llm: LLMStats = field(default_factory=LLMStats)
    ms: Timings = field(default_factory=Timings)
    error: str | None = col(pa.string())
    clarify: dict | None = col(pa.string(), json=True)  # {question, options} when the rewrite asked back
    turn_class: str | None = col(pa.string())  # the decide role's class of the turn, where an arm asked it
    filters_removed: list[str] = col(_STR_LIST, factory=list)  # "field: reason" for every rejected filter
