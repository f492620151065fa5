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
the baseline's between-session spread lets it detect. A metric that does not apply to an arm,
or that no labelled turn of the eval set measures, is shown n/a; a check naming such an arm, a
rule that applies to no pair, a segment that names no label value, and a policy of which nothing
applies are bad input. Exit codes: 0 pass, 1 regression (or insufficient data), 2 bad input, 3
infrastructure (errors, failed LLM calls, or unmeasured values past the limits)."""
from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from harness.analysis.compare import CompareError, RunData, check_same_evalset, combined, compare_pair, load_run, why_missing
from harness.analysis.evidence import coverage, describe_gaps
from harness.analysis.gate_report import moved_turns, to_markdown, write_outputs
from harness.metrics.registry import resolve
from harness.metrics.segments import SegmentError, check_segment, segment_keys
from harness.analysis.pairing import Pair, PairingError, find_arm, pair_runs
from harness.analysis.policy import GateUsageError, Policy, load_policy

PASS, REGRESSION, USAGE, INFRA = 0, 1, 2, 3
VERDICT = {PASS: "pass", REGRESSION: "regression", INFRA: "infrastructure"}
MEANING = {PASS: "pass", REGRESSION: "regression or insufficient data", USAGE: "bad input",
           INFRA: "infrastructure"}
SECTIONS = ("rules", "floors", "budgets")


def infra_reason(reason) -> bool:
    """An unmeasured value that infrastructure caused (an error, a failed call or judgment), as
    opposed to one the labels or the arm explain (no relevant document, n/a, abstained)."""
    return isinstance(reason, str) and (reason.startswith("error") or "failed" in reason)


def _applies(m, pair: Pair, side: str | None = None) -> bool:
    sides = (side,) if side else ("baseline", "candidate")
    return all(m.applies_to(getattr(pair, x).capabilities) for x in sides)


def _matches(rule_arm: str, pair: Pair) -> bool:
    return rule_arm == "*" or rule_arm in (pair.baseline.label, pair.candidate.label, pair.baseline.arm_id,
                                           pair.candidate.arm_id)


def _items(policy: Policy):
    for section in SECTIONS:
        for i, item in enumerate(getattr(policy, section)):
            yield section, i, item


def select_pairs(section: str, i: int, item, policy: Policy, pairs: list[Pair], cand: RunData) -> list[Pair]:
    """The pairs a rule, floor or budget applies to; naming an arm that is no pair, or one the
    metric does not apply to, is bad input, and so is a rule that applies to no pair at all."""
    where, m = policy.where(section, i), resolve(item.metric)
    matched = [p for p in pairs if _matches(item.arm, p)]
    if item.arm != "*" and not matched:
        try:
            find_arm(cand.arms, item.arm, cand.name)
        except PairingError as e:
            raise GateUsageError(f"{where}.arm: {e}") from None
        raise GateUsageError(f"{where}.arm: {item.arm!r} has no partner in the baseline")
    side = None if section == "rules" else "candidate"
    if item.arm != "*":
        for p in matched:
            if not _applies(m, p, side):
                raise GateUsageError(f"{where}.arm: {m.name} does not apply to {p.label} (it needs "
                                     f"{', '.join(sorted(m.needs))}): remove the check or name another arm")
    if section == "rules" and not any(_applies(m, p) for p in matched):
        raise GateUsageError(f"{where}.metric: {m.name} applies to no arm pair of these runs (it needs "
                             f"{', '.join(sorted(m.needs))}): nothing to compare")
    return matched


def check_inputs(policy: Policy, runs: list[RunData], pairs: list[Pair]) -> None:
    """Segments that name label values of these runs, and metrics that were measured where they
    apply (a judged metric needs judgments with an endpoint); bad input otherwise."""
    for section, i, item in _items(policy):
        where, m, seg = policy.where(section, i), resolve(item.metric), getattr(item, "segment", "all")
        try:
            check_segment(seg, runs[0].labels)
        except SegmentError as e:
            raise GateUsageError(f"{where}.segment: {e}") from None
        if not any(segment_keys(r.labels, seg) for r in runs):
            raise GateUsageError(f"{where}.segment: {seg} matches no labelled turn of {runs[0].name} or "
                                 f"{runs[1].name}: the check would compare nothing (remove it or name a segment "
                                 "these runs have)")
        for run, side in zip(runs, ("baseline", "candidate")):
            if section != "rules" and side == "baseline":
                continue
            applies = [p for p in pairs if m.applies_to(getattr(p, side).capabilities)]
            if applies and m.name not in run.metrics and m.family == "judged":
                raise GateUsageError(f"{where}.metric: {why_missing(m, run)}")
            rows = run.per_turn[run.per_turn["metric"] == m.name]
            if len(rows) and "unmeasured" in rows and rows["value"].isna().all() \
                    and rows["unmeasured"].astype(str).str.startswith("not measured").all():
                raise GateUsageError(f"{where}.metric: {m.name} of {run.name} was not measured "
                                     f"({rows['unmeasured'].iloc[0]}): name a judge endpoint under llm.roles.judge "
                                     f"in the run's config and run `harness judge {run.path}`")


def _failed_calls(run: RunData, limit: float) -> list[str]:
    counts = run.manifest.get("counts") or {}
    turns, failed = counts.get("turns") or 0, counts.get("turns_failed") or 0
    if turns and failed / turns > limit:
        return [f"{run.name}: {failed} of {turns} replayed turns failed (an error, or an LLM call that failed after "
                f"its retries and fell back) ({failed / turns:.1%} > {limit:.1%})"]
    return []


def infrastructure(policy: Policy, runs: list[RunData], pairs: list[Pair]) -> list[str]:
    """Why these runs cannot be gated: errors and failed LLM calls, and the metrics of the
    policy left unmeasured by infrastructure (an error, a failed judgment) past the limits."""
    lim = policy.limits
    out = [x for run in runs for x in _failed_calls(run, lim.max_error_rate)]
    metrics = sorted({item.metric for _, _, item in _items(policy)})
    for run, side in zip(runs, ("baseline", "candidate")):
        for p in pairs:
            pt = run.per_turn[run.per_turn["arm_id"] == getattr(p, side).arm_id]
            err = pt.loc[pt["metric"] == "error_rate", "value"].mean()
            if err > lim.max_error_rate:
                out.append(f"{run.name} {p.label}: error rate {err:.1%} > {lim.max_error_rate:.1%}")
            for m in metrics:
                rows = pt[pt["metric"] == m]
                if rows.empty or "unmeasured" not in rows:
                    continue
                bad = rows["unmeasured"].map(infra_reason)
                if bad.mean() > lim.max_unmeasured_rate:
                    out.append(f"{run.name} {p.label}: {m} unmeasured on {int(bad.sum())} of {len(rows)} turns "
                               f"({bad.mean():.1%} > {lim.max_unmeasured_rate:.1%}; e.g. "
                               f"{rows.loc[bad, 'unmeasured'].iloc[0]})")
    return out


def _na(kind: str, name: str, pair: Pair, m, segment: str = "all", why: str | None = None) -> dict:
    """A check that does not apply here: shown, neither passed nor failed."""
    return {"kind": kind, "name": name, "status": "n/a", "ok": True, "label": pair.label, "metric": m.name,
            "segment": segment, "direction": m.direction,
            "detail": why or f"n/a for this arm: {m.name} needs {', '.join(sorted(m.needs))}"}


def _insufficient(out: dict, n: int, need: int, where: str) -> dict:
    return {**out, "status": "insufficient", "ok": False,
            "detail": f"insufficient data: {n} session(s) measured {where} (min_sessions {need})"}


def _worse_or_better(change: float) -> str:
    """A direction-adjusted change in words: 'worse by 0.12', 'better by 0.03', 'unchanged'."""
    return "unchanged" if abs(change) < 5e-5 else f"{'worse' if change < 0 else 'better'} by {abs(change):.4f}"


def rule_result(i: int, rule, pair: Pair, base: RunData, cand: RunData, policy: Policy, pt: pd.DataFrame) -> dict:
    m = resolve(rule.metric)
    direction = rule.direction or m.direction
    name = f"rule {i + 1}: {rule.test} {m.name} [{rule.segment}] {pair.label}"
    if not _applies(m, pair):
        return _na("rule", name, pair, m, rule.segment)
    row = compare_pair(base, cand, pair, m.name, rule.segment, policy.n_resamples, policy.seed, rule.alpha, pt=pt,
                       direction=direction)
    sign = m.sign(direction)
    diff, n_s = row.get("diff", math.nan), int(row.get("n_sessions") or 0)
    change, lo = sign * diff, min(sign * row["ci_lo"], sign * row["ci_hi"])  # lo: the worst end of the CI
    need = rule.min_sessions or policy.min_sessions
    out = {"kind": "rule", "name": name, "label": pair.label, "metric": m.name, "segment": rule.segment,
           "direction": direction, "diff": diff, "ci": [row["ci_lo"], row["ci_hi"]], "p": row["p"], "mde": row["mde"],
           "n_sessions": n_s, "n_turns": int(row.get("n_turns") or 0), "changes": pair.changes}
    if n_s < need or math.isnan(diff):
        return _insufficient(out, n_s, need, "in both runs")
    said = (f"candidate − baseline {diff:+.4f}, 95% CI [{row['ci_lo']:+.4f}, {row['ci_hi']:+.4f}]; {direction} is "
            f"better: {_worse_or_better(change)}")
    if rule.test == "noninferiority":
        ok = lo >= -rule.max_drop
        why = f"{said}, at worst {_worse_or_better(lo)} ({'within' if ok else 'beyond'} the allowed drop {rule.max_drop})"
    else:
        p_one = row["p"] / 2 if change < 0 else 1.0
        ok = not (-change > rule.max_drop and p_one < rule.alpha)
        why = f"{said} vs allowed drop {rule.max_drop}, one-sided p {p_one:.4f} vs alpha {rule.alpha}"
    return {**out, "status": "pass" if ok else "fail", "ok": bool(ok), "detail": why}


def _candidate_values(cand: RunData, arm_id: str, metric: str, segment: str) -> pd.Series:
    keys = segment_keys(cand.labels, segment)
    pt = cand.per_turn[(cand.per_turn["arm_id"] == arm_id) & (cand.per_turn["metric"] == metric)]
    inside = pd.MultiIndex.from_arrays([pt["session_id"], pt["turn_index"]]).isin(list(keys))
    return pt[inside].groupby(["session_id", "turn_index"])["value"].mean()


def bound_result(kind: str, i: int, item, pair: Pair, cand: RunData, need: int) -> dict:
    """A floor (min/max of the mean) or a budget (max of a stat) on the candidate's values."""
    m = resolve(item.metric)
    seg = getattr(item, "segment", "all")
    stat = getattr(item, "stat", "mean")
    name = f"{kind} {i + 1}: {m.name} [{seg}] {pair.label}" if kind == "floor" else \
        f"{kind} {i + 1}: {stat} {m.name} {pair.label}"
    if not m.applies_to(pair.candidate.capabilities):
        return _na(kind, name, pair, m, seg)
    turns = _candidate_values(cand, pair.candidate.arm_id, m.name, seg)
    out = {"kind": kind, "name": name, "label": pair.label, "metric": m.name, "segment": seg, "direction": m.direction}
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
    return {**out, "status": "pass" if ok else "fail", "ok": bool(ok), "value": v,
            "detail": f"{stat} {v:.4f} ({bounds}) over {len(vals)} turns, {n_s} sessions"}


