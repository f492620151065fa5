"""The CI gate: a policy (harness/analysis/policy.py) turned into a verdict and an exit code.

Arms pair by label (harness/analysis/pairing.py); labels without a partner are refused (exit 2) unless
the policy says `unpaired: warn`. Every rule is read in its metric's good direction
(harness/metrics/registry.py): with `change` = candidate − baseline made positive when better,
- `noninferiority` passes only when the lower bound of the paired, session-level bootstrap CI
  of the change lies above −max_drop;
- `regression` fails only when the change is worse than −max_drop AND significant at alpha
  (one-sided randomization test over sessions).
A rule needs `min_sessions` sessions measured in both runs, a floor or budget as many in the
candidate; fewer is "insufficient data", a failed check. Each rule reports the smallest change
the baseline's between-session spread lets it detect; a noninferiority rule whose CI straddles
−max_drop on a set that cannot detect a drop of max_drop is "insufficient data" too (with the
sessions that would be needed), never a regression. A metric that does not apply to an arm,
or that no labelled turn of the eval set measures, is shown n/a; a check naming such an arm, a
rule that applies to no pair, a segment that names no label value, and a policy of which nothing
applies are bad input. Exit codes: 0 pass, 1 regression (or insufficient data), 2 bad input, 3
infrastructure (errors, failed LLM calls, or unmeasured values past the limits)."""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pandas as pd

from harness.analysis.bound_values import missing_values, not_finite
from harness.analysis.compare import CompareError, RunData, Split, compare_pair
from harness.analysis.evidence import lost_turns
from harness.analysis.gate_inputs import SECTIONS, applies, infrastructure, prepare
from harness.analysis.gate_report import moved_turns, to_markdown, write_outputs
from harness.analysis.pairing import Pair
from harness.analysis.policy import GateUsageError, Policy, load_policy
from harness.analysis.pool_warnings import judged_warnings
from harness.analysis.unchanged import unchanged
from harness.metrics.segments import SegmentError, segment_keys
from harness.metrics.signflip import p_said
from harness.metrics.stats import STATS, sessions_needed
from harness.run.armset import EXTERNAL

PASS, REGRESSION, USAGE, INFRA = 0, 1, 2, 3
VERDICT = {PASS: "pass", REGRESSION: "regression", INFRA: "infrastructure"}
INSUFFICIENT = "insufficient data"  # the verdict (exit 1) when every failed check lacked the data to judge it
MEANING = {PASS: "pass", REGRESSION: "regression or insufficient data", USAGE: "bad input",
           INFRA: "infrastructure"}
__all__ = ["SECTIONS", "evaluate", "evaluate_to", "gate", "prepare"]


def _na(kind: str, name: str, pair: Pair, m, segment: str = "all", why: str | None = None) -> dict:
    """A check that does not apply here: shown, neither passed nor failed."""
    return {"kind": kind, "name": name, "status": "n/a", "ok": True, "label": pair.label, "metric": m.name,
            "segment": segment, "direction": m.direction,
            "detail": why or f"n/a for this arm: {m.name} needs {', '.join(sorted(m.needs))}"}


def _dropped(kind: str, name: str, pair: Pair, m, segment: str) -> dict | None:
    """A failed check when the candidate's arm (of any kind: a pair named across kinds too) no
    longer declares a capability the metric needs and the baseline's did: its metric is not
    measured, and what is not measured cannot pass. An imported run file (rankings only, paired
    on purpose) records no more than its rankings: the check is n/a, and says so."""
    if not m.applies_to(pair.baseline.capabilities) or m.applies_to(pair.candidate.capabilities):
        return None
    gone = sorted(set(m.needs) - set(pair.candidate.capabilities))
    if pair.candidate.capabilities == EXTERNAL:
        return _na(kind, name, pair, m, segment, f"n/a: {pair.candidate.label} is an imported run file (rankings "
                   f"only): {m.name} needs {', '.join(gone)}, which no imported run records")
    return {"kind": kind, "name": name, "status": "fail", "ok": False, "label": pair.label, "metric": m.name,
            "segment": segment, "direction": m.direction,
            "detail": f"the candidate's arm no longer declares {', '.join(gone)}, which {m.name} needs and the "
                      "baseline's arm declared: it is not measured, so it cannot pass"}


