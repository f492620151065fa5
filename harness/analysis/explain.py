"""`harness gate --explain`: for a pair of runs and a policy, every check the gate would make, with
the sessions it would see, before any statistic is computed. The runs and the policy are checked
as the gate checks them (complete, fresh, covering, every name known), so a policy that explains
is a policy that gates."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from harness.analysis.compare import Split
from harness.analysis.gate import underpowered
from harness.analysis.gate_inputs import prepare
from harness.analysis.policy import Policy
from harness.metrics.segments import segment_keys
from harness.metrics.stats import min_detectable_drop, paired_of
from harness.store.folder import RunData


def sessions(run: RunData, arm_id: str, metric: str, segment: str, labels: pd.DataFrame) -> set[str]:
    """Sessions with a measured value of `metric` for the arm inside `segment` of `labels` (the
    baseline's: the turns every check reads)."""
    pt = run.turns([metric])
    rows = pt[(pt["arm_id"] == arm_id) & pt["value"].notna()]
    keys = segment_keys(labels, segment)
    inside = pd.MultiIndex.from_arrays([rows["session_id"], rows["turn_index"]]).isin(list(keys))
    return set(rows.loc[inside, "session_id"])


def power(item, pair, split: Split) -> dict:
    """A rule's smallest detectable difference on these runs (from the baseline's spread between the
    sessions both runs measure, as the gate computes it) and what it means for the rule."""
    frame = paired_of(split, item.metric, "A:" + pair.baseline.arm_id, "B:" + pair.candidate.arm_id,
                      split.keys(item.segment))
    mde, n = min_detectable_drop(frame, item.alpha), int(frame["session_id"].nunique())
    weak = underpowered(mde, n, item.max_drop) if item.test == "noninferiority" else None
    said = "not estimable" if mde != mde else f"{mde:.4f}"
    return {"mde": None if mde != mde else mde,
            "power": weak or f"with {n} sessions the smallest drop this set can show is {said} (max_drop {item.max_drop})"}


def _row(kind: str, i: int, item, pair, prep: dict, need: int, split: Split) -> dict:
    m = item.m
    seg = getattr(item, "segment", "all")
    base, cand = prep["base"], prep["cand"]
    what = m.name + (f" ({item.test})" if kind == "rule" else f" ({getattr(item, 'stat', 'mean')})")
    out = {"check": f"{kind} {i + 1}", "metric": what, "label": pair.label, "segment": seg, "need": need}
    sides = ("baseline", "candidate") if kind == "rule" else ("candidate",)
    if not all(m.applies_to(getattr(pair, s).capabilities) for s in sides):
        return {**out, "baseline": None, "candidate": None, "both": None,
                "will": f"n/a: {m.name} needs {', '.join(sorted(m.needs))}"}
    c = sessions(cand, pair.candidate.arm_id, m.name, seg, base.labels)
    b = sessions(base, pair.baseline.arm_id, m.name, seg, base.labels) if kind == "rule" else None
    seen = len(b & c) if b is not None else len(c)
    will = "n/a: no turn measures it here" if not c and kind != "rule" else \
        "compared" if seen >= need else f"insufficient data ({seen} < {need} sessions)"
    out = {**out, "baseline": None if b is None else len(b), "candidate": len(c),
           "both": None if b is None else seen, "will": will}
    return {**out, **power(item, pair, split)} if kind == "rule" and seen >= need else out


def explain(baseline: Path, candidate: Path, policy: Policy, pairs: list[str] | None = None) -> dict:
    """{rows: one per check and pair, not_compared, evidence, warnings} (bad input raises as the gate does)."""
    prep = prepare(baseline, candidate, policy, pairs)
    rows = []
    split = Split(prep["base"], prep["cand"])  # the turn means only: no statistic is computed
    for section, i, item, chosen in prep["chosen"]:
        need = (getattr(item, "min_sessions", None) or policy.min_sessions)
        rows += [_row(section[:-1], i, item, p, prep, need, split) for p in chosen]
    return {"baseline": prep["base"].name, "candidate": prep["cand"].name, "rows": rows,
            "not_compared": prep["not_compared"], "evidence": prep["evidence"], "warnings": prep["warnings"]}
