"""The CI gate: a policy (harness/policy.py) turned into a verdict and an exit code.

Arms pair by label (harness/pairing.py); labels without a partner are refused (exit 2) unless
the policy says `unpaired: warn`. Every rule is read in its metric's good direction
(harness/metrics/registry.py): with `change` = candidate − baseline made positive when better,
- `noninferiority` passes only when the lower bound of the paired, session-level bootstrap CI
  of the change lies above −max_drop;
- `regression` fails only when the change is worse than −max_drop AND significant at alpha
  (one-sided randomization test over sessions).
A rule needs `min_sessions` sessions measured in both runs; fewer is "insufficient data", a
failed check. Each rule reports the smallest change the baseline's between-session spread lets
it detect. A metric that does not apply to an arm is shown n/a; a rule naming that arm is bad
input. Exit codes: 0 pass, 1 regression (or insufficient data), 2 bad input, 3 infrastructure
(error or unmeasured rates past the limits, judgments that failed)."""
from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from harness.compare import CompareError, RunData, check_same_evalset, combined, compare_pair, load_run, why_missing
from harness.gate_report import moved_turns, to_markdown, write_outputs
from harness.metrics.registry import resolve
from harness.metrics.segments import SegmentError, segment_keys
from harness.pairing import Pair, PairingError, find_arm, pair_arms, split_pair
from harness.policy import GateUsageError, Policy, load_policy

PASS, REGRESSION, USAGE, INFRA = 0, 1, 2, 3
VERDICT = {PASS: "pass", REGRESSION: "regression", INFRA: "infrastructure"}


def infra_reason(reason) -> bool:
    """An unmeasured value that infrastructure caused (an error, a failed call or judgment), as
    opposed to one the labels or the arm explain (no relevant document, n/a, abstained)."""
    return isinstance(reason, str) and (reason.startswith("error") or "failed" in reason)


def _matches(rule_arm: str, pair: Pair) -> bool:
    return rule_arm == "*" or rule_arm in (pair.baseline.label, pair.candidate.label, pair.baseline.arm_id,
                                           pair.candidate.arm_id)


def _pairs_for(kind: str, i: int, item, pairs: list[Pair], cand: RunData) -> list[Pair]:
    """The pairs a rule, floor or budget applies to; a named arm that is no pair is bad input."""
    matched = [p for p in pairs if _matches(item.arm, p)]
    if item.arm != "*" and not matched:
        try:
            find_arm(cand.arms, item.arm, cand.name)
        except PairingError as e:
            raise GateUsageError(f"{kind} {i + 1}: {e}") from None
        raise GateUsageError(f"{kind} {i + 1}: arm {item.arm!r} has no partner in the baseline")
    if not matched:
        raise GateUsageError(f"{kind} {i + 1} ({item.metric}) matches no arm pair")
    m = resolve(item.metric)
    if item.arm != "*":
        for p in matched:
            if not (m.applies_to(p.baseline.capabilities) and m.applies_to(p.candidate.capabilities)):
                raise GateUsageError(f"{kind} {i + 1}: {m.name} does not apply to arm {p.label} (it needs "
                                     f"{', '.join(sorted(m.needs))}): remove the rule or name another arm")
    return matched


def _na(kind: str, name: str, pair: Pair, m, segment: str = "all") -> dict:
    """A check that does not apply to this arm: shown, neither passed nor failed."""
    return {"kind": kind, "name": name, "status": "n/a", "ok": True, "label": pair.label, "metric": m.name,
            "segment": segment, "direction": m.direction,
            "detail": f"n/a for this arm: {m.name} needs {', '.join(sorted(m.needs))}"}


def infrastructure(policy: Policy, runs: list[RunData], pairs: list[Pair]) -> list[str]:
    """Why these runs cannot be gated: error rates, and unmeasured rates of rule metrics where
    infrastructure (an error, a failed judgment) left the value out."""
    out = []
    metrics = {r.metric for r in policy.rules}
    for run, side in ((runs[0], "baseline"), (runs[1], "candidate")):
        for p in pairs:
            arm = getattr(p, side).arm_id
            pt = run.per_turn[run.per_turn["arm_id"] == arm]
            err = pt.loc[pt["metric"] == "error_rate", "value"].mean()
            if err > policy.limits.max_error_rate:
                out.append(f"{run.name} {p.label}: error rate {err:.1%} > {policy.limits.max_error_rate:.1%}")
            for m in sorted(metrics):
                rows = pt[pt["metric"] == m]
                if rows.empty or "unmeasured" not in rows:
                    continue
                bad = rows["unmeasured"].map(infra_reason)
                if bad.mean() > policy.limits.max_unmeasured_rate:
                    eg = rows.loc[bad, "unmeasured"].iloc[0]
                    out.append(f"{run.name} {p.label}: {m} unmeasured on {int(bad.sum())} of {len(rows)} turns "
                               f"({bad.mean():.1%} > {policy.limits.max_unmeasured_rate:.1%}; e.g. {eg})")
    return out


