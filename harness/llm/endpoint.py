"""An LLM endpoint as a run config names it (`llm.roles.ROLE`, the judge's): a pydantic model
without the openai SDK, so that parsing a config, and a run whose roles are all offline, never
import the SDK (harness.llm.client does, when a role has an endpoint)."""
from __future__ import annotations

import os
from typing import Any, Literal

from pydantic import Field

from harness.errors import BadInput
from harness.strict import Strict


class EndpointConfig(Strict):
    """One endpoint. Keys come from the environment only, never from a config file."""

    kind: Literal["openai", "azure", "openai-compatible"]
    model: str  # Azure: the deployment name
    base_url: str | None = None  # openai-compatible: required; azure: default $AZURE_OPENAI_BASE_URL
    api_key_env: str | None = None  # name of the variable holding the key (default per kind)
    timeout: float = Field(default=60.0, gt=0)
    max_retries: int = Field(default=4, ge=0)
    backoff_base: float = Field(default=0.5, ge=0)
    backoff_max: float = Field(default=20.0, ge=0)
    rpm: int | None = Field(default=None, ge=1)
    tpm: int | None = Field(default=None, ge=1)
    temperature: float = 0.0
    max_tokens: int = 512
    max_string_length: int | None = None  # adds maxLength to schema strings (llama.cpp grammars)
    max_items: int | None = None  # adds maxItems to schema lists (llama.cpp grammars)
    extra_body: dict[str, Any] = Field(default_factory=dict)

    def key_env(self) -> str | None:
        if self.api_key_env:
            return self.api_key_env
        return {"openai": "OPENAI_API_KEY", "azure": "AZURE_OPENAI_API_KEY"}.get(self.kind)

    def resolved_base_url(self) -> str | None:
        """The URL the client calls, its ${VARIABLES} expanded here for every role and step (a run
        config, the judge's and relevance's endpoints read back from a manifest)."""
        url = os.path.expandvars(self.base_url) if self.base_url else None
        if url and "$" in url:
            raise BadInput(f"base_url {self.base_url!r}: an environment variable it names is not set")
        if self.kind == "azure":
            url = url or os.environ.get("AZURE_OPENAI_BASE_URL")
            if not url:
                raise BadInput("azure endpoint: set AZURE_OPENAI_BASE_URL or base_url (…/openai/v1/)")
            return url
        if self.kind == "openai-compatible" and not url:
            raise BadInput("openai-compatible endpoint needs base_url")
        return url
