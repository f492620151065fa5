"""Paired comparisons of every arm against a reference arm (default: the `original` arm) per
metric and segment: mean difference, session-level bootstrap CI, session-level randomization
p-value, Holm across all comparisons of the table, wins/ties/losses, minimum detectable drop,
and the share of the oracle gap closed where an oracle arm exists. Compute only; rendering and
writing are elsewhere."""
from __future__ import annotations

import math

import pandas as pd

from harness.metrics.registry import headline
from harness.metrics.segments import parse_segment, segment_keys
from harness.metrics.stats import TurnMeans, compare_arms, holm_over

DEFAULT_SEGMENTS = ("all", "turn_index>=2")


def oracle_gap_closed(ref_mean: float, arm_mean: float, oracle_mean: float,
                      eps: float = 1e-12) -> float | None:
    """Share of the reference-to-oracle gap closed by the arm:
    ``(arm - ref) / (oracle - ref)``. None when the gap is ~0 (``|oracle - ref| <= eps``) or
    an input is missing/NaN. Can be negative (arm worse than ref) or > 1 (arm beyond the
    oracle)."""
    vals = (ref_mean, arm_mean, oracle_mean)
    if any(v is None or (isinstance(v, float) and math.isnan(v)) for v in vals):
        return None
    gap = float(oracle_mean) - float(ref_mean)
    if abs(gap) <= eps:
        return None
    return (float(arm_mean) - float(ref_mean)) / gap


def paired_table(per_turn: pd.DataFrame, labels: pd.DataFrame, arms: list, reference: str | None = None,
                 metrics=None, segments=DEFAULT_SEGMENTS, settings: dict | None = None) -> pd.DataFrame:
    """`arms`: the run's arms (harness.run.armset.ArmInfo); the reference is `reference` (an arm id)
    or the arm that declares the `reference` capability; the oracle gap is measured to the arm
    that declares `oracle`. `metrics`: the run's headline recall and nDCG (its metric `settings`)
    unless given."""
    metrics = metrics or headline(settings)[:2]
    recall = headline(settings)[0]
    ids = [a.arm_id for a in arms]
    ref = reference or next((a.arm_id for a in arms if "reference" in a.capabilities), None)
    if ref is None:
        return pd.DataFrame()
    oracle = next((a.arm_id for a in arms if "oracle" in a.capabilities), None)
    others = [a for a in ids if a != ref]
    if tuple(segments) == DEFAULT_SEGMENTS and "split" in labels and labels["split"].nunique() > 1:
        # tuned on one split, held out on another: every figure on each split
        segments = (*segments, *[f"split={s} & turn_index>=2" for s in sorted(labels["split"].unique())])
    frames = []
    measured = set(per_turn["metric"])
    means = TurnMeans(per_turn)  # each arm's turn means grouped once for every segment
    for seg_text in segments:
        seg = parse_segment(seg_text)
        key_set = segment_keys(labels, seg)
        if not key_set:
            continue
        for m in metrics:
            if m not in measured:
                continue
            df = compare_arms(means, m, ref, others, segment_keys=key_set)  # the counts of STATS
            if df.empty:
                continue
            df = df.assign(segment=seg.name)
            if oracle is not None and df["direction"].iloc[0] != "none":
                o = df[df["arm"] == oracle]
                if not o.empty and pd.notna(o["mean_arm"].iloc[0]):
                    df["oracle_gap_closed"] = [oracle_gap_closed(r.mean_ref, r.mean_arm, o["mean_arm"].iloc[0])
                                               if r.arm != oracle else None for r in df.itertuples()]
            frames.append(df)
    if not frames:
        return pd.DataFrame()
    out = pd.concat(frames, ignore_index=True)
    holm_over(out)  # across every comparison of this table
    # cost per recall point relative to the reference: extra USD per turn per +1 point of headline recall
    cost = per_turn[per_turn["metric"] == "cost_usd"].groupby("arm_id")["value"].mean()
    rec = out[(out["metric"] == recall) & (out["segment"] == "all")].set_index("arm")["diff"]
    out["cost_per_recall_point"] = [
        (cost.get(r.arm, float("nan")) - cost.get(ref, float("nan"))) / (100 * rec[r.arm])
        if r.metric == recall and r.segment == "all" and r.arm in rec and rec[r.arm] not in (0,) else float("nan")
        for r in out.itertuples()]
    return out
