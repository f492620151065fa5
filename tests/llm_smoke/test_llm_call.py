"""The LLM layer against a real local model: llama.cpp's llama-server (docs/local-llm.md,
`make local-llm`, `make smoke-llm`): one structured call through LLMClient. It proves the
protocol (strict json_schema enforced by the server's grammar, parsed and validated by the
client, usage recorded), not the quality of what the model writes."""
import asyncio

from pydantic import BaseModel

from harness.llm.client import EndpointConfig, LLMClient

MAX_STRING_LENGTH = 200


class Standalone(BaseModel):
    standalone: str
    confidence: float


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
