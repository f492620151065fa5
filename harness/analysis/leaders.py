"""Which arm leads each run, and by how much: the answer the report opens with. Per run and
headline metric (the run's headline recall and nDCG, harness.metrics.registry.headline, and the
judged metrics where measured): the best arm by its mean over all labelled turns (oracle arms, an
upper bound, are not ranked; among arms with the same mean the reference arm, else the first in
the manifest), its paired difference with the run's reference arm (the arm that declares the
`reference` capability) and with every other ranked arm, by the statistics of `harness compare`
(session bootstrap 95% CI, session randomization p) with Holm across every comparison of the
run, and the arms the best is not significantly better than: it `leads` when there is none, else
it is tied with them. Runs are answered one by one, so runs on different eval sets each get their
own. Returns plain data that the report renders (harness/report/sections/answer.py); writes nothing."""
from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from harness.analysis.evidence import EvidenceError, check_run
from harness.analysis.verdict import evalset_of, mark
from harness.metrics.registry import headline, judged, resolve
from harness.metrics.stats import STATS, compare_arms, holm
from harness.store.folder import RunData

EPS = 1e-12
FIELDS = ("diff", "ci_lo", "ci_hi", "p", "p_floor", "n_turns", "n_sessions", "n_unmeasured")


def answer_metrics(run: RunData) -> list[str]:
    """The metrics the answer ranks arms by: the run's headline recall and nDCG (its own cutoffs) and
    the judged metrics it measured, as the report's headline table shows them."""
    measured = run.metrics
    return [m for m in headline(run.manifest.metrics)[:2] + judged() if m in measured]


def _means(run: RunData, metric: str) -> dict[str, float]:
    """Arm id -> mean over all labelled turns (the metrics table's aggregate), measured arms only."""
    a = run.aggregates
    rows = a[(a["metric"] == metric) & (a["segment"].astype(str) == "all") & (a["n"].fillna(0) > 0)]
    return {r.arm_id: float(r.mean) for r in rows.itertuples() if not pd.isna(r.mean)}


def _ranked(run: RunData, metric: str) -> list[tuple[str, float]]:
    """(arm id, mean) of the arms ranked on `metric`, best first in its direction; the reference arm
    first among equal means, then the manifest's order."""
    means = _means(run, metric)
    sign = -1.0 if resolve(metric).direction == "lower" else 1.0
    order = {a.arm_id: i for i, a in enumerate(run.arms)}
    ref = reference_arm(run)
    arms = [a.arm_id for a in run.arms if a.arm_id in means and "oracle" not in a.capabilities]
    return sorted(((a, means[a]) for a in arms),
                  key=lambda x: (-round(sign * x[1] / EPS) * EPS, x[0] != ref, order[x[0]]))


def reference_arm(run: RunData) -> str | None:
    return next((a.arm_id for a in run.arms if "reference" in a.capabilities), None)


def _flipped(r: dict) -> dict:
    """A row of compare_arms (other − best) as best − other."""
    out = {k: (None if pd.isna(r[k]) else float(r[k])) for k in FIELDS}
    for k in ("diff", "ci_lo", "ci_hi"):
        out[k] = None if out[k] is None else -out[k]
    out["ci_lo"], out["ci_hi"] = out["ci_hi"], out["ci_lo"]
    for k in ("n_turns", "n_sessions", "n_unmeasured"):
        out[k] = int(out[k] or 0)
    return out


def _metric(run: RunData, metric: str) -> dict | None:
    """The best arm on one metric and its comparisons with every other ranked arm (p not yet adjusted)."""
    ranked = _ranked(run, metric)
    if not ranked:
        return None
    label = {a.arm_id: a.label for a in run.arms}
    best, others = ranked[0][0], [a for a, _ in ranked[1:]]
    means = dict(ranked)
    direction = resolve(metric).direction
    rows = {}
    if others:
        pt = run.turns([metric])
        df = compare_arms(pt, metric, best, others, direction=direction)  # the counts of STATS
        rows = {r["arm"]: _flipped(r) for r in df.to_dict("records")}
    return {"name": metric, "direction": direction, "n_ranked": len(ranked),
            "best": {"arm_id": best, "label": label[best], "mean": means[best]},
            "others": [{"arm_id": a, "label": label[a], "mean": means[a], **rows[a]} for a in others]}


def _adjust(metrics: list[dict], ref: str | None, alpha: float) -> None:
    """Holm across every comparison of the run; then each metric's reference row, runner-up and
    the arms the best is not significantly better than (each comparison's `mark` is `improvement`
    where the best is better in the metric's direction with Holm p below alpha, as the verdict
    block marks cells)."""
    cells = [(m, o) for m in metrics for o in m["others"]]
    n_tests = sum(c["p"] is not None for _, c in cells)
    for (m, c), p in zip(cells, holm([math.nan if c["p"] is None else c["p"] for _, c in cells])):
        c["p_holm"] = None if math.isnan(p) else p
        c["holm_m"] = n_tests
        c["mark"] = mark(m["direction"], c["diff"], c["p_holm"], alpha)
    for m in metrics:
        m["next"] = m["others"][0] if m["others"] else None
        m["tied"] = [o for o in m["others"] if o["mark"] != "improvement"]
        m["leads"] = bool(m["others"]) and not m["tied"]
        m["best_is_reference"] = m["best"]["arm_id"] == ref
        m["vs_reference"] = next((o for o in m["others"] if o["arm_id"] == ref), None)


def leaders_of(run: RunData, alpha: float = STATS.alpha) -> dict:
    """One run's answer (see the module's docstring)."""
    ref = reference_arm(run)
    label = {a.arm_id: a.label for a in run.arms}
    out = {"run": run.name, "dir": str(run.path.resolve()), "eval_set": evalset_of(run.path)[1],
           "reference": label.get(ref), "partial": None if run.evidence is None or run.evidence.complete
           else run.evidence.completeness.describe(), "metrics": [], "why": None, **STATS.method(),
           "alpha": alpha, "n_tests": 0}
    if not run.scored:
        out["why"] = f"not scored (`harness metrics {run.name}`)"
        return out
    metrics = [m for m in (_metric(run, name) for name in answer_metrics(run)) if m]
    if not metrics:
        out["why"] = "no arm has a measured headline metric"
        return out
    _adjust(metrics, ref, alpha)
    if ref is None:
        out["why"] = "no arm declares the `reference` capability: nothing to compare the best arm with"
    out["metrics"] = metrics
    out["n_tests"] = sum(o["p"] is not None for m in metrics for o in m["others"])
    return out


def leaders(paths: list[Path], checked: dict[str, RunData] | None = None) -> dict:
    """{resolved run folder: its answer} for the report's runs (checked as every reader checks them;
    bad input as EvidenceError). `checked`: runs the caller has checked and loaded as check_run
    (complete=False, scored=False) loads them, with no table scored again, by resolved folder."""
    out = {}
    for p in paths:
        key = str(Path(p).resolve())
        run = (checked or {}).get(key)
        if run is None:
            try:
                run = check_run(p, complete=False, scored=False, rescore=False)
            except ValueError as e:
                raise EvidenceError(str(e)) from None
        out[key] = leaders_of(run)
    return out
