"""What happened to a turn, from its final row: an empty ranking, an error, a fallback."""
from __future__ import annotations

import numpy as np

from harness.metrics.kernel import Long, Scoring
from harness.metrics.registry import Template, family
from harness.unmeasured import Unmeasured

TEMPLATES = [
    Template("zero_results", "lower", "rate", "1 when the final ranking is empty", reads=("ranking", "error")),
    Template("error_rate", "lower", "rate", "1 when the turn ended in an error", needs=("replayed",),
             reads=("error",)),
    Template("fallback_rate", "lower", "rate", "1 when a fallback replaced a failed or refused step",
             needs=("replayed",), reads=("fallback_reason",)),
]


@family("outcomes", TEMPLATES, order=20)
def outcome_rows(s: Scoring) -> Long:
    f = s.final
    why = np.where(f.na, f.na_text, None).astype(object)
    zero = np.where(f.na | f.err, np.nan, (s.tr.lengths[f.rows] == 0).astype(np.float64))
    zero_why = np.where(f.na, why, np.where(f.err, Unmeasured.ERROR.value, None)).astype(object)
    return f.long([s.codes("zero_results"), s.codes("error_rate"), s.codes("fallback_rate")],
                  np.column_stack([zero, f.err.astype(np.float64), np.where(f.na, np.nan, f.fb.astype(np.float64))]),
                  np.column_stack([zero_why, why, why]))
