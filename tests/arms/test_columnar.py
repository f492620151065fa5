"""A lane's hits and a round's candidate entries are held column-wise (harness.corpus.index.Hits,
harness.arms.result.Candidates) for speed: they must read, compare and store exactly as the
lists of Hit and of dicts they replace."""
import pyarrow as pa

from harness.arms.result import CANDIDATE, Candidates
from harness.corpus.index import Hit, Hits
from harness.store.traces import SCHEMA, rows_to_table


def test_hits_read_as_the_list_of_hits_they_replace():
    h = Hits(["b", "a", "c"], [3.0, 2.5, 1.0], "bm25")
    as_list = [Hit("b", 3.0, 1, "bm25"), Hit("a", 2.5, 2, "bm25"), Hit("c", 1.0, 3, "bm25")]
    assert list(h) == as_list and h == as_list and len(h) == 3 and h[-1] == as_list[-1]
    assert h[:2] == as_list[:2] and h[:2].doc_ids == ["b", "a"] and h[1:] == as_list[1:]
    assert h + Hits(["z"], [0.5], "dense") == as_list + [Hit("z", 0.5, 1, "dense")]
    assert [x.doc_id for x in Hits([], [], "dense")] == []


def test_candidates_read_and_store_as_the_dicts_they_replace():
    entries = [{"doc_id": "d1", "score": 2.0, "rank": 1, "lane": "bm25:0"},
               {"doc_id": "d0", "score": 1.5, "rank": 2, "lane": "bm25:0"},
               {"doc_id": "d1", "score": 0.0, "rank": 1, "lane": "fused"}]
    c = Candidates().add(["d1", "d0"], [2, 1.5], "bm25:0").add(["d1"], [0.0], "fused")
    assert list(c) == entries and c == entries and len(c) == 3 and c[2] == entries[2]
    both = Candidates(entries[:1])
    both += entries[1:]
    assert both == c
    rows = [c, [], entries[:2], Candidates(), None]  # columnar, dicts (an importer's), empty, missing
    got = Candidates.arrow(rows)
    want = pa.array([entries, [], entries[:2], [], None], pa.list_(CANDIDATE))
    assert got.equals(want) and got.to_pylist() == want.to_pylist()


def test_a_trace_table_from_columnar_candidates_equals_one_from_dicts():
    entries = [{"doc_id": f"d{i}", "score": 1.0 / (i + 1), "rank": i + 1, "lane": "dense:0"} for i in range(40)]
    rows = [{"arm_id": "a", "candidates": Candidates(entries[:n])} for n in (0, 1, 40)]
    table = rows_to_table(rows)
    assert table.schema == SCHEMA
    assert table["candidates"].to_pylist() == [entries[:0], entries[:1], entries]
