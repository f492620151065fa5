"""The segment labels of a labels snapshot: its `segments` column holds each turn's extra labels as a
JSON object text; RunFolder.labels gives each key a `seg.KEY` column."""
from __future__ import annotations

import json

import pandas as pd


def with_segments(labels: pd.DataFrame) -> pd.DataFrame:
    """`labels` with a `seg.KEY` column per key of its `segments` texts, each distinct text parsed
    once (a month's labels: 10^6 rows, a few distinct texts); a missing text has no segment label.
    Each column's values and type as a list of every row's values would give."""
    codes, texts = pd.factorize(labels["segments"])
    segs = [json.loads(s or "{}") for s in texts] + ([{}] if (codes < 0).any() else [])
    at = codes.copy()
    at[codes < 0] = len(segs) - 1
    for k in sorted({k for s in segs for k in s}):
        labels[f"seg.{k}"] = pd.Series([s.get(k) for s in segs]).array.take(at)
    return labels
