"""The LLM client's CPU per structured call (the rewrite role's schema) against the scripted test
server in a process of its own (bench/endpoint.py, no latency), the client's process CPU over N
calls, 8 in flight. Run with PYTHONPATH set to the tree to measure:

    PYTHONPATH=TREE .venv/bin/python bench/client_cpu.py TREE N
"""
import asyncio
import json
import sys
import time

sys.path.insert(0, sys.argv[1] + "/bench")
from harness.llm.client import EndpointConfig, LLMClient  # noqa: E402
from harness.roles.rewrite import RewriteOutput  # noqa: E402
import endpoint  # noqa: E402

N = int(sys.argv[2])


async def go(base):
    c = LLMClient(EndpointConfig(kind="openai-compatible", base_url=base, model="m", max_retries=0), None,
                  semaphore=asyncio.Semaphore(8))
    try:
        await c.structured("rewrite", "sys", json.dumps({"turn": "warm"}), RewriteOutput)
        t0 = time.process_time()
        out = await asyncio.gather(*(c.structured("rewrite", "sys", json.dumps({"turn": f"u{i}"}), RewriteOutput)
                                     for i in range(N)))
        cpu = time.process_time() - t0
        assert all(r.record.error is None for r in out), out[0].record.error
        return cpu
    finally:
        await c.aclose()


with endpoint.Endpoint(0.0) as ep:
    print(json.dumps({"cpu_ms_per_call": 1000 * asyncio.run(go(ep.base_url)) / N}))
