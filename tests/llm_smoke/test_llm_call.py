"""The LLM layer against a real local model: llama.cpp's llama-server (see docs/local-llm.md,
`make local-llm`). Runs only where that server is running and HARNESS_LOCAL_LLM_URL names it,
e.g. HARNESS_LOCAL_LLM_URL=http://127.0.0.1:8088/v1; skipped otherwise. The model is a small
base model: this proves the protocol (strict json_schema enforced by the server's grammar,
parsed and validated by the client, usage recorded), not the quality of what it writes."""
import asyncio
import os
from urllib.parse import urlsplit

import httpx
import pytest
from pydantic import BaseModel

from harness.llm.client import EndpointConfig, LLMClient

ENV = "HARNESS_LOCAL_LLM_URL"
MAX_STRING_LENGTH = 200


class Standalone(BaseModel):
    standalone: str
    confidence: float


def _server_root(base_url: str) -> str:
    """http://127.0.0.1:8088/v1 -> http://127.0.0.1:8088 (llama-server's /health is at the root)."""
    parts = urlsplit(base_url.rstrip("/"))
    path = parts.path[:-3] if parts.path.endswith("/v1") else parts.path
    return f"{parts.scheme}://{parts.netloc}{path}"


@pytest.fixture(scope="module")
def local_llm() -> tuple[str, str]:
    """(base_url, model) of a running local server, or skip with the reason."""
    base_url = os.environ.get(ENV, "").strip()
    if not base_url:
        pytest.skip(f"{ENV} is not set: start llama-server with `make local-llm` and set "
                    f"{ENV}=http://127.0.0.1:8088/v1 to run this test")
    root = _server_root(base_url)
    try:
        health = httpx.get(f"{root}/health", timeout=3.0)
    except httpx.HTTPError as e:
        pytest.skip(f"{ENV}={base_url}: no answer from {root}/health ({type(e).__name__}); is llama-server running?")
    if health.status_code != 200:
        pytest.skip(f"{ENV}={base_url}: {root}/health answered {health.status_code} (server not ready)")
    model = os.environ.get("HARNESS_LOCAL_LLM_MODEL", "").strip()
    if not model:
        models = httpx.get(f"{base_url.rstrip('/')}/models", timeout=5.0).json()
        model = models["data"][0]["id"]  # the name llama-server reports (its --alias)
    return base_url, model


def test_structured_call_against_local_llama_server(local_llm):
    base_url, model = local_llm
    endpoint = EndpointConfig(kind="openai-compatible", base_url=base_url, model=model,
                              max_string_length=MAX_STRING_LENGTH, max_tokens=512, timeout=120, max_retries=1)

    async def call():
        client = LLMClient(endpoint, cache=None)  # no cache: every call reaches the server
        try:
            return await client.structured(
                "rewrite",
                "Rewrite the user's last turn as a standalone search query. "
                "Reply with JSON: standalone (the query), confidence (0 to 1).",
                "Earlier: how many holiday days do I get? Last turn: and for travel by train?",
                Standalone, seed=1)
        finally:
            await client.aclose()

    result = asyncio.run(call())
    assert result.record.error is None, (result.record.error, result.raw)
    assert isinstance(result.value, Standalone)
    assert Standalone.model_validate_json(result.raw) == result.value
    assert len(result.value.standalone) <= MAX_STRING_LENGTH  # the grammar enforced maxLength
    assert result.record.model == model
    assert result.record.prompt_tokens > 0 and result.record.completion_tokens > 0
    assert result.record.attempts == 1