def _check_measured(metric: str, runs: list[RunData], pairs: list[Pair]) -> None:
    """A rule's metric must exist in both runs where it applies; else bad input with the fix."""
    m = resolve(metric)
    for run, side in ((runs[0], "baseline"), (runs[1], "candidate")):
        applies = [p for p in pairs if m.applies_to(getattr(p, side).capabilities)]
        if applies and m.name not in run.metrics:
            raise GateUsageError(why_missing(m, run))
        rows = run.per_turn[run.per_turn["metric"] == m.name]
        if len(rows) and "unmeasured" in rows and rows["value"].isna().all() \
                and rows["unmeasured"].astype(str).str.startswith("not measured").all():
            raise GateUsageError(f"{m.name} of {run.name} was not measured ({rows['unmeasured'].iloc[0]}): "
                                 f"judge it with an endpoint (`harness judge {run.path} --endpoint URL --model M`)")


def rule_result(i: int, rule, pair: Pair, base: RunData, cand: RunData, policy: Policy, pt: pd.DataFrame) -> dict:
    m = resolve(rule.metric)
    direction = rule.direction or m.direction
    name = f"rule {i + 1}: {rule.test} {m.name} [{rule.segment}] {pair.label}"
    if not (m.applies_to(pair.baseline.capabilities) and m.applies_to(pair.candidate.capabilities)):
        return _na("rule", name, pair, m, rule.segment)
    if not segment_keys(base.labels, rule.segment):
        return {**_na("rule", name, pair, m, rule.segment),
                "detail": f"n/a: segment {rule.segment} holds no labelled turn of this eval set"}
    row = compare_pair(base, cand, pair, m.name, rule.segment, policy.n_resamples, policy.seed, rule.alpha, pt=pt,
                       direction=direction)
    sign = 1.0 if direction == "higher" else -1.0
    diff, n_s = row.get("diff", math.nan), int(row.get("n_sessions") or 0)
    change, lo, hi = sign * diff, *sorted((sign * row["ci_lo"], sign * row["ci_hi"]))
    need = rule.min_sessions or policy.min_sessions
    out = {"kind": "rule", "name": name, "label": pair.label, "metric": m.name, "segment": rule.segment,
           "direction": direction, "diff": diff, "ci": [row["ci_lo"], row["ci_hi"]], "p": row["p"], "mde": row["mde"],
           "n_sessions": n_s, "n_turns": int(row.get("n_turns") or 0), "changes": pair.changes}
    if n_s < need or math.isnan(diff):
        return {**out, "status": "insufficient", "ok": False,
                "detail": f"insufficient data: {n_s} session(s) measured in both runs (min_sessions {need})"}
    better = "higher" if direction == "higher" else "lower"
    if rule.test == "noninferiority":
        ok = lo > -rule.max_drop
        why = (f"change {change:+.4f} ({better} is better), CI of the change [{lo:+.4f}, {hi:+.4f}]: lower bound "
               f"{'>' if ok else '<='} -{rule.max_drop}")
    else:
        p_one = row["p"] / 2 if change < 0 else 1.0
        ok = not (-change > rule.max_drop and p_one < rule.alpha)
        why = (f"change {change:+.4f} ({better} is better) vs max drop {rule.max_drop}, one-sided p {p_one:.4f} "
               f"vs alpha {rule.alpha}")
    return {**out, "status": "pass" if ok else "fail", "ok": bool(ok), "detail": why}


def _candidate_values(cand: RunData, arm_id: str, metric: str, segment: str) -> pd.Series:
    keys = segment_keys(cand.labels, segment)
    pt = cand.per_turn[(cand.per_turn["arm_id"] == arm_id) & (cand.per_turn["metric"] == metric)]
    inside = pd.MultiIndex.from_arrays([pt["session_id"], pt["turn_index"]]).isin(list(keys))
    return pt[inside].groupby(["session_id", "turn_index"])["value"].mean().dropna()


def floor_result(i: int, fl, pair: Pair, cand: RunData) -> dict:
    m = resolve(fl.metric)
    name = f"floor {i + 1}: {m.name} [{fl.segment}] {pair.label}"
    if not m.applies_to(pair.candidate.capabilities):
        return _na("floor", name, pair, m, fl.segment)
    vals = _candidate_values(cand, pair.candidate.arm_id, m.name, fl.segment)
    base = {"kind": "floor", "name": name, "label": pair.label, "metric": m.name, "segment": fl.segment,
            "direction": m.direction}
    if vals.empty:
        return {**base, "status": "n/a", "ok": True,
                "detail": f"n/a: no turn of this eval set measures {m.name} in segment {fl.segment}"}
    v = float(vals.mean())
    ok = (fl.min is None or v >= fl.min) and (fl.max is None or v <= fl.max)
    n_s = vals.index.get_level_values(0).nunique()
    return {**base, "status": "pass" if ok else "fail", "ok": bool(ok), "value": v,
            "detail": f"{v:.4f} (min {fl.min}, max {fl.max}) over {len(vals)} turns, {n_s} sessions"}