def _pairing(base: RunData, cand: RunData, policy: Policy, cli_pairs: list[str] | None):
    try:
        pairing = pair_runs(base, cand, cli_pairs, policy.pairs)
    except PairingError as e:
        raise GateUsageError(str(e)) from None
    missing = pairing.unpaired(base.name, cand.name)
    if missing and policy.unpaired == "error":
        raise GateUsageError(f"{missing}. Every label must be compared: add the arms, pair them with --pair "
                             "BASELINE=CANDIDATE or `pairs:`, or set `unpaired: warn` in the policy")
    if not pairing.pairs:
        raise GateUsageError(f"{base.name} and {cand.name} have no arm label in common")
    return pairing, ([f"not compared: {missing}"] if missing else [])


def _moved(results: list[dict], pairs: list[Pair], pt: pd.DataFrame, base: RunData) -> None:
    for res in results:
        if not res["ok"] and res.get("metric"):
            pair = next(p for p in pairs if p.label == res["label"])
            res["moved"] = moved_turns(pt, base, pair, res["metric"], res["segment"], res.get("direction") or "none")


def _coverage(base: RunData, cand: RunData, pairs: list[Pair], policy: Policy) -> str | None:
    """What of the baseline the candidate does not cover, in words (None: everything); bad input
    unless the policy says `coverage: subset`."""
    gaps = coverage(base, cand, pairs)
    if not gaps:
        return None
    what = f"{cand.name} lacks what the baseline {base.name} has for {describe_gaps(gaps, cand.name)}"
    if policy.coverage == "full":
        raise GateUsageError(f"the candidate does not cover the baseline: {what}. Replay the candidate on the "
                             "baseline's sessions, splits and repeats, or state `coverage: subset` in the policy to "
                             "gate what both hold (the verdict then names what was not compared)")
    return what


