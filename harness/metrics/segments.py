"""The segment grammar shared by metrics, compare and gate:
`all`, `field=value`, `field in [a, b]`, `field>=n`, `field<=n`, and conjunctions of these
joined by `&` (e.g. `split=main & turn_index>=2`).
Fields are label columns (turn_index, query_type, language, domain, answerability,
multi_turn_type, split) or keys of a turn's `segments` labels (e.g. collection)."""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from harness.errors import BadInput
from harness.yamlpos import did_you_mean

_IN = re.compile(r"^\s*([A-Za-z_][\w.]*)\s+in\s+\[(.*)\]\s*$")
_CMP = re.compile(r"^\s*([A-Za-z_][\w.]*)\s*(>=|<=|=)\s*(.+?)\s*$")

FIELDS = ("turn_index", "query_type", "language", "domain", "answerability", "multi_turn_type", "split")
# the turn-index segments every table by turn index shows (terminal, report, the report's verdict block)
TURN_SEGMENTS = ("all", "turn_index=1", "turn_index=2", "turn_index=3", "turn_index>=4", "turn_index>=2")


BUCKETS = ("1", "2", "3", "4+")  # what `bucket` returns, in order


def bucket(turn_index) -> str:
    """The turn bucket of a turn index: "1", "2", "3" or "4+"."""
    t = int(turn_index)
    return "4+" if t >= 4 else str(t)


class SegmentError(BadInput, ValueError):
    pass


@dataclass(frozen=True)
class Segment:
    field: str | None
    op: str  # all | = | in | >= | <=
    value: object = None

    @property
    def name(self) -> str:
        if self.op == "all":
            return "all"
        if self.op == "in":
            return f"{self.field} in [{', '.join(map(str, self.value))}]"
        return f"{self.field}{self.op}{self.value}"

    def __str__(self) -> str:
        return self.name

    def mask(self, labels: pd.DataFrame) -> pd.Series:
        if self.op == "all":
            return pd.Series(True, index=labels.index)
        if self.field not in labels.columns:
            raise SegmentError(f"segment {self.name!r}: unknown field {self.field!r}")
        col = labels[self.field]
        if self.op in (">=", "<="):
            num = pd.to_numeric(col, errors="coerce")
            return (num >= self.value) if self.op == ">=" else (num <= self.value)
        as_str = col.astype("string")
        if self.op == "=":
            return (as_str == str(self.value)).fillna(False)
        return as_str.isin([str(v) for v in self.value]).fillna(False)


@dataclass(frozen=True)
class AllOf:
    """A conjunction: a turn is in it when it is in every part."""
    parts: tuple[Segment, ...]

    @property
    def name(self) -> str:
        return " & ".join(p.name for p in self.parts)

    def __str__(self) -> str:
        return self.name

    def mask(self, labels: pd.DataFrame) -> pd.Series:
        out = pd.Series(True, index=labels.index)
        for p in self.parts:
            out &= p.mask(labels)
        return out


