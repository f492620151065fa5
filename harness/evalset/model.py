"""Pydantic models of an eval set: its info file (harness.evalset.folder), corpus documents, sessions,
turns and per-turn labels. The format is documented in docs/eval-sets.md."""
from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, StrictInt, field_validator

from harness.strict import Strict


class FilterField(Strict):
    """One field of the corpus metadata that a filter may name."""

    field: str = Field(min_length=1)
    type: Literal["string", "number", "integer", "boolean", "string_list"]
    description: str = ""
    kind: Literal["preference", "entitlement"] = "preference"
    safety_relevant: bool = False
    values: list[str] | None = None  # allowed values for strings (None = any)
    min: float | None = None
    max: float | None = None
    unit: str | None = None  # canonical unit of a number field (e.g. "ml", "mm")
    account_key: str | None = None  # for entitlement fields: which account key sets it


class EvalSetInfo(Strict):
    """The eval set's info file (harness.evalset.folder.INFO)."""

    name: str = Field(min_length=1, pattern=r"^[a-z0-9][a-z0-9_.-]*$")
    version: str = Field(min_length=1)
    description: str = ""
    languages: list[str] = Field(min_length=1)
    source: str = Field(min_length=1)
    licence: str = Field(min_length=1)
    written_here: bool = False
    pooled_corpus: bool = False  # every document is relevant to some turn: absolute scores inflated
    notes: str = ""
    filters: list[FilterField] = Field(default_factory=list)

    @field_validator("filters")
    @classmethod
    def _unique_fields(cls, v: list[FilterField]) -> list[FilterField]:
        seen = set()
        for f in v:
            if f.field in seen:
                raise ValueError(f"filter field {f.field!r} declared twice")
            seen.add(f.field)
        return v

    def filter_field(self, name: str) -> FilterField | None:
        return next((f for f in self.filters if f.field == name), None)


class Document(Strict):
    """One line of the corpus file (harness.evalset.folder.CORPUS)."""

    doc_id: str = Field(min_length=1)
    title: str = ""
    text: str = Field(min_length=1)
    metadata: dict[str, Any] = Field(default_factory=dict)

    @property
    def passage(self) -> str:
        """What a judge reads of the document: its title on a line of its own, then its text."""
        return f"{self.title}\n{self.text}" if self.title else self.text


class Filter(Strict):
    field: str = Field(min_length=1)
    op: Literal["eq", "gte", "lte", "in"] = "eq"
    value: Any


class Shown(Strict):
    """An item the assistant showed, in the order shown."""

    doc_id: str = Field(min_length=1)
    name: str = ""


class Assistant(Strict):
    answer: str = ""
    shown: list[Shown] = Field(default_factory=list)


class Account(Strict):
    """Account context: the source of entitlement filters. Never set by a model."""

    assortment: str | None = None
    price_list: str | None = None
    currency: str | None = None
    ship_country: str | None = None


class State(Strict):
    """The state in force when the user sent the turn."""

    filters: list[Filter] = Field(default_factory=list)
    account: Account | None = None  # None: inherit the session's account


class Labels(Strict):
    qrels: dict[str, StrictInt] = Field(default_factory=dict)  # doc_id -> grade (>=1 relevant); "2" is refused
    qrels_measured: bool = True  # False: no relevance labels exist (IR metrics unmeasured)
    expected_filters: list[Filter] = Field(default_factory=list)
    identifiers: list[str] = Field(default_factory=list)
    query_type: str | None = None
    language: str | None = None
    answerability: Literal["ANSWERABLE", "PARTIAL", "UNANSWERABLE", "UNDERSPECIFIED"] | None = None
    reference_rewrite: str | None = None
    reference_answer: str | None = None
    multi_turn_type: str | None = None
    surface_doc: str | None = None  # misleading questions: the section their surface points to
    segments: dict[str, str] = Field(default_factory=dict)  # further segment fields

    @field_validator("qrels")
    @classmethod
    def _grades(cls, v: dict[str, int]) -> dict[str, int]:
        for doc, g in v.items():
            if g < 0:
                raise ValueError(f"grade of {doc!r} is negative")
        return v


class Turn(Strict):
    user: str = Field(min_length=1)
    assistant: Assistant | None = None
    state: State = Field(default_factory=State)
    turn_index: int | None = Field(default=None, ge=1)  # default: position in the session (1-based)
    labels: Labels | None = None  # None: history only


class Session(Strict):
    session_id: str = Field(min_length=1)
    domain: str | None = None
    account: Account = Field(default_factory=Account)
    turns: list[Turn] = Field(min_length=1)
