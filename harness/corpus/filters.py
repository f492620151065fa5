"""Filters as data ({field, op, value}) turned into an engine's filter (qdrant-client's for a
Qdrant server, Qdrant Edge's for the embedded engine: one translation, two filter models) and into
a Python predicate over document metadata (for the lexical and identifier lanes). For
`string_list` fields, `eq` means the list contains the value and `in` means it contains one of
the values. Numbers match by value, as in Python (an `eq 5` finds 5 and 5.0): range conditions,
since a match condition takes only strings, integers and booleans and matches integers only."""
from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from qdrant_client import models as qm


def filter_key(filters: list[dict]) -> str:
    """A list of filters as a key (a run's memo, the lanes' masks): its canonical JSON, "" for none."""
    return json.dumps(filters, sort_keys=True, default=str) if filters else ""


def _as_list(v: Any) -> list:
    return list(v) if isinstance(v, (list, tuple, set)) else [v]


def _is_number(v, bools: bool = False) -> bool:
    return isinstance(v, (int, float)) and (bools or not isinstance(v, bool))


def _build(filters: list[dict], m, range_, bools_as_numbers: bool):
    """The filter in engine module `m`'s model (FieldCondition, MatchValue, MatchAny, Filter)
    with `range_` its numeric range class."""
    if not filters:
        return None
    num = lambda v: _is_number(v, bools_as_numbers)  # noqa: E731
    equal = lambda key, v: m.FieldCondition(key=key, range=range_(gte=float(v), lte=float(v)))  # noqa: E731
    must = []
    for f in filters:
        key, op, val = f"meta.{f['field']}", f.get("op", "eq"), f["value"]
        if op == "eq" and num(val):
            must.append(equal(key, val))
        elif op == "eq":
            must.append(m.FieldCondition(key=key, match=m.MatchValue(value=val)))
        elif op == "in" and any(num(v) for v in _as_list(val)):
            must.append(m.Filter(should=[equal(key, v) if num(v) else
                                         m.FieldCondition(key=key, match=m.MatchValue(value=v)) for v in _as_list(val)]))
        elif op == "in":
            must.append(m.FieldCondition(key=key, match=m.MatchAny(any=_as_list(val))))
        elif op == "gte":
            must.append(m.FieldCondition(key=key, range=range_(gte=val)))
        elif op == "lte":
            must.append(m.FieldCondition(key=key, range=range_(lte=val)))
        else:
            raise ValueError(f"unknown filter op {op!r}")
    return m.Filter(must=must)


def to_qdrant(filters: list[dict]) -> qm.Filter | None:
    """The filter for qdrant-client (a Qdrant server, or its local mode)."""
    from qdrant_client import models as qm  # seconds to import: only where a server is used

    return _build(filters, qm, qm.Range, bools_as_numbers=False)


def to_edge(filters: list[dict]):
    """The filter in Qdrant Edge's model, over payloads written by `edge_payload`. Booleans are
    numbers there (qdrant-edge-py 0.9.0 reads MatchValue(True) as the integer 1, which never
    matches a JSON true), as they are to Python's `matches` (True == 1)."""
    import qdrant_edge as edge

    return _build(filters, edge, edge.RangeFloat, bools_as_numbers=True)


def edge_payload(meta: dict) -> dict:
    """A document's metadata as a Qdrant Edge payload for `to_edge`: booleans as 0 and 1."""
    def enc(v):
        if isinstance(v, bool):
            return int(v)
        return [enc(x) for x in v] if isinstance(v, (list, tuple)) else v
    return {"meta": {k: enc(v) for k, v in meta.items()}}


def matches(meta: dict, filters: list[dict]) -> bool:
    for f in filters:
        have, op, val = meta.get(f["field"]), f.get("op", "eq"), f["value"]
        if have is None:
            return False
        values = _as_list(have)
        if op == "eq":
            ok = val in values
        elif op == "in":
            ok = any(v in values for v in _as_list(val))
        elif op == "gte":
            ok = any(isinstance(x, (int, float)) and x >= val for x in values)
        elif op == "lte":
            ok = any(isinstance(x, (int, float)) and x <= val for x in values)
        else:
            raise ValueError(f"unknown filter op {op!r}")
        if not ok:
            return False
    return True