class TurnLookup:
    """Per-turn rows (session id, turn index) to the positions of their label rows (-1: none), by
    integer keys: no tuple per turn."""

    def __init__(self, labels: pd.DataFrame):
        self.codes, self.sessions = pd.factorize(labels["session_id"].astype(str))
        self.stride = int(labels["turn_index"].max() if len(labels) else 0) + 1
        self.index = pd.Index(self.codes * self.stride + labels["turn_index"].to_numpy(np.int64))

    def rows(self, session_ids, turn_index) -> np.ndarray:
        codes, uniq = pd.factorize(pd.Index(session_ids))
        found = self.sessions.get_indexer(pd.Index(uniq).astype(str))  # each distinct id looked up once
        ls = np.where(codes >= 0, found[np.clip(codes, 0, None)] if len(found) else -1, -1)
        tix = np.asarray(turn_index, np.int64)
        ok = (ls >= 0) & (tix >= 0) & (tix < self.stride)
        return np.where(ok, self.index.get_indexer(np.where(ok, ls * self.stride + tix, -1)), -1)

    def within(self, rows: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """Which of `rows` (label row positions) have a label row that `mask` selects."""
        return (rows >= 0) & np.asarray(mask, bool)[np.clip(rows, 0, None)] if len(mask) else np.zeros(len(rows), bool)


def segment_keys(labels: pd.DataFrame, segment: str | Segment | AllOf) -> set:
    """The (session_id, turn_index) keys of the labelled turns in a segment."""
    seg = parse_segment(segment) if isinstance(segment, str) else segment
    sel = labels.loc[seg.mask(labels).to_numpy(), ["session_id", "turn_index"]]
    return set(map(tuple, sel.values.tolist()))


def check_segment(text: str, labels: pd.DataFrame) -> Segment | AllOf:
    """A segment a user wrote, checked against a run's labels: every field must be a label column
    and every value of `=` / `in` must occur there (a typo would select nothing and pass
    quietly). SegmentError with a suggestion otherwise."""
    seg = parse_segment(text)
    for part in (seg.parts if isinstance(seg, AllOf) else (seg,)):
        if part.op == "all":
            continue
        if part.field not in labels.columns:
            fields = [c for c in labels.columns if c in FIELDS or c.startswith("seg.")]
            raise SegmentError(f"segment {text!r}: unknown field {part.field!r}{did_you_mean(part.field, fields)} "
                               f"(fields: {', '.join(fields)})")
        if part.op in ("=", "in"):
            have = set(labels[part.field].dropna().astype(str))
            for v in (part.value if part.op == "in" else (part.value,)):
                if str(v) not in have:
                    raise SegmentError(f"segment {text!r}: no labelled turn has {part.field}={v}{did_you_mean(v, have)} "
                                       f"(values: {', '.join(sorted(have)[:12])})")
    return seg


def parse_segment(text: str) -> Segment | AllOf:
    if "&" in text:
        pieces = text.split("&")
        if any(not p.strip() for p in pieces):
            raise SegmentError(f"segment {text!r}: empty part around '&'")
        parts = tuple(_parse_one(p) for p in pieces)
        if any(p.op == "all" for p in parts):
            raise SegmentError(f"segment {text!r}: 'all' cannot be part of a conjunction")
        return AllOf(parts)
    return _parse_one(text)


def _parse_one(text: str) -> Segment:
    t = text.strip()
    if t == "all":
        return Segment(None, "all")
    m = _IN.match(t)
    if m:
        vals = [v.strip().strip("'\"") for v in m.group(2).split(",") if v.strip()]
        if not vals:
            raise SegmentError(f"segment {text!r}: empty list")
        return Segment(m.group(1), "in", tuple(vals))
    m = _CMP.match(t)
    if m:
        field, op, val = m.groups()
        if op in (">=", "<="):
            try:
                return Segment(field, op, float(val) if "." in val else int(val))
            except ValueError:
                raise SegmentError(f"segment {text!r}: {op} needs a number") from None
        return Segment(field, "=", val.strip("'\""))
    raise SegmentError(f"segment {text!r}: expected all, field=value, field in [a, b], field>=n or field<=n")


def default_segments(labels: pd.DataFrame) -> list[Segment]:
    """all; each exact turn index and the buckets 1, 2, 3, 4+ and >=2; each value of every label field."""
    segs = [Segment(None, "all")]
    tix = sorted(int(x) for x in labels["turn_index"].dropna().unique())
    segs += [Segment("turn_index", "=", str(i)) for i in tix]
    if any(i >= 2 for i in tix):
        segs.append(Segment("turn_index", ">=", 2))
    if any(i >= 4 for i in tix):
        segs.append(Segment("turn_index", ">=", 4))
    extra = [c for c in labels.columns if c.startswith("seg.")]
    for f in [*FIELDS[1:], *extra]:
        if f in labels.columns:
            for v in sorted(labels[f].dropna().astype(str).unique()):
                segs.append(Segment(f, "=", v))
    return segs
