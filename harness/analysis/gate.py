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
applies are bad input. Exit codes (harness.errors.Exit): 0 pass, 1 regression (or insufficient
data), 2 bad input, 3 infrastructure (errors, failed LLM calls, or unmeasured values past the
limits). The verdict is a typed GateVerdict (harness.analysis.verdict_types), written to gate.json."""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path

from harness.analysis.bound_values import missing_values, not_finite
from harness.analysis.compare import CompareError, RunData, Split, compare_pair
from harness.analysis.evidence import lost_turns
from harness.analysis.gate_inputs import SECTIONS, applies, infrastructure, prepare
from harness.analysis.gate_report import moved_turns, to_markdown, write_outputs
from harness.analysis.pairing import Pair
from harness.analysis.policy import GateUsageError, Policy, load_policy
from harness.analysis.pool_warnings import judged_warnings
from harness.analysis.unchanged import unchanged
from harness.analysis.verdict_types import CheckKind, CheckResult, CheckStatus, GateVerdict, PairSaid, Reason, \
    Statistics, Verdict
from harness.errors import Exit
from harness.metrics.segments import SegmentError
from harness.metrics.signflip import p_said
from harness.metrics.stats import STATS, sessions_needed
from harness.store.armset import EXTERNAL

__all__ = ["SECTIONS", "evaluate", "evaluate_to", "gate", "prepare"]


def _check(kind: str, name: str, pair: Pair, m, segment: str, status: CheckStatus, reason: Reason | None, detail: str,
           direction: str | None = None, **numbers) -> CheckResult:
    return CheckResult(kind=CheckKind(kind), name=name, status=status, label=pair.label, metric=m, segment=segment,
                       direction=direction or m.direction, detail=detail, reason=reason, **numbers)


def _judged(ok: bool, failed: Reason) -> tuple[CheckStatus, Reason]:
    return (CheckStatus.PASS, Reason.WITHIN) if ok else (CheckStatus.FAIL, failed)


def _na(kind: str, name: str, pair: Pair, m, segment: str = "all", why: str | None = None,
        reason: Reason = Reason.NOT_APPLICABLE) -> CheckResult:
    """A check that does not apply here: shown, neither passed nor failed."""
    return _check(kind, name, pair, m, segment, CheckStatus.NA, reason,
                  why or f"n/a for this arm: {m.name} needs {', '.join(sorted(m.needs))}")


def _dropped(kind: str, name: str, pair: Pair, m, segment: str) -> CheckResult | None:
    """A failed check when the candidate's arm (of any kind: a pair named across kinds too) no
    longer declares a capability the metric needs and the baseline's did: its metric is not
    measured, and what is not measured cannot pass. An imported run file (rankings only, paired
    on purpose) records no more than its rankings: the check is n/a, and says so."""
    if not m.applies_to(pair.baseline.capabilities) or m.applies_to(pair.candidate.capabilities):
        return None
    gone = sorted(set(m.needs) - set(pair.candidate.capabilities))
    if pair.candidate.capabilities == EXTERNAL:
        return _na(kind, name, pair, m, segment, f"n/a: {pair.candidate.label} is an imported run file (rankings "
                   f"only): {m.name} needs {', '.join(gone)}, which no imported run records", Reason.IMPORTED_RUN)
    return _check(kind, name, pair, m, segment, CheckStatus.FAIL, Reason.CAPABILITY_DROPPED,
                  f"the candidate's arm no longer declares {', '.join(gone)}, which {m.name} needs and the baseline's "
                  "arm declared: it is not measured, so it cannot pass")


def _lost(out: CheckResult, base: RunData, cand: RunData, pair: Pair, policy: Policy, split: Split) -> CheckResult:
    """The check failed when the candidate left more of the turns the baseline measured unmeasured
    than limits.max_lost_rate allows; else the count is said beside the result."""
    lost = lost_turns(base, cand, pair.baseline.arm_id, pair.candidate.arm_id, out.metric.name, out.segment,
                      split.sides(pair, out.metric.name), split.where)
    if not lost.n:
        return out
    said = lost.describe(cand.name)
    if lost.rate > policy.limits.max_lost_rate:
        return out.but(status=CheckStatus.FAIL, reason=Reason.TURNS_LOST, lost=lost.n,
                       detail=f"{said}: {lost.rate:.1%} > max_lost_rate {policy.limits.max_lost_rate:.1%}; what is not "
                              f"measured is not compared, so it cannot pass ({out.detail})")
    return out.but(lost=lost.n, detail=f"{out.detail}; {said}, left out")


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


def _rule_name(i: int, rule, pair: Pair) -> str:
    return f"rule {i + 1}: {rule.test} {rule.m.name} [{rule.segment}] {pair.label}"


def rule_result(i: int, rule, pair: Pair, base: RunData, cand: RunData, policy: Policy, split: Split) -> CheckResult:
    m, name = rule.m, _rule_name(i, rule, pair)
    direction = rule.direction or m.direction
    if not applies(m, pair):
        return _dropped("rule", name, pair, m, rule.segment) or _na("rule", name, pair, m, rule.segment)
    row = compare_pair(base, cand, pair, m.name, rule.segment, policy.n_resamples, policy.seed, rule.alpha,
                       split=split, direction=direction)
    sign = m.sign(direction)
    diff, n_s = row.get("diff", math.nan), int(row.get("n_sessions") or 0)
    change, lo = sign * diff, min(sign * row["ci_lo"], sign * row["ci_hi"])  # lo: the worst end of the CI
    need = rule.min_sessions or policy.min_sessions
    numbers = dict(diff=diff, ci=(row["ci_lo"], row["ci_hi"]), p=row["p"], p_floor=row.get("p_floor"),
                   p_exact=bool(row.get("p_exact")), mde=row["mde"], n_sessions=n_s,
                   n_turns=int(row.get("n_turns") or 0), changes=list(pair.changes))
    if n_s < need or math.isnan(diff):
        return _check("rule", name, pair, m, rule.segment, CheckStatus.INSUFFICIENT, Reason.TOO_FEW_SESSIONS,
                      f"insufficient data: {n_s} session(s) measured in both runs (min_sessions {need})", direction,
                      **numbers)
    said = (f"candidate − baseline {diff:+.4f}, {1 - rule.alpha:.0%} CI [{row['ci_lo']:+.4f}, {row['ci_hi']:+.4f}], "
            f"p {p_said(row['p'], row.get('p_floor'))}; {direction} is better: {_worse_or_better(change)}")
    if rule.test == "noninferiority":
        ok = lo >= -rule.max_drop
        why = f"{said}, at worst {_worse_or_better(lo)} ({'within' if ok else 'beyond'} the allowed drop {rule.max_drop})"
        best = max(sign * row["ci_lo"], sign * row["ci_hi"])  # the CI's best end, in the good direction
        weak = None if ok or best < -rule.max_drop else underpowered(row["mde"], n_s, rule.max_drop)
        if weak:  # neither shown within the margin nor wholly beyond it, on a set too small to tell
            out = _check("rule", name, pair, m, rule.segment, CheckStatus.INSUFFICIENT, Reason.UNDERPOWERED,
                         f"{weak} ({why})", direction, **numbers)
            return _lost(out, base, cand, pair, policy, split)
        failed = Reason.NOT_SHOWN_NONINFERIOR
    else:
        p_one = row["p"] / 2 if change < 0 else 1.0
        ok = not (-change > rule.max_drop and p_one < rule.alpha)
        floor = row.get("p_floor")  # a p at the test's resolution: its half is a bound too
        said_p = p_said(p_one, None if floor is None or floor != floor or change >= 0 else floor / 2)
        why = f"{said} vs allowed drop {rule.max_drop}, one-sided p {said_p} vs alpha {rule.alpha}"
        failed = Reason.SIGNIFICANT_DROP
    out = _check("rule", name, pair, m, rule.segment, *_judged(ok, failed), why, direction, **numbers)
    return _lost(out, base, cand, pair, policy, split)


def _bound_name(kind: str, i: int, item, pair: Pair) -> str:
    if kind == "floor":
        return f"{kind} {i + 1}: {item.m.name} [{getattr(item, 'segment', 'all')}] {pair.label}"
    return f"{kind} {i + 1}: {getattr(item, 'stat', 'mean')} {item.m.name} {pair.label}"


def bound_result(kind: str, i: int, item, pair: Pair, base: RunData, cand: RunData, policy: Policy,
                 split: Split) -> CheckResult:
    """A floor (min/max of the mean) or a budget (max of a stat) on the candidate's values."""
    m, name = item.m, _bound_name(kind, i, item, pair)
    seg = getattr(item, "segment", "all")
    stat = getattr(item, "stat", "mean")
    if not m.applies_to(pair.candidate.capabilities):
        return _dropped(kind, name, pair, m, seg) or _na(kind, name, pair, m, seg)
    # the candidate arm's turn means on the baseline's labelled turns of the segment: the turns the verdict says it
    # compared (turns the candidate holds beyond them are named, not read)
    turns = split.of(m.name, "B:" + pair.candidate.arm_id, split.keys(seg))
    gone, beside = missing_values(base, cand, pair, m.name, seg, policy.limits.max_lost_rate, split.where)
    gone = gone or not_finite(turns.dropna(), m.name)  # a metric no longer measured, an infinite value: failed
    if gone:
        return _check(kind, name, pair, m, seg, CheckStatus.FAIL, Reason.VALUES_MISSING, gone)
    if turns.empty:  # no labelled turn of this eval set has what the metric measures (identifiers, ...)
        return _na(kind, name, pair, m, seg, f"n/a: no turn of this eval set measures {m.name} in segment {seg}",
                   Reason.NOT_IN_EVAL_SET)
    if kind == "budget" and m.name == "cost_usd" and turns.isna().any():
        return _check(kind, name, pair, m, seg, CheckStatus.FAIL, Reason.COST_UNKNOWN,
                      "cost unknown for some turns (no price for the model)")
    vals = turns.dropna()
    n_s = vals.index.get_level_values(0).nunique()
    if n_s < policy.min_sessions:
        return _check(kind, name, pair, m, seg, CheckStatus.INSUFFICIENT, Reason.TOO_FEW_SESSIONS,
                      f"insufficient data: {n_s} session(s) measured in the candidate (min_sessions "
                      f"{policy.min_sessions})")
    v = float({"mean": vals.mean(), "p50": vals.quantile(0.5), "p95": vals.quantile(0.95)}[stat])
    lo, hi = (getattr(item, "min", None), item.max)
    ok = (lo is None or v >= lo) and (hi is None or v <= hi)
    bounds = f"min {lo}, max {hi}" if kind == "floor" else f"max {hi}"
    said = f"{stat} {v:.4f} ({bounds}) over {len(vals)} turns, {n_s} sessions" + (f"; {beside}" if beside else "")
    out = _check(kind, name, pair, m, seg, *_judged(ok, Reason.OUT_OF_BOUNDS), said, value=v)
    return _lost(out, base, cand, pair, policy, split) if m.applies_to(pair.baseline.capabilities) else out


