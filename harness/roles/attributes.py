"""Typed product attributes found in a turn's text, mapped onto the eval set's preference
fields (the filter schema's `values` and units). Used by the offline rewrite and decide roles."""
from __future__ import annotations

import re

from harness.guards import units

_MATERIAL_WORDS = {  # surface word -> canonical value prefix in the schema
    "a4": "stainless steel A4", "v4a": "stainless steel A4", "seawater": "stainless steel A4",
    "a2": "stainless steel A2", "v2a": "stainless steel A2", "stainless": "stainless steel", "edelstahl": "stainless steel",
    "galvanised": "galvanised steel", "galvanized": "galvanised steel", "verzinkt": "galvanised steel",
    "brass": "brass", "messing": "brass", "pvc": "PVC-U", "nitrile": "nitrile", "latex": "latex",
}
_INCH = re.compile(r"(?<![\w/])(\d+(?:\s+\d/\d)?|\d/\d)\s*(?:\"|inch(?:es)?|in\b|zoll)", re.I)
_THREAD = re.compile(r"\b(M\d{1,2})\b")
_GLOVE = re.compile(r"\bsize\s+(XS|S|M|L|XL|XXL|\d{1,2})\b|\b(?:in|größe)\s+(XS|S|M|L|XL|XXL)\b", re.I)


def _plural_forms(word: str) -> list[str]:
    w = word.lower()
    forms = {w, w + "s", w + "es"}
    if w.endswith("y"):
        forms.add(w[:-1] + "ies")
    if w.endswith("s"):
        forms.add(w[:-1])
    return sorted(forms, key=len, reverse=True)


def find_category(text: str, categories: list[str]) -> str | None:
    """The schema category a text names (longest match; singular or plural; last word alone
    counts too, e.g. 'nuts' -> 'hex nut')."""
    low = text.lower()
    best = None
    for c in categories:
        if c == "service":
            continue
        for f in _plural_forms(c):
            if re.search(rf"\b{re.escape(f)}\b", low):
                if best is None or len(c) > len(best[0]):
                    best = (c, 2)
    if best:
        return best[0]
    for c in categories:  # the head noun alone ("nuts"), only after a determiner or at the start
        head = c.split()[-1]
        if c == "service":
            continue
        for f in _plural_forms(head):
            if re.search(rf"(?:^|\b(?:the|a|an|and|some|any|what|which|matching|passende[nrs]?|und|die|der)\s+){re.escape(f)}\b", low):
                return c
    return None


_NEGATED = re.compile(r"^\s*(?:isn't|is not|isnt|not|won't|doesn't)\b", re.I)


def find_material(text: str, materials: list[str]) -> str | None:
    """The material a text asks for: the last one named that is not negated ("not A2",
    "brass isn't enough")."""
    low = text.lower()
    found: list[tuple[int, str]] = []
    for m in sorted(materials, key=len, reverse=True):
        for mm in re.finditer(rf"\b{re.escape(m.lower())}\b", low):
            found.append((mm.start(), m, mm.end()))
    for w, v in _MATERIAL_WORDS.items():
        for mm in re.finditer(rf"\b{re.escape(w)}\b", low):
            exact = [m for m in materials if m.lower() == v.lower()]
            found.append((mm.start(), exact[0] if exact else v, mm.end()))
    keep = [(pos, m) for pos, m, end in found
            if not re.search(r"\bnot (?:the |a |an )?$", low[:pos]) and not _NEGATED.match(low[end:])]
    if not keep:
        return None
    last = max(p for p, _ in keep)
    return max((m for p, m in keep if p == last), key=len)


def extract(text: str, schema: list[dict]) -> dict:
    """Attributes named in `text`: {field: value} for fields present in the schema."""
    fields = {f["field"]: f for f in schema}
    out: dict = {}
    if "category" in fields and fields["category"].get("values"):
        c = find_category(text, fields["category"]["values"])
        if c:
            out["category"] = c
    if "material" in fields:
        m = find_material(text, fields["material"].get("values") or [])
        if m:
            out["material"] = m
    if "thread" in fields:
        t = _THREAD.findall(text)
        if t:
            out["thread"] = t[-1].upper()
    for name, find in (("container_ml", units.volumes_ml), ("length_mm", units.lengths_mm),
                       ("concentration_pct", units.percents), ("pressure_rating_bar", units.bars)):
        if name in fields and (found := find(text)):
            out[name] = found[-1]
    if "size" in fields:
        m = _INCH.search(text)
        g = _GLOVE.search(text)
        if m:
            out["size"] = f"{m.group(1)} in"
        elif g:
            out["size"] = (g.group(1) or g.group(2)).upper()
    if "brand" in fields:
        for b in fields["brand"].get("values") or []:
            if re.search(rf"\b{re.escape(b)}\b", text, re.I):
                out["brand"] = b
    return out
