"""Schemas a small model cannot run away with, replies cut at max_tokens, and roles asked for
fewer fields (issue 41): each role's strict schema carries per-field bounds without any endpoint
setting; a reply stopped at max_tokens is a named failure, never parsed, cached or repaired, and
counted per role; `fields:` asks the model for some fields and takes the rest offline."""
import asyncio

import pytest
from pydantic import BaseModel

from harness.config import ConfigError, load_config
from harness.errors import BadInput
from harness.llm.cache import LLMCache
from harness.llm.failures import count_key, cut_error, kind_of, llm_failures_line
from harness.llm.schema import strict_schema
from harness.roles.answer import AnswerOutput
from harness.roles.base import LLMConfig, Roles
from harness.roles.decide import Decision
from harness.roles.grade import GradeOutput
from harness.roles.hyde import HydeOutput
from harness.roles.rerank import RerankOutput
from harness.roles.rewrite import RewriteOutput
from harness.testing import TestServer

OUTPUTS = [RewriteOutput, Decision, HydeOutput, GradeOutput, RerankOutput, AnswerOutput]
REPLY = {"standalone": "probation notice period after the probation", "must_keep": ["probation"], "filters": [],
         "confidence": 0.9, "variants": [], "clarify": None}
OFFLINE = RewriteOutput(standalone="offline query", must_keep=[], filters=[], confidence=0.5,
                        variants=["v1", "v2"], clarify=None)


def test_the_rewrite_schema_bounds_its_fields_without_any_endpoint_setting():
    """The observation: with one global 200-character bound every SmolLM2 call ran to max_tokens;
    the rewrite's standalone query, identifiers and variants each have their own bound."""
    s = strict_schema(RewriteOutput)
    props = s["properties"]
    assert props["standalone"]["maxLength"] <= 200
    assert props["must_keep"]["maxItems"] <= 5 and props["must_keep"]["items"]["maxLength"] <= 40
    assert props["variants"]["maxItems"] <= 3 and props["variants"]["items"]["maxLength"] <= 200
    assert props["filters"]["maxItems"] <= 5
    assert s["$defs"]["FilterProposal"]["properties"]["field"]["maxLength"] <= 40


def _unbounded(node, path="", inside_any=False):
    """Paths of strings without maxLength and lists without maxItems (a union's members aside)."""
    out = []
    if isinstance(node, dict):
        if not inside_any and node.get("type") == "string" and "enum" not in node and "pattern" not in node \
                and "maxLength" not in node:
            out.append(path)
        if not inside_any and node.get("type") == "array" and "maxItems" not in node:
            out.append(path)
        for k, v in node.items():
            out += _unbounded(v, f"{path}.{k}", inside_any or k == "anyOf")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _unbounded(v, f"{path}.{i}", inside_any)
    return out


@pytest.mark.parametrize("model", OUTPUTS, ids=lambda m: m.__name__)
def test_every_role_schema_bounds_every_string_and_list(model):
    assert _unbounded(strict_schema(model)) == []


def test_bounds_ask_less_than_the_fields_accept_so_offline_values_still_validate():
    long = "x" * 300  # longer than a model is asked for, within what the offline rewrite may write
    assert RewriteOutput(standalone=long, must_keep=["a"] * 8, filters=[], confidence=0.5, variants=[], clarify=None)
    assert strict_schema(RewriteOutput)["properties"]["standalone"]["maxLength"] < len(long)


def test_an_endpoint_bound_applies_only_where_no_field_bounds():
    s = strict_schema(RewriteOutput, max_string_length=90, max_items=1)
    assert s["properties"]["standalone"]["maxLength"] == 150  # the field's own bound
    assert s["$defs"]["Clarify"]["properties"]["options"]["maxItems"] == 2

    class Free(BaseModel):  # a model of one's own without bounds: the endpoint's apply
        text: str
        tags: list[str]

    f = strict_schema(Free, max_string_length=90, max_items=1)["properties"]
    assert f["text"]["maxLength"] == 90 and f["tags"]["maxItems"] == 1 and f["tags"]["items"]["maxLength"] == 90