def _moved(results: list[CheckResult], pairs: list[Pair], split: Split) -> list[CheckResult]:
    """Each failed check with the turns that moved most in its bad direction."""
    by_label = {p.label: p for p in pairs}
    return [r.but(moved=moved_turns(split.pair_rows(by_label[r.label], r.metric.name), split.where, by_label[r.label],
                                    r.metric.name, r.segment, r.direction)) if not r.ok else r for r in results]


def _checks(prep: dict, policy: Policy, split: Split) -> list[CheckResult]:
    """Every check of the policy on every pair it applies to; bad input when none applies."""
    base, cand = prep["base"], prep["cand"]
    results = [rule_result(i, item, p, base, cand, policy, split) if sec == "rules" else
               bound_result(sec[:-1], i, item, p, base, cand, policy, split)
               for sec, i, item, ps in prep["chosen"] for p in ps]
    if results and all(r.status is CheckStatus.NA for r in results):
        raise GateUsageError("no check of the policy applies to these runs (every one is n/a: "
                             + "; ".join(sorted({r.detail for r in results})) + "): nothing would be compared")
    return _moved(results, prep["pairs"], split)


def _verdict(status: Exit, failed: list[CheckResult]) -> Verdict:
    if status is Exit.INFRASTRUCTURE:
        return Verdict.INFRASTRUCTURE
    if status is Exit.PASS:
        return Verdict.PASS
    return Verdict.INSUFFICIENT if all(r.status is CheckStatus.INSUFFICIENT for r in failed) else Verdict.REGRESSION


