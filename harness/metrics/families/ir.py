"""Ranking metrics per turn, as trec_eval defines them: recall@k, precision@k, success@k, MRR
(with and without a cutoff), nDCG (linear gains, with and without a cutoff), MAP (with and
without a cutoff), R-precision; computed on arrays with ranx's formulas (ranx, ir_measures and
trec_eval's own test suite are the references the tests compare with): recall@k = hits / |R|,
MRR@k = 1 / rank, nDCG@k with discounts exactly as ranx's `_dcg` computes them (the C library's
log2, as numba's) and summed in the same order. A ranking reaches the formulas as ranx would receive it from strictly decreasing
scores in the arm's order: a document listed twice counts once, at its last position (the rows
where that changes the top are re-ranked exactly). Relevant means grade >= 1. A turn without
relevance labels, or with no relevant document, is unmeasured with its reason, never scored 0.
The family computes the measures a scoring names (registry.ranking_names; trec-eval's -m)."""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from harness.metrics.kernel import Long, Scoring, Traces
from harness.metrics.registry import Template, families, family
from harness.store.record import Manifest
from harness.unmeasured import Unmeasured

READS = ("ranking", "not_applicable", "error", "labels.qrels")


def score_rankings(labels, rankings: list[dict], names: list[str]):
    """The ranking metrics `names` (canonical) of rankings held in memory ({session_id,
    turn_index, ranking} each; e.g. a TREC run file), against labels with `qrels`: the per-turn
    frame, from every family that computes what it is asked (this one, the pool's)."""
    from harness.metrics.kernel import scoring, to_frame

    rows = [{"arm_id": "run", "repeat": 0, "round": 1, "is_final": True, **r} for r in rankings]
    s = scoring(None, Manifest(run_id="rankings", metrics={"names": list(names)}), labels, Traces.from_rows(rows))
    parts = [p for p in (f.kernel(s) for f in families() if f.requested) if p is not None]
    return to_frame(Long.concat(parts), s.arm_names, s.session_names, s.codes.names)


def cutoffs(names: list[str]) -> list[tuple[str, int | None]]:
    """(stem, cutoff) of each name; None for a measure of the whole ranking (`map`, `ndcg`)."""
    return [(m.partition("@")[0], int(m.partition("@")[2]) if "@" in m else None) for m in names]


@functools.lru_cache(maxsize=64)
def _discounts_of(k: int) -> np.ndarray:
    out = np.array([math.log2(r + 1) for r in range(1, k + 1)], np.float64)
    out.flags.writeable = False
    return out


