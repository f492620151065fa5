"""The gate's and compare's `identical rankings on every turn` (harness.analysis.unchanged) from
digests of each final trace row, read a part at a time (issue 45 item 3: every final row's ranking as
text took 4.7 GB for 10^5 turns x 5 arms)."""
from __future__ import annotations

import shutil

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from harness.analysis.final_rows import final_rows, ranking_digests, same_rows
from harness.store.folder import RunData
from tests.conftest import ROOT


def test_ranking_digests_tell_every_difference_apart():
    """The gate's `identical rankings` from digests per final row (not every row's ranking as text):
    a difference past the 64th document, a prefix, an order, a null ranking against an empty one."""
    long = [f"d{i}" for i in range(100)]
    rows = [long, long[:99] + ["x"], long[:99], long[1:] + long[:1], [], None, ["a", "b"], ["b", "a"], ["a", None],
            ["a", "b"], long]
    first, second = (d.to_pylist() for d in ranking_digests(pa.chunked_array([pa.array(rows, pa.list_(pa.string()))])))
    keys = list(zip(first, second))
    assert keys[0] == keys[10] and keys[6] == keys[9]  # equal lists, equal digests, wherever they sit
    distinct = [keys[i] for i in (0, 1, 2, 3, 4, 5, 6, 7, 8)]
    assert len(set(distinct)) == len(distinct) and keys[5] == (None, None)


def test_a_ranking_changed_at_its_last_document_is_not_identical(tmp_path):
    base, cand = tmp_path / "base", tmp_path / "cand"
    shutil.copytree(ROOT / "runs/baselines/b2b", base)
    shutil.copytree(base, cand)
    part = sorted((cand / "traces").glob("*.parquet"))[0]
    t = pq.read_table(part)
    rows = t.to_pylist()
    i = next(i for i, r in enumerate(rows) if r["is_final"] and r["ranking"] and len(r["ranking"]) > 64)
    rows[i]["ranking"] = rows[i]["ranking"][:-1] + ["not-the-last-document"]
    pq.write_table(pa.Table.from_pylist(rows, t.schema), part)
    arm = rows[i]["arm_id"]
    a, b = RunData.load(base, scored=False), RunData.load(cand, scored=False)
    arms = {x.arm_id for x in a.arms}
    ta, tb = final_rows(a, arms), final_rows(b, arms)
    for x in arms:
        same = same_rows(ta.filter(pc.equal(ta["arm_id"], x)), tb.filter(pc.equal(tb["arm_id"], x)))
        assert same == (x != arm), x
