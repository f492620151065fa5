"""The decide role: classify a turn from its text and state into the classes the rewrite arms
use. Offline: ordered rules over the text (identifiers, service words, ordinals, constraint
words, pronouns, length) and whether the conversation has history."""
from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, Field

from harness.guards.identifiers import find_identifiers
from harness.llm.schema import bound
from harness.roles import attributes
from harness.roles.state import CompactState
from harness.roles.text import within

NEEDS_REWRITE = {"reference", "ellipsis", "ordinal", "changed_constraint", "topic_switch"}


REASON_CHARS = 300
ASK_REASON = 100  # what a model is asked to write (the strict schema's bound)


class Decision(BaseModel):
    turn_class: Literal["reference", "ellipsis", "ordinal", "changed_constraint", "topic_switch", "identifier",
                        "vague_application", "self_contained"]
    needs_rewrite: bool
    reason: str = Field(max_length=REASON_CHARS, json_schema_extra=bound(ASK_REASON))


ORDINAL = re.compile(r"\b(first|second|third|fourth|fifth|last|1st|2nd|3rd|4th|erste[nmrs]?|zweite[nmrs]?|"
                     r"dritte[nmrs]?|vierte[nmrs]?|letzte[nmrs]?)\b", re.I)
_ORD_N = {"first": 1, "1st": 1, "second": 2, "2nd": 2, "third": 3, "3rd": 3, "fourth": 4, "4th": 4, "fifth": 5,
          "last": -1, "erst": 1, "zweit": 2, "dritt": 3, "viert": 4, "letzt": -1}
CHANGE = re.compile(r"\b(cheaper|less expensive|too (?:expensive|pricey)|pricey|under \d|below \d|at least|at most|"
                    r"instead|rather|not the|not a\d|not \w+ enough|isn't enough|only the ones?|without|milder|stronger|"
                    r"bigger|smaller|one size (?:up|down|bigger|smaller)|size (?:up|down)|günstiger|billiger|statt|"
                    r"stattdessen|nicht so|lieber|something (?:that|under|cheaper|milder|stronger))\b", re.I)
SERVICE = re.compile(r"\b(ship|shipping|shipped|deliver|delivery|delivered|arrive|get here|be here|dispatch|"
                     r"invoice|invoices|vat|return|returns|send (?:it|them|a box)? ?back|certificate|certificates|"
                     r"minimum order|surcharge|discount|pay|payment|customs|backorder(?:ed)?|in stock|stock|pallet|"
                     r"express|tomorrow|lieferung|liefern|versand|versenden|rechnung|mindestbestellwert|zoll|"
                     r"rückgabe|zurückschicken|skonto)\b", re.I)
PRONOUN = re.compile(r"\b(it|its|that|this|those|these|them|they|same|one|ones|es|das|dies|diese[nmrs]?|"
                     r"dasselbe|davon|dazu|passende[nmrs]?|matching)\b", re.I)
START_REF = re.compile(r"^\s*(and|und|or|oder|also|auch|but|aber|what about|how about|in|im|the|die|der|das)\b", re.I)
VAGUE = re.compile(r"^\s*(how (?:do|can|should|to)|what (?:should|do|can) i|which .* should|wie (?:kann|soll|muss)|"
                   r"was (?:muss|soll|kann) ich)\b", re.I)
WORD = re.compile(r"[\wÄÖÜäöüß-]+")


def ordinal_index(text: str) -> int | None:
    m = ORDINAL.search(text)
    if not m:
        return None
    w = m.group(1).lower()
    for k, v in _ORD_N.items():
        if w.startswith(k):
            return v
    return None


def decide_offline(state: CompactState) -> Decision:
    text = state.turn
    ids = find_identifiers(text)
    rest = text
    for i in ids:
        rest = rest.replace(i, " ")
    words = WORD.findall(rest)
    has_history = bool(state.history)
    named = attributes.extract(text, state.schema)

    def d(cls: str, why: str) -> Decision:
        return Decision(turn_class=cls, needs_rewrite=cls in NEEDS_REWRITE, reason=within(why, REASON_CHARS))

    if ids and len(words) <= 1:
        return d("identifier", f"only identifier(s) {', '.join(ids)}")
    if not has_history:
        if VAGUE.search(text) and not ids and not named:
            return d("vague_application", "a how-to question without a product or identifier")
        return d("self_contained", "first turn of the conversation")
    if (m := SERVICE.search(text)) and "category" not in named and not ids:
        return d("topic_switch", f"service question ({m.group(1)!r}) without a product")
    if ordinal_index(text) is not None and state.last_shown:
        return d("ordinal", f"ordinal {ORDINAL.search(text).group(1)!r} into the shown list")
    if m := CHANGE.search(text):
        return d("changed_constraint", f"constraint word {m.group(1)!r}")
    if ids and len(words) >= 3:
        return d("self_contained", "names identifier(s) with its own words")
    if (m := PRONOUN.search(text)) and len(words) <= 12:
        return d("reference", f"pronoun {m.group(1)!r}")
    if "category" in named and len(words) >= 3 and not START_REF.search(text):
        return d("self_contained", f"names a product ({named['category']})")
    if len(words) <= 6 and (named or START_REF.search(text)):
        return d("ellipsis", "short turn with an attribute but no product of its own")
    if len(words) <= 4:
        return d("ellipsis", "short turn that leans on the conversation")
    return d("self_contained", "long enough to stand alone")
