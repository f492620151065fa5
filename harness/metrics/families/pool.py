"""Measures that read the judgments themselves, not only the relevant documents: what the
judgment pool covers of a ranking, and bpref, which scores a ranking on judged documents only.

- `bpref` (trec_eval's): for each relevant document retrieved, 1 - (judged non-relevant documents
  ranked above it, at most R) / min(R, judged non-relevant documents), summed over R; documents
  without a judgment, or with a negative grade (trec_eval: in the pool but unjudged), are skipped.
- `judged@k` (ir_measures' Judged@k): documents of the top k with any judgment (a line in the
  qrels, whatever its grade) over min(k, documents retrieved); an empty ranking is unmeasured.
- `unjudged@k` (trec_eval's unj_k): documents of the top k without a judgment, or with a
  negative grade, over k. It is not 1 - judged@k: a ranking shorter than k counts its missing
  places as judged, and a negative grade counts as unjudged.

A turn without relevance labels is unmeasured; judged@k and unjudged@k are measured on a turn
without a relevant document (bpref is not). Rankings are read as the ranking family reads them
(a document listed twice counts once, at its last position)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from harness.metrics.families.ir import READS, cutoffs, measured, to_long, tops, unmeasured_reasons, width
from harness.metrics.kernel import Long, Scoring
from harness.metrics.registry import Template, family


def bpref(J: np.ndarray, nrel: np.ndarray, nnonrel: np.ndarray) -> np.ndarray:
    """trec_eval's bpref over judgments J (rows x ranks, NaN: no judgment), R and N per row."""
    rel, nonrel = J >= 1, (J >= 0) & (J < 1)  # NaN compares False: unjudged is neither
    above = np.cumsum(nonrel, axis=1) - nonrel  # judged non-relevant ranked above each place
    denom = np.minimum(nnonrel, nrel).astype(np.float64)[:, None]
    part = 1.0 - np.divide(np.minimum(above, nrel[:, None]), denom, out=np.zeros(J.shape), where=above > 0)
    return np.where(rel, part, 0.0).sum(axis=1) / nrel


def judged_share(J: np.ndarray, top: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(judged share of the top k, retrieved of the top k) per row."""
    n = (top[:, :k] >= 0).sum(axis=1)
    return np.divide((~np.isnan(J[:, :k])).sum(axis=1), n, out=np.full(len(n), np.nan), where=n > 0), n


def unjudged_share(J: np.ndarray, top: np.ndarray, k: int) -> np.ndarray:
    none = np.isnan(J[:, :k]) | (J[:, :k] < 0)
    return (none & (top[:, :k] >= 0)).sum(axis=1) / k


TEMPLATES = [
    Template("bpref", "higher", "0-1", "per relevant document retrieved: 1 - judged non-relevant documents above "
             "it (at most R) / min(R, judged non-relevant documents); summed over R (trec_eval bpref)", reads=READS),
    Template("judged@k", "none", "share", "documents of the top k with a judgment (any grade) / min(k, retrieved) "
             "(ir_measures Judged@k): how much of the ranking the qrels see; a coverage figure, no direction (never a "
             "regression by itself; a policy rule on it states one)", reads=READS),
    Template("unjudged@k", "lower", "share", "documents of the top k without a judgment or with a negative grade / k "
             "(trec_eval unj_k)", reads=READS),
    Template("holes@k", "none", "count", "documents of the top k without a judgment for the turn (holes in the pool)",
             reads=READS),
    Template("holes_relevant_elsewhere@k", "none", "count", "documents of the top k without a judgment for the turn "
             "but judged relevant for another turn of the same session (a cheap signal of pool bias)", reads=READS),
]


def elsewhere(lab, li: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """For the label rows `li`: sorted keys r * D + c of the documents c relevant (grade >= 1) for
    another turn of label row r's session (D: the documents' count), with `li` and D, so that a
    row's membership is one search, not a set per row."""
    sess = lab.usess.get_indexer(lab.df["session_id"].astype(object))
    by: dict[int, list[int]] = {}
    for i, s in enumerate(sess.tolist()):
        by.setdefault(s, []).append(i)
    keys = [r * lab.D + c for r in set(li.tolist()) for c in set().union(*[lab.rel_codes[o] for o in by[sess[r]] if o != r])]
    return np.unique(np.asarray(keys, np.int64)), np.asarray(li, np.int64), int(lab.D)


