"""Reliability (issue 9), property 7: concurrent writers share one LLM cache folder safely.

Several processes open the same cache folder at the same moment (creating the database and
switching it to WAL together) and write many distinct entries, some keys shared, while reading
each other's; afterwards every entry is there with the right body, nothing is lost, and SQLite's
integrity check passes. Two replays sharing a cache folder in two processes do the same through
the whole LLM layer."""
from __future__ import annotations

import json
import multiprocessing as mp
import sqlite3
import subprocess

import yaml

from harness.llm.cache import LLMCache, request_key
from harness.testing import TestServer
from tests.reliability_helpers import HARNESS, b2b_slice, embeddings_copy, endpoint, model_reply
from tests.reliability_helpers import loopback_only  # noqa: F401  (autouse: loopback only)

WRITERS, KEYS, SHARED = 4, 300, 50


def body(key: str) -> bytes:
    return b'{"choices":[{"message":{"content":"' + key.encode() + b'"}}],"pad":"' + b"x" * 2000 + b'"}'


def writer(folder: str, w: int, start, out) -> None:
    start.wait()  # every process opens the folder at the same moment
    cache = LLMCache(folder)
    keys = [request_key("openai-compatible", "/v1/chat/completions", {"w": w, "i": i}) for i in range(KEYS)]
    shared = [request_key("openai-compatible", "/v1/chat/completions", {"shared": i}) for i in range(SHARED)]
    missing = 0
    for i, k in enumerate(keys):
        cache.put(k, body(k), latency_ms=1.0, kind="openai-compatible", model="m", role="rewrite")
        if i < SHARED:
            cache.put(shared[i], body(shared[i]), latency_ms=1.0)
        got = cache.get(k)  # read your own write at once
        missing += got is None or got.body != body(k)
        other = request_key("openai-compatible", "/v1/chat/completions", {"w": (w + 1) % WRITERS, "i": i})
        hit = cache.get(other)  # and another writer's, when it is already there
        missing += hit is not None and hit.body != body(other)
    out.put((w, missing))


def test_concurrent_writers_neither_corrupt_the_cache_nor_lose_entries(tmp_path):
    ctx = mp.get_context("spawn")  # fresh interpreters: no connection inherited through fork
    start, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=writer, args=(str(tmp_path), w, start, out)) for w in range(WRITERS)]
    for p in procs:
        p.start()
    start.set()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0] * WRITERS
    results = dict(out.get(timeout=5) for _ in procs)
    assert results == {w: 0 for w in range(WRITERS)}

    with sqlite3.connect(tmp_path / "llm_cache.sqlite") as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        rows = dict(db.execute("SELECT key, body FROM replies").fetchall())
    assert len(rows) == WRITERS * KEYS + SHARED
    assert all(bytes(b) == body(k) for k, b in rows.items())
    assert len(LLMCache(tmp_path)) == WRITERS * KEYS + SHARED


def test_two_runs_at_once_share_a_cache_folder(tmp_path):
    """Two `harness run` processes with different LLM requests fill one cache folder at once;
    then a third run of each config in replay mode finds every request there."""
    root = b2b_slice(tmp_path / "b2b-slice", sessions=("b2b-t01", "b2b-t02", "b2b-t04"))
    cache = tmp_path / "shared-cache"
    with TestServer(latency=0.02) as srv:
        srv.add_rule(model_reply)
        paths = []
        for i, last_n in enumerate((2, 4)):  # last_n changes every rewrite request: disjoint keys
            cfg = {"name": f"c{i}", "eval_set": str(root), "splits": ["test"], "runs_dir": str(tmp_path / "runs"),
                   "index": {"embedding_cache": str(embeddings_copy())}, "concurrency": 8,
                   "arms": [{"name": "rewrite", "lane": "bm25", "last_n": last_n},
                            {"name": "multi_query_rrf", "lane": "bm25", "last_n": last_n}],
                   "llm": {"cache": {"folder": str(cache), "mode": "readwrite"}, "roles": {"rewrite": endpoint(srv)}}}
            paths.append(tmp_path / f"c{i}.yaml")
            paths[-1].write_text(yaml.safe_dump(cfg), encoding="utf-8")
        procs = [subprocess.Popen([str(HARNESS), "run", str(p), "--no-progress", "--no-metrics"], cwd=tmp_path,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for p in paths]
        errs = [p.communicate(timeout=300)[1] for p in procs]
        assert [p.returncode for p in procs] == [0, 0], errs
        asked = {json.dumps(r.json, sort_keys=True) for r in srv.requests}
    with sqlite3.connect(cache / "llm_cache.sqlite") as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        n = db.execute("SELECT COUNT(*) FROM replies").fetchone()[0]
    assert n == len(asked) > 0  # one entry per distinct request, none lost
    for p in paths:  # the server is gone: replay mode must find everything in the cache
        cfg = yaml.safe_load(p.read_text())
        cfg["llm"]["cache"]["mode"] = "replay"
        p.write_text(yaml.safe_dump(cfg), encoding="utf-8")
        r = subprocess.run([str(HARNESS), "run", str(p), "--no-progress", "--no-metrics"], cwd=tmp_path,
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
