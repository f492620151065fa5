"""Paired comparisons of every arm against a reference arm (default: the `original` arm) per
metric and segment: mean difference, session-level bootstrap CI, session-level randomization
p-value, Holm across all comparisons of the table, wins/ties/losses, minimum detectable drop,
and the share of the oracle gap closed where an oracle arm exists. Compute only; rendering and
writing are elsewhere. Fed a session group at a time (`PairedSums.add`): what the statistics
resample are sessions, so each comparison keeps per-session sums, never the run's turns."""
from __future__ import annotations

import copy
import math

import numpy as np
import pandas as pd

from harness.metrics.registry import direction_of, headline
from harness.metrics.segments import TurnLookup, parse_segment
from harness.metrics.stats import (COMPARE_COLUMNS, STATS, TurnMeans, bootstrap_of_sums, holm_over,
                                   min_detectable_drop, paired_means, randomization_of_sums, session_sums,
                                   wins_ties_losses)

DEFAULT_SEGMENTS = ("all", "turn_index>=2")
TIE = 1e-12  # a difference this small is a tie (stats.compare_arms' tol)


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


class _Sums:
    """One comparison's per-session sums over the groups fed so far (sessions in sorted order)."""

    def __init__(self):
        self.sums, self.counts, self.means_a = [], [], []
        self.a = self.b = 0.0
        self.n = self.unmeasured = 0
        self.wtl = np.zeros(3, np.int64)

    def add(self, frame: pd.DataFrame, unmeasured: int, direction: str) -> None:
        s, c = session_sums(frame["session_id"].to_numpy(), frame["b"].to_numpy(float) - frame["a"].to_numpy(float))
        self.sums.append(s)
        self.counts.append(c)
        self.means_a.append(frame.groupby("session_id", sort=False)["a"].mean().to_numpy(float))
        self.a, self.b = self.a + float(frame["a"].sum()), self.b + float(frame["b"].sum())
        self.n, self.unmeasured = self.n + len(frame), self.unmeasured + unmeasured
        self.wtl += wins_ties_losses(frame, TIE, direction)

    def merge(self, other: "_Sums") -> None:
        """The sums of the next session group, fed to another (an `empty` PairedSums')."""
        self.sums += other.sums
        self.counts += other.counts
        self.means_a += other.means_a
        self.a, self.b = self.a + other.a, self.b + other.b
        self.n, self.unmeasured = self.n + other.n, self.unmeasured + other.unmeasured
        self.wtl += other.wtl

    def row(self, n_resamples: int, seed: int) -> dict:
        sums, counts = (np.concatenate(x) if x else np.zeros(0) for x in (self.sums, self.counts))
        if self.n:  # the counts of STATS, as compare_arms: the same comparison, the same numbers
            diff, lo, hi = bootstrap_of_sums(sums, counts, n_resamples, STATS.alpha, seed)
            test = randomization_of_sums(sums, STATS.n_permutations, seed)
            p, exact, floor = test.p, test.exact, test.resolution if test.at_resolution else math.nan
            mean_ref, mean_arm = self.a / self.n, self.b / self.n
        else:
            diff = lo = hi = p = mean_ref = mean_arm = floor = math.nan
            exact = False
        means = np.concatenate(self.means_a) if self.means_a else np.zeros(0)
        per_session = pd.DataFrame({"session_id": np.arange(len(means)), "a": means})  # one row per session
        w, t, l_ = (int(x) for x in self.wtl)
        return {"n_turns": self.n, "n_sessions": len(sums), "n_unmeasured": self.unmeasured, "mean_ref": mean_ref,
                "mean_arm": mean_arm, "diff": diff, "ci_lo": lo, "ci_hi": hi, "p": p, "p_exact": exact, "p_floor": floor,
                "wins": w, "ties": t, "losses": l_, "mde": min_detectable_drop(per_session, STATS.alpha, STATS.power)}


