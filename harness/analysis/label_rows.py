"""A run's labelled turns as positions in key order (session id as text, then turn index), so that
an arm's turn means, a segment and a pairing of two arms are arrays over those positions: a
comparison of a month's runs holds a few numbers per labelled turn and (metric, arm), never a
tuple per turn nor another arm's rows (issue 45). The turn means equal `stats._turn_means`
restricted to the labelled turns, in the same order, computed by the same pandas group mean."""
from __future__ import annotations

import numpy as np
import pandas as pd

from harness.metrics.segments import AllOf, Segment, TurnLookup, parse_segment


class LabelRows:
    """The labelled turns of `labels` in key order: `session` (each turn's session as its rank among
    the sessions' ids, `sessions`, sorted as text) and `turn` (its turn index), position by position."""

    def __init__(self, labels: pd.DataFrame):
        self.labels = labels
        self.lookup = TurnLookup(labels)
        ranks, self.sessions = pd.factorize(labels["session_id"].astype(str).to_numpy(object), sort=True)
        turns = labels["turn_index"].to_numpy(np.int64)
        self.order = np.lexsort((turns, ranks))  # position -> label row
        self.position = np.empty(len(labels), np.int64)  # label row -> position
        self.position[self.order] = np.arange(len(labels))
        self.session, self.turn = ranks[self.order].astype(np.int64), turns[self.order]
        self.sessions = pd.Index(self.sessions, dtype=object)
        self.turn_levels = np.unique(self.turn)
        self.turn_codes = np.searchsorted(self.turn_levels, self.turn)
        self._masks: dict[str, np.ndarray] = {}

    def __len__(self) -> int:
        return len(self.order)

    def positions(self, session_ids, turn_index) -> np.ndarray:
        """The position of each (session id, turn index) among the labelled turns, -1 for a turn
        without a label row."""
        rows = self.lookup.rows(session_ids, turn_index)
        if not len(self.position):  # no labelled turn
            return np.full(len(rows), -1, np.int64)
        return np.where(rows >= 0, self.position[np.clip(rows, 0, None)], -1) if len(rows) else rows

    def mask(self, segment: str | Segment | AllOf) -> np.ndarray:
        """Which positions a segment holds (each segment's mask computed once)."""
        seg = parse_segment(segment) if isinstance(segment, str) else segment
        if seg.name not in self._masks:
            self._masks[seg.name] = seg.mask(self.labels).to_numpy(bool)[self.order]
        return self._masks[seg.name]

    def index(self, positions: np.ndarray) -> pd.MultiIndex:
        """(session_id, turn_index) of positions, built from their codes (no tuple per turn)."""
        return pd.MultiIndex(levels=[self.sessions, self.turn_levels],
                             codes=[self.session[positions], self.turn_codes[positions]],
                             names=["session_id", "turn_index"], verify_integrity=False)


class ArmMeans:
    """One arm's turn means of one metric over the labelled turns: `mean` per position (NaN where
    no repeat is measured or the arm has no row) and `seen` (the arm has a row for the turn)."""

    def __init__(self, where: LabelRows, rows: pd.DataFrame):
        pos = where.positions(rows["session_id"], rows["turn_index"]) if len(rows) else np.zeros(0, np.int64)
        keep = pos >= 0
        values = pd.to_numeric(rows["value"], errors="coerce").to_numpy(float)[keep]
        means = pd.Series(values).groupby(pos[keep], sort=True).mean()  # the group mean of `_turn_means`
        self.where = where
        self.seen = np.zeros(len(where), bool)
        self.seen[means.index.to_numpy(np.int64)] = True
        self.mean = np.full(len(where), np.nan)
        self.mean[means.index.to_numpy(np.int64)] = means.to_numpy(float)

    def series(self, mask: np.ndarray | None = None) -> pd.Series:
        """The means of the turns the arm has a row for (within `mask`), as `stats._turn_means` gives
        them: indexed by (session_id, turn_index) in key order."""
        sel = self.seen if mask is None else self.seen & mask
        pos = np.flatnonzero(sel)
        return pd.Series(self.mean[pos], index=self.where.index(pos), dtype=float)
