"""Replay at the latency bound, against the scripted endpoint in its own process on 127.0.0.1
(bench/endpoint.py: the client's CPU and the server's run on different interpreters, as
against a real endpoint).

Workload per point: a generated eval set (temp folder) of CALLS / 4 sessions x 4 labelled
turns, 2,000 documents; one arm, `rewrite` with `lane: bm25` and the rewrite role on the
endpoint, so every turn makes exactly one LLM call and retrieval is cheap. At each point
(latency, concurrency, calls) it replays the workload cold (empty LLM cache), then warm WARM_RUNS
times (same cache: zero HTTP calls; the median run reported, every run's traces equal to cold's), and prints: the run's wall time after the index (from the first step
after the index in `Replay.run`, its jobs, to the end: job loop, trace parts, manifest), the time
before it (eval set, roles, arms, manifest, labels: what a run does before building its index;
the index itself is given), the job loop's, the bound ceil(calls / concurrency) x latency, the
efficiency bound / wall, the client process's CPU per call over the run, and the LLM client
alone (LLMClient.structured, CALLS calls at the point's concurrency, no replay): its CPU per
call and its efficiency; and, for reference, the same requests over bare aiohttp (no SDK).

    .venv/bin/python bench/replay.py [--points 0.1:16:800,0.1:64:3200,0.05:128:12800] [--out FILE]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import pandas  # noqa: E402,F401  (as in a run that reaches its index: labels.parquet, written first, imports it)
from common import HashEmbedder, cpu_seconds, emit, machine_note, peak_rss_mb, write_generated_set  # noqa: E402
from endpoint import Endpoint  # noqa: E402

from harness.config import parse_config  # noqa: E402
from harness.corpus.embed import EmbeddingCache  # noqa: E402
from harness.corpus.index import Index  # noqa: E402
from harness.store.equality import trace_differences  # noqa: E402
from harness.evalset.load import load_eval_set  # noqa: E402
from harness.store.manifest import read_manifest  # noqa: E402
from harness.run.replay import Replay  # noqa: E402
from harness.roles.state import CompactState  # noqa: E402


WARM_RUNS = 5  # warm re-runs per point, the median reported: one run of 0.3-2 s moves by a third with the machine


class TimedReplay(Replay):
    """Replay whose job loop (the concurrent part) is timed, and the moment its index is ready
    (`jobs` is the first step after the index in `Replay.run`)."""

    loop_wall = 0.0
    index_ready = 0.0

    def jobs(self, index):
        self.index_ready = time.perf_counter()
        return super().jobs(index)

    async def _run_jobs(self, jobs, total, writer):
        t0 = time.perf_counter()
        try:
            return await super()._run_jobs(jobs, total, writer)
        finally:
            self.loop_wall = time.perf_counter() - t0


def endpoint(url: str) -> dict:
    return {"kind": "openai-compatible", "base_url": url, "model": "test-model", "timeout": 60, "max_retries": 0}


def replay_once(es_root: Path, index, ep: Endpoint, concurrency: int, cache: Path, run_dir: Path) -> dict:
    raw = {"name": "bench", "eval_set": str(es_root), "arms": [{"name": "rewrite", "lane": "bm25"}],
           "runs_dir": str(run_dir.parent), "concurrency": concurrency,
           "llm": {"cache": {"folder": str(cache), "mode": "readwrite"}, "roles": {"rewrite": endpoint(ep.base_url)}}}
    ep.reset()
    server_cpu0 = ep.stats()["cpu"]
    c0, t0 = cpu_seconds(), time.perf_counter()
    rp = TimedReplay(parse_config(raw), raw, run_dir=run_dir, progress=False)
    rp.run(index=index)
    end, cpu = time.perf_counter(), cpu_seconds() - c0
    wall, before = end - rp.index_ready, rp.index_ready - t0
    counts = read_manifest(run_dir).counts
    stats = ep.stats()
    return {"wall": wall, "before_index": before, "loop_wall": rp.loop_wall, "cpu": cpu, "server_cpu": stats["cpu"] - server_cpu0, "server_calls": stats["calls"],
            "peak_in_flight": stats["peak_in_flight"], "http_calls": counts["http_calls"],
            "cache_hits": counts["cache_hits"], "errors": counts["errors"], "fallbacks": counts["fallbacks"]}


async def client_alone(url: str, concurrency: int, prompts: list[str]) -> tuple[float, float]:
    """The LLM client without the replay: len(prompts) structured calls, `concurrency` at a
    time, no cache. Returns (wall s, CPU s); connections opened by a first round, not timed."""
    from harness.llm.client import EndpointConfig, LLMClient
    from harness.roles.prompts import prompt_text
    from harness.roles.rewrite import RewriteOutput

    sem = asyncio.Semaphore(concurrency)
    client = LLMClient(EndpointConfig(**endpoint(url)), cache=None, semaphore=sem, connections=concurrency)
    system = prompt_text("rewrite.v1")

    async def one(p):
        res = await client.structured("rewrite", system, p, RewriteOutput)
        assert res.value is not None, res.record.error

    try:
        await asyncio.gather(*(one(p) for p in prompts[:concurrency]))
        c0, t0 = cpu_seconds(), time.perf_counter()
        await asyncio.gather(*(one(p) for p in prompts))
        return time.perf_counter() - t0, cpu_seconds() - c0
    finally:
        await client.aclose()


async def aiohttp_alone(url: str, concurrency: int, prompts: list[str]) -> tuple[float, float]:
    """The floor under the SDK: the same requests (body serialised once, reply parsed by
    ChatCompletion and the rewrite schema) over a bare aiohttp session, without the openai SDK and
    httpx2 between. A reference only: the harness goes through the SDK. Returns (wall s, CPU s)."""
    import json

    import aiohttp
    from openai.types.chat import ChatCompletion

    from harness.llm.schema import response_format
    from harness.roles.prompts import prompt_text
    from harness.roles.rewrite import RewriteOutput

    sem = asyncio.Semaphore(concurrency)
    system, fmt = prompt_text("rewrite.v1"), response_format(RewriteOutput)
    headers = {"Content-Type": "application/json", "Authorization": "Bearer none"}

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency)) as session:
        async def one(p):
            body = {"model": "test-model", "messages": [{"role": "system", "content": system}, {"role": "user", "content": p}],
                    "temperature": 0.0, "max_tokens": 512, "response_format": fmt}
            async with sem:
                async with session.post(url + "/chat/completions", data=json.dumps(body).encode(), headers=headers) as r:
                    reply = ChatCompletion.model_validate_json(await r.read())
            RewriteOutput.model_validate_json(reply.choices[0].message.content)

        await asyncio.gather(*(one(p) for p in prompts[:concurrency]))
        c0, t0 = cpu_seconds(), time.perf_counter()
        await asyncio.gather(*(one(p) for p in prompts))
        return time.perf_counter() - t0, cpu_seconds() - c0


def generated_workload(tmp: Path, calls: int, docs: int = 2000):
    """The generated eval set of CALLS turns (CALLS / 4 sessions x 4) over `docs` documents, loaded,
    and its index (hash vectors: the bm25 lane never reads them). Returns (root, eval set, index)."""
    es_root = write_generated_set(tmp / f"set-{calls}", math.ceil(calls / 4), docs=docs)
    es = load_eval_set(es_root)
    return es_root, es, Index(es.docs, HashEmbedder(), EmbeddingCache(tmp / f"emb-{calls}"), max_chars=2000)


def measure_point(tmp: Path, latency: float, conc: int, calls: int) -> dict:
    es_root, es, index = generated_workload(tmp, calls)
    prompts = [CompactState(t.user, [], [], {}, []).to_prompt() for s in es.sessions for t in s.turns][:calls]
    name = f"{latency}-{conc}"
    with Endpoint(latency) as ep:
        cold = replay_once(es_root, index, ep, conc, tmp / f"llm-{name}", tmp / "runs" / f"cold-{name}")
        warms = [replay_once(es_root, index, ep, conc, tmp / f"llm-{name}", tmp / "runs" / f"warm{k}-{name}")
                 for k in range(WARM_RUNS)]
        alone_wall, alone_cpu = asyncio.run(client_alone(ep.base_url, conc, prompts))
        raw_wall, raw_cpu = asyncio.run(aiohttp_alone(ep.base_url, conc, prompts))
    n = cold["server_calls"]
    bound = math.ceil(n / conc) * latency
    alone_bound = math.ceil(len(prompts) / conc) * latency
    same = not any(trace_differences(tmp / "runs" / f"cold-{name}", tmp / "runs" / f"warm{k}-{name}")
                   for k in range(WARM_RUNS))
    warm = dict(sorted(warms, key=lambda w: w["wall"])[WARM_RUNS // 2])  # the median run (WARM_RUNS is odd)
    warm["walls"] = [w["wall"] for w in warms]
    for k in ("http_calls", "server_calls"):  # over every warm run: any call at all is a miss of the cache
        warm[k] = sum(w[k] for w in warms)
    warm["cache_hits"] = min(w["cache_hits"] for w in warms)
    return {"latency": latency, "concurrency": conc, "calls": n, "bound": bound, "cold": cold, "warm": warm,
            "efficiency": bound / cold["wall"], "loop_efficiency": bound / cold["loop_wall"],
            "cpu_per_call_ms": cold["cpu"] / n * 1000, "server_cpu_ms": cold["server_cpu"] / max(n, 1) * 1000, "alone_cpu_ms": alone_cpu / len(prompts) * 1000,
            "alone_efficiency": alone_bound / alone_wall, "raw_cpu_ms": raw_cpu / len(prompts) * 1000,
            "raw_efficiency": alone_bound / raw_wall, "warm_equal": same}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--points", default="0.1:16:800,0.1:64:3200,0.05:128:12800", help="latency_s:concurrency:calls,...")
    ap.add_argument("--out", type=Path, help="write the figures as a markdown section here")
    ap.add_argument("--json", type=Path, help="write the headline figures as JSON here (bench/all.py's targets table)")
    args = ap.parse_args(argv)
    note = machine_note()
    tmp = Path(tempfile.mkdtemp(prefix="bench-replay-"))
    results = [measure_point(tmp, float(a), int(b), int(c)) for a, b, c in (p.split(":") for p in args.points.split(","))]
    figures = {"note": note, "points": results, "peak_rss_mb": peak_rss_mb()}
    emit(to_markdown(figures), args.out)
    if args.json:
        args.json.write_text(json.dumps(headline(figures), indent=1), encoding="utf-8")
    return figures


def headline(f: dict) -> dict:
    """Per point (latency_ms x concurrency): the efficiency and the warm re-run's ms a turn."""
    return {f"{p['latency'] * 1000:.0f}x{p['concurrency']}": {
        "efficiency": p["efficiency"], "warm_ms_per_turn": 1000 * p["warm"]["wall"] / p["calls"]}
        for p in f["points"]} | {"note": f["note"]}