def roles(base_url: str, tmp_path, **ep) -> Roles:
    cfg = LLMConfig.model_validate({"cache": {"folder": str(tmp_path / "cache")}, "roles": {"rewrite": {
        "kind": "openai-compatible", "base_url": base_url, "model": "small", "max_retries": 0, "max_tokens": 64, **ep}}})
    return Roles(cfg, concurrency=2)


async def _call(r: Roles):
    try:
        return await r.call("rewrite", '{"turn": "And after it?"}', RewriteOutput, lambda: OFFLINE.model_copy())
    finally:
        await r.aclose()


def test_a_reply_cut_at_max_tokens_is_a_named_failure_never_cached_and_counted(tmp_path):
    with TestServer() as srv:
        srv.add_rule(REPLY)  # valid JSON: cut all the same
        srv.set_faults("length", rate=1.0)
        r = roles(srv.base_url, tmp_path)
        out = asyncio.run(_call(r))
        assert out.value is None and out.record.error.startswith("cut at max_tokens (")
        assert out.fallback.startswith("rewrite failed: cut at max_tokens")
        assert srv.calls == 1  # no repair: the model would run on again
        assert r.failures == {count_key("rewrite", "cut at max_tokens"): 1}
        r2 = roles(srv.base_url, tmp_path)
        asyncio.run(_call(r2))
        assert srv.calls == 2  # nothing was cached: asked again
    assert llm_failures_line(r.failures) == "rewrite 1 (cut at max_tokens 1)"


@pytest.mark.parametrize("error, kind", [
    ("cut at max_tokens (64 tokens)", "cut at max_tokens"), ("invalid JSON: Expecting value", "invalid JSON"),
    ("schema violation: standalone: Field required", "schema violation"), ("APITimeoutError: Request timed out.", "timeout"),
    ("InternalServerError 500: boom", "HTTP error"), ("APIConnectionError: Connection error.", "HTTP error"),
])
def test_failure_kinds(error, kind):
    assert kind_of(error) == kind


def test_a_reply_cut_before_max_tokens_names_the_context_window():
    """SmolLM2's judge prompts filled a 2048-token slot: 342 tokens of 1024 is no max_tokens cut."""
    assert cut_error(1024, 1024) == "cut at max_tokens (1024 tokens)"
    short = cut_error(342, 1024)
    assert short.startswith("cut at max_tokens (342 of 1024 tokens") and "context window" in short
    assert kind_of(short) == "cut at max_tokens"


def test_a_role_asked_for_fewer_fields_takes_the_rest_offline(tmp_path):
    with TestServer() as srv:
        srv.add_rule({"standalone": "probation notice period", "must_keep": []})
        r = roles(srv.base_url, tmp_path, fields=["standalone", "must_keep"])
        full = roles(srv.base_url, tmp_path)
        assert r.prompt("rewrite").hash != full.prompt("rewrite").hash  # two configs, two prompt refs
        asyncio.run(full.aclose())
        out = asyncio.run(_call(r))
        sent = [q.json for q in srv.requests if q.path.endswith("/chat/completions")][-1]
    schema = sent["response_format"]["json_schema"]
    assert schema["name"] == "RewriteOutput" and set(schema["schema"]["properties"]) == {"standalone", "must_keep"}
    assert sent["messages"][0]["content"].endswith("Write only these fields: standalone, must_keep.")
    assert out.value.standalone == "probation notice period" and out.value.variants == ["v1", "v2"]
    assert out.value.confidence == 0.5 and out.offline_fields == ("filters", "confidence", "variants", "clarify")


HEAD = "name: x\neval_set: eval_sets/b2b-shop\narms: [rewrite]\nllm:\n  roles:\n    rewrite:\n"


def test_an_unknown_field_is_located_with_a_suggestion(tmp_path):
    p = tmp_path / "run.yaml"
    p.write_text(HEAD + "      kind: openai-compatible\n      base_url: http://x.invalid/v1\n      model: m\n"
                 "      fields: [standalone, must_kep]\n")
    with pytest.raises(ConfigError) as e:
        load_config(p)
    assert isinstance(e.value, BadInput)  # exit 2
    msg = str(e.value).replace(str(p), "run.yaml")
    assert "run.yaml:10: llm.roles.rewrite.fields.1: unknown field 'must_kep' of the rewrite role; " \
           "did you mean 'must_keep'?" in msg, msg
