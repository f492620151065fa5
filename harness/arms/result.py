"""What an arm reports for one round of one turn: `ArmResult`, with its typed `LLMStats` and
`Timings`. Each field carries its trace column's Arrow type (`col`): the trace row of the run
stage (harness/store/traces.py) is derived from these and the replay's `TurnKey`, so adding a field
is one edit. It lives with the arms, below the run stage that stores it."""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from itertools import chain

import numpy as np
import pyarrow as pa

CANDIDATE = pa.struct([("doc_id", pa.string()), ("score", pa.float64()), ("rank", pa.int32()), ("lane", pa.string())])
_STR_LIST = pa.list_(pa.string())


class Candidates:
    """The trace's candidate entries ({doc_id, score, rank, lane}), held as the lanes' rankings
    themselves: `add` keeps a reference to a lane's lists (a Hits' lists are never changed once
    made), not a dict per hit nor a copy, and the trace writer turns a batch of rows into Arrow
    from them (`arrow`): doc ids and scores in one conversion each, ranks and lanes computed with
    numpy from the rankings' lengths. Iterating gives the
    entries as dicts; `+=` takes dicts too (their ranks and lanes as given)."""

    __slots__ = ("parts",)

    def __init__(self, entries=()):
        # (doc ids, scores, ranks or None: 1..n, lane: one name for all, or a name per entry)
        self.parts: list[tuple[list, list, list | None, str | list]] = []
        self += entries

    def add(self, doc_ids: list[str], scores: list[float], lane: str) -> "Candidates":
        """A lane's ranking, best first: ranks 1..n (the lists are kept, not copied)."""
        if len(doc_ids) != len(scores):
            raise ValueError(f"lane {lane}: {len(doc_ids)} doc ids, {len(scores)} scores")
        if doc_ids:
            self.parts.append((doc_ids, scores, None, lane))
        return self

    def __iadd__(self, entries):
        if isinstance(entries, Candidates):
            self.parts.extend(entries.parts)
            return self
        entries = list(entries)
        if entries:
            self.parts.append(([e["doc_id"] for e in entries], [float(e["score"]) for e in entries],
                               [int(e["rank"]) for e in entries], [e["lane"] for e in entries]))
        return self

    def __len__(self) -> int:
        return sum(len(p[0]) for p in self.parts)

    def __iter__(self):
        for doc_ids, scores, ranks, lane in self.parts:
            ranks = ranks or range(1, len(doc_ids) + 1)
            lanes = lane if isinstance(lane, list) else [lane] * len(doc_ids)
            yield from ({"doc_id": d, "score": s, "rank": r, "lane": la}
                        for d, s, r, la in zip(doc_ids, scores, ranks, lanes))

    def __getitem__(self, i):
        return list(self)[i]

    def __eq__(self, other) -> bool:
        return list(self) == list(other)

    def __repr__(self) -> str:
        return f"Candidates({list(self)!r})"

    @staticmethod
    def arrow(rows: list) -> pa.Array:
        """The trace column of many rows' candidates (Candidates, a list of dicts, or None)."""
        each = [c if isinstance(c, Candidates) or c is None else Candidates(c) for c in rows]
        parts = [p for c in each if c is not None for p in c.parts]
        lens = np.fromiter((len(p[0]) for p in parts), np.int64, len(parts))
        # a row's entries end where its last part ends: the parts' running lengths at the rows' running part counts
        ends = np.concatenate(([0], np.cumsum(lens)))
        n_parts = np.fromiter((len(c.parts) if c is not None else 0 for c in each), np.int64, len(each))
        offsets = ends[np.concatenate(([0], np.cumsum(n_parts)))]
        values = pa.StructArray.from_arrays(
            [pa.array(list(chain.from_iterable(p[0] for p in parts)), pa.string()),
             pa.array(list(chain.from_iterable(p[1] for p in parts)), pa.float64()),
             _ranks(parts, lens), _lanes(parts, lens)], fields=list(CANDIDATE))
        mask = pa.array([c is None for c in each]) if any(c is None for c in each) else None
        return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), values, type=pa.list_(CANDIDATE), mask=mask)


def _ranks(parts: list, lens: np.ndarray) -> pa.Array:
    """The entries' ranks: 1..n along each ranking (numpy), or as given where entries came as dicts."""
    if all(p[2] is None for p in parts):
        starts = np.cumsum(lens) - lens
        return pa.array((np.arange(int(lens.sum()), dtype=np.int64) - np.repeat(starts, lens) + 1).astype(np.int32))
    return pa.array(list(chain.from_iterable(p[2] or range(1, len(p[0]) + 1) for p in parts)), pa.int32())


def _lanes(parts: list, lens: np.ndarray) -> pa.Array:
    """The entries' lanes: each ranking's name repeated (one code per ranking, taken from the few
    names), or as given where entries came as dicts."""
    if any(isinstance(p[3], list) for p in parts):
        return pa.array(list(chain.from_iterable(p[3] if isinstance(p[3], list) else [p[3]] * len(p[0])
                                                 for p in parts)), pa.string())
    names: dict[str, int] = {}
    codes = np.fromiter((names.setdefault(p[3], len(names)) for p in parts), np.int32, len(parts))
    return pa.array(list(names), pa.string()).take(pa.array(np.repeat(codes, lens)))


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
        return sum(getattr(self, name) or 0.0 for name in _STAGES)


_STAGES = tuple(f.name for f in fields(Timings) if f.name != "total")  # what `stages` sums, in field order


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
    candidates: Candidates = col(pa.list_(CANDIDATE), factory=Candidates)  # {doc_id, score, rank, lane}
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
