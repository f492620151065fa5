"""The openai SDK client the LLM layer sends through, with its request building done once.

Every request of the LLM layer is the same but for its body: a POST of serialised JSON to one
path with the role's header. The SDK builds each one from scratch (its default and platform
headers, the URL merged with the base URL, then httpx's own header merging and URL parsing),
most of the client's CPU per call. Here the first request of each
(path, headers, retry count, timeout) is built the SDK's way and kept as a template; later ones
copy its URL, headers (Host and Content-Length recomputed by httpx) and extensions, with their
own body. Anything else takes the SDK's path unchanged: JSON bodies, files, query parameters (a
library's own calls through our client), an idempotency header, a key provider or provider
runtime (credentials that may change between requests). Sending, retries, status checks and
error classes stay the SDK's."""
from __future__ import annotations

from typing import Any

import httpx2
import openai
from openai._models import FinalRequestOptions
from openai._types import NotGiven


def _template_key(client: "AsyncOpenAI", options: FinalRequestOptions, retries_taken: int) -> tuple | None:
    """What a request's template depends on, or None when the request takes the SDK's path."""
    if (options.method.lower() != "post" or not isinstance(options.content, (bytes, bytearray)) or options.params
            or options.files is not None or options.json_data is not None or options.extra_json is not None
            or options.follow_redirects is not None or client._idempotency_header is not None
            or client._provider_runtime is not None or client._api_key_provider is not None):
        return None
    headers = options.headers if not isinstance(options.headers, NotGiven) else {}
    if not all(isinstance(v, str) for v in headers.values()):
        return None
    timeout = None if isinstance(options.timeout, NotGiven) else repr(options.timeout)
    return (options.url, tuple(sorted(headers.items())), retries_taken, timeout,
            tuple(sorted(options.security.items())), client.api_key)


class AsyncOpenAI(openai.AsyncOpenAI):
    """`openai.AsyncOpenAI` whose repeated requests copy the first one's URL, headers and extensions."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._templates: dict[tuple, tuple[httpx2.URL, list[tuple[bytes, bytes]], dict]] = {}

    def _build_request(self, options: FinalRequestOptions, *, retries_taken: int = 0) -> httpx2.Request:
        key = _template_key(self, options, retries_taken)
        if key is None:
            return super()._build_request(options, retries_taken=retries_taken)
        template = self._templates.get(key)
        if template is None:
            request = super()._build_request(options, retries_taken=retries_taken)
            headers = [(k, v) for k, v in request.headers.raw if k.lower() != b"content-length"]
            self._templates[key] = (request.url, headers, dict(request.extensions))
            return request
        url, headers, extensions = template
        return httpx2.Request("POST", url, headers=headers, content=bytes(options.content), extensions=extensions)