def _lost(out: dict, base: RunData, cand: RunData, pair: Pair, policy: Policy, split: Split) -> dict:
    """The check failed when the candidate left more of the turns the baseline measured unmeasured
    than limits.max_lost_rate allows; else the count is said beside the result."""
    lost = lost_turns(base, cand, pair.baseline.arm_id, pair.candidate.arm_id, out["metric"], out["segment"],
                      split.sides(pair, out["metric"]))
    if not lost.n:
        return out
    said = lost.describe(cand.name)
    if lost.rate > policy.limits.max_lost_rate:
        return {**out, "status": "fail", "ok": False, "lost": lost.n,
                "detail": f"{said}: {lost.rate:.1%} > max_lost_rate {policy.limits.max_lost_rate:.1%}; what is not "
                          f"measured is not compared, so it cannot pass ({out['detail']})"}
    return {**out, "lost": lost.n, "detail": f"{out['detail']}; {said}, left out"}


def _insufficient(out: dict, n: int, need: int, where: str) -> dict:
    return {**out, "status": "insufficient", "ok": False,
            "detail": f"insufficient data: {n} session(s) measured {where} (min_sessions {need})"}


def underpowered(mde: float, n_sessions: int, max_drop: float) -> str | None:
    """Why a noninferiority rule cannot be judged on this set: its smallest detectable difference is
    larger than its margin (or not estimable), in words with the sessions that would be needed;
    None when the set can show a drop of `max_drop`. The gate's results and --explain say it alike."""
    if not max_drop > 0:
        return None  # a margin of 0: only a CI wholly at or above 0 passes; no size of set changes that
    if math.isnan(mde):
        return (f"insufficient data: the smallest detectable difference is not estimable with {n_sessions} "
                "session(s) (no spread between the baseline's sessions)")
    if mde <= max_drop:
        return None
    need = sessions_needed(mde, n_sessions, max_drop)
    return (f"insufficient data: with {n_sessions} sessions the smallest drop this set can show is {mde:.4f} (more "
            f"than max_drop {max_drop}); about {need} sessions would be needed")


def _worse_or_better(change: float) -> str:
    """A direction-adjusted change in words: 'worse by 0.12', 'better by 0.03', 'unchanged'."""
    return "unchanged" if abs(change) < 5e-5 else f"{'worse' if change < 0 else 'better'} by {abs(change):.4f}"