def evaluate(baseline: Path, candidate: Path, policy: Policy, pairs_cli: list[str] | None = None) -> GateVerdict:
    prep = prepare(baseline, candidate, policy, pairs_cli)
    base, cand, pairs = prep["base"], prep["cand"], prep["pairs"]
    infra = infrastructure(policy, [base, cand], pairs)
    split = Split(base, cand)
    results = _checks(prep, policy, split)
    gated = [r.segment for r in results if r.status is not CheckStatus.NA]  # coverage on the gated segments
    failed = [r for r in results if not r.ok]
    status = Exit.INFRASTRUCTURE if infra else Exit.REGRESSION if failed else Exit.PASS
    counts = dataclasses.replace(STATS, n_resamples=policy.n_resamples, seed=policy.seed)
    return GateVerdict(
        status=status, verdict=_verdict(status, failed), baseline=base.name, candidate=cand.name,
        statistics=Statistics(**counts.method(), said=counts.said()),
        pairs=[PairSaid(label=p.label, baseline_arm=p.baseline.arm_id, candidate_arm=p.candidate.arm_id, how=p.how,
                        changes=list(p.changes)) for p in pairs],
        not_compared=prep["not_compared"], evidence=prep["evidence"], scope=prep["scope"],
        warnings=prep["warnings"] + judged_warnings(base, cand, pairs, gated), infrastructure=infra,
        results=results, unchanged=unchanged(base, cand, pairs, split))  # label -> why: one line in gate.md


def evaluate_to(baseline: Path, candidate: Path, policy_path: Path, pairs: list[str] | None,
                out_dir: Path) -> tuple[Exit, GateVerdict | None, str]:
    """Gate and write gate.md, JUnit and JSON into `out_dir`: (exit code, verdict or None, Markdown
    or the error message)."""
    try:
        pol = load_policy(policy_path)
        v = evaluate(baseline, candidate, pol, pairs)
    except (GateUsageError, CompareError, SegmentError) as e:
        return Exit.BAD_INPUT, None, f"error: {e}"
    write_outputs(v, out_dir)
    return v.status, v, to_markdown(v)


def gate(baseline: Path, candidate: Path, policy_path: Path, pairs: list[str] | None, out_dir: Path) -> tuple[Exit, str]:
    """(exit code, Markdown or error message)."""
    code, _, text = evaluate_to(baseline, candidate, policy_path, pairs, out_dir)
    return code, text
