"""What an arm can declare it does. Arms build their capabilities from these members; metrics name
the ones they need (harness/metrics/registry.py checks the names) and are n/a for an arm without
them. A member is its string, so manifests written as plain names read back equal."""
from __future__ import annotations

from enum import StrEnum


class Capability(StrEnum):
    RANKING = "ranking"
    QUERIES = "queries"
    REPLAYED = "replayed"
    LOOPS = "loops"
    ANSWERS = "answers"
    ASKS_BACK = "asks_back"
    PROPOSES_FILTERS = "proposes_filters"
    REFERENCE = "reference"
    ORACLE = "oracle"

    @property
    def meaning(self) -> str:
        return MEANINGS[self]


MEANINGS = {
    Capability.RANKING: "returns a ranked list of documents",
    Capability.QUERIES: "issues queries that the trace records",
    Capability.REPLAYED: "replayed by the harness: timings, LLM calls, filters and errors recorded",
    Capability.LOOPS: "retrieves in rounds, `hits_per_round` hits each",
    Capability.ANSWERS: "answers from its hits or abstains",
    Capability.ASKS_BACK: "may ask a clarifying question instead of only rewriting",
    Capability.PROPOSES_FILTERS: "a role proposes filters that the schema validator checks",
    Capability.REFERENCE: "the default reference of paired tables within a run",
    Capability.ORACLE: "uses the labels' reference rewrite: an upper bound",
}