def rule_result(i: int, rule, pair: Pair, base: RunData, cand: RunData, policy: Policy, split: Split) -> dict:
    m = rule.m
    direction = rule.direction or m.direction
    name = f"rule {i + 1}: {rule.test} {m.name} [{rule.segment}] {pair.label}"
    if not applies(m, pair):
        return _dropped("rule", name, pair, m, rule.segment) or _na("rule", name, pair, m, rule.segment)
    row = compare_pair(base, cand, pair, m.name, rule.segment, policy.n_resamples, policy.seed, rule.alpha,
                       split=split, direction=direction)
    sign = m.sign(direction)
    diff, n_s = row.get("diff", math.nan), int(row.get("n_sessions") or 0)
    change, lo = sign * diff, min(sign * row["ci_lo"], sign * row["ci_hi"])  # lo: the worst end of the CI
    need = rule.min_sessions or policy.min_sessions
    out = {"kind": "rule", "name": name, "label": pair.label, "metric": m.name, "segment": rule.segment,
           "direction": direction, "diff": diff, "ci": [row["ci_lo"], row["ci_hi"]], "p": row["p"], "p_floor": row.get("p_floor"),
           "p_exact": bool(row.get("p_exact")), "mde": row["mde"],
           "n_sessions": n_s, "n_turns": int(row.get("n_turns") or 0), "changes": pair.changes}
    if n_s < need or math.isnan(diff):
        return _insufficient(out, n_s, need, "in both runs")
    said = (f"candidate − baseline {diff:+.4f}, {1 - rule.alpha:.0%} CI [{row['ci_lo']:+.4f}, {row['ci_hi']:+.4f}], "
            f"p {p_said(row['p'], row.get('p_floor'))}; {direction} is better: {_worse_or_better(change)}")
    if rule.test == "noninferiority":
        ok = lo >= -rule.max_drop
        why = f"{said}, at worst {_worse_or_better(lo)} ({'within' if ok else 'beyond'} the allowed drop {rule.max_drop})"
        best = max(sign * row["ci_lo"], sign * row["ci_hi"])  # the CI's best end, in the good direction
        weak = None if ok or best < -rule.max_drop else underpowered(row["mde"], n_s, rule.max_drop)
        if weak:  # neither shown within the margin nor wholly beyond it, on a set too small to tell
            return _lost({**out, "status": "insufficient", "ok": False, "detail": f"{weak} ({why})"}, base, cand,
                         pair, policy, split)
    else:
        p_one = row["p"] / 2 if change < 0 else 1.0
        ok = not (-change > rule.max_drop and p_one < rule.alpha)
        floor = row.get("p_floor")  # a p at the test's resolution: its half is a bound too
        said_p = p_said(p_one, None if floor is None or floor != floor or change >= 0 else floor / 2)
        why = f"{said} vs allowed drop {rule.max_drop}, one-sided p {said_p} vs alpha {rule.alpha}"
    return _lost({**out, "status": "pass" if ok else "fail", "ok": bool(ok), "detail": why}, base, cand, pair, policy,
                 split)


def _candidate_values(base: RunData, cand: RunData, arm_id: str, metric: str, segment: str) -> pd.Series:
    """The candidate arm's values per turn of the segment, on the baseline's labelled turns only: the
    turns the verdict says it compared (turns the candidate holds beyond them are named, not read)."""
    keys = segment_keys(base.labels, segment)
    pt = cand.turns([metric])
    pt = pt[pt["arm_id"] == arm_id]
    inside = pd.MultiIndex.from_arrays([pt["session_id"], pt["turn_index"]]).isin(list(keys))
    return pt[inside].groupby(["session_id", "turn_index"])["value"].mean()


def bound_result(kind: str, i: int, item, pair: Pair, base: RunData, cand: RunData, policy: Policy,
                 split: Split) -> dict:
    """A floor (min/max of the mean) or a budget (max of a stat) on the candidate's values."""
    m = item.m
    seg = getattr(item, "segment", "all")
    stat = getattr(item, "stat", "mean")
    name = f"{kind} {i + 1}: {m.name} [{seg}] {pair.label}" if kind == "floor" else \
        f"{kind} {i + 1}: {stat} {m.name} {pair.label}"
    if not m.applies_to(pair.candidate.capabilities):
        return _dropped(kind, name, pair, m, seg) or _na(kind, name, pair, m, seg)
    need = policy.min_sessions
    turns = _candidate_values(base, cand, pair.candidate.arm_id, m.name, seg)
    out = {"kind": kind, "name": name, "label": pair.label, "metric": m.name, "segment": seg, "direction": m.direction}
    gone, beside = missing_values(base, cand, pair, m.name, seg, policy.limits.max_lost_rate)
    gone = gone or not_finite(turns.dropna(), m.name)  # a metric no longer measured, an infinite value: failed
    if gone:
        return {**out, "status": "fail", "ok": False, "detail": gone}
    if turns.empty:  # no labelled turn of this eval set has what the metric measures (identifiers, ...)
        return _na(kind, name, pair, m, seg, f"n/a: no turn of this eval set measures {m.name} in segment {seg}")
    if kind == "budget" and m.name == "cost_usd" and turns.isna().any():
        return {**out, "status": "fail", "ok": False, "detail": "cost unknown for some turns (no price for the model)"}
    vals = turns.dropna()
    n_s = vals.index.get_level_values(0).nunique()
    if n_s < need:
        return _insufficient(out, n_s, need, "in the candidate")
    v = float({"mean": vals.mean(), "p50": vals.quantile(0.5), "p95": vals.quantile(0.95)}[stat])
    lo, hi = (getattr(item, "min", None), item.max)
    ok = (lo is None or v >= lo) and (hi is None or v <= hi)
    bounds = f"min {lo}, max {hi}" if kind == "floor" else f"max {hi}"
    out = {**out, "status": "pass" if ok else "fail", "ok": bool(ok), "value": v,
           "detail": f"{stat} {v:.4f} ({bounds}) over {len(vals)} turns, {n_s} sessions"
                     + (f"; {beside}" if beside else "")}
    return _lost(out, base, cand, pair, policy, split) if m.applies_to(pair.baseline.capabilities) else out


