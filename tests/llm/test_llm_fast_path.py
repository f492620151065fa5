"""The LLM client's per-call shortcuts give what the long way gives: the SDK's public `post`
sends the body serialised once, the cache key from the request's one serialisation equals
`request_key`, and replies written behind in batches all reach the database."""
import asyncio

import httpx2
import pytest

from harness.llm.cache import LLMCache, canonical_json, key_of_json, request_key


@pytest.mark.parametrize("body", [{"model": "m", "messages": [{"role": "user", "content": "Grüße \u2028 \"x\""}],
                                   "temperature": 0.0, "seed": 3, "response_format": {"type": "json_schema", "z": [1, None]}},
                                  {}])
def test_the_key_from_the_serialised_request_equals_request_key(body):
    import hashlib
    import json

    # the key caches were written under: sha256 of the whole request serialised canonically
    whole = {"kind": "azure", "path": "/openai/v1/chat/completions", "body": body}
    stored = hashlib.sha256(json.dumps(whole, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()).hexdigest()
    assert key_of_json("azure", "/openai/v1/chat/completions", canonical_json(body)) == \
           request_key("azure", "/openai/v1/chat/completions", body) == stored


def test_a_body_with_a_value_serialised_before_serialises_the_same():
    from harness.llm.client import _format
    from harness.roles.rewrite import RewriteOutput

    fmt, text = _format(RewriteOutput, None, None)
    body = {"model": "m", "messages": [{"role": "user", "content": "ä", "b": {"z": 1, "a": 2}}], "response_format": fmt,
            "seed": 1, "x": {"k": [{"y": 1, "b": None}]}}
    assert canonical_json(body, {"response_format": (fmt, text)}) == canonical_json(body)
    other = {**body, "response_format": dict(fmt)}  # an equal dict, not the one serialised before: serialised again
    assert canonical_json(other, {"response_format": (fmt, "WRONG")}) == canonical_json(body)


def test_replies_written_behind_in_batches_all_reach_the_database(tmp_path):
    cache = LLMCache(tmp_path)
    for i in range(500):
        cache.put_later(f"k{i}", b'{"i": %d}' % i, float(i), kind="openai-compatible", model="m", role="rewrite")
    assert cache.get("k499").body == b'{"i": 499}'
    cache.flush()
    other = LLMCache(tmp_path)
    assert len(other) == 500 and other.get("k7").latency_ms == 7.0 and other.get("k7").body == b'{"i": 7}'
    cache.put_later("k7", b'{"i": "again"}', 1.0)  # a later write of a key wins
    cache.flush()
    assert LLMCache(tmp_path).get("k7").body == b'{"i": "again"}'


def test_a_failed_batch_raises_at_flush_and_later_writes_still_happen(tmp_path):
    cache = LLMCache(tmp_path)
    cache.put_later("ok", b"{}", 1.0)
    cache.flush()
    cache.put_later("bad", None, 1.0)  # body NOT NULL: the batch fails
    with pytest.raises(Exception):
        cache.flush()
    cache.put_later("after", b"{}", 2.0)
    cache.flush()
    assert LLMCache(tmp_path).get("after") is not None and cache.get("bad") is None


def test_the_sdks_public_post_sends_the_serialised_body(tmp_path):
    from harness.testing import TestServer

    async def go(base):
        import openai

        sdk = openai.AsyncOpenAI(api_key="k", base_url=base, max_retries=0, http_client=httpx2.AsyncClient())
        try:
            return [await sdk.post("/chat/completions", cast_to=httpx2.Response, content=b'{"model":"m","n":%d}' % i,
                                   options={"headers": {"x-harness-role": "rewrite"}}) for i in range(3)]
        finally:
            await sdk.close()

    with TestServer() as s:
        s.add_rule({"x": 1})
        out = asyncio.run(go(s.base_url))
        assert s.calls == 3 and [r.json["n"] for r in s.requests] == [0, 1, 2]
    assert all(r.status_code == 200 for r in out)


def test_a_structured_call_is_kept_under_the_key_of_the_request_the_endpoint_received(tmp_path):
    """The role's prompt is serialised once per process (and its schema): the key a reply is kept
    under must still be request_key of the very request sent, and the cached reply (parsed
    without its marker-free body going through json.loads) must give the same value."""
    import sqlite3

    from pydantic import BaseModel

    from harness.llm.client import EndpointConfig, LLMClient
    from harness.testing.server import TestServer

    class Out(BaseModel):
        x: int

    SYSTEM = "Système \"prompt\"\n\u2028"

    async def go(base, user):
        c = LLMClient(EndpointConfig(kind="openai-compatible", base_url=base, model="m", max_retries=0),
                      LLMCache(tmp_path, "readwrite"))
        try:
            return await c.structured("judge", SYSTEM, user, Out)
        finally:
            c.cache.flush()
            await c.aclose()

    with TestServer() as s:
        s.add_rule({"x": 3})
        first = [asyncio.run(go(s.base_url, u)) for u in ("ä \"q\"", "second")]
        sent = [r.json for r in s.requests]
        assert [b["messages"][:2] for b in sent] == [[{"role": "system", "content": SYSTEM}, {"role": "user", "content": u}]
                                                    for u in ("ä \"q\"", "second")]
        again = asyncio.run(go(s.base_url, "ä \"q\""))
        assert s.calls == 2  # the third call was answered by the cache
    keys = {k for (k,) in sqlite3.connect(tmp_path / "llm_cache.sqlite").execute("SELECT key FROM replies")}
    assert keys == {request_key("openai-compatible", "/v1/chat/completions", b) for b in sent}
    assert first[0].value == again.value == Out(x=3) and again.record.cache_hit and not first[0].record.cache_hit
