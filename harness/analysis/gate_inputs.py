"""What the gate checks before it compares anything: both runs complete, fresh and labelled alike
(harness.analysis.evidence), the candidate covering the baseline, every label paired or named,
every check of the policy applying to something these runs measured, and the failures the traces
record per arm (infrastructure). Everything wrong here is bad input (GateUsageError, CompareError:
exit 2) or infrastructure (a list of reasons: exit 3); nothing here passes or fails a check."""
from __future__ import annotations

import json
from pathlib import Path

from harness.analysis.compare import RunData, check_same_evalset, load_run, why_missing
from harness.analysis.evidence import coverage, describe_gaps, same_evidence, shard_said, turns_beyond
from harness.analysis.pairing import Pair, PairingError, find_arm, pair_runs
from harness.analysis.policy import GateUsageError, Policy
from harness.metrics.registry import on_request
from harness.metrics.segments import SegmentError, check_segment, parse_segment
from harness.store.integrity import failures
from harness.unmeasured import Unmeasured

SECTIONS = ("rules", "floors", "budgets")


def infra_reason(reason) -> bool:
    """An unmeasured value that infrastructure caused (an error, a failed call or judgment), as
    opposed to one the labels or the arm explain (no relevant document, n/a, abstained)."""
    kind = Unmeasured.of(reason)
    return kind is not None and kind.infrastructure


def applies(m, pair: Pair, side: str | None = None) -> bool:
    sides = (side,) if side else ("baseline", "candidate")
    return all(m.applies_to(getattr(pair, x).capabilities) for x in sides)


def _matches(rule_arm: str, pair: Pair) -> bool:
    return rule_arm == "*" or rule_arm in (pair.baseline.label, pair.candidate.label, pair.baseline.arm_id,
                                           pair.candidate.arm_id)


def items(policy: Policy):
    for section in SECTIONS:
        for i, item in enumerate(getattr(policy, section)):
            yield section, i, item


def select_pairs(section: str, i: int, item, policy: Policy, pairs: list[Pair], cand: RunData) -> list[Pair]:
    """The pairs a rule, floor or budget applies to; naming an arm that is no pair, or one the
    metric does not apply to, is bad input, and so is a rule that applies to no pair at all. What
    applies is decided by the baseline's arm where the candidate's dropped a capability: that is a
    failed check, never an n/a one (harness.analysis.gate)."""
    where, m = policy.where(section, i), item.m
    matched = [p for p in pairs if _matches(item.arm, p)]
    if item.arm != "*" and not matched:
        try:
            find_arm(cand.arms, item.arm, cand.name)
        except PairingError as e:
            raise GateUsageError(f"{where}.arm: {e}") from None
        raise GateUsageError(f"{where}.arm: {item.arm!r} has no partner in the baseline")
    side = "baseline" if section == "rules" else "candidate"
    if item.arm != "*":
        for p in matched:
            if not (applies(m, p, side) or applies(m, p, "baseline")):
                raise GateUsageError(f"{where}.arm: {m.name} does not apply to {p.label} (it needs "
                                     f"{', '.join(sorted(m.needs))}): remove the check or name another arm")
    if section == "rules" and not any(applies(m, p, "baseline") for p in matched):
        raise GateUsageError(f"{where}.metric: {m.name} applies to no arm pair of these runs (it needs "
                             f"{', '.join(sorted(m.needs))}): nothing to compare")
    return matched


def _segment(where: str, seg: str, runs: list[RunData]) -> None:
    try:
        check_segment(seg, runs[0].labels)
    except SegmentError as e:
        raise GateUsageError(f"{where}.segment: {e}") from None
    if not any(parse_segment(seg).mask(r.labels).to_numpy(bool).any() for r in runs):
        raise GateUsageError(f"{where}.segment: {seg} matches no labelled turn of {runs[0].name} or "
                             f"{runs[1].name}: the check would compare nothing (remove it or name a segment "
                             "these runs have)")


def check_inputs(policy: Policy, runs: list[RunData], pairs: list[Pair]) -> None:
    """Segments that name label values of these runs, and metrics that were measured where they
    apply (a judged metric needs judgments with an endpoint, a ranking metric its cutoff in the
    run's metric settings); bad input otherwise."""
    for section, i, item in items(policy):
        where, m = policy.where(section, i), item.m
        _segment(where, getattr(item, "segment", "all"), runs)
        for run, side in zip(runs, ("baseline", "candidate")):
            if section != "rules" and side == "baseline":
                continue
            applied = [p for p in pairs if m.applies_to(getattr(p, side).capabilities)]
            if applied and m.name not in run.metrics and (m.family == "judged" or on_request(m)):
                raise GateUsageError(f"{where}.metric: {why_missing(m, run)}")
            rows = run.turns([m.name])
            if len(rows) and "unmeasured" in rows and rows["value"].isna().all() \
                    and (Unmeasured.each(rows["unmeasured"]) == Unmeasured.NOT_MEASURED).all():
                raise GateUsageError(f"{where}.metric: {m.name} of {run.name} was not measured "
                                     f"({rows['unmeasured'].iloc[0]}): name a judge endpoint under llm.roles.judge "
                                     f"in the run's config and run `harness judge {run.path}`")


def failed_turns(runs: list[RunData]) -> list[str]:
    """Every arm with failed turns, as the traces record them (never the manifest's counts)."""
    return [f"{r.name} {f.describe()}" for r in runs for f in failures(r.folder, r.manifest)]


