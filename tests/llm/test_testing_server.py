"""The scripted OpenAI-compatible test server, driven by the real ``openai`` SDK."""
import asyncio
import json
import threading
import time

import httpx
import openai
import pydantic
import pytest

from harness.errors import BadInput
from harness.testing import FAULTS, Script, TestServer, prompt_hash

USER = [{"role": "user", "content": "how many holiday days do I get"}]


@pytest.fixture
def srv():
    with TestServer() as server:
        yield server


def client(srv, **kw):
    return openai.OpenAI(base_url=srv.base_url, api_key="test-key", max_retries=0, **kw)


def aclient(srv, **kw):
    return openai.AsyncOpenAI(base_url=srv.base_url, api_key="test-key", max_retries=0, **kw)


def chat(srv, messages=USER, **kw):
    with client(srv) as c:
        return c.chat.completions.create(model="test-model", messages=messages, **kw)


def test_scripted_json_reply_is_parsed_with_realistic_envelope(srv):
    srv.add_rule({"standalone": "holiday days per year"}, user="holiday")
    resp = chat(srv)
    assert json.loads(resp.choices[0].message.content) == {"standalone": "holiday days per year"}
    assert resp.choices[0].message.role == "assistant" and resp.choices[0].finish_reason == "stop"
    assert resp.id.startswith("chatcmpl-") and resp.model == "test-model" and resp.created > 0
    assert resp.usage.prompt_tokens == 7 and resp.usage.completion_tokens == 5 and resp.usage.total_tokens == 12
    assert srv.calls == 1 and srv.requests[0].path == "/v1/chat/completions"


def test_default_reply_json_mode_and_models(srv):
    assert chat(srv).choices[0].message.content == "OK"
    assert chat(srv, response_format={"type": "json_object"}).choices[0].message.content == "{}"
    schema = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}}
    assert chat(srv, response_format=schema).choices[0].message.content == "{}"
    srv.script.default_reply = "fallback"
    assert chat(srv).choices[0].message.content == "fallback"
    with client(srv) as c:
        assert [m.id for m in c.models.list()] == ["test-model", "test-embedding"]


def test_reply_chosen_by_system_prompt_hash(srv):
    v1, v2 = "Rewrite the question. v1", "Rewrite the question as a standalone query. v2"
    assert prompt_hash(v1) != prompt_hash(v2) and len(prompt_hash(v1)) == 12
    srv.add_rule({"standalone": "from v1"}, prompt_hash=prompt_hash(v1))
    srv.add_rule({"standalone": "from v2"}, prompt_hash=prompt_hash(v2))
    for prompt, expected in ((v1, "from v1"), (v2, "from v2")):
        resp = chat(srv, [{"role": "system", "content": prompt}, *USER])
        assert json.loads(resp.choices[0].message.content)["standalone"] == expected


def test_matchers_combine_and_first_match_wins():
    script = Script(default_reply="none")
    first = script.add("system+model", system="Rewrite", model="m-a")
    script.add("system only", system="Rewrite")
    script.add("predicate", when=lambda req: req.get("temperature") == 0)
    with TestServer(script=script) as srv, client(srv) as c:
        def ask(model, system="Rewrite please", **kw):
            msgs = [{"role": "system", "content": system}, *USER]
            return c.chat.completions.create(model=model, messages=msgs, **kw).choices[0].message.content
        assert ask("m-a") == "system+model"
        assert ask("m-b") == "system only"
        assert ask("m-b", system="Answer", temperature=0) == "predicate"
        assert ask("m-b", system="Answer") == "none"
        assert first.hits == 1


def test_seed_dependent_callable_reply(srv):
    srv.add_rule(lambda req: {"standalone": f"variant {req.get('seed', 0) % 3}"})
    replies = [json.loads(chat(srv, seed=s).choices[0].message.content)["standalone"] for s in (0, 1, 2, 3)]
    assert replies == ["variant 0", "variant 1", "variant 2", "variant 0"]


