"""The report's verdict blocks, computed: for a baseline run and each candidate run, candidate −
baseline per arm label, metric and turn-index segment with the statistics of `harness compare`
(harness.analysis.compare: arms paired by label, session bootstrap 95% CI, randomization p, Holm
across the block), each cell marked a regression or an improvement in its metric's direction,
what changed between the paired arms (models, parameters, prompts), and with a policy the gate's
verdict (harness.analysis.gate). Also which runs get a block: `--baseline RUN` names the
baseline; without it exactly two runs mean BASELINE CANDIDATE; runs on different eval sets (or
not scored) cannot be paired and get the reason instead. Returns plain data (dicts, lists,
numbers, and the gate's GateVerdict) that the report renders (harness/report/sections/verdict.py);
writes nothing."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from harness.analysis.compare import CompareError, check_metrics, compare_data
from harness.analysis.gate import SECTIONS, evaluate
from harness.analysis.pairing import PairingError, pair_runs
from harness.analysis.policy import GateUsageError, Policy, load_policy
from harness.analysis.pool_warnings import judged_warnings
from harness.metrics.aggregate import turn_values
from harness.metrics.families.operational import SHOWN as SHOWN_OPERATIONAL
from harness.metrics.registry import coverage as pool_coverage, headline, judged, resolve
from harness.metrics.segments import TURN_SEGMENTS, segment_keys
from harness.metrics.stats import STATS
from harness.store.folder import RunData, RunFolder
from harness.analysis.evidence import EvidenceError, check_run, coverage_notes

EPS = 1e-12
CELL = ("diff", "ci_lo", "ci_hi", "p", "p_holm", "holm_m", "p_floor", "n_turns", "n_sessions", "n_unmeasured", "mean_ref", "mean_arm")


def mark(direction: str, diff: float, p_holm: float, alpha: float = STATS.alpha) -> str:
    """'regression' when candidate − baseline goes the metric's bad way with Holm p < alpha,
    'improvement' when it goes the good way likewise, '' otherwise (always for a metric without
    a direction of its own)."""
    if direction not in ("higher", "lower") or diff is None or p_holm is None:
        return ""
    if math.isnan(diff) or math.isnan(p_holm) or not p_holm < alpha or diff == 0:
        return ""
    return "improvement" if (diff > 0) == (direction == "higher") else "regression"


@dataclass
class Plan:
    """The report's runs in order (the baseline first) and which of them get a verdict block."""
    runs: list[Path]
    baseline: Path | None = None
    candidates: list[Path] = field(default_factory=list)
    why_not: list[str] = field(default_factory=list)  # why runs have no block, in words


def _same(a: Path, b: Path) -> bool:
    return Path(a).resolve() == Path(b).resolve()


def evalset_of(path: Path) -> tuple[tuple, str]:
    """The identity of a run's eval set (name, version, hash) and how to name it."""
    es = RunFolder(path).read_manifest().eval_set
    return (es.name, es.version, es.hash), f"{es.name} {es.version}"


def plan(paths: list[Path], baseline: Path | None = None) -> Plan:
    paths = [Path(p) for p in paths]
    if baseline is not None:
        cands = [p for p in paths if not _same(p, baseline)]
        why = [] if cands else [f"--baseline {Path(baseline).name} is the only run: name candidate runs too"]
        return Plan([Path(baseline), *cands], Path(baseline), cands, why)
    if len(paths) == 2:
        return Plan(paths, paths[0], [paths[1]])
    if len(paths) == 1:
        return Plan(paths, why_not=["one run: there is no baseline to compare it with (`harness report BASELINE "
                                    "CANDIDATE`, or --baseline RUN with candidates, opens with candidate − baseline)"])
    sets = list(dict.fromkeys(evalset_of(p)[1] for p in paths))
    if len(sets) > 1:
        return Plan(paths, why_not=[f"{len(paths)} runs on {len(sets)} eval sets ({', '.join(sets)}): runs on "
                                    "different eval sets have no turns in common to pair, so they are shown side by "
                                    "side only"])
    return Plan(paths, why_not=[f"{len(paths)} runs and no --baseline: name the baseline with --baseline RUN to "
                                "compare the others with it"])


def unpairable(base: RunData, cand: RunData) -> str | None:
    """Why a candidate cannot be compared with the baseline turn by turn, or None."""
    (b_id, b_name), (c_id, c_name) = evalset_of(base.path), evalset_of(cand.path)
    if b_id != c_id:
        return (f"no verdict block for {cand.name}: it uses eval set {c_name}, the baseline {base.name} uses {b_name}; "
                "runs on different eval sets have no turns in common to pair")
    for r in (base, cand):
        if not r.scored:
            return f"no verdict block for {cand.name}: {r.name} is not scored (run `harness metrics` on it)"
    return None


def verdict_metrics(base: RunData) -> list[str]:
    """The quality metrics a block shows by default: the baseline's headline ranking metrics (its
    own cutoffs) and the judged ones; regressions are counted on them."""
    return headline(base.manifest.metrics) + judged()


