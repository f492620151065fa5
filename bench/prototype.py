"""Prototypes of the proposed changes, applied by monkeypatching in the benchmark process only
(never imported by the package or the tests), so that bench/replay.py can measure them:

- `eager`:  LLMClient.__init__ touches `sdk.chat.completions`, so the openai SDK's lazy import of
            its resources (~0.7-1 s of module imports) happens when the client is built, not on
            the event loop during the first call, where it blocks every turn in flight.
- `schema`: strict_schema(model, max_string_length, max_items) memoised (it rebuilt the same
            JSON schema with pydantic on every call: ~1 ms of CPU per LLM call).
- `precheck`: LLMClient.structured looks the request up in the LLM cache before building it
            with the SDK; a hit is parsed directly (the SDK path costs ~1 ms per call even when
            the transport answers from the cache). A miss goes through the SDK as before, so the
            transport still fills the cache; a key the two sides compute differently only
            costs the speed-up, never a wrong answer.
- `gc`:     gc.freeze() when the job loop starts (gc.unfreeze() when it ends): the eval set, the
            index and the jobs, hundreds of thousands of long-lived objects, leave the
            collector's generations, so a full (generation 2) collection no longer walks them
            while turns are in flight: measured 5 collections of up to 330 ms each (1.3 s of a
            12.6 s run at 500 ms x 64) before, 73 ms at most after.
- `pools`:  the LLM client's HTTP transport spread over 4 connection pools (round robin), so each
            httpcore pool holds a quarter of the connections: httpcore walks every pooled
            connection (with a socket poll in has_expired()) on each request and release, a cost
            per call that grows with the concurrency (encode/httpcore#1035).
- `thread`: the rewrite family's blocking `search(...)` runs on one worker thread
            (loop.run_in_executor with a single-thread executor: retrieval stays serial, so the
            index needs no locking), so the event loop keeps sending and receiving LLM calls
            while BM25/Qdrant work.
"""
from __future__ import annotations

import asyncio
import functools
import inspect
import json
import textwrap
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlparse

VARIANTS = {"stock": (), "eager": ("eager",), "proto": ("eager", "schema", "precheck"),
            "proto+thread": ("eager", "schema", "precheck", "thread"), "thread": ("thread",),
            "proto+pools": ("eager", "schema", "precheck", "pools"), "pools": ("pools",), "gc": ("gc",),
            "proto+gc": ("eager", "schema", "precheck", "gc"),
            "proto+gc+pools": ("eager", "schema", "precheck", "gc", "pools")}


def install(variant: str) -> tuple[str, ...]:
    parts = VARIANTS[variant]
    for name, apply in STEPS.items():  # in this order, whatever the order of the variant's parts
        if name in parts:
            apply()
    return parts


def _eager():
    from harness.llm import client

    init = client.LLMClient.__init__

    def __init__(self, *a, **k):
        init(self, *a, **k)
        self.sdk.chat.completions  # noqa: B018  (imports openai.resources now, off the event loop)

    client.LLMClient.__init__ = __init__


def _schema():
    from harness.llm import client, schema

    cached = functools.lru_cache(maxsize=256)(schema.strict_schema)
    client.strict_schema = cached


def _precheck():
    from harness.llm import client
    from harness.llm.cache import request_key
    from harness.llm.transport import CACHE_HEADER, LATENCY_HEADER

    create = client.LLMClient._create

    class _Headers(dict):
        def get(self, k, d=None):
            return super().get(k.lower(), d)

    class _Obj:
        def __init__(self, d):
            self.__dict__.update({k: (_Obj(v) if isinstance(v, dict) else [_Obj(x) if isinstance(x, dict) else x for x in v]
                                      if isinstance(v, list) else v) for k, v in d.items()})

    async def _create(self, role, body):
        cache = self.cache
        if cache is not None and cache.mode not in ("off", "refresh"):
            sent = {k: v for k, v in body.items() if k != "extra_body"} | (body.get("extra_body") or {})
            base = urlparse(str(self.sdk.base_url)).path.rstrip("/")
            hit = cache.get(request_key(self.endpoint.kind, f"{base}/chat/completions", sent))
            if hit is not None:
                self.transport.stats.cache_hits += 1
                data = json.loads(hit.body)
                return _Obj(data), _Headers({CACHE_HEADER: "hit", LATENCY_HEADER: f"{hit.latency_ms:.3f}"}), 1
        return await create(self, role, body)

    client.LLMClient._create = _create


_EXECUTOR: ThreadPoolExecutor | None = None


async def search_async(*a, **k):
    """The proposed harness.arms.pipeline.search_async: search() on one worker thread."""
    global _EXECUTOR
    from harness.arms import pipeline

    if _EXECUTOR is None:
        _EXECUTOR = ThreadPoolExecutor(max_workers=1, thread_name_prefix="retrieval")
    return await asyncio.get_running_loop().run_in_executor(_EXECUTOR, functools.partial(pipeline.search, *a, **k))


def _thread():
    """RewriteFamily.run with `r = search(` replaced by `r = await search_async(`: exactly the
    proposed three-line diff, compiled from the current source."""
    from harness.arms import rewrite

    src = textwrap.dedent(inspect.getsource(rewrite.RewriteFamily.run))
    assert src.count("r = search(") == 3, "harness/arms/rewrite.py changed: update the prototype"
    src = src.replace("r = search(", "r = await search_async(")
    ns = dict(vars(rewrite))
    ns["search_async"] = search_async
    exec(compile(src, rewrite.__file__, "exec"), ns)
    rewrite.RewriteFamily.run = ns["run"]


class RoundRobinTransport:
    """N httpx transports used in turn (prototype of the `pools` change)."""

    def __init__(self, make, n: int = 4):
        import httpx

        self.inner = [make() for _ in range(n)]
        self.i = 0
        self.__class__ = type("RoundRobinTransport", (RoundRobinTransport, httpx.AsyncBaseTransport), {})

    async def handle_async_request(self, request):
        self.i = (self.i + 1) % len(self.inner)
        return await self.inner[self.i].handle_async_request(request)

    async def aclose(self):
        for t in self.inner:
            await t.aclose()


def _pools(n: int = 4):
    import httpx

    from harness.llm import client

    init = client.LLMClient.__init__

    def __init__(self, *a, **k):
        init(self, *a, **k)
        self.transport.inner = RoundRobinTransport(lambda: httpx.AsyncHTTPTransport(
            limits=httpx.Limits(max_connections=1024, max_keepalive_connections=256)), n)

    client.LLMClient.__init__ = __init__


def _gc():
    import gc

    from harness import replay

    run_jobs = replay.Replay._run_jobs

    async def _run_jobs(self, jobs, writer):
        gc.freeze()
        try:
            return await run_jobs(self, jobs, writer)
        finally:
            gc.unfreeze()

    replay.Replay._run_jobs = _run_jobs


# the prototypes by name, in the order install() applies them
STEPS = {"eager": _eager, "schema": _schema, "precheck": _precheck, "thread": _thread, "pools": _pools, "gc": _gc}
