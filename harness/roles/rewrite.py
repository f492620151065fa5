"""The rewrite role and its strict JSON contract.

Offline implementations (no model; documented in docs/roles.md): `method: hqe`, historical
query expansion (harness/roles/hqe.py, the default), or `method: rules`, this project's rules
for a product catalogue: classify the turn with the offline decide role, then
- identifier / self-contained / vague: the turn as typed;
- topic switch: the turn's content words plus the account's ship country; product filters dropped;
- ordinal: the n-th item of the assistant's last shown list is the focus;
- reference / ellipsis / changed constraint: the first item of the last shown list is the focus
  (without a shown list, the previous user turn stands in);
the focus item's name with the attributes the turn changes substituted (length, thread,
volume, concentration, size, material), a new product category replacing the old one while
thread, material and size carry over, "cheaper" turned into a price bound below the focus
item's price, and the turn's remaining content words appended. Proposed filters come from the
focus item's catalogue attributes and the values the turn names; identifiers stay verbatim."""
from __future__ import annotations

import dataclasses
import json
import re
from typing import Literal, get_args

from pydantic import BaseModel, Field

from harness.corpus.memo import Reused, shared
from harness.guards.identifiers import find_identifiers
from harness.llm.schema import bound
from harness.roles import attributes
from harness.roles.decide import ORDINAL, WORD, Decision, decide_offline, ordinal_index
from harness.roles.state import CompactState, ShownItem
from harness.roles.text import within


SERVICE_HINTS = [(re.compile(p, re.I), h) for p, h in [
    (r"\b(invoice|vat|rechnung)", "invoice"),
    (r"\b(return|send .*back|rückgabe|zurück)", "returns policy"),
    (r"\b(certificate|zertifikat|zeugnis)", "material certificate"),
    (r"\b(minimum order|mindestbestell|surcharge|small order)", "minimum order value surcharge"),
    (r"\b(discount|pay|payment|skonto)", "payment terms discount"),
    (r"\b(customs|zoll)", "customs duties"),
    (r"\b(stock|backorder)", "stock availability backorder"),
    (r"\b(dangerous|hazardous|chemicals)", "hazardous goods shipping"),
    (r"\b(ship|deliver|arrive|here|dispatch|tomorrow|express|pallet|lieferung|liefern|versand|wann)", "delivery time shipping"),
]]


STANDALONE_CHARS = 400  # the standalone query a model (or an offline method) may write
# what a model is asked to write (the strict schema's bounds, harness/llm/schema.py): a query, an
# identifier or a value, a few of each; tighter than what the fields accept offline
ASK_QUERY, ASK_NAME, ASK_KEEP, ASK_VARIANTS, ASK_FILTERS = 150, 40, 5, 2, 4


class FilterProposal(BaseModel):
    field: str = Field(max_length=64, json_schema_extra=bound(ASK_NAME))
    op: str = Field(pattern="^(eq|gte|lte|in)$")
    value: str | float | int | bool | list[str | float | int]


class Clarify(BaseModel):
    question: str = Field(max_length=300, json_schema_extra=bound(ASK_QUERY))
    options: list[str] = Field(json_schema_extra=bound(max_items=ASK_VARIANTS, item_max_length=ASK_NAME))


class RewriteOutput(BaseModel):
    standalone: str = Field(max_length=STANDALONE_CHARS, json_schema_extra=bound(ASK_QUERY))
    must_keep: list[str] = Field(json_schema_extra=bound(max_items=ASK_KEEP, item_max_length=ASK_NAME))
    filters: list[FilterProposal] = Field(json_schema_extra=bound(max_items=ASK_FILTERS))
    confidence: float = Field(ge=0, le=1)
    variants: list[str] = Field(json_schema_extra=bound(max_items=ASK_VARIANTS, item_max_length=ASK_QUERY))
    clarify: Clarify | None


_FILLER = set("""a an the and or but so ok okay hmm please thanks thank you yes no also as well too then there here
is are was be it its that this those these them they one ones same what whats how which who do does did can could
would will i me my we us our your for of to in on at with by from about any anything something some more less
than just only need want like get got have has had please same thing version instead rather really much
und oder aber auch noch bitte es das die der den dem ein eine einen im in am mit für von zu ist sind gibt haben
wir uns ich mir mich sie so dann""".split())
_PACK = re.compile(r",?\s*(?:pack|box|bundle|carton|case) of \d+.*$", re.I)
_SUBST = {
    "length_mm": re.compile(r"\b\d+(?:[.,]\d+)?\s?mm\b"),
    "thread": re.compile(r"\bM\d{1,2}\b"),
    "container_ml": re.compile(r"\b\d+(?:[.,]\d+)?\s*-?\s*(?:ml|l|L|litres?|liters?|Liter)\b"),
    "concentration_pct": re.compile(r"\b\d+(?:[.,]\d+)?\s?%"),
    "size": re.compile(r"(?:\bsize\s+\w+|\b\d+(?:\s\d/\d)?(?:/\d)?\s?(?:\"|in\b|inch))"),
    "material": re.compile(r"\b(?:stainless steel\s*)?(?:A2|A4)\b|\bgalvani[sz]ed(?: steel)?\b|\bbrass\b|\bPVC(?:-U)?\b|\bstainless(?: steel)?\b", re.I),
}


