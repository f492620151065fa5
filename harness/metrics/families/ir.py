"""Ranking metrics per turn: recall@k, nDCG@k (linear gains), MRR@k, computed with ranx's
formulas on arrays (ranx itself is the reference the tests compare with): recall@k = hits /
|R|, MRR@k = 1 / rank, nDCG@k with discounts from numba exactly as ranx's `_dcg` and summed in
the same order. A ranking reaches the formulas as ranx would receive it from strictly
decreasing scores in the arm's order: a document listed twice counts once, at its last position
(the rows where that changes the top are re-ranked exactly). Relevant means grade >= 1. A turn
without relevance labels, or with no relevant document, is unmeasured with its reason, never
scored 0."""
from __future__ import annotations

import functools
import math

import numpy as np
import pandas as pd

from harness.defaults import metric_settings
from harness.metrics.kernel import Long, Scoring, Traces
from harness.metrics.registry import Template, family
from harness.run.record import Manifest

READS = ("ranking", "not_applicable", "error", "labels.qrels")


def ir_metric_names(cutoffs: list[int], ndcg_at: int, mrr_at: int) -> list[str]:
    return [f"recall@{k}" for k in cutoffs] + [f"ndcg@{ndcg_at}", f"mrr@{mrr_at}"]


def names_of(settings: dict | None) -> list[str]:
    s = metric_settings(settings)
    return ir_metric_names(s["cutoffs"], s["ndcg_at"], s["mrr_at"])


def score_rankings(labels, rankings: list[dict], names: list[str]):
    """The ranking metrics `names` of rankings held in memory ({session_id, turn_index, ranking}
    each; e.g. a TREC run file), against labels with `qrels`: the per-turn frame."""
    from harness.metrics.kernel import Traces, scoring, to_frame

    rows = [{"arm_id": "run", "repeat": 0, "round": 1, "is_final": True, **r} for r in rankings]
    s = scoring(None, Manifest(run_id="rankings", metrics={"names": list(names)}), labels, Traces.from_rows(rows))
    return to_frame(ir_rows(s), s.arm_names, s.session_names, s.codes.names)


@functools.lru_cache(maxsize=64)
def _discounts_of(k: int) -> np.ndarray:
    out = np.array([math.log2(r + 1) for r in range(1, k + 1)], np.float64)
    out.flags.writeable = False
    return out


def _discounts(k: int) -> np.ndarray:
    """log2(rank + 1) for ranks 1..k exactly as ranx's `_dcg` computes them: numba's log2 is the C
    library's, as is `math.log2`, while numpy's own log2 differs in the last bit for some ranks
    (13 of the first 100,000); ranx's values are the reference (tests/test_ir_metrics.py compares
    with numba's for every k up to 10,000). No numba here: its import and first compile cost a
    process seconds."""
    return _discounts_of(k) if k > 0 else np.zeros(0)


def _ranx_top(codes: np.ndarray, width: int) -> np.ndarray:
    """The first `width` documents as ranx ranks {doc: n - i}: each once, at its last position."""
    last: dict[int, int] = {}
    for i, c in enumerate(codes.tolist()):
        last[c] = i
    order = sorted(last, key=last.__getitem__)[:width]
    out = np.full(width, -1, np.int64)
    out[:len(order)] = order
    return out


def _ideal_dcg(lab, k: int, disc: np.ndarray) -> np.ndarray:
    R = int(lab.n_rel.max(initial=0))
    g = np.zeros((lab.n, max(R, 1)))
    for i, q in enumerate(lab.qrels):
        if q:
            v = sorted(q.values(), reverse=True)
            g[i, :len(v)] = v
    out = np.zeros(lab.n)
    for j in range(min(k, R)):
        out = out + g[:, j] / disc[j]
    return out