def holes(J: np.ndarray, top: np.ndarray, k: int, other: tuple | None = None) -> np.ndarray:
    """Documents of the top k without a judgment; with `other` (`elsewhere`), those of them relevant
    for another turn of the row's session."""
    hole = np.isnan(J[:, :k]) & (top[:, :k] >= 0)
    if other is None:
        return hole.sum(axis=1).astype(np.float64)
    keys, li, d = other
    wanted = li[:, None] * d + top[:, :k]
    pos = np.clip(np.searchsorted(keys, wanted), 0, max(len(keys) - 1, 0))
    inside = (keys[pos] == wanted) if len(keys) else np.zeros(wanted.shape, bool)
    return (hole & inside).sum(axis=1).astype(np.float64)


@family("pool", TEMPLATES, order=11, requested=True)
def pool_rows(s: Scoring) -> Long | None:
    names = s.requested("pool")
    if not names:
        return None
    lab, f = s.lab, s.final
    kinds = cutoffs(names)
    reason = unmeasured_reasons(s, relevant=False)
    norel = unmeasured_reasons(s)
    values = np.full((len(f), len(names)), np.nan)
    why = np.repeat(reason[:, None], len(names), axis=1)
    mrows, rows = measured(s, reason)
    if len(mrows):
        top = tops(s.tr, rows, width(s.tr, rows, kinds))
        li = f.li[mrows]
        J = lab.judgments(li, top)
        for c, (kind, k) in enumerate(kinds):
            if kind == "bpref":
                ok = lab.n_rel[li] > 0
                values[mrows[ok], c] = bpref(J[ok], lab.n_rel[li][ok], lab.n_nonrel[li][ok])
                why[:, c] = norel
            elif kind == "judged":
                values[mrows, c], n = judged_share(J, top, k)
                why[mrows[n == 0], c] = "empty ranking"
            elif kind == "holes":
                values[mrows, c] = holes(J, top, k)
            elif kind == "holes_relevant_elsewhere":
                values[mrows, c] = holes(J, top, k, elsewhere(lab, li))
            else:
                values[mrows, c] = unjudged_share(J, top, k)
    return to_long(s, names, values, why)


HOLES, ELSEWHERE = "holes@10", "holes_relevant_elsewhere@10"  # what the hole report sums


def hole_sums(per_turn: pd.DataFrame | None, into: dict | None = None) -> dict[str, list]:
    """arm -> [turns, holes, relevant elsewhere] unrounded, added to `into` (sums over session groups)."""
    out = {} if into is None else into
    if per_turn is None:
        return out
    pt = per_turn[per_turn["metric"].isin([HOLES, ELSEWHERE])].dropna(subset=["value"])
    if pt.empty:
        return out
    v = pt.groupby(["arm_id", "metric", "session_id", "turn_index"], sort=False, observed=True)["value"].mean()
    v = v.reset_index()
    for arm, g in v.groupby("arm_id", sort=False, observed=True):
        h, e = g[g["metric"] == HOLES], g[g["metric"] == ELSEWHERE]
        acc = out.setdefault(str(arm), [0, 0.0, 0.0])
        acc[0], acc[1], acc[2] = acc[0] + len(h), acc[1] + float(h["value"].sum()), acc[2] + float(e["value"].sum())
    return out


def holes_rounded(sums: dict[str, list]) -> dict[str, dict]:
    return {arm: {"turns": n, "holes": int(round(h)), "relevant_elsewhere": int(round(e))} for arm, (n, h, e) in
            sums.items()}
