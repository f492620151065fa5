"""Replay throughput and the warm LLM cache, against the scripted test server.

Workload: a generated eval set (temp folder) of SESSIONS sessions x 4 labelled turns, 2,000
documents; one arm, `rewrite` with `lane: bm25` and the rewrite role on the test server, so
every turn makes exactly one LLM call and retrieval is cheap. At each point (latency,
concurrency) it replays the workload cold (empty LLM cache), then warm (same cache: zero HTTP
calls), and prints: LLM calls, wall time of the replay loop, the lower bound
ceil(calls / concurrency) x latency, wall/bound, the one-call-at-a-time per-call time (direct
LLMClient.structured on a sample) and the speed-up it implies, retrieval time (sum of
ms_retrieve), the cold/warm ratio and peak memory.

    .venv/bin/python bench/replay.py [--sessions 250] [--points 0.2:16,0.5:64] [--seq-sample 200]
                                     [--variant stock|proto|proto+thread|...] [--out bench/results/replay.md]

`--variant` measures prototypes of the proposed changes (bench/prototype.py: eager SDK import,
memoised strict schema, LLM-cache lookup before the SDK, retrieval on a worker thread); they
are monkeypatched inside this process only.
"""
from __future__ import annotations

import argparse
import asyncio
import math
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (emit, HashEmbedder, cpu_seconds, machine_note, peak_rss_mb, rewrite_reply,  # noqa: E402
                    write_generated_set)

from prototype import VARIANTS, install  # noqa: E402

from harness.config import parse_config  # noqa: E402
from harness.corpus.embed import EmbeddingCache  # noqa: E402
from harness.corpus.index import Index  # noqa: E402
from harness.evalset.load import load_eval_set  # noqa: E402
from harness.manifest import read_manifest  # noqa: E402
from harness.replay import Replay  # noqa: E402
from harness.roles.state import CompactState  # noqa: E402
from harness.testing import TestServer  # noqa: E402
from harness.traces import read_traces  # noqa: E402


class TimedReplay(Replay):
    """Replay whose job loop (the concurrent part, after index and labels) is timed, with the
    process CPU time spent in it and the event loop's lag sampled every 5 ms."""

    loop_wall = loop_cpu = 0.0
    lag_ms: list[float] = []

    async def _run_jobs(self, jobs, writer):
        lags: list[float] = []
        stop = asyncio.Event()

        async def probe():
            while not stop.is_set():
                t = time.perf_counter()
                await asyncio.sleep(0.005)
                lags.append((time.perf_counter() - t - 0.005) * 1000)

        task = asyncio.ensure_future(probe())
        c0, t0 = cpu_seconds(), time.perf_counter()
        try:
            return await super()._run_jobs(jobs, writer)
        finally:
            self.loop_wall = time.perf_counter() - t0
            self.loop_cpu = cpu_seconds() - c0
            stop.set()
            await task
            self.lag_ms = lags


def endpoint(srv) -> dict:
    return {"kind": "openai-compatible", "base_url": srv.base_url, "model": "test-model", "timeout": 60,
            "max_retries": 0}