def _tops(tr: Traces, rows: np.ndarray, K: int) -> np.ndarray:
    """The top K codes of each row as ranx sees them (documents listed twice count once)."""
    top = tr.prefix(rows, K)
    lens = tr.lengths[rows]
    suspect = np.zeros(len(rows), bool)  # a top document listed again further down
    cand = np.nonzero(lens > 1)[0]
    for s in range(0, len(cand), 32768):
        c = cand[s:s + 32768]
        full = tr.prefix(rows[c], int(lens[c].max()))
        for j in range(min(K, full.shape[1] - 1)):
            suspect[c] |= (top[c, j] >= 0) & (full[:, j + 1:] == top[c, j:j + 1]).any(axis=1)
    for r in np.nonzero(suspect)[0]:
        top[r] = _ranx_top(tr.ranking(rows[r]), K)
    return top


def _values(kind: str, k: int, G: np.ndarray, nrel: np.ndarray, idcg: np.ndarray, disc: np.ndarray) -> np.ndarray:
    """One metric over the grade matrix G (rows x K)."""
    n = len(G)
    if kind == "recall":
        return (G[:, :k] > 0).sum(axis=1) / nrel
    if kind == "mrr":
        v, found = np.zeros(n), np.zeros(n, bool)
        for j in range(k):
            new = (G[:, j] > 0) & ~found
            v[new] = 1 / (j + 1)
            found |= new
        return v
    dcg = np.zeros(n)
    for j in range(k):
        dcg = dcg + G[:, j] / disc[j]
    return dcg / np.where(idcg == 0.0, 1.0, idcg)


def unmeasured_reasons(s: Scoring) -> np.ndarray:
    """Per final row: why the ranking metrics cannot be computed there, or None."""
    f, lab = s.final, s.lab
    reason = np.where(~lab.measured[f.li], "no relevance labels",
                      np.where(lab.n_rel[f.li] == 0, "no relevant document", None)).astype(object)
    return np.where(reason != None, reason, np.where(f.na, f.na_text, np.where(f.err, "error", None))).astype(object)  # noqa: E711


TEMPLATES = [
    Template("recall@k", "higher", "share", "relevant documents in the top k / relevant documents", reads=READS),
    Template("ndcg@k", "higher", "0-1", "DCG@k / IDCG@k with linear gains (grade / log2(rank + 1))", reads=READS),
    Template("mrr@k", "higher", "0-1", "1 / rank of the first relevant document in the top k, else 0", reads=READS),
]


@family("ir", TEMPLATES, order=10)
def ir_rows(s: Scoring) -> Long:
    tr, lab, f = s.tr, s.lab, s.final
    names = s.settings.get("names") or names_of(s.settings)
    kinds = [(m.partition("@")[0], int(m.partition("@")[2])) for m in names]
    K = max([k for _, k in kinds] + [0])
    reason = unmeasured_reasons(s)
    gkey = pd.factorize(f.arm * (int(f.rep.max(initial=0)) + 1) + f.rep)[0]  # (arm, repeat), first appearance
    values = np.full((len(f), len(kinds)), np.nan)
    mrows = np.nonzero(np.equal(reason, None))[0]
    if len(mrows):
        # one ranking per (arm, repeat, turn): the last row's
        pair = gkey[mrows] * (lab.n + 1) + f.li[mrows]
        last = pd.Series(mrows).groupby(pair, sort=False).transform("last").to_numpy(np.int64)
        G = lab.grades(f.li[mrows], _tops(tr, f.rows[last], K))
        disc = _discounts(K)
        nrel = lab.n_rel[f.li[mrows]]
        for c, (kind, k) in enumerate(kinds):
            idcg = _ideal_dcg(lab, k, disc)[f.li[mrows]] if kind == "ndcg" else None
            values[mrows, c] = _values(kind, k, G, nrel, idcg, disc)
    o = np.argsort(gkey, kind="stable")
    n, m = len(o), len(names)
    mcodes = np.array([s.codes(x) for x in names], np.int64)
    return Long(arm=np.repeat(f.arm[o], m), rep=np.repeat(f.rep[o], m), sess=np.repeat(f.sess[o], m),
                tix=np.repeat(f.tix[o], m), metric=np.tile(mcodes, n), value=values[o].reshape(-1),
                unm=np.repeat(reason[o], m))