def to_markdown(f: dict) -> str:
    lines = ["## Replay at the latency bound (bench/replay.py)", "",
             "Workload per point: CALLS / 4 generated sessions x 4 labelled turns, 2,000 documents; arm "
             "`rewrite(lane=bm25)` with the rewrite role on bench/endpoint.py, the scripted test server in its own "
             f"process on 127.0.0.1 (one LLM call per turn). Machine: {f['note']}.", "",
             "| latency | concurrency | LLM calls | bound (s) | before the index (s) | run after the index (s) | **efficiency** | job loop (s) | "
             "loop efficiency | client CPU per call, whole run (ms) | endpoint CPU per call (ms) | LLM client alone: CPU per call (ms) / efficiency | "
             "aiohttp alone, no SDK: CPU per call (ms) / efficiency | peak in flight |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for p in f["points"]:
        c = p["cold"]
        lines.append(f"| {p['latency'] * 1000:.0f} ms | {p['concurrency']} | {p['calls']} | {p['bound']:.2f} | {c['before_index']:.2f} | {c['wall']:.2f} | "
                     f"**{p['efficiency']:.2f}** | {c['loop_wall']:.2f} | {p['loop_efficiency']:.2f} | {p['cpu_per_call_ms']:.2f} | "
                     f"{p['server_cpu_ms']:.2f} | {p['alone_cpu_ms']:.2f} / {p['alone_efficiency']:.2f} | {p['raw_cpu_ms']:.2f} / {p['raw_efficiency']:.2f} | "
                     f"{c['peak_in_flight']} |")
    lines += ["", f"Warm re-run (same LLM cache), {WARM_RUNS} runs one after the other, the median run in the table "
              "(HTTP and server calls summed over every warm run, cache hits the fewest of any):", "",
              "| latency | concurrency | HTTP calls (transport) | server calls | cache hits | warm run (s) | **ms a turn** | each run's ms a turn | cold/warm | traces equal to cold |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for p in f["points"]:
        w, c = p["warm"], p["cold"]
        each = ", ".join(f"{1000 * x / p['calls']:.2f}" for x in w["walls"])
        lines.append(f"| {p['latency'] * 1000:.0f} ms | {p['concurrency']} | {w['http_calls']} | {w['server_calls']} | {w['cache_hits']} | "
                     f"{w['wall']:.2f} | **{1000 * w['wall'] / p['calls']:.2f}** | {each} | {c['wall'] / w['wall']:.1f}x | "
                     f"{'yes' if p['warm_equal'] else 'NO'} |")
    lines += ["", "efficiency: ceil(calls / concurrency) x latency / wall, where wall is the run after the index "
              "(from `Replay.run`'s first step after the index, its jobs, to the end: the job loop, the trace parts, the "
              "final manifest); before the index: Replay built from its config (eval set, roles, arms), the first "
              "manifest and the labels, what a run does before it builds its index (given here); loop "
              "efficiency: the same over the job loop alone. Client CPU per call: the benchmark process's CPU time "
              "over the whole run (retrieval, trace rows and the LLM client; the server runs in its own process) per "
              "call. Endpoint CPU per call: bench/endpoint.py's process (the scripted server, on the same 2 cores) over the same run. LLM client alone: LLMClient.structured, the same number of calls at the same concurrency without "
              "the replay, no cache. aiohttp alone: the same requests and reply parsing over a bare aiohttp session, "
              "without the openai SDK and httpx2 (a reference for what the SDK's own request handling costs; the "
              "harness does not use it).",
              "", f"Peak memory (ru_maxrss of the benchmark process): {f['peak_rss_mb']:.0f} MB.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
