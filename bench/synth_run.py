"""A synthetic run folder for the metrics benchmark: manifest.json, labels.parquet and trace
parts written through harness.store.traces.rows_to_table, like a replay would.

TURNS labelled turns (sessions of 4) x 5 arms: original, rewrite (can ask back), multi_query_rrf
(identifier lane, filters), corrective (top_k=3, 1-3 rounds, answers or abstains) and oracle
(n/a on a share of turns). Rankings of DEPTH document ids out of a 50,000-document corpus, a
relevant document placed with some probability; unmeasured turns, turns without a relevant
document, errors, fallbacks, identifiers, expected/applied filters and unknown prices occur at
fixed rates. Deterministic for a seed."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402,F401  (environment)

from harness.store.manifest import write_manifest  # noqa: E402
from harness.run.replay import LABEL_SCHEMA  # noqa: E402
from harness.store.traces import rows_to_table, to_json  # noqa: E402

N_DOCS = 50_000
QTYPES = ["direct", "reference", "ellipsis", "topic_switch", "identifier"]
ANSW = ["ANSWERABLE", "PARTIAL", "UNANSWERABLE", "UNDERSPECIFIED"]
SCHEMA_FIELDS = [{"field": "material", "type": "string", "kind": "preference"},
                 {"field": "length_mm", "type": "number", "kind": "preference", "unit": "mm"},
                 {"field": "assortment", "type": "string", "kind": "entitlement", "account_key": "assortment"}]


def _arms():
    base = {"answer": False, "depth": 100, "lane": "hybrid"}
    rw = {**base, "budget_ms": 0, "decide": False, "id_lane": True, "last_n": 4, "pool": 100, "rerank": False, "rrf_k": 60}
    corr = {"depth": 50, "lane": "hybrid", "last_n": 4, "max_rounds": 3, "min_coverage": 0.3, "route": "none",
            "start": "original", "strong": 0.87, "support": "sentence", "threshold": 0.82, "top_k": 3}
    specs = [("original", base, {}), ("rewrite", rw, {"rewrite": "test-model"}),
             ("multi_query_rrf", rw, {"rewrite": "test-model"}),
             ("corrective", corr, {"grade": "offline", "answer": "offline"}), ("oracle", base, {})]
    out = []
    for name, params, backends in specs:
        parts = {k: (str(v).lower() if isinstance(v, bool) else str(v)) for k, v in params.items()}
        if backends:
            parts["model"] = "+".join(sorted(set(backends.values())))
        arm_id = f"{name}(" + ",".join(f"{k}={parts[k]}" for k in sorted(parts)) + ")"
        out.append({"arm_id": arm_id, "arm": name, "params": params, "backends": backends})
    return out


def _draws(rng, turns: int) -> dict:
    """Per-turn draws (in this order: the generator's output depends on it)."""
    d = {"n_rel": rng.integers(1, 4, turns), "rel_docs": rng.integers(0, N_DOCS, (turns, 3)),
         "measured": rng.random(turns) >= 0.05, "no_rel": rng.random(turns) < 0.03,
         "qtype": rng.integers(0, len(QTYPES), turns)}
    d["has_id"] = d["qtype"] == 4
    d["has_filter"] = rng.random(turns) < 0.2
    d["answ"] = rng.integers(0, 4, turns)
    d["has_ref"] = rng.random(turns) >= 0.3
    sess = np.arange(turns) // 4
    d.update(sess=sess, tix=np.arange(turns) % 4 + 1, sids=np.array([f"s{s:06d}" for s in sess], dtype=object))
    return d


def _write_labels(run_dir: Path, d: dict, docs) -> list[list[str]]:
    """labels.parquet; returns each turn's identifiers."""
    labels, lab_ids = [], []
    for i in range(len(d["sess"])):
        q = {docs[r]: (0 if d["no_rel"][i] else int(1 + (j == 0))) for j, r in enumerate(d["rel_docs"][i, :d["n_rel"][i]])}
        ids = [f"4711-{i % 100:02d}"] if d["has_id"][i] else []
        ef = [{"field": "material", "op": "eq", "value": "stainless"}] if d["has_filter"][i] else []
        lab_ids.append(ids)
        sess, tix = d["sess"][i], d["tix"][i]
        labels.append({"session_id": d["sids"][i], "turn_index": int(tix), "split": "main" if sess % 5 else "test",
                       "domain": ["shop", "hr", "docs"][sess % 3], "query_type": QTYPES[d["qtype"][i]],
                       "language": "de" if sess % 4 == 0 else "en", "answerability": ANSW[d["answ"][i]],
                       "multi_turn_type": ["follow-up", "clarification"][tix % 2], "qrels": to_json(q),
                       "qrels_measured": bool(d["measured"][i]), "identifiers": ids, "expected_filters": to_json(ef),
                       "reference_rewrite": "reference query" if d["has_ref"][i] else None, "reference_answer": None,
                       "surface_doc": None, "user": labels_user(d["has_id"][i], i),
                       "segments": "{}"})
    pq.write_table(pa.Table.from_pylist(labels, schema=LABEL_SCHEMA), run_dir / "labels.parquet")
    return lab_ids


def _round_row(rng, run_id: str, arm: dict, d: dict, i: int, rnd: int, n_rounds: int, na, err, ctx: dict) -> dict:
    """One trace row: turn i of `arm`, round rnd of n_rounds (draws in the generator's order)."""
    name, docs, depth, user = arm["arm"], ctx["docs"], ctx["depth"], labels_user(d["has_id"][i], i)
    final = rnd == n_rounds
    rk = docs[rng.integers(0, N_DOCS, depth)].tolist() if na is None else []
    if na is None and rng.random() < ctx["hit_p"]:
        rk[int(rng.integers(0, min(depth, 30)))] = docs[d["rel_docs"][i, 0]]
    applied = [{"field": "assortment", "op": "eq", "value": "A"}]
    if name in ("rewrite", "multi_query_rrf") and (d["has_filter"][i] or rng.random() < 0.1):
        applied.append({"field": "material", "op": "eq", "value": "stainless" if rng.random() < 0.7 else "brass"})
    queries = [user] if na is None else []
    if name in ("rewrite", "multi_query_rrf") and d["has_id"][i] and rng.random() < 0.05:
        queries = ["part without its number"]
    llm = 1 if name in ("rewrite", "multi_query_rrf") else 0
    answer = abst = None
    if name == "corrective" and final and na is None:
        abst = bool(rng.random() < 0.3)
        answer = "Ich weiß es nicht." if abst else "The answer [doc]."
    return {
        "run_id": run_id, "arm_id": arm["arm_id"], "arm": name, "params": ctx["params_json"], "repeat": 0,
        "session_id": d["sids"][i], "turn_index": int(d["tix"][i]), "query_type": QTYPES[d["qtype"][i]], "language": "en",
        "domain": "shop", "round": rnd, "is_final": final, "original_query": user,
        "issued_queries": queries, "lanes": ["hybrid:0"], "must_keep": ctx["lab_ids"][i],
        "proposed_filters": to_json(applied[1:]), "applied_filters": to_json(applied),
        "filter_violations": ["assortment"] if llm and rng.random() < 0.01 else [],
        "fallback_reason": "rewrite failed: synthetic" if llm and rng.random() < 0.03 else None,
        "not_applicable": na, "candidates": [], "ranking": rk,
        "verdict": ("sufficient" if final else "insufficient") if name == "corrective" else None,
        "verdict_reason": None, "answer": answer, "answer_doc_ids": [], "abstained": abst,
        "llm_calls": llm, "prompt_tokens": 300 * llm, "completion_tokens": 40 * llm,
        "cost_usd": (None if rng.random() < 0.02 else 0.0001) if llm else None,
        "cache_hits": int(llm and rng.random() < 0.5), "ms_rewrite": 200.0 * llm or None,
        "ms_retrieve": float(rng.random() * 10), "ms_grade": None, "ms_answer": None,
        "ms_total": float(200 * llm + rng.random() * 10), "error": err if final else None,
        "prompt_hashes": to_json({"rewrite": "abc123"} if llm else {}), "backend": ctx["backend"],
        "clarify": to_json({"question": "which?", "options": []}) if llm and rng.random() < 0.02 else None,
        "turn_class": None, "filters_removed": []}


HIT_P = {"original": 0.5, "rewrite": 0.6, "multi_query_rrf": 0.65, "corrective": 0.55, "oracle": 0.7}


def _arm_rows(rng, run_id: str, arm: dict, d: dict, ctx: dict):
    """The trace rows of one arm over every turn, in order."""
    name = arm["arm"]
    ctx = {**ctx, "params_json": to_json(arm["params"]), "backend": to_json(arm["backends"]), "hit_p": HIT_P[name]}
    for i in range(len(d["sess"])):
        na = "no reference rewrite" if name == "oracle" and not d["has_ref"][i] else None
        n_rounds = int(rng.integers(1, 4)) if name == "corrective" and na is None else 1
        err = "TimeoutError: synthetic" if rng.random() < 0.005 else None
        for rnd in range(1, n_rounds + 1):
            yield _round_row(rng, run_id, arm, d, i, rnd, n_rounds, na, err, ctx)


def write_synthetic_run(run_dir: Path, turns: int = 100_000, depth: int = 100, seed: int = 0,
                        part_rows: int = 25_000) -> dict:
    run_dir = Path(run_dir)
    (run_dir / "traces").mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    docs = np.array([f"doc-{i:06d}" for i in range(N_DOCS)], dtype=object)
    d = _draws(rng, turns)
    ctx = {"docs": docs, "depth": depth, "lab_ids": _write_labels(run_dir, d, docs)}
    arms = _arms()
    buf, part, n_rows = [], 0, 0
    for arm in arms:
        for row in _arm_rows(rng, run_dir.name, arm, d, ctx):
            buf.append(row)
            n_rows += 1
            if len(buf) >= part_rows:
                pq.write_table(rows_to_table(buf), run_dir / "traces" / f"part-{part:05d}-synth.parquet")
                part, buf = part + 1, []
    if buf:
        pq.write_table(rows_to_table(buf), run_dir / "traces" / f"part-{part:05d}-synth.parquet")
        part += 1
    manifest = {"run_id": run_dir.name, "status": "complete", "config": {"name": "synthetic"}, "config_hash": "synthetic",
                "eval_set": {"name": "synthetic", "version": "1", "hash": "synthetic", "path": "", "splits": ["main", "test"],
                             "pooled_corpus": False, "written_here": True},
                "arms": arms, "filter_schema": SCHEMA_FIELDS,
                "metrics": {"cutoffs": [5, 10, 20], "ndcg_at": 10, "mrr_at": 10}, "repeats": 1,
                "counts": {"turns": turns * len(arms), "rows": n_rows}}
    write_manifest(run_dir, manifest)
    return {"turns": turns, "arms": len(arms), "rows": n_rows, "depth": depth, "parts": part}


def labels_user(has_id, i) -> str:
    return f"part 4711-{i % 100:02d} please" if has_id else "and the other one?"


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--turns", type=int, default=100_000)
    ap.add_argument("--depth", type=int, default=100)
    a = ap.parse_args()
    print(write_synthetic_run(a.out, a.turns, a.depth))