def _moved(results: list[dict], pairs: list[Pair], pt: pd.DataFrame, base: RunData) -> None:
    for res in results:
        if not res["ok"] and res.get("metric"):
            pair = next(p for p in pairs if p.label == res["label"])
            res["moved"] = moved_turns(pt, base, pair, res["metric"], res["segment"], res.get("direction") or "none")


def evaluate(baseline: Path, candidate: Path, policy: Policy, pairs_cli: list[str] | None = None) -> dict:
    prep = prepare(baseline, candidate, policy, pairs_cli)
    base, cand, pairs, chosen = prep["base"], prep["cand"], prep["pairs"], prep["chosen"]
    warnings = prep["warnings"]
    infra = infrastructure(policy, [base, cand], pairs)
    split = Split(base, cand)
    results = []
    for sec, i, item, ps in chosen:
        for p in ps:
            results.append(rule_result(i, item, p, base, cand, policy, split) if sec == "rules" else
                           bound_result(sec[:-1], i, item, p, base, cand, policy, split))
    if results and all(r["status"] == "n/a" for r in results):
        raise GateUsageError("no check of the policy applies to these runs (every one is n/a: "
                             + "; ".join(sorted({r["detail"] for r in results})) + "): nothing would be compared")
    _moved(results, pairs, split.frame, base)
    gated = [r["segment"] for r in results if r["status"] != "n/a"]  # coverage on the segments the policy gates
    warnings = warnings + judged_warnings(base, cand, pairs, gated)
    status = INFRA if infra else (REGRESSION if not all(r["ok"] for r in results) else PASS)
    failed = [r for r in results if not r["ok"]]
    said = INSUFFICIENT if status == REGRESSION and all(r["status"] == "insufficient" for r in failed) \
        else VERDICT[status]
    counts = dataclasses.replace(STATS, n_resamples=policy.n_resamples, seed=policy.seed)
    return {"status": status, "verdict": said, "baseline": base.name, "candidate": cand.name,
            "statistics": {**counts.method(), "said": counts.said()},
            "pairs": [{"label": p.label, "baseline_arm": p.baseline.arm_id, "candidate_arm": p.candidate.arm_id,
                       "how": p.how, "changes": p.changes} for p in pairs],
            "not_compared": prep["not_compared"], "evidence": prep["evidence"], "scope": prep["scope"],
            "warnings": warnings, "infrastructure": infra, "results": results,
            "unchanged": unchanged(base, cand, pairs, split)}  # label -> why: one line in gate.md


def evaluate_to(baseline: Path, candidate: Path, policy_path: Path, pairs: list[str] | None,
                out_dir: Path) -> tuple[int, dict | None, str]:
    """Gate and write gate.md, JUnit and JSON into `out_dir`: (exit code, verdict or None, Markdown
    or the error message)."""
    try:
        pol = load_policy(policy_path)
        v = evaluate(baseline, candidate, pol, pairs)
    except (GateUsageError, CompareError, SegmentError) as e:
        return USAGE, None, f"error: {e}"
    write_outputs(v, out_dir)
    return v["status"], v, to_markdown(v)


def gate(baseline: Path, candidate: Path, policy_path: Path, pairs: list[str] | None, out_dir: Path) -> tuple[int, str]:
    """(exit code, Markdown or error message)."""
    code, _, text = evaluate_to(baseline, candidate, policy_path, pairs, out_dir)
    return code, text
