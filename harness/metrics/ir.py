"""IR metrics per turn through ranx: recall@k, nDCG@k (linear gains), MRR@k.
Rankings reach ranx as strictly decreasing scores in the arm's order (already ordered by score,
then doc id descending), so ranx's insertion-order tie break never decides anything.
Relevant means grade >= 1. A turn without relevance labels, or with no relevant document, is
unmeasured (with its reason), never scored 0."""
from __future__ import annotations

import json
import os

import numpy as np
import pandas as pd

DEFAULT_SETTINGS = {"cutoffs": [5, 10, 20], "ndcg_at": 10, "mrr_at": 10}  # a manifest without `metrics`


def present(x):
    """A string column value, or None for missing (None, NaN, pandas NA, empty)."""
    if x is None or (not isinstance(x, str) and pd.isna(x)) or x == "":
        return None
    return x


def ir_metric_names(cutoffs: list[int], ndcg_at: int, mrr_at: int) -> list[str]:
    return [f"recall@{k}" for k in cutoffs] + [f"ndcg@{ndcg_at}", f"mrr@{mrr_at}"]


def per_turn_ir(final: pd.DataFrame, labels: pd.DataFrame, names: list[str]) -> pd.DataFrame:
    """final: one row per (arm_id, repeat, session_id, turn_index) with `ranking` and
    `not_applicable`/`error`; labels: labels.parquet. Returns long rows
    (arm_id, repeat, session_id, turn_index, metric, value, unmeasured)."""
    os.environ.setdefault("NUMBA_CACHE_DIR", os.path.abspath(".cache/numba"))
    from ranx import Qrels, Run, evaluate

    lab = labels.set_index(["session_id", "turn_index"])
    qrels_all: dict[str, dict[str, int]] = {}
    why_unmeasured: dict[tuple, str] = {}
    for (sid, tix), row in lab.iterrows():
        q = {d: int(g) for d, g in json.loads(row["qrels"]).items() if int(g) >= 1}
        if not row["qrels_measured"]:
            why_unmeasured[(sid, tix)] = "no relevance labels"
        elif not q:
            why_unmeasured[(sid, tix)] = "no relevant document"
        else:
            qrels_all[f"{sid}\x1f{tix}"] = q
    out = []
    for (arm_id, rep), grp in final.groupby(["arm_id", "repeat"], sort=False):
        run: dict[str, dict[str, float]] = {}
        meta = []
        for sid, tix, ranking, na, err in zip(grp["session_id"], grp["turn_index"], grp["ranking"],
                                              grp["not_applicable"], grp["error"]):
            na, err = present(na), present(err)
            reason = why_unmeasured.get((sid, tix))
            if reason is None and na:
                reason = f"n/a: {na}"
            if reason is None and err:
                reason = "error"
            meta.append((sid, tix, reason))
            if reason is None:
                ranking = list(ranking) if ranking is not None else []
                n = len(ranking)
                run[f"{sid}\x1f{tix}"] = {d: float(n - i) for i, d in enumerate(ranking)}
        scores: dict[str, dict[str, float]] = {}
        if run and not any(run.values()):
            scores = {m: {k: 0.0 for k in run} for m in names}
        elif run:
            qrels = Qrels({k: qrels_all[k] for k in run})
            # empty rankings are added back by make_comparable (they score 0, they are measured)
            r = Run({k: v for k, v in run.items() if v}).make_comparable(qrels)
            evaluate(qrels, r, names, save_results_in_run=True)
            scores = {m: dict(r.scores[m]) for m in names}
        for sid, tix, reason in meta:
            key = f"{sid}\x1f{tix}"
            for m in names:
                val = scores[m].get(key, np.nan) if reason is None else np.nan
                out.append((arm_id, rep, sid, tix, m, float(val), reason))
    return pd.DataFrame(out, columns=["arm_id", "repeat", "session_id", "turn_index", "metric", "value", "unmeasured"])
