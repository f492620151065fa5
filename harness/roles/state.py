"""The compact state a rewriter sees instead of the transcript: the last N turns, the items the
assistant showed (in order, ids and names, with their catalogue attributes), the active
filters and the account context. An arm builds it from its turn (harness.arms.state)."""
from __future__ import annotations

import json
from dataclasses import dataclass, field

# json.dumps(v, ensure_ascii=False), its encoder built once (dumps builds one a call with these arguments)
_ENCODE = json.JSONEncoder(ensure_ascii=False).encode

COUNTRY_NAMES = {"DE": "Germany", "AT": "Austria", "CH": "Switzerland", "NL": "the Netherlands", "BE": "Belgium",
                 "FR": "France", "IT": "Italy", "PL": "Poland", "DK": "Denmark", "CZ": "Czechia"}


@dataclass
class ShownItem:
    doc_id: str
    name: str
    metadata: dict = field(default_factory=dict)


@dataclass
class PastTurn:
    user: str
    answer: str = ""
    shown: list[ShownItem] = field(default_factory=list)


@dataclass
class CompactState:
    turn: str
    history: list[PastTurn]  # oldest first, at most N
    filters: list[dict]
    account: dict
    schema: list[dict]  # preference fields a model may propose: field, type, values, unit
    retry: dict | None = None  # a corrective loop's retry: the queries tried and why they were not enough

    @property
    def last_shown(self) -> list[ShownItem]:
        for t in reversed(self.history):
            if t.shown:
                return t.shown
        return []

    def country_name(self) -> str | None:
        c = self.account.get("ship_country")
        return COUNTRY_NAMES.get(c, c) if c else None

    def to_prompt(self) -> str:
        """The user message of the rewrite prompt: the state as compact JSON (with `retry` when a
        corrective loop asks for its next query)."""
        return _ENCODE({
            "last_turns": [{"user": t.user, "assistant": t.answer[:300],
                            "shown": [{"n": i + 1, "doc_id": s.doc_id, "name": s.name} for i, s in enumerate(t.shown)]}
                           for t in self.history],
            "active_filters": self.filters, "account": self.account,
            "filter_fields": self.schema, "turn": self.turn, **({"retry": self.retry} if self.retry else {}),
        })
