"""Identifier guard: find identifiers (part numbers such as `4711-32`, supplier-prefixed
`WX-4711-32`, EAN-8/EAN-13 with a valid check digit, drawing numbers), replace them with
placeholders before a model sees the text, restore them afterwards, and check that every
issued query keeps them verbatim."""
from __future__ import annotations

import re

_PART = r"(?:[A-Z]{1,4}-)?\d{3,6}-\d{1,4}(?:-\d{1,4})?"
_DRAWING = r"(?:DWG|ZNR|ZNr\.?|Zeichnung)[- ]?\d{3,}(?:[-/.]\d+)*"
_EAN = r"\d{13}|\d{8}"
_RX = re.compile(rf"(?<![\w-])(?:{_DRAWING}|{_PART}|{_EAN})(?![\w-])")
PLACEHOLDER = "⟦ID{}⟧"
_PH_RX = re.compile(r"⟦ID(\d+)⟧")


def ean_valid(code: str) -> bool:
    if not code.isdigit() or len(code) not in (8, 13):
        return False
    digits = [int(c) for c in code]
    body, check = digits[:-1], digits[-1]
    weights = [3, 1] if len(code) == 8 else [1, 3]
    total = sum(d * weights[i % 2] for i, d in enumerate(body))
    return (10 - total % 10) % 10 == check


def find_identifiers(text: str) -> list[str]:
    """Identifiers in order of appearance, de-duplicated. Digit-only codes count only as EANs
    with a valid check digit (so a year or a quantity is not an identifier)."""
    out: list[str] = []
    for m in _RX.finditer(text):
        s = m.group(0)
        if s.isdigit() and not ean_valid(s):
            continue
        if s not in out:
            out.append(s)
    return out


def whole(ident: str) -> re.Pattern:
    """The identifier as a whole token: 4711-32 does not occur in 4711-321 or WX-4711-32."""
    return re.compile(rf"(?<![\w-]){re.escape(ident)}(?![\w-])")


def mask(text: str, ids: list[str] | None = None) -> tuple[str, dict[str, str]]:
    """Replace identifiers with placeholders ⟦ID1⟧, ⟦ID2⟧, ...; return the mapping. `ids`: the
    text's `find_identifiers`, when the caller has them already."""
    ids = find_identifiers(text) if ids is None else ids
    mapping = {PLACEHOLDER.format(i + 1): ident for i, ident in enumerate(ids)}
    for ph, ident in mapping.items():
        text = whole(ident).sub(ph, text)
    return text, mapping


def unmask(text: str, mapping: dict[str, str]) -> str:
    return _PH_RX.sub(lambda m: mapping.get(m.group(0), m.group(0)), text)


def preserved(identifiers: list[str], queries: list[str]) -> float | None:
    """Share of identifiers that appear verbatim in every query (None without identifiers)."""
    if not identifiers:
        return None
    ok = sum(1 for i in identifiers if queries and all(whole(i).search(q) for q in queries))
    return ok / len(identifiers)


def restore_identifiers(text: str, mapping: dict[str, str], ids: list[str]) -> str:
    """Put placeholders back; an identifier of the turn that the model dropped or altered is
    prepended verbatim."""
    text = unmask(text, mapping)
    for i in ids:
        if not whole(i).search(text):
            text = f"{i} {text}"
    return text