def _discounts(k: int) -> np.ndarray:
    """log2(rank + 1) for ranks 1..k exactly as ranx's `_dcg` computes them: numba's log2 is the C
    library's, as is `math.log2`, while numpy's own log2 differs in the last bit for some ranks
    (13 of the first 100,000); ranx's values are the reference (tests/metrics/test_ir_metrics.py compares
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


def tops(tr: Traces, rows: np.ndarray, K: int) -> np.ndarray:
    """The top K codes of each row as ranx sees them (documents listed twice count once)."""
    top = tr.prefix(rows, K)
    lens = tr.lengths[rows]
    suspect = np.zeros(len(rows), bool)  # a top document listed again further down
    cand = np.nonzero(lens > 1)[0]
    for s in range(0, len(cand), 32768):
        c = cand[s:s + 32768]
        full = tr.prefix(rows[c], int(lens[c].max()))
        srt = np.sort(full, axis=1)  # only a row listing some document twice can be suspect
        twice = ((srt[:, 1:] == srt[:, :-1]) & (srt[:, 1:] >= 0)).any(axis=1)
        c, full = c[twice], full[twice]
        for j in range(min(K, full.shape[1] - 1)):
            suspect[c] |= (top[c, j] >= 0) & (full[:, j + 1:] == top[c, j:j + 1]).any(axis=1)
    for r in np.nonzero(suspect)[0]:
        top[r] = _ranx_top(tr.ranking(rows[r]), K)
    return top


def width(tr: Traces, rows: np.ndarray, kinds: list[tuple[str, int | None]]) -> int:
    """How many documents of each ranking the measures read: the largest cutoff, or the longest
    ranking when one reads the whole ranking."""
    K = max([k for _, k in kinds if k is not None] + [0])
    if any(k is None for _, k in kinds) and len(rows):
        K = max(K, int(tr.lengths[rows].max(initial=0)))
    return K


@dataclass
class Block:
    """The measured rankings as grades (rows x W: G) with what the formulas read beside them."""

    G: np.ndarray
    nrel: np.ndarray  # relevant documents per row
    li: np.ndarray  # label rows
    lab: object  # harness.metrics.kernel.Labels
    disc: np.ndarray  # log2(rank + 1), ranks 1..W

    def hits(self, k: int | None) -> np.ndarray:
        return self.G[:, :k] > 0


def _mrr(b: Block, k: int | None) -> np.ndarray:
    v, found = np.zeros(len(b.G)), np.zeros(len(b.G), bool)
    for j in range(k if k is not None else b.G.shape[1]):
        new = (b.G[:, j] > 0) & ~found
        v[new] = 1 / (j + 1)
        found |= new
    return v


def _ndcg(b: Block, k: int | None) -> np.ndarray:
    n = k if k is not None else b.G.shape[1]
    disc = b.disc
    if k is None:  # the ideal ranks every relevant document, retrieved or not (trec_eval's ndcg)
        k = int(b.lab.n_rel.max(initial=0))
        disc = _discounts(max(k, n))
    idcg = _ideal_dcg(b.lab, k, disc)[b.li]
    dcg = np.zeros(len(b.G))
    for j in range(n):
        dcg = dcg + b.G[:, j] / disc[j]
    return dcg / np.where(idcg == 0.0, 1.0, idcg)


def _map(b: Block, k: int | None) -> np.ndarray:
    """Precision at each relevant document of the top k, summed, over |R| (trec_eval's map_cut)."""
    H = b.hits(k)
    prec = np.cumsum(H, axis=1) / np.arange(1, H.shape[1] + 1)
    return np.where(H, prec, 0.0).sum(axis=1) / b.nrel


def _rprec(b: Block, k: int | None) -> np.ndarray:
    """Relevant documents in the top |R| over |R| (a ranking shorter than |R| is padded)."""
    c = np.cumsum(b.hits(None), axis=1)
    at = np.minimum(b.nrel, c.shape[1]) - 1
    got = c[np.arange(len(c)), np.maximum(at, 0)] if c.shape[1] else np.zeros(len(c))
    return np.where(at >= 0, got, 0) / b.nrel


MEASURES = {
    "recall": lambda b, k: b.hits(k).sum(axis=1) / b.nrel,
    "precision": lambda b, k: b.hits(k).sum(axis=1) / k,
    "success": lambda b, k: b.hits(k).any(axis=1).astype(np.float64),
    "mrr": _mrr, "ndcg": _ndcg, "map": _map, "rprec": _rprec,
}


def unmeasured_reasons(s: Scoring, relevant: bool = True) -> np.ndarray:
    """Per final row: why the ranking metrics cannot be computed there, or None. `relevant`:
    a turn without a relevant document is unmeasured too."""
    f, lab = s.final, s.lab
    rel = np.where(lab.n_rel[f.li] == 0, "no relevant document", None) if relevant else np.full(len(f), None)
    reason = np.where(~lab.measured[f.li], "no relevance labels", rel).astype(object)
    return np.where(reason != None, reason, np.where(f.na, f.na_text, np.where(f.err, Unmeasured.ERROR.value, None))).astype(object)  # noqa: E711


def _gkey(s: Scoring) -> np.ndarray:
    """(arm, repeat) of each final row as a code in first-appearance order."""
    f = s.final
    return pd.factorize(f.arm * (int(f.rep.max(initial=0)) + 1) + f.rep)[0]


def measured(s: Scoring, reason: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The final rows without a reason, and the trace row whose ranking each is scored on: one
    ranking per (arm, repeat, turn), the last row's."""
    f, mrows = s.final, np.nonzero(np.equal(reason, None))[0]
    if not len(mrows):
        return mrows, mrows
    pair = _gkey(s)[mrows] * (s.lab.n + 1) + f.li[mrows]
    last = pd.Series(mrows).groupby(pair, sort=False).transform("last").to_numpy(np.int64)
    return mrows, f.rows[last]


def to_long(s: Scoring, names: list[str], values: np.ndarray, why: np.ndarray) -> Long:
    """Rows of `names` per final row, ordered by (arm, repeat); `values` is (rows, metrics),
    `why` per row or (rows, metrics)."""
    f = s.final
    o = np.argsort(_gkey(s), kind="stable")
    n, m = len(o), len(names)
    mcodes = np.array([s.codes(x) for x in names], np.int64)
    unm = why[o].reshape(-1) if why.ndim == 2 else np.repeat(why[o], m)
    return Long(arm=np.repeat(f.arm[o], m), rep=np.repeat(f.rep[o], m), sess=np.repeat(f.sess[o], m),
                tix=np.repeat(f.tix[o], m), metric=np.tile(mcodes, n), value=values[o].reshape(-1), unm=unm)


TEMPLATES = [
    Template("recall@k", "higher", "share", "relevant documents in the top k / relevant documents", reads=READS),
    Template("precision@k", "higher", "share", "relevant documents in the top k / k (trec_eval P_k)", reads=READS),
    Template("success@k", "higher", "0/1", "1 when a relevant document is in the top k (trec_eval success_k)",
             reads=READS),
    Template("ndcg@k", "higher", "0-1", "DCG@k / IDCG@k with linear gains (grade / log2(rank + 1))", reads=READS),
    Template("ndcg", "higher", "0-1", "DCG / IDCG over the whole ranking, the ideal ranking every relevant document "
             "(trec_eval ndcg)", reads=READS),
    Template("mrr@k", "higher", "0-1", "1 / rank of the first relevant document in the top k, else 0", reads=READS),
    Template("mrr", "higher", "0-1", "1 / rank of the first relevant document, else 0 (trec_eval recip_rank)",
             reads=READS),
    Template("map@k", "higher", "0-1", "sum of precision at each relevant document in the top k / relevant documents "
             "(trec_eval map_cut_k)", reads=READS),
    Template("map", "higher", "0-1", "sum of precision at each relevant document retrieved / relevant documents "
             "(trec_eval map)", reads=READS),
    Template("rprec", "higher", "share", "relevant documents in the top R / R, R = relevant documents (trec_eval "
             "Rprec)", reads=READS),
]


@family("ir", TEMPLATES, order=10, requested=True)
def ir_rows(s: Scoring) -> Long | None:
    names = s.requested("ir")
    if not names:
        return None
    lab, f = s.lab, s.final
    kinds = cutoffs(names)
    reason = unmeasured_reasons(s)
    values = np.full((len(f), len(names)), np.nan)
    mrows, rows = measured(s, reason)
    if len(mrows):
        K = width(s.tr, rows, kinds)
        li = f.li[mrows]
        b = Block(lab.grades(li, tops(s.tr, rows, K)), lab.n_rel[li], li, lab, _discounts(K))
        for c, (kind, k) in enumerate(kinds):
            values[mrows, c] = MEASURES[kind](b, k)
    return to_long(s, names, values, reason)