class PairedSums:
    """paired_table fed a session group at a time: `add` each group's per-turn rows and labels,
    then `table`. `arms`: the run's arms (harness.store.armset.ArmInfo); the reference is `reference`
    (an arm id) or the arm that declares the `reference` capability; the oracle gap is measured to
    the arm that declares `oracle`. `metrics`: the run's headline recall and nDCG (its metric
    `settings`) unless given. Segments are masks over label rows, so a group's labels decide them."""

    def __init__(self, labels: pd.DataFrame, arms: list, reference: str | None = None, metrics=None,
                 segments=DEFAULT_SEGMENTS, n_resamples: int = STATS.n_resamples, seed: int = STATS.seed, settings: dict | None = None):
        self.metrics = metrics or headline(settings)[:2]
        self.recall = headline(settings)[0]
        ids = [a.arm_id for a in arms]
        self.ref = reference or next((a.arm_id for a in arms if "reference" in a.capabilities), None)
        self.oracle = next((a.arm_id for a in arms if "oracle" in a.capabilities), None)
        self.others = [a for a in ids if a != self.ref]
        if tuple(segments) == DEFAULT_SEGMENTS and "split" in labels and labels["split"].nunique() > 1:
            # tuned on one split, held out on another: every figure on each split
            segments = (*segments, *[f"split={s} & turn_index>=2" for s in sorted(labels["split"].unique())])
        self.segments = [parse_segment(s) for s in segments]
        self.n_resamples, self.seed = n_resamples, seed
        self.sums: dict[tuple[str, str, str], _Sums] = {}  # (segment, metric, arm), in table order
        self.cost: dict[str, list[float]] = {}  # arm -> [sum, count] of cost_usd per turn

    def add(self, per_turn: pd.DataFrame, labels: pd.DataFrame) -> None:
        if self.ref is None:
            return
        pt = per_turn[per_turn["metric"].isin([*self.metrics, "cost_usd"])]
        cost = pt[pt["metric"] == "cost_usd"].dropna(subset=["value"])
        for arm, g in cost.groupby("arm_id", sort=False):
            c = self.cost.setdefault(arm, [0.0, 0])
            c[0], c[1] = c[0] + float(g["value"].sum()), c[1] + len(g)
        lookup, means = TurnLookup(labels), TurnMeans(pt)  # each arm's turn means once, then per segment
        rows: dict[tuple[str, str], np.ndarray] = {}  # (metric, arm) -> the label row of each of its turns

        def within(m: str, arm: str, mask: np.ndarray) -> pd.Series:
            s = means.of(m, arm)
            if (m, arm) not in rows:
                rows[(m, arm)] = lookup.rows(s.index.get_level_values(0), s.index.get_level_values(1))
            return s[lookup.within(rows[(m, arm)], mask)]

        measured = set(pt["metric"].unique().tolist())  # the distinct names, not a string per row
        for seg in self.segments:
            mask = seg.mask(labels).to_numpy(bool)
            if not mask.any():
                continue
            for m in (m for m in self.metrics if m in measured):
                direction, ref = direction_of(m), within(m, self.ref, mask)
                for arm in self.others:
                    frame, unm = paired_means(ref, within(m, arm, mask))
                    self.sums.setdefault((seg.name, m, arm), _Sums()).add(frame, unm.either, direction)

    def empty(self) -> "PairedSums":
        """One of the same comparisons with nothing fed yet (a session group scored in another process)."""
        out = copy.copy(self)
        out.sums, out.cost = {}, {}
        return out

    def merge(self, other: "PairedSums") -> None:
        """What an `empty` one was fed: the next session group's sums."""
        for key, sums in other.sums.items():
            self.sums.setdefault(key, _Sums()).merge(sums)
        for arm, (total, n) in other.cost.items():
            c = self.cost.setdefault(arm, [0.0, 0])
            c[0], c[1] = c[0] + total, c[1] + n

    def table(self) -> pd.DataFrame:
        frames = []
        for seg in (s.name for s in self.segments):
            for m in self.metrics:
                rows = [{"metric": m, "direction": direction_of(m), "reference": self.ref, "arm": arm,
                         **self.sums[(seg, m, arm)].row(self.n_resamples, self.seed)}
                        for arm in self.others if (seg, m, arm) in self.sums]
                if not rows:
                    continue
                df = pd.DataFrame(rows, columns=[c for c in COMPARE_COLUMNS if c not in ("p_holm", "holm_m")])
                df.insert(COMPARE_COLUMNS.index("p_holm"), "p_holm", math.nan)
                df.insert(COMPARE_COLUMNS.index("holm_m"), "holm_m", 0)
                frames.append(self._oracle(holm_over(df).assign(segment=seg)))
        if not frames:
            return pd.DataFrame()
        out = pd.concat(frames, ignore_index=True)
        holm_over(out)  # across every comparison of this table
        return self._cost(out)

    def _oracle(self, df: pd.DataFrame) -> pd.DataFrame:
        if self.oracle is not None and df["direction"].iloc[0] != "none":
            o = df[df["arm"] == self.oracle]
            if not o.empty and pd.notna(o["mean_arm"].iloc[0]):
                df["oracle_gap_closed"] = [oracle_gap_closed(r.mean_ref, r.mean_arm, o["mean_arm"].iloc[0])
                                           if r.arm != self.oracle else None for r in df.itertuples()]
        return df

    def _cost(self, out: pd.DataFrame) -> pd.DataFrame:
        """Cost per recall point relative to the reference: extra USD per turn per +1 point of headline recall."""
        cost = {a: s / n for a, (s, n) in self.cost.items() if n}
        rec = out[(out["metric"] == self.recall) & (out["segment"] == "all")].set_index("arm")["diff"]
        out["cost_per_recall_point"] = [
            (cost.get(r.arm, float("nan")) - cost.get(self.ref, float("nan"))) / (100 * rec[r.arm])
            if r.metric == self.recall and r.segment == "all" and r.arm in rec and rec[r.arm] not in (0,)
            else float("nan") for r in out.itertuples()]
        return out


def paired_table(per_turn: pd.DataFrame, labels: pd.DataFrame, arms: list, reference: str | None = None,
                 metrics=None, segments=DEFAULT_SEGMENTS, n_resamples: int = STATS.n_resamples, seed: int = STATS.seed,
                 settings: dict | None = None) -> pd.DataFrame:
    """PairedSums over one per-turn table (the whole run as one group)."""
    sums = PairedSums(labels, arms, reference, metrics, segments, n_resamples, seed, settings)
    sums.add(per_turn, labels)
    return sums.table()