def replay_once(es_root: Path, index, srv, concurrency: int, cache: Path, run_dir: Path) -> dict:
    raw = {"name": "bench", "eval_set": str(es_root), "arms": [{"name": "rewrite", "lane": "bm25"}],
           "runs_dir": str(run_dir.parent), "concurrency": concurrency,
           "llm": {"cache": {"folder": str(cache), "mode": "readwrite"}, "roles": {"rewrite": endpoint(srv)}}}
    srv.reset_stats()
    rp = TimedReplay(parse_config(raw), raw, run_dir=run_dir, progress=False)
    t0 = time.perf_counter()
    rp.run(index=index)
    total = time.perf_counter() - t0
    counts = read_manifest(run_dir)["counts"]
    t = read_traces(run_dir, ["ms_retrieve", "llm_calls", "error", "fallback_reason"]).to_pandas()
    lag = sorted(rp.lag_ms) or [0.0]
    return {"wall": rp.loop_wall, "run_total": total, "cpu": rp.loop_cpu, "turns": len(t),
            "server_calls": srv.calls, "http_calls": counts["http_calls"], "llm_calls": int(t["llm_calls"].sum()),
            "cache_hits": counts["cache_hits"], "peak_in_flight": srv.peak_in_flight,
            "retrieve_s": float(t["ms_retrieve"].sum()) / 1000, "errors": int(t["error"].notna().sum()),
            "fallbacks": int(t["fallback_reason"].notna().sum()),
            "lag_p50_ms": lag[len(lag) // 2], "lag_p99_ms": lag[int(len(lag) * 0.99)], "lag_max_ms": lag[-1]}


async def sequential(srv, n: int, prompts: list[str]) -> float:
    """Per-call time of a one-call-at-a-time loop: direct LLMClient.structured, no cache."""
    from harness.llm.client import EndpointConfig, LLMClient
    from harness.roles.base import prompt_text
    from harness.roles.rewrite import RewriteOutput

    client = LLMClient(EndpointConfig(**endpoint(srv)), cache=None)
    system = prompt_text("rewrite.v1")
    await client.structured("rewrite", system, prompts[0], RewriteOutput)  # connection warm-up, not timed
    t0 = time.perf_counter()
    for i in range(n):
        res = await client.structured("rewrite", system, prompts[i % len(prompts)], RewriteOutput)
        assert res.value is not None, res.record.error
    per_call = (time.perf_counter() - t0) / n
    await client.aclose()
    return per_call


def sample_prompts(es, n: int) -> list[str]:
    """The rewrite prompt's user message of the first n turns, each without history."""
    return [CompactState(t.user, [], [], {}, []).to_prompt() for s in es.sessions for t in s.turns][:n]


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sessions", type=int, default=250)
    ap.add_argument("--points", default="0.2:16,0.5:64", help="latency_s:concurrency,...")
    ap.add_argument("--seq-sample", type=int, default=200, help="calls in the one-at-a-time sample (per point)")
    ap.add_argument("--seq-budget", type=float, default=0,
                    help="cap a point's one-at-a-time sample at this many seconds of latency (0: no cap)")
    ap.add_argument("--variant", choices=sorted(VARIANTS), default="stock",
                    help="stock: the harness as it is; others: prototypes of proposed changes (bench/prototype.py)")
    ap.add_argument("--out", type=Path, help="write the figures as a markdown section here")
    args = ap.parse_args(argv)
    install(args.variant)
    points = [(float(a), int(b)) for a, b in (p.split(":") for p in args.points.split(","))]
    note = machine_note()
    tmp = Path(tempfile.mkdtemp(prefix="bench-replay-"))
    es_root = write_generated_set(tmp / "set", args.sessions)
    es = load_eval_set(es_root)
    index = Index(es.docs, HashEmbedder(), EmbeddingCache(tmp / "emb"), max_chars=2000)
    prompts = sample_prompts(es, args.seq_sample)
    results = []
    for latency, conc in points:
        with TestServer(latency=latency) as srv:
            srv.add_rule(rewrite_reply)
            cache = tmp / f"llm-{latency}-{conc}"
            cold = replay_once(es_root, index, srv, conc, cache, tmp / "runs" / f"cold-{latency}-{conc}")
            warm = replay_once(es_root, index, srv, conc, cache, tmp / "runs" / f"warm-{latency}-{conc}")
            n_seq = args.seq_sample if not args.seq_budget else min(args.seq_sample, max(20, int(args.seq_budget / latency)))
            seq = asyncio.run(sequential(srv, n_seq, prompts)) if n_seq else float("nan")
        calls = cold["server_calls"]
        bound = math.ceil(calls / conc) * latency
        from harness.equality import trace_differences

        same = not trace_differences(tmp / "runs" / f"cold-{latency}-{conc}", tmp / "runs" / f"warm-{latency}-{conc}")
        results.append({"latency": latency, "concurrency": conc, "calls": calls, "bound": bound,
                        "ratio": cold["wall"] / bound, "seq_per_call": seq, "seq_n": n_seq,
                        "speedup": seq * calls / cold["wall"], "cold": cold, "warm": warm,
                        "cold_warm": cold["wall"] / warm["wall"], "warm_equal": same})
    figures = {"sessions": args.sessions, "turns": args.sessions * 4, "variant": args.variant, "note": note,
               "points": results, "peak_rss_mb": peak_rss_mb()}
    emit(to_markdown(figures), args.out)
    return figures


def _seq(p: dict) -> str:
    if not p["seq_n"]:
        return "not measured | —"
    return f"{p['seq_per_call'] * 1000:.1f} ({p['seq_n']} calls) | {p['speedup']:.1f}x"


def to_markdown(f: dict) -> str:
    title = "Replay (bench/replay.py)" if f["variant"] == "stock" else \
        f"Replay with the proposed changes prototyped (bench/replay.py --variant {f['variant']}; bench/prototype.py)"
    lines = [f"## {title}", "",
             f"Workload: {f['sessions']:,} generated sessions x 4 labelled turns = {f['turns']:,} turns, 2,000 documents; "
             "arm `rewrite(lane=bm25)` with the rewrite role on the scripted test server (in-process, one LLM call "
             f"per turn). Machine: {f['note']}.", "",
             "| latency | concurrency | LLM calls | wall (s) | bound (s) | wall/bound | one-at-a-time per call (ms, sample) | speed-up | retrieval (s) | loop CPU (s) | loop lag p50/p99/max (ms) | peak in flight |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for p in f["points"]:
        c = p["cold"]
        lines.append(f"| {p['latency'] * 1000:.0f} ms | {p['concurrency']} | {p['calls']} | {c['wall']:.2f} | {p['bound']:.2f} | "
                     f"**{p['ratio']:.2f}** | {_seq(p)} | {c['retrieve_s']:.2f} | "
                     f"{c['cpu']:.2f} | {c['lag_p50_ms']:.1f}/{c['lag_p99_ms']:.1f}/{c['lag_max_ms']:.1f} | {c['peak_in_flight']} |")
    lines += ["", "Warm re-run (same LLM cache):", "",
              "| latency | concurrency | HTTP calls (transport) | server calls | cache hits | warm wall (s) | cold/warm | retrieval (s) | traces equal to cold |",
              "|---|---|---|---|---|---|---|---|---|"]
    for p in f["points"]:
        w = p["warm"]
        lines.append(f"| {p['latency'] * 1000:.0f} ms | {p['concurrency']} | {w['http_calls']} | {w['server_calls']} | {w['cache_hits']} | "
                     f"{w['wall']:.2f} | **{p['cold_warm']:.1f}x** | {w['retrieve_s']:.2f} | {'yes' if p['warm_equal'] else 'NO'} |")
    lines += ["", "wall: the replay's job loop (index, labels and manifest excluded); bound: ceil(calls / concurrency) x "
              "latency; speed-up: calls x one-at-a-time per-call time / wall; retrieval: sum of ms_retrieve; loop CPU: "
              "process CPU during the loop (the test server runs in this process, so its share is included); loop lag: "
              "how late a 5 ms timer on the event loop fired.",
              "", f"Peak memory (ru_maxrss of the benchmark process): {f['peak_rss_mb']:.0f} MB.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