def _metrics(base: RunData, cand: RunData, policy: Policy | None, extra: list[str]) -> tuple[list[str], list[str]]:
    """(quality, operational): the default metrics both runs measured, then those of -m/--metric
    (checked: unknown or unmeasured is bad input) and of the policy, each in its kind."""
    both = base.metrics & cand.metrics
    names = [m for m in verdict_metrics(base) + pool_coverage(base.manifest.metrics)[:1] + list(SHOWN_OPERATIONAL)
             if m in both]  # judged@k beside the ranking metrics: a coverage figure, never marked
    names += [m.name for m in check_metrics(list(extra), [base, cand])]
    if policy is not None:
        names += [i.metric for s in SECTIONS for i in getattr(policy, s) if i.metric in both]
    names = list(dict.fromkeys(names))
    return [m for m in names if not resolve(m).operational], [m for m in names if resolve(m).operational]


def unmeasured(base: RunData, cand: RunData) -> dict[str, str]:
    """Default metrics a run did not measure -> why, in words (faithfulness: no judgments)."""
    out = {}
    for m in verdict_metrics(base):
        lack = [r.name for r in (base, cand) if m not in r.metrics]
        if lack:
            why = (f"no judgments in {' and '.join(lack)} (`harness judge RUN`, then `harness metrics RUN`)"
                   if m in judged() else f"not measured in {' and '.join(lack)}")
            out[m] = f"{m} n/a: {why}"
    return out


def turn_pairs(base: RunData, cand: RunData, pairs: list) -> list[dict]:
    """Per paired arm, session and turn: the baseline's and the candidate's value of the baseline's
    headline recall and nDCG (repeats averaged, unmeasured turns left out) and whether the candidate
    is worse in the metric's direction (the drill-down shows them and filters the turns where one is)."""
    back = {p.baseline.arm_id: p.candidate.arm_id for p in pairs}
    keys = ["arm_id", "session_id", "turn_index"]
    out = []
    for m in headline(base.manifest.metrics)[:2]:
        if m not in base.metrics or m not in cand.metrics:
            continue
        up = resolve(m).direction != "lower"

        def mean(r: RunData, arms) -> pd.DataFrame:
            t = r.turns([m])
            t = t[t["arm_id"].isin(arms)]
            return turn_values(t, keys, sort=True)

        b = mean(base, back).assign(arm_id=lambda x: x["arm_id"].map(back))
        j = mean(cand, set(back.values())).merge(b, on=keys, suffixes=("", "_base"))
        for r in j.itertuples():
            worse = r.value < r.value_base - EPS if up else r.value > r.value_base + EPS
            out.append({"candidate_arm": r.arm_id, "session_id": str(r.session_id), "turn_index": int(r.turn_index),
                        "metric": m, "baseline": float(r.value_base), "candidate": float(r.value),
                        "worse": bool(worse)})
    return out


def segments(labels: pd.DataFrame) -> tuple[list[str], str | None]:
    """The turn-index segments that hold labelled turns; a note when the set has single
    questions only (t=1 is then all) or when a segment holds none."""
    have = [s for s in TURN_SEGMENTS if segment_keys(labels, s)]
    if set(have) <= {"all", "turn_index=1"}:
        return ["all"], "every session of this eval set has one question (all turns are t=1): no rows per turn index"
    empty = [s for s in TURN_SEGMENTS if s not in have]
    return have, (f"no labelled turn in {', '.join(empty)}" if empty else None)


COUNTS = ("n_turns", "n_sessions", "n_unmeasured", "holm_m")


def _cell(r: dict) -> dict:
    out = {}
    for k in CELL:
        v = r.get(k)
        v = None if v is None or pd.isna(v) else float(v)
        out[k] = int(v) if v is not None and k in COUNTS else v
    out["mark"] = mark(r["direction"], r["diff"], r["p_holm"])
    return out


def _labels(table: pd.DataFrame, pairs: dict, metrics: list[str], segs: list[str]) -> list[dict]:
    """One entry per compared label: its pair and one row per segment with a cell per metric
    (None where the metric does not apply to the pair)."""
    out = []
    by = {(r["label"], r["metric"], r["segment"]): r for r in table.to_dict("records")}
    for label in dict.fromkeys(table["label"] if "label" in table else []):
        p = pairs[label]
        rows = [{"segment": s, "cells": {m: (_cell(by[(label, m, s)]) if (label, m, s) in by else None)
                                         for m in metrics}} for s in segs]
        out.append({"label": label, "how": p.how, "baseline_arm": p.baseline.arm_id,
                    "candidate_arm": p.candidate.arm_id, "changes": list(p.changes), "rows": rows})
    return out


