"""Filters as data ({field, op, value}) turned into a Qdrant filter and into a Python predicate
over document metadata (for the lexical lane). For `string_list` fields, `eq` means the list
contains the value and `in` means it contains one of the values."""
from __future__ import annotations

from typing import Any

from qdrant_client import models as qm


def _as_list(v: Any) -> list:
    return list(v) if isinstance(v, (list, tuple, set)) else [v]


def _is_float(v) -> bool:
    return isinstance(v, float) and not isinstance(v, bool)


def to_qdrant(filters: list[dict]) -> qm.Filter | None:
    if not filters:
        return None
    must = []
    for f in filters:
        key, op, val = f"meta.{f['field']}", f.get("op", "eq"), f["value"]
        if op == "eq" and _is_float(val):  # MatchValue takes only str, int and bool
            must.append(qm.FieldCondition(key=key, range=qm.Range(gte=val, lte=val)))
        elif op == "eq":
            must.append(qm.FieldCondition(key=key, match=qm.MatchValue(value=val)))
        elif op == "in" and any(_is_float(v) for v in _as_list(val)):
            must.append(qm.Filter(should=[qm.FieldCondition(key=key, range=qm.Range(gte=v, lte=v)) for v in _as_list(val)]))
        elif op == "in":
            must.append(qm.FieldCondition(key=key, match=qm.MatchAny(any=_as_list(val))))
        elif op == "gte":
            must.append(qm.FieldCondition(key=key, range=qm.Range(gte=val)))
        elif op == "lte":
            must.append(qm.FieldCondition(key=key, range=qm.Range(lte=val)))
        else:
            raise ValueError(f"unknown filter op {op!r}")
    return qm.Filter(must=must)


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
