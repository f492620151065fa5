"""Units normalised for filters (5 l = 5L = 5 litres = 5000 ml; 60 mm = 6 cm), while the typed
form stays in the lexical query."""
from __future__ import annotations

import re

_VOL = re.compile(r"(?<![\w.,])(\d+(?:[.,]\d+)?)\s*-?\s*(ml|millilit(?:er|re)s?|l|ltr|lit(?:er|re)s?|liter)(?![\w])", re.I)
_LEN = re.compile(r"(?<![\w.,])(\d+(?:[.,]\d+)?)\s*(mm|cm|m)(?![\w²³])", re.I)
_PCT = re.compile(r"(?<![\w.,])(\d+(?:[.,]\d+)?)\s*(%|percent|prozent)", re.I)
_BAR = re.compile(r"(?<![\w.,])(\d+(?:[.,]\d+)?)\s*(bar)\b", re.I)
_EUR = re.compile(r"(?:(?:EUR|€)\s*(\d+(?:[.,]\d+)?)|(\d+(?:[.,]\d+)?)\s*(?:EUR|€|euros?))", re.I)


def _num(s: str) -> float:
    return float(s.replace(",", "."))


def _clean(x: float) -> int | float:
    return int(x) if float(x).is_integer() else round(x, 3)


def volumes_ml(text: str) -> list[int | float]:
    out = []
    for n, u in _VOL.findall(text):
        v = _num(n)
        out.append(_clean(v if u.lower().startswith("m") else v * 1000))
    return out


def lengths_mm(text: str) -> list[int | float]:
    f = {"mm": 1, "cm": 10, "m": 1000}
    return [_clean(_num(n) * f[u.lower()]) for n, u in _LEN.findall(text)]


def percents(text: str) -> list[int | float]:
    return [_clean(_num(n)) for n, _ in _PCT.findall(text)]


def bars(text: str) -> list[int | float]:
    return [_clean(_num(n)) for n, _ in _BAR.findall(text)]


def euros(text: str) -> list[float]:
    return [_num(a or b) for a, b in _EUR.findall(text)]


def normalise_value(field_unit: str | None, value):
    """A filter value in the schema's unit: '5 l' -> 5000 for a field in ml."""
    if not isinstance(value, str) or not field_unit:
        return value
    conv = {"ml": volumes_ml, "mm": lengths_mm, "bar": bars, "EUR": euros, "%": percents}.get(field_unit)
    found = conv(value) if conv else []
    if found:
        return found[0]
    try:
        return _clean(_num(value))
    except ValueError:
        return value