def _fmt_attr(field: str, value) -> str:
    if field == "length_mm":
        return f"{value} mm"
    if field == "container_ml":
        return f"{value / 1000:g} litres" if isinstance(value, (int, float)) and value >= 1000 else f"{value} ml"
    if field == "concentration_pct":
        return f"{value}%"
    if field == "size":
        return str(value).replace(" in", " inch") if str(value).endswith(" in") else f"size {value}"
    return str(value)


def _content_words(text: str, drop: set[str] = frozenset()) -> list[str]:
    words = []
    for w in WORD.findall(ORDINAL.sub(" ", text)):
        lw = w.lower()
        if lw in _FILLER or lw in drop or len(lw) < 2:
            continue
        words.append(w)
    return words


def _focus(state: CompactState, cls: str) -> ShownItem | None:
    shown = state.last_shown
    if not shown:
        return None
    if cls == "ordinal":
        n = ordinal_index(state.turn) or 1
        if n == -1:
            return shown[-1]
        return shown[n - 1] if n <= len(shown) else shown[-1]
    return shown[0]


def _price_bound(state: CompactState, focus: ShownItem | None) -> dict | None:
    if focus is None or not re.search(r"cheaper|too (?:expensive|pricey)|pricey|günstiger|billiger|less expensive", state.turn, re.I):
        return None
    price = focus.metadata.get("price_net")
    if isinstance(price, (int, float)):
        return {"field": "price_net", "op": "lte", "value": round(price - 0.01, 2)}
    return None


def _filters_from(attrs: dict, fields: dict) -> list[FilterProposal]:
    out = []
    for k in ("category", "thread", "material", "size", "container_ml", "length_mm"):
        if k in attrs and k in fields:
            vals = fields[k].get("values")
            if vals and attrs[k] not in vals:
                continue
            out.append(FilterProposal(field=k, op="eq", value=attrs[k]))
    return out


def _focused_query(focus, named: dict, text: str, fields: dict) -> tuple[str, dict]:
    """The query about the item the turn refers to (its title, or a new category with the
    attributes carried over), changed by what the turn names; and the attributes it implies."""
    base = {k: v for k, v in focus.metadata.items() if k in fields and fields[k].get("type") != "string_list"}
    new_cat = named.get("category")
    negated = {m.group(1).lower() for m in re.finditer(r"\bnot (?:the |a |an )?([\w-]+)", text, re.I)}
    if new_cat and new_cat != base.get("category"):
        attrs = {**{k: base[k] for k in ("thread", "material", "size") if k in base}, **named}
        query = " ".join([attrs["category"]] + [_fmt_attr(k, attrs[k]) for k in ("thread", "size", "material") if k in attrs])
    else:
        attrs = {**base, **named}
        query = _PACK.sub("", focus.name).strip()
        for k, v in named.items():
            if k in ("category", "brand"):
                continue
            rx = _SUBST.get(k)
            query = rx.sub(_fmt_attr(k, v), query, count=1) if rx and rx.search(query) else f"{query} {_fmt_attr(k, v)}"
    for neg in negated:
        if "material" in attrs and neg in str(attrs["material"]).lower():
            attrs.pop("material")
            query = re.sub(rf"\b{re.escape(neg)}\w*\b", "", query, flags=re.I)
    used = {w.lower() for v in named.values() for w in WORD.findall(_fmt_attr("x", v))} | negated | {"not"}
    extra = [w for w in _content_words(text, used) if w.lower() not in query.lower()]
    return " ".join((query + " " + " ".join(extra)).split()), attrs


Method = Literal["hqe", "rules"]  # the offline rewrite: a published method, or this project's catalogue rules
METHODS = get_args(Method)


