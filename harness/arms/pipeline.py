"""The retrieval pipeline shared by the rewrite arms: the identifier lane first, then a hybrid
lane (dense + BM25 by RRF) per query, all fused again by RRF, de-duplicated, pool capped;
an optional rerank role on the capped pool; an optional answer stage. Entitlement filters
from the account are applied on every lane."""
from __future__ import annotations

import time

import numpy as np

from harness.arms.base import ArmResult, TurnContext
from harness.arms.result import Candidates
from harness.corpus import bm25_many
from harness.corpus.fusion import rrf
from harness.guards.identifiers import find_identifiers
from harness.roles.answer import AnswerOutput, abstention, answer_from_evidence, answer_offline
from harness.roles.lang import detect_language
from harness.roles.rerank import OFFLINE_NOTE, RerankOutput, apply_rerank, rerank_offline
from harness.threads import off_loop, timed


def applied_filters(ctx: TurnContext, filters: list[dict]) -> list[dict]:
    """What every lane of a search applies: the account's entitlement filters, then `filters`."""
    return ctx.entitlement_filters + list(filters)


def lane_depth(depth: int) -> int:
    """How deep each lane of a search looks (the fused list is cut to `depth`)."""
    return max(depth, 50)


def search(ctx: TurnContext, queries: list[str], filters: list[dict], *, lane: str, depth: int, rrf_k: int = 60,
           pool: int = 100, id_lane: bool = True, must_keep: list[str] = (), vectors: np.ndarray | None = None) -> ArmResult:
    """Issue `queries` (the first is the main one) with `filters` plus the account's
    entitlement filters. `vectors` replaces the dense query vectors (HyDE mixes)."""
    idx = ctx.index
    if lane in ("hybrid", "bm25"):
        bm25_many.search_ahead(idx)  # the BM25 searches of the retrieval batch, together, off this search's clock
    t0 = time.perf_counter()
    applied = applied_filters(ctx, filters)
    lanes_used, candidates, rankings = [], Candidates(), []
    ids = [i for i in dict.fromkeys(list(must_keep) + [x for q in queries for x in find_identifiers(q)])]
    if id_lane and ids and getattr(idx, "identifiers", None) is not None:
        hits = idx.identifier_lane(ids, depth, applied)
        lanes_used.append("identifier")
        candidates.add(hits.doc_ids, hits.scores, "identifier")
        rankings.append(hits.doc_ids)
    per_query = len(queries)
    fs = [applied] * per_query
    if lane in ("hybrid", "dense"):
        dense = idx.dense(queries, lane_depth(depth), fs, vectors=vectors)
    if lane in ("hybrid", "bm25"):
        lex = idx.lexical(queries, lane_depth(depth), fs)
    for qi in range(per_query):
        lists = []
        if lane in ("hybrid", "dense"):
            candidates.add(dense[qi].doc_ids, dense[qi].scores, f"dense:{qi}")
            lists.append(dense[qi].doc_ids)
        if lane in ("hybrid", "bm25"):
            candidates.add(lex[qi].doc_ids, lex[qi].scores, f"bm25:{qi}")
            lists.append(lex[qi].doc_ids)
        rankings.append([d for d, _ in rrf(lists, k=rrf_k)] if len(lists) > 1 else list(lists[0]))
        lanes_used.append(f"{lane}:{qi}")
    if len(rankings) > 1:
        final = rrf(rankings, k=rrf_k, cap=pool)
        fused, fused_scores = [d for d, _ in final], [s for _, s in final]
    else:  # one list: its own order, each score 0.0
        fused = rankings[0][:pool]
        fused_scores = [0.0] * len(fused)
    ranking = fused[:depth]
    candidates.add(fused, fused_scores, "fused")
    r = ArmResult(issued_queries=list(queries), lanes=lanes_used, applied_filters=applied, candidates=candidates,
                  ranking=ranking)
    # a lane another arm of the run searched first counts what it cost then (harness/corpus/memo.py)
    searched = (dense if lane in ("hybrid", "dense") else []) + (lex if lane in ("hybrid", "bm25") else [])
    reused_ms = sum(hits.ms for hits in searched if hits.shared)
    r.ms.retrieve = (time.perf_counter() - t0) * 1000 + reused_ms
    return r