def infrastructure(policy: Policy, runs: list[RunData], pairs: list[Pair]) -> list[str]:
    """Why these runs cannot be gated: an arm whose failed turns (errors, LLM calls that failed
    after their retries, read from the traces) pass max_error_rate, and the metrics of the policy
    left unmeasured by infrastructure (an error, a failed judgment) past max_unmeasured_rate."""
    lim = policy.limits
    out = [f"{r.name} {f.label}: {f.failed} of {f.turns} turns failed ({f.rate:.1%} > {lim.max_error_rate:.1%}; "
           f"first: session {f.first_session} turn {f.first_turn}: {f.first_error})"
           for r in runs for f in failures(r.folder, r.manifest) if f.rate > lim.max_error_rate]
    metrics = sorted({item.metric for _, _, item in items(policy)})
    for run, side in zip(runs, ("baseline", "candidate")):
        for p in pairs:
            for m in metrics:
                rows = run.arm_turns(m, getattr(p, side).arm_id)
                if rows.empty or "unmeasured" not in rows:
                    continue
                bad = Unmeasured.each(rows["unmeasured"].astype(object)).isin([k for k in Unmeasured if k.infrastructure])
                if bad.mean() > lim.max_unmeasured_rate:
                    out.append(f"{run.name} {p.label}: {m} unmeasured on {int(bad.sum())} of {len(rows)} turns "
                               f"({bad.mean():.1%} > {lim.max_unmeasured_rate:.1%}; e.g. "
                               f"{rows.loc[bad, 'unmeasured'].iloc[0]})")
    return out


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


def _coverage(base: RunData, cand: RunData, pairs: list[Pair], policy: Policy) -> str | None:
    """What the verdict will not cover, in words (None: everything the eval set's splits hold):
    baseline turns the candidate lacks, and a baseline that is itself a shard. Bad input unless the
    policy says `coverage: subset`."""
    out = [said] if (said := shard_said(base, "baseline")) else []
    gaps = coverage(base, cand, pairs)
    if gaps:
        out.append(f"{cand.name} lacks what the baseline {base.name} has for {describe_gaps(gaps, cand.name)}")
    if out and policy.coverage == "full":
        what = "the candidate does not cover the baseline" if gaps else "the baseline does not cover its eval set"
        fix = "merge the baseline's shards (`harness merge`), " if base.manifest.shard else "replay the candidate on the baseline's " \
            "sessions, splits and repeats, "
        raise GateUsageError(f"{what}: {'; '.join(out)}. To gate, {fix}or state `coverage: subset` in the policy to "
                             "gate what both hold (the verdict then names what was not compared)")
    return "; ".join(out) or None


def scope(base: RunData, subset_of: RunData | None = None) -> str:
    """What the verdict covers, in words: sessions, turns (and how many of them have a relevant
    document in their qrels, when not all: ranking metrics compare only those), splits and
    repeats of the baseline; with `subset_of` (coverage: subset) only the baseline's turns that run
    holds too, said to be a subset and counted against the baseline's."""
    f = base.evidence.finals
    lab = base.labels
    whole = lab.drop_duplicates(["session_id", "turn_index"])  # a subset is counted against the labelled turns
    if subset_of is not None:
        held = subset_of.evidence.finals[["repeat", "session_id", "turn_index"]].drop_duplicates()
        f = f.merge(held, on=["repeat", "session_id", "turn_index"])
    splits = sorted(set(lab.loc[lab["session_id"].isin(set(f["session_id"])), "split"])) if "split" in lab else []
    turns = f.drop_duplicates(["session_id", "turn_index"])
    relevant = lab["qrels"].map(lambda q: any(g >= 1 for g in json.loads(q).values())) if "qrels" in lab else True
    judged = lab.loc[lab.get("qrels_measured", True) & relevant, ["session_id", "turn_index"]].astype(
        {"turn_index": "int64"})
    n_judged = len(turns[["session_id", "turn_index"]].astype({"turn_index": "int64"}).merge(judged))
    counted = (f"{f['session_id'].nunique()} sessions, {len(turns)} turns" if subset_of is None else
               f"subset: {f['session_id'].nunique()} of {whole['session_id'].nunique()} sessions, {len(turns)} of "
               f"{len(whole)} turns")
    return (counted + (f" ({n_judged} with a relevant document in their qrels)" if n_judged < len(turns) else "")
            + (f", split(s) {', '.join(map(str, splits))}" if splits else "")
            + f", {base.manifest.repeats if subset_of is None else f['repeat'].nunique()} repeat(s)")


def prepare(baseline: Path, candidate: Path, policy: Policy, pairs_cli: list[str] | None = None) -> dict:
    """Both runs checked (complete, fresh, labelled alike, covering), paired, and every check with
    the pairs it applies to; bad input as GateUsageError or CompareError."""
    base, cand = load_run(baseline), load_run(candidate)
    check_same_evalset([base, cand], False)
    pairing, warnings = _pairing(base, cand, policy, pairs_cli)
    pairs = pairing.pairs
    not_compared = _coverage(base, cand, pairs, policy)
    chosen = [(sec, i, item, select_pairs(sec, i, item, policy, pairs, cand)) for sec, i, item in items(policy)]
    check_inputs(policy, [base, cand], pairs)
    if (base.manifest.run_id, base.manifest.started) == (cand.manifest.run_id, cand.manifest.started):
        warnings.append(f"the candidate {cand.name} is the baseline {base.name} itself (same run id and start): this "
                        "verdict compares a run with itself")
    elif copied := same_evidence(base, cand):
        warnings.append(copied)
    if beyond := turns_beyond(base, cand):
        warnings.append(beyond)
    evidence = [n for r in (base, cand) for n in r.evidence.notes(r.name)] + \
        [f"failed turns: {x}" for x in failed_turns([base, cand])]
    return {"base": base, "cand": cand, "pairs": pairs, "warnings": warnings, "chosen": chosen,
            "not_compared": not_compared, "evidence": evidence,
            "scope": scope(base, cand if not_compared else None)}