def rewrite_hqe(state: CompactState, index) -> RewriteOutput:
    """Historical query expansion (harness/roles/hqe.py), with the values the turn itself names
    in the filter schema as filters, and two variants from other strategies: previous-turn
    expansion and RM3 feedback on the expanded query. Confidence 0.5 when HQE judged the turn
    ambiguous, else 0.8 (what rewrite_adaptive branches on)."""
    from harness.roles.hqe import hqe, previous_turn, rm3

    query, ambiguous, _ = hqe(state, index, STANDALONE_CHARS)
    fields = {f["field"]: f for f in state.schema}
    named = attributes.extract(state.turn, state.schema)
    return RewriteOutput(standalone=within(query, STANDALONE_CHARS), must_keep=find_identifiers(state.turn),
                         filters=_filters_from(named, fields),
                         confidence=0.5 if ambiguous else 0.8, variants=[previous_turn(state), rm3(index, query)[0]],
                         clarify=None)


def offline_rewrite(method: str, state: CompactState, index) -> RewriteOutput | Reused:
    """The offline rewrite role by method: `hqe` (published) or `rules` (catalogue rules). The
    arms of a turn ask it for the same state: computed once per run (the index's memo), the
    other arms are given it as `Reused` (Roles.call hands each a copy)."""
    key = ("rewrite", method, json.dumps(dataclasses.asdict(state), sort_keys=True, ensure_ascii=False, default=str))
    return shared(getattr(index, "memo", None), key, lambda: _offline_rewrite(method, state, index))


def _offline_rewrite(method: str, state: CompactState, index) -> RewriteOutput:
    if method == "hqe":
        return rewrite_hqe(state, index)
    if method == "rules":
        return rewrite_offline(state)
    raise ValueError(f"unknown offline rewrite method {method!r}; known: {', '.join(METHODS)}")


def rewrite_offline(state: CompactState, decision: Decision | None = None) -> RewriteOutput:
    decision = decision or decide_offline(state)
    cls = decision.turn_class
    text = state.turn
    ids = find_identifiers(text)
    fields = {f["field"]: f for f in state.schema}
    named = attributes.extract(text, state.schema)
    if cls in ("identifier", "self_contained", "vague_application"):
        return RewriteOutput(standalone=within(text.strip(), STANDALONE_CHARS), must_keep=ids, filters=_filters_from(named, fields),
                             confidence=0.9, variants=_variants(ids, named), clarify=None)
    if cls == "topic_switch":
        words = [h for rx, h in SERVICE_HINTS if rx.search(text)][:1] + _content_words(text)
        country = state.country_name()
        q = " ".join(words + ([country] if country else []))
        return RewriteOutput(standalone=within(q or text, STANDALONE_CHARS), must_keep=ids, filters=[], confidence=0.7, variants=[], clarify=None)
    focus = _focus(state, cls)
    if focus is None:  # no shown list: lean on the previous user turn
        prev = state.history[-1].user if state.history else ""
        q = " ".join(_content_words(prev) + _content_words(text))
        return RewriteOutput(standalone=within(q or text, STANDALONE_CHARS), must_keep=ids, filters=_filters_from(named, fields), confidence=0.5,
                             variants=[], clarify=None)
    query, attrs = _focused_query(focus, named, text, fields)
    for i in ids:  # identifiers stay verbatim
        if i not in query:
            query = f"{i} {query}"
    flt = [f for f in _filters_from(attrs, fields) if f.field not in ("length_mm",) or "length_mm" in named]
    pb = _price_bound(state, focus)
    if pb:
        flt.append(FilterProposal(**pb))
    flt += _bounds(text, fields)
    conf = 0.8 if cls in ("ordinal", "changed_constraint") else 0.65
    return RewriteOutput(standalone=within(query, STANDALONE_CHARS), must_keep=ids, filters=flt, confidence=conf,
                         variants=_variants(ids, attrs), clarify=None)


_LE = re.compile(r"\b(under|below|less than|at most|max(?:imum)?|or less|unter|höchstens|bis)\b", re.I)
_GE = re.compile(r"\b(at least|or more|minimum|min\.?|mindestens|über|over)\b", re.I)


def _bounds(text: str, fields: dict) -> list[FilterProposal]:
    """Numeric bounds the turn states: "under 50 euros", "at least 16 bar", "30 % or more"."""
    from harness.guards import units

    out = []
    op = "lte" if _LE.search(text) else "gte" if _GE.search(text) else None
    if op is None:
        return out
    for field, conv in (("price_net", units.euros), ("pressure_rating_bar", units.bars), ("concentration_pct", units.percents)):
        vals = conv(text)
        if field in fields and vals:
            out.append(FilterProposal(field=field, op=op, value=vals[-1]))
    return out


def _variants(ids: list[str], attrs: dict) -> list[str]:
    out = []
    if ids:
        out.append(" ".join(ids))
    attr_q = " ".join(_fmt_attr(k, attrs[k]) for k in ("category", "thread", "size", "material", "container_ml") if k in attrs)
    if attr_q:
        out.append(attr_q)
    return out[:2]