async def query_vectors(ctx: TurnContext, queries: list[str]) -> tuple[np.ndarray, float]:
    """The queries' embeddings (through the index's cache) and the milliseconds this turn spent
    on them: on the embedding worker, batched with other turns' queries; inline without the threads."""
    if ctx.threads is not None:
        return await ctx.threads.embed_queries(ctx.index, queries)
    return timed(ctx.index.embed_queries, queries)


async def search_async(ctx: TurnContext, queries: list[str], filters: list[dict], *, lane: str,
                       vectors: np.ndarray | None = None, **kw) -> ArmResult:
    """`search` off the event loop: the query vectors from the embedding worker (batched with
    other turns' queries), the rest on the retrieval worker. Inline without the threads. The
    result is the same as `search`'s; ms_retrieve counts the search and this turn's share of
    the embedding batch."""
    embed_ms = 0.0
    if vectors is None and lane in ("hybrid", "dense") and ctx.threads is not None and queries:
        vectors, embed_ms = await query_vectors(ctx, queries)
    if lane in ("hybrid", "bm25") and ctx.threads is not None and kw.get("depth"):
        # the retrieval thread's batch does its BM25 searches together (harness/corpus/bm25_many.py)
        bm25_many.announce(ctx.index, queries, lane_depth(kw["depth"]), applied_filters(ctx, filters))
    r, _ = await off_loop(ctx.threads, search, ctx, queries, filters, lane=lane, vectors=vectors, **kw)
    r.ms.retrieve += embed_ms
    return r


async def rerank_stage(ctx: TurnContext, question: str, r: ArmResult, pool: int) -> list:
    """Rerank the capped pool with the rerank role; the offline role keeps the order and says so."""
    head = r.ranking[:pool]
    texts = [{"doc_id": d, "text": ctx.index.docs[d].text[:600]} for d in head]
    import json

    out = await ctx.roles.call("rerank", json.dumps({"question": question, "candidates": texts}, ensure_ascii=False),
                               RerankOutput, lambda: rerank_offline(head), seed=ctx.seed)
    if out.value is None:
        r.lanes.append(f"rerank failed, fused order kept: {out.fallback}")
    else:
        r.ranking = apply_rerank(head, out.value.doc_ids) + r.ranking[pool:]
        r.lanes.append(f"rerank({out.backend})" + (f": {OFFLINE_NOTE}" if out.backend == "offline" else ""))
    r.ms.rerank = out.ms
    return [out]


async def answer_stage(ctx: TurnContext, question: str, r: ArmResult, top_k: int = 3, must_answer: bool = False,
                       evidence: list[tuple[str, str, float]] | None = None) -> list:
    """The answer role on the arm's top hits: answer with sources, or abstain. `evidence`
    ((doc_id, sentence, support), best first) orders the passages by their best sentence, and
    the offline role then quotes the best-supported sentences."""
    import json

    lang = detect_language(ctx.turn.user)
    order = list(dict.fromkeys([d for d, _, _ in evidence or []] + r.ranking[:top_k]))[:top_k]
    passages = [(d, ctx.index.docs[d].text) for d in order]
    user = json.dumps({"question": question, "language": lang,
                       "abstention_text": abstention(lang),
                       "passages": [{"doc_id": d, "text": t[:1500]} for d, t in passages]}, ensure_ascii=False)
    out = await ctx.roles.call("answer", user, AnswerOutput, lambda: (answer_from_evidence(evidence, lang) if evidence
                                                               else answer_offline(question, passages, lang, must_answer=must_answer)),
                               seed=ctx.seed)
    if out.value is None:  # the ranking stands; the answer is missing and the row says why
        r.answer, r.abstained = None, None
        r.fallback_reason = "; ".join(x for x in (r.fallback_reason, out.fallback) if x)
    else:
        known = {d for d, _ in passages}
        r.answer = out.value.answer
        r.answer_doc_ids = [d for d in out.value.doc_ids if d in known]
        r.abstained = out.value.abstained
    r.ms.answer = out.ms
    return [out]
