"""On MTRAG-UN the offline arms are distinct baselines (issue: offline roles as published methods):
`multi_query_rrf` (HQE, previous-turn expansion, RM3 fused) and `rewrite_hyde` with `hyde_scope: all`
(vector feedback) return a top 10 different from `rewrite`'s (HQE) on at least a third of the
turns with turn index >= 2. A quarter of the sessions (shard 1 of 4), the demo config's arms, the
shipped embedding cache (no query embedded here)."""
import pandas as pd
import pytest

from harness.config import load_config
from harness.corpus.embed import EmbeddingCache, make_embedder
from harness.corpus.index import Index
from harness.run.replay import Replay
from harness.run.traces import read_traces
from tests.conftest import ROOT


@pytest.fixture(scope="module")
def finals(tmp_path_factory) -> pd.DataFrame:
    tmp = tmp_path_factory.mktemp("mtrag")
    cfg, raw = load_config(ROOT / "configs/mtrag.yaml")
    raw = {**raw, "eval_set": str(ROOT / cfg.eval_set), "runs_dir": str(tmp),
           "arms": [a for a in raw["arms"] if (a if isinstance(a, str) else a["name"])
                    in ("rewrite", "multi_query_rrf", "rewrite_hyde")]}
    cfg = cfg.model_copy(update={"eval_set": raw["eval_set"], "runs_dir": str(tmp), "arms": raw["arms"]})
    rp = Replay(cfg, raw, run_dir=tmp / "run", progress=False, shard=(1, 4))
    cache = EmbeddingCache(ROOT / cfg.eval_set / "embeddings", write_to=tmp / "emb")
    index = Index(rp.es.docs, make_embedder(cfg.index.embedder), cache, max_chars=cfg.index.max_chars)
    run = rp.run(index=index)
    assert index.cache.misses == 0, "the shipped cache covers the demo config's queries"
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
