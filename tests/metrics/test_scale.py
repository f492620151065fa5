"""Scoring at scale (issue 45): per-turn string columns that a single Arrow array could not hold
(200,000 turns x 5 arms: the arm id repeated past 2 GB, `Take operation overflowed binary array
capacity`), forced at a small size through the decoder's chunk size."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from harness.metrics.compute import MetricsResult, write_metrics
from harness.metrics.kernel import Long, decoded, to_frame
from harness.store.folder import AGG_COLUMNS
import pandas as pd


def _long(n: int) -> Long:
    rng = np.random.default_rng(0)
    return Long(arm=rng.integers(0, 2, n), rep=np.zeros(n, np.int64), sess=rng.integers(0, 3, n),
                tix=np.arange(n, dtype=np.int64), metric=np.zeros(n, np.int64), value=rng.random(n),
                unm=np.array([None] * n, object))


ARMS, SESSIONS = ["original(depth=100)", "rewrite(model=m)"], ["s0", "s1", "s2"]


def test_decoded_strings_are_large_and_chunked():
    codes = np.array([0, 1, 1, 0, 1, 0, 0], np.int64)
    arr = decoded(codes, ARMS, chunk_rows=3)
    assert arr.type == pa.large_string()  # 64-bit offsets: no 2 GB bound on one chunk's text
    assert [len(c) for c in arr.chunks] == [3, 3, 1]
    assert arr.to_pylist() == [ARMS[i] for i in codes]


def test_per_turn_frame_holds_its_strings_in_chunks():
    long = _long(11)
    want = [ARMS[i] for i in long.cols["arm"]], [SESSIONS[i] for i in long.cols["sess"]]
    frame = to_frame(long, ARMS, SESSIONS, ["recall@10"], chunk_rows=4)
    column = pa.Table.from_pandas(frame, preserve_index=False).column("arm_id")
    assert column.num_chunks == 3 and pa.types.is_large_string(column.type)
    assert frame["arm_id"].tolist() == want[0] and frame["session_id"].tolist() == want[1]
    assert set(frame["metric"]) == {"recall@10"}


def test_chunked_frame_writes_the_metrics_file(tmp_path):
    (tmp_path / "manifest.json").write_text("{}")
    frame = to_frame(_long(9), ARMS, SESSIONS, ["recall@10"], chunk_rows=2)
    agg = pd.DataFrame([[ARMS[0], "recall@10", "all", 0.5, 0.5, 0.9, 9, 0, 3, np.nan]], columns=AGG_COLUMNS)
    res = MetricsResult(frame, agg, ARMS, ["recall@10"])
    path = write_metrics(tmp_path, res, chunk_rows=4)
    back = pq.read_table(path).to_pandas()
    turns = back[back["kind"] == "turn"]
    assert turns["arm_id"].tolist() == frame["arm_id"].tolist()
    assert turns["value"].tolist() == frame["value"].tolist()