def budget_result(i: int, bd, pair: Pair, cand: RunData) -> dict:
    m = resolve(bd.metric)
    name = f"budget {i + 1}: {bd.stat} {m.name} {pair.label}"
    if not m.applies_to(pair.candidate.capabilities):
        return _na("budget", name, pair, m)
    rows = cand.per_turn[(cand.per_turn["arm_id"] == pair.candidate.arm_id) & (cand.per_turn["metric"] == m.name)]
    base = {"kind": "budget", "name": name, "label": pair.label, "metric": m.name, "segment": "all", "direction": "lower"}
    if rows["value"].isna().any() and m.name == "cost_usd":
        return {**base, "status": "fail", "ok": False, "detail": "cost unknown for some turns (no price for the model)"}
    vals = rows["value"].dropna()
    if vals.empty:
        return {**base, "status": "n/a", "ok": True, "detail": f"n/a: no turn measures {m.name}"}
    v = {"mean": vals.mean(), "p50": vals.quantile(0.5), "p95": vals.quantile(0.95)}[bd.stat]
    return {**base, "status": "pass" if v <= bd.max else "fail", "ok": bool(v <= bd.max), "value": float(v),
            "detail": f"{v:.4f} vs max {bd.max}"}


def _pairing(base: RunData, cand: RunData, policy: Policy, cli_pairs: list[str] | None):
    try:
        named = {**policy.pairs, **dict(split_pair(p, base.arms, cand.arms) for p in cli_pairs or [])}
        pairing = pair_arms(base.arms, cand.arms, named, base.name, cand.name)
    except PairingError as e:
        raise GateUsageError(str(e)) from None
    missing = pairing.unpaired(base.name, cand.name)
    if missing and policy.unpaired == "error":
        raise GateUsageError(f"{missing}. Every label must be compared: add the arms, pair them with --pair "
                             "BASELINE=CANDIDATE or `pairs:`, or set `unpaired: warn` in the policy")
    if not pairing.pairs:
        raise GateUsageError(f"{base.name} and {cand.name} have no arm label in common")
    return pairing, ([f"not compared: {missing}"] if missing else [])


def evaluate(baseline: Path, candidate: Path, policy: Policy, pairs_cli: list[str] | None = None) -> dict:
    base, cand = load_run(baseline), load_run(candidate)
    check_same_evalset([base, cand], False)
    pairing, warnings = _pairing(base, cand, policy, pairs_cli)
    pairs = pairing.pairs
    jobs = [(i, r, _pairs_for("rule", i, r, pairs, cand)) for i, r in enumerate(policy.rules)]
    floors = [(i, f, _pairs_for("floor", i, f, pairs, cand)) for i, f in enumerate(policy.floors)]
    budgets = [(i, b, _pairs_for("budget", i, b, pairs, cand)) for i, b in enumerate(policy.budgets)]
    for r in policy.rules:
        _check_measured(r.metric, [base, cand], pairs)
    infra = infrastructure(policy, [base, cand], pairs)
    pt = combined(base, cand)
    results = [rule_result(i, r, p, base, cand, policy, pt) for i, r, ps in jobs for p in ps]
    if results and all(r["status"] == "n/a" for r in results):
        raise GateUsageError("no rule of the policy applies to these runs (every one is n/a: "
                             + "; ".join(sorted({r["detail"] for r in results})) + "): nothing would be compared")
    results += [floor_result(i, f, p, cand) for i, f, ps in floors for p in ps]
    results += [budget_result(i, b, p, cand) for i, b, ps in budgets for p in ps]
    for res in results:
        if not res["ok"] and res.get("metric"):
            pair = next(p for p in pairs if p.label == res["label"])
            res["moved"] = moved_turns(pt, base, pair, res["metric"], res["segment"], res.get("direction") or "none")
    status = INFRA if infra else (REGRESSION if not all(r["ok"] for r in results) else PASS)
    return {"status": status, "verdict": VERDICT[status], "baseline": base.name, "candidate": cand.name,
            "pairs": [{"label": p.label, "baseline_arm": p.baseline.arm_id, "candidate_arm": p.candidate.arm_id,
                       "how": p.how, "changes": p.changes} for p in pairs],
            "warnings": warnings, "infrastructure": infra, "results": results}


def gate(baseline: Path, candidate: Path, policy_path: Path, pairs: list[str] | None, out_dir: Path) -> tuple[int, str]:
    """Returns (exit code, Markdown or error message)."""
    try:
        pol = load_policy(policy_path)
        v = evaluate(baseline, candidate, pol, pairs)
    except (GateUsageError, CompareError, SegmentError) as e:
        return USAGE, f"error: {e}"
    write_outputs(v, out_dir)
    return v["status"], to_markdown(v)
