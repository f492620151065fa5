"""One colour per arm label, the same in every run, plot and report: a label's colour is a
function of the label, never of the arm's position in a run. The shipped arms' labels have fixed
colours; any other label takes one by a stable hash of its text among the rest, the next free one
when two labels of a report would share it (labels sorted, so the choice does not depend on order)."""
from __future__ import annotations

import hashlib

COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
          "#bcbd22", "#17becf", "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd"]
# the labels of the shipped configs' arms (harness/arms, configs/*.yaml), each with its colour
FIXED = ("original", "concat", "rewrite", "rewrite rules", "multi_query_rrf", "rewrite_adaptive", "rewrite_hyde",
         "corrective", "oracle")


def _hashed(label: str) -> int:
    free = len(COLORS) - len(FIXED)
    return len(FIXED) + int(hashlib.sha256(label.encode("utf-8")).hexdigest()[:8], 16) % free


def arm_colors(labels) -> dict[str, int]:
    """The colour index (into COLORS) of every label: fixed for the shipped arms' labels, else by
    hash, probing to a free colour while there is one."""
    out = {label: FIXED.index(label) for label in labels if label in FIXED}
    taken = set(out.values())
    for label in sorted(set(labels) - set(out)):
        i = _hashed(label)
        for step in range(len(COLORS)):
            j = (i - len(FIXED) + step) % (len(COLORS) - len(FIXED)) + len(FIXED)
            if j not in taken:
                i = j
                break
        out[label] = i
        taken.add(i)
    return out