def test_tool_call_reply(srv):
    srv.add_rule([{"name": "Rewrite", "arguments": {"standalone": "holiday days", "confidence": 0.9}}])
    tools = [{"type": "function", "function": {"name": "Rewrite", "parameters": {"type": "object"}}}]
    resp = chat(srv, tools=tools, tool_choice={"type": "function", "function": {"name": "Rewrite"}})
    choice = resp.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    call = choice.message.tool_calls[0]
    assert call.type == "function" and call.function.name == "Rewrite" and call.id.startswith("call_")
    assert json.loads(call.function.arguments) == {"standalone": "holiday days", "confidence": 0.9}


def test_429_with_and_without_retry_after(srv):
    srv.set_faults("429", retry_after="0.05")
    with pytest.raises(openai.RateLimitError) as err:
        chat(srv)
    assert err.value.status_code == 429 and err.value.response.headers["retry-after"] == "0.05"
    srv.set_faults("429_no_retry_after")
    with pytest.raises(openai.RateLimitError) as err:
        chat(srv)
    assert "retry-after" not in err.value.response.headers


def test_500(srv):
    srv.set_faults("500")
    with pytest.raises(openai.InternalServerError):
        chat(srv)


def test_hang_times_out_and_stop_does_not_wait_for_it():
    srv = TestServer(hang_seconds=30).start()
    srv.set_faults("hang")
    t0 = time.monotonic()
    with pytest.raises(openai.APITimeoutError), client(srv, timeout=0.3) as c:
        c.chat.completions.create(model="test-model", messages=USER)
    assert time.monotonic() - t0 < 2 and srv.in_flight == 1  # the server is still "thinking"
    srv.stop()
    assert time.monotonic() - t0 < 3


def test_connection_reset(srv):
    srv.set_faults("reset")
    with pytest.raises(openai.APIConnectionError) as err:
        chat(srv)
    assert not isinstance(err.value, openai.APITimeoutError)
    srv.set_faults()
    assert chat(srv).choices[0].message.content == "OK"  # the server survives


def test_content_faults(srv):
    class Rewrite(pydantic.BaseModel):
        standalone: str
    srv.add_rule({"standalone": "x"})
    srv.set_faults("invalid_json")
    content = chat(srv).choices[0].message.content
    assert content == '{"standalone": "x"'  # returned as-is, cut off
    with pytest.raises(json.JSONDecodeError):
        json.loads(content)
    srv.set_faults("bad_schema")
    broken = json.loads(chat(srv).choices[0].message.content)  # valid JSON ...
    with pytest.raises(pydantic.ValidationError):  # ... of the wrong shape
        Rewrite.model_validate(broken)
    srv.set_faults("empty_choices")
    resp = chat(srv)
    assert resp.choices == [] and resp.usage.prompt_tokens > 0


def test_faults_per_rule_rate_seed_and_times():
    def outcomes(seed):
        with TestServer(seed=seed) as srv, client(srv) as c:
            srv.set_faults("500", "429", rate=0.5)
            out = []
            for _ in range(20):
                try:
                    c.chat.completions.create(model="test-model", messages=USER)
                    out.append("ok")
                except openai.APIStatusError as e:
                    out.append(e.status_code)
            return out
    first = outcomes(7)
    assert first == outcomes(7) and {"ok", 500, 429} <= set(first)
    with TestServer() as srv:
        flaky = srv.add_rule("flaky ok", user="flaky", fault="500", fault_times=2)
        srv.add_rule("fine")
        with client(srv) as c:
            for expected in ("500", "500", "flaky ok"):
                try:
                    got = c.chat.completions.create(
                        model="m", messages=[{"role": "user", "content": "flaky"}]).choices[0].message.content
                except openai.InternalServerError:
                    got = "500"
                assert got == expected
        assert flaky.hits == 3 and chat(srv).choices[0].message.content == "fine"
        # SDK retries honour a fractional Retry-After: two 429s, then success.
        srv.set_faults("429", times=2, retry_after="0.05")
        with openai.OpenAI(base_url=srv.base_url, api_key="k", max_retries=2) as c:
            assert c.chat.completions.create(model="m", messages=USER).choices[0].message.content == "fine"
    with pytest.raises(BadInput):
        TestServer().set_faults("teapot")


