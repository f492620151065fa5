"""On MTRAG-UN the offline arms are distinct baselines (issue: offline roles as published methods):
`multi_query_rrf` (HQE, previous-turn expansion, RM3 fused) and `rewrite_hyde` with `hyde_scope: all`
(vector feedback) return a top 10 different from `rewrite`'s (HQE) on at least a third of the
turns with turn index >= 2. A quarter of the sessions (shard 1 of 4), the demo config's arms, the
shipped embedding cache (no query embedded here)."""
import pandas as pd
import pytest

from harness.store.traces import read_traces
from tests.evalset.test_written_sets_behave import replay


@pytest.fixture(scope="module")
def finals(tmp_path_factory) -> pd.DataFrame:
    run, _ = replay("configs/mtrag.yaml", tmp_path_factory.mktemp("mtrag"),
                    arms=("rewrite", "multi_query_rrf", "rewrite_hyde"), shard=(1, 4))
    t = read_traces(run).to_pandas()
    return t[t["is_final"] & (t["turn_index"] >= 2)]


@pytest.mark.parametrize("arm", ["multi_query_rrf", "rewrite_hyde"])
def test_the_arm_differs_from_rewrite_on_a_third_of_the_follow_ups(finals, arm):
    top = {a: {(r.session_id, r.turn_index): tuple(r.ranking[:10]) for r in g.itertuples()}
           for a, g in finals.groupby("arm")}
    keys = sorted(top["rewrite"])
    assert len(keys) >= 50
    differ = sum(top[arm][k] != top["rewrite"][k] for k in keys)
    assert differ >= len(keys) / 3, f"{arm}: {differ} of {len(keys)}"
    if arm == "rewrite_hyde":
        notes = finals[finals["arm"] == arm]["verdict_reason"].dropna()
        assert len(notes) == len(keys) and notes.str.contains("HyDE (offline: vector feedback", regex=False).all()
