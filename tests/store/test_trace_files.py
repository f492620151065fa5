"""harness.store.traces.read_trace_file: a run's Parquet part and a session group's Arrow stream
(harness.metrics.groups.split_into) read alike, rankings as dictionary codes; a part's missing
column reads as nulls; an unreadable part names itself. RunFolder.labels: the segment labels of
each distinct text, a missing text none (it raised a TypeError)."""
from __future__ import annotations

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from harness.metrics.groups import compact, split_into
from harness.store.traces import RANKING, STREAM, SCHEMA, TraceError, TurnKey, has_rows, read_trace_file, row, \
    rows_to_table
from harness.arms.result import ArmResult


def _part(path, sessions, arm="a", row_group_size=None):
    rows = [row(TurnKey(run_id="r", arm_id=arm, arm=arm, session_id=s, turn_index=t, round=1, is_final=True),
                ArmResult(ranking=[f"{s}-{t}-{k}" for k in range(3)] + ["shared"]))
            for s in sessions for t in (1, 2)]
    pq.write_table(rows_to_table(rows), path, row_group_size=row_group_size)
    return path


def _plain(t: pa.Table) -> list[dict]:
    return t.cast(t.schema.set(t.schema.get_field_index("ranking"), pa.field("ranking", pa.list_(pa.string())))
                  ).to_pylist()


def test_a_group_stream_holds_its_sessions_rows_as_the_parts_hold_them(tmp_path):
    parts = [_part(tmp_path / "p0.parquet", ["s1", "s2", "s3"]), _part(tmp_path / "p1.parquet", ["s3", "s1"], "b")]
    files = split_into(parts, [["s1"], ["s2", "s3"], ["s9"]], tmp_path, "000")
    assert files[2] is None and all(f.suffix == STREAM and has_rows(f) for f in files[:2])
    whole = pa.concat_tables([read_trace_file(p) for p in parts])
    assert whole.schema.field("ranking").type == RANKING and whole.schema.names == SCHEMA.names
    for f, sessions in zip(files[:2], [{"s1"}, {"s2", "s3"}]):
        got = read_trace_file(f)
        assert got.schema.field("ranking").type == RANKING
        want = [r for r in _plain(whole) if r["session_id"] in sessions]
        assert _plain(got) == want  # every column, the parts' order
    assert read_trace_file(files[0], ["session_id", "ranking"]).column_names == ["session_id", "ranking"]


def test_each_group_stream_carries_only_the_ids_its_rows_list(tmp_path):
    """A replay's part has a row group per batch, sessions in no order: each row group's dictionary
    holds every id of its rows, and a group's stream keeps only the ones of its own rows."""
    sessions = [f"s{i}" for i in (5, 1, 4, 2, 3, 0)]
    p = _part(tmp_path / "p0.parquet", sessions, row_group_size=4)
    files = split_into([p], [["s0", "s1"], ["s2", "s3"], ["s4", "s5"]], tmp_path, "000")
    for f, mine in zip(files, [{"s0", "s1"}, {"s2", "s3"}, {"s4", "s5"}]):
        for chunk in read_trace_file(f).column("ranking").chunks:
            ids = set(chunk.values.dictionary.to_pylist())
            assert ids == {d for r in chunk.to_pylist() for d in r} and {i.split("-")[0] for i in ids} <= mine | {"shared"}
        assert {r["session_id"] for r in read_trace_file(f, ["session_id"]).to_pylist()} == mine


def test_compact_keeps_the_rankings_nulls_and_slices():
    text = pa.array([["a", "b", None], None, [], ["c", "a"], ["b"]], pa.list_(pa.string()))
    codes = pa.ListArray.from_arrays(text.offsets, text.values.dictionary_encode(), mask=text.is_null()).cast(RANKING)
    for arr in (codes, codes.slice(1, 3), codes.slice(3)):
        got = compact(pa.chunked_array([arr], RANKING))
        assert got.type == RANKING and got.to_pylist() == arr.to_pylist()
        assert sorted(got.chunk(0).values.dictionary.to_pylist()) == sorted({d for r in arr.to_pylist() if r
                                                                            for d in r if d is not None})


def test_a_part_lacking_a_column_reads_it_as_nulls_and_an_unreadable_one_is_named(tmp_path):
    p = _part(tmp_path / "p0.parquet", ["s1"])
    pq.write_table(pq.read_table(p).drop_columns(["verdict_reason"]), p)
    t = read_trace_file(p, ["session_id", "verdict_reason", "ranking"])
    assert t.column("verdict_reason").null_count == t.num_rows == 2
    assert t.column("ranking").to_pylist()[0] == ["s1-1-0", "s1-1-1", "s1-1-2", "shared"]
    bad = tmp_path / "traces" / "p1.parquet"
    bad.parent.mkdir()
    bad.write_bytes(b"not parquet")
    with pytest.raises(TraceError, match="p1.parquet: unreadable trace part"):
        read_trace_file(bad)
    empty = tmp_path / "p2.parquet"
    pq.write_table(SCHEMA.empty_table(), empty)
    assert not has_rows(empty)
    old = tmp_path / "p3.parquet"  # a part written before rankings were recorded
    pq.write_table(pq.read_table(p).drop_columns(["ranking"]), old)
    assert read_trace_file(old, ["ranking"]).column("ranking").to_pylist() == [None, None]


def test_labels_parse_each_segments_text_once_and_a_missing_one_has_no_segment(tmp_path):
    from harness.store.folder import LABEL_KEYS, LABELS, RunFolder

    texts = ['{"plan": "pro", "n": 2}', "", None, '{"plan": "free", "tags": [1, 2]}', '{"n": 2.5}'] * 3
    cols = {k: pa.array([f"s{i}" if k == "session_id" else None for i in range(len(texts))], pa.string())
            for k in LABEL_KEYS if k not in ("turn_index", "segments")}
    cols.update(turn_index=pa.array(range(len(texts)), pa.int64()), segments=pa.array(texts, pa.string()))
    pq.write_table(pa.table(cols), tmp_path / LABELS)
    got = RunFolder(tmp_path).labels()
    plan = got["seg.plan"].tolist()
    assert plan[0] == plan[5] == "pro" and plan[3] == "free" and all(pd.isna(plan[i]) for i in (1, 2, 4, 7))
    assert got["seg.n"].tolist()[:5][0] == 2 and got["seg.n"].tolist()[4] == 2.5
    assert got["seg.tags"].tolist()[3] == [1, 2] and got["seg.tags"].tolist()[8] == [1, 2]
    assert got["seg.n"].dtype == "float64"  # 2, 2.5 and missing: as a list of every row's values gives
    every = ['{"k": 1, "on": true}', '{"k": 2, "on": false}'] * 3  # no missing text: integers stay integers
    pq.write_table(pa.table({**{c: v.slice(0, 6) for c, v in cols.items() if c != "segments"},
                             "segments": pa.array(every, pa.string())}), tmp_path / LABELS)
    got = RunFolder(tmp_path).labels()
    assert got["seg.k"].dtype == "int64" and got["seg.on"].dtype == "bool" and got["seg.k"].tolist() == [1, 2] * 3