def test_embeddings_are_deterministic(srv):
    with client(srv) as c:
        a = c.embeddings.create(model="test-embedding", input=["holiday", "travel", "holiday"])  # base64 path
        b = c.embeddings.create(model="test-embedding", input="holiday", encoding_format="float")
        wide = c.embeddings.create(model="test-embedding", input="holiday", dimensions=32)
    vecs = [d.embedding for d in a.data]
    assert len(vecs[0]) == 8 and vecs[0] == vecs[2] and vecs[0] != vecs[1]
    assert vecs[0] == pytest.approx(b.data[0].embedding, abs=1e-6)  # float32 over base64
    assert b.data[0].embedding == srv.embed("holiday")
    assert sum(x * x for x in b.data[0].embedding) == pytest.approx(1.0)
    assert len(wide.data[0].embedding) == 32
    with TestServer(embedding_dim=16) as other, client(other) as c:
        again = c.embeddings.create(model="e", input="holiday", encoding_format="float").data[0].embedding
    assert again[:8] != b.data[0].embedding and again == srv.embed("holiday", 16)


def test_paths_without_v1_prefix(srv):
    root = srv.base_url.removesuffix("/v1")
    r = httpx.post(f"{root}/chat/completions", json={"model": "m", "messages": USER})
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "OK"
    assert httpx.post(f"{root}/embeddings", json={"input": "x"}).json()["data"][0]["index"] == 0
    assert httpx.post(f"{root}/chat/completions", content=b"not json").status_code == 400


async def _burst(srv, n, limit=None):
    sem = asyncio.Semaphore(limit or n)
    async with aclient(srv) as c:
        async def one(i):
            async with sem:
                r = await c.chat.completions.create(model="m", messages=[{"role": "user", "content": f"q{i}"}])
                return r.choices[0].message.content
        return await asyncio.gather(*(one(i) for i in range(n)))


def test_peak_in_flight_under_concurrency():
    # the latency must outlast starting 64 connections on a busy 2-core machine
    with TestServer(latency=1.5) as srv:
        assert asyncio.run(_burst(srv, 64)) == ["OK"] * 64
        assert srv.calls == 64 and srv.peak_in_flight == 64 and srv.in_flight == 0
        srv.reset_stats()
        assert srv.calls == 0 and srv.peak_in_flight == 0 and srv.requests == []
        srv.latency = 0.5
        asyncio.run(_burst(srv, 64, limit=8))
        assert srv.calls == 64 and srv.peak_in_flight == 8


def test_256_concurrent_connections():
    with TestServer(latency=2.0) as srv:  # outlasts starting 256 connections on a busy machine
        assert len(asyncio.run(_burst(srv, 256))) == 256
        assert srv.peak_in_flight == 256


def test_credentials_are_redacted_in_request_log(srv):
    with client(srv, default_headers={"api-key": "azure-secret"}) as c:
        c.chat.completions.create(model="test-model", messages=USER)
    (rec,) = srv.requests
    assert rec.headers["authorization"] == "***" and rec.headers["api-key"] == "***"
    assert rec.json["messages"] == USER and rec.method == "POST"
    assert not any("test-key" in v or "azure-secret" in v for v in rec.headers.values())


def test_stops_cleanly_without_leftover_threads():
    before = set(threading.enumerate())
    srv = TestServer().start()
    chat(srv)
    srv.stop()
    srv.stop()  # idempotent
    assert set(threading.enumerate()) == before
    assert set(FAULTS) >= {"429", "500", "hang", "reset", "invalid_json", "bad_schema", "empty_choices"}