def _operational(base: RunData, cand: RunData, names: list[str], arms: list[str] | None, specs: list[str] | None,
                 pairs: dict) -> dict | None:
    """Candidate − baseline of the operational metrics over all turns, per label, apart from the
    verdict: whether the pair changed at all, and where each run was timed."""
    if not names:
        return None
    c = compare_data([base, cand], names, ["all"], arms, specs)
    rows = []
    for label, g in c.table.groupby("label", sort=False):
        cells = {r["metric"]: {k: _plain(r.get(k)) for k in ("diff", "ci_lo", "ci_hi", "p", "p_holm", "p_floor", "mean_ref",
                                                       "mean_arm")}
                 for r in g.to_dict("records")}
        rows.append({"label": label, "changed": bool(pairs[label].changes), "cells": cells})
    timed = {r.name: (r.manifest.machine.model_dump() if r.manifest.machine else None) for r in (base, cand)}
    return {"metrics": [{"name": m, "unit": resolve(m).unit} for m in names], "rows": rows, "timed": timed}


def _plain(v):
    return None if v is None or pd.isna(v) else float(v)


def _not_compared(base: RunData, cand: RunData, pairs: list) -> list[str]:
    """What the block cannot vouch for: partial or rescored runs, baseline turns the candidate lacks."""
    return coverage_notes(base, cand, pairs) + [n for r in (base, cand) for n in r.evidence.notes(r.name)]


def block(base: RunData, cand: RunData, policy: Policy | None, extra_metrics: list[str], arms: list[str] | None,
          pairs: list[str] | None) -> dict:
    """One candidate against the baseline (CompareError, GateUsageError: bad input)."""
    gate = evaluate(base.path, cand.path, policy, pairs) if policy is not None else None
    ms, ops = _metrics(base, cand, policy, extra_metrics)
    segs, seg_note = segments(base.labels)
    specs = [f"{b}={c}" for b, c in (policy.pairs if policy else {}).items()] + list(pairs or [])
    c = compare_data([base, cand], ms, segs, arms, specs or None)  # the counts of STATS, as compare and the gate
    try:
        pairing = pair_runs(base, cand, specs or None)
    except PairingError as e:
        raise CompareError(str(e)) from None
    by_label = {p.label: p for p in pairing.pairs}
    na = unmeasured(base, cand)  # shown as n/a columns, with the reason
    shown = ms + [m for m in na if m not in ms]
    labels = _labels(c.table, by_label, shown, segs)
    compared = {lab["label"] for lab in labels}
    marks = [(lab["label"], row["segment"], m, cell["mark"]) for lab in labels for row in lab["rows"]
             for m, cell in row["cells"].items() if cell and cell["mark"]]
    return {"baseline": base.name, "candidate": cand.name, "baseline_dir": str(base.path.resolve()),
            "candidate_dir": str(cand.path.resolve()),
            "metrics": [{"name": m, "direction": resolve(m).direction, "unit": resolve(m).unit, "na": na.get(m)}
                        for m in shown],
            "turns": turn_pairs(base, cand, [p for p in pairing.pairs if p.label in compared]),
            "segments": segs, "segment_note": seg_note, "labels": labels, "notes": c.notes,
            "unchanged": c.unchanged.get(cand.name, {}),  # label -> why: one line instead of its rows
            "evidence": _not_compared(base, cand, [p for p in pairing.pairs if p.label in compared]),
            "operational": _operational(base, cand, ops, arms, specs or None, by_label),
            "n_tests": int(c.table["p"].notna().sum()), **STATS.method(), "method": STATS.said(),
            "judged": [] if gate else judged_warnings(base, cand, [p for p in pairing.pairs if p.label in compared],
                                                      segs),  # with a policy, the gate's warnings say it
            "regressions": [x[:3] for x in marks if x[3] == "regression"],
            "improvements": [x[:3] for x in marks if x[3] == "improvement"], "gate": gate}


def verdicts(p: Plan, policy_path: Path | None = None, extra_metrics: list[str] = (), arms: list[str] | None = None,
             pairs: list[str] | None = None) -> dict:
    """{blocks: [one per candidate that can be paired], why_not: [reasons], policy: its name}.
    Bad input (a policy, metric, arm or pair that does not fit these runs) raises
    GateUsageError or CompareError with the file:line or option it concerns."""
    policy = load_policy(policy_path) if policy_path is not None else None
    why, blocks = list(p.why_not), []
    if p.baseline is not None:
        try:
            base = check_run(p.baseline, complete=False, scored=False)
            cands = [check_run(c, complete=False, scored=False) for c in p.candidates]
        except (EvidenceError, ValueError) as e:
            raise CompareError(str(e)) from None
        for cand in cands:
            reason = unpairable(base, cand)
            if reason:
                why.append(reason)
                continue
            blocks.append(block(base, cand, policy, list(extra_metrics), arms, pairs))
    if policy is not None and not blocks:
        raise GateUsageError(f"--policy {Path(policy_path).name}: no candidate to gate against a baseline ("
                             + "; ".join(why) + ")")
    return {"blocks": blocks, "why_not": why, "policy": Path(policy_path).name if policy_path else None}
