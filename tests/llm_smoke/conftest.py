"""The real-model smoke (`make smoke-llm`, docs/local-llm.md): collected only when
HARNESS_LOCAL_LLM_URL names a server, so `make test` stays offline; once collected, a server that
does not answer fails the smoke (it is never skipped)."""
import os

import httpx
import pytest

ENV = "HARNESS_LOCAL_LLM_URL"
collect_ignore_glob = [] if os.environ.get(ENV, "").strip() else ["test_*.py"]


def server_root(base_url: str) -> str:
    """http://127.0.0.1:8088/v1 -> http://127.0.0.1:8088 (llama-server's /health is at the root)."""
    url = base_url.rstrip("/")
    return url[:-3] if url.endswith("/v1") else url


@pytest.fixture(scope="session")
def local_llm() -> tuple[str, str]:
    """(base_url, model) of the running local server; the smoke fails when it does not answer."""
    base_url = os.environ[ENV].strip().rstrip("/")
    root = server_root(base_url)
    try:
        health = httpx.get(f"{root}/health", timeout=5.0)
    except httpx.HTTPError as e:
        pytest.fail(f"{ENV}={base_url}: no answer from {root}/health ({type(e).__name__}); start it: make local-llm")
    if health.status_code != 200:
        pytest.fail(f"{ENV}={base_url}: {root}/health answered {health.status_code} (server not ready)")
    model = os.environ.get("HARNESS_LOCAL_LLM_MODEL", "").strip()
    if not model:
        model = httpx.get(f"{base_url}/models", timeout=5.0).json()["data"][0]["id"]  # llama-server's --alias
    return base_url, model