def prepare(baseline: Path, candidate: Path, policy: Policy, pairs_cli: list[str] | None = None) -> dict:
    """Both runs checked (complete, fresh, covering), paired, and every check with the pairs it
    applies to; bad input as GateUsageError or CompareError."""
    base, cand = load_run(baseline), load_run(candidate)
    check_same_evalset([base, cand], False)
    pairing, warnings = _pairing(base, cand, policy, pairs_cli)
    pairs = pairing.pairs
    not_compared = _coverage(base, cand, pairs, policy)
    chosen = [(sec, i, item, select_pairs(sec, i, item, policy, pairs, cand)) for sec, i, item in _items(policy)]
    check_inputs(policy, [base, cand], pairs)
    evidence = [n for r in (base, cand) for n in r.evidence.notes(r.name)]
    return {"base": base, "cand": cand, "pairs": pairs, "warnings": warnings, "chosen": chosen,
            "not_compared": not_compared, "evidence": evidence}


def evaluate(baseline: Path, candidate: Path, policy: Policy, pairs_cli: list[str] | None = None) -> dict:
    prep = prepare(baseline, candidate, policy, pairs_cli)
    base, cand, pairs, chosen = prep["base"], prep["cand"], prep["pairs"], prep["chosen"]
    warnings = prep["warnings"]
    infra = infrastructure(policy, [base, cand], pairs)
    pt = combined(base, cand)
    results = []
    for sec, i, item, ps in chosen:
        for p in ps:
            results.append(rule_result(i, item, p, base, cand, policy, pt) if sec == "rules" else
                           bound_result(sec[:-1], i, item, p, cand, policy.min_sessions))
    if results and all(r["status"] == "n/a" for r in results):
        raise GateUsageError("no check of the policy applies to these runs (every one is n/a: "
                             + "; ".join(sorted({r["detail"] for r in results})) + "): nothing would be compared")
    _moved(results, pairs, pt, base)
    status = INFRA if infra else (REGRESSION if not all(r["ok"] for r in results) else PASS)
    return {"status": status, "verdict": VERDICT[status], "baseline": base.name, "candidate": cand.name,
            "pairs": [{"label": p.label, "baseline_arm": p.baseline.arm_id, "candidate_arm": p.candidate.arm_id,
                       "how": p.how, "changes": p.changes} for p in pairs],
            "not_compared": prep["not_compared"], "evidence": prep["evidence"],
            "warnings": warnings, "infrastructure": infra, "results": results}


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
