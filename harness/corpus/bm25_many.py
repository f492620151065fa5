"""BM25 for many queries at once: the lexical searches of the turns one retrieval batch holds
(harness/threads.py), computed together and equal, to the last bit, to one query at a time.

One query at a time, bm25s (numpy backend) adds each in-vocabulary query token's column of its
score matrix into a float32 vector, token by token, and the index then ranks the documents of the
chunks scoring above zero (`Index._best_docs`). Here the same additions are made for all queries
at once, position by position (every query's first token, then every query's second, ...): each
(query, chunk) cell receives the same float32 additions in the same order, so it holds the same
bits. A column's chunks are distinct (checked once per index: `columns_distinct`), so one
fancy-indexed addition per position loses no update. The documents are then ranked with one sort
over every query's positive cells (query, score descending, doc id descending), which orders each
query's documents as `Index._best_docs` does. A batch pays numpy's per-call overhead once, not
once a query (equal results: tests/corpus/test_bm25_many.py)."""
from __future__ import annotations

import time

import numpy as np

from harness.corpus.filters import filter_key
from harness.corpus.hits import Hits
from harness.corpus.tokenize import tokenize

MAX_CELLS = 1 << 23  # queries x chunks scored in one matrix (32 MB of float32); a larger batch is split


def columns_distinct(bm25) -> bool:
    """Whether every token's column names each chunk at most once (bm25s builds them so, each in
    increasing order: checked in one pass; else by sorting every (column, chunk) pair)."""
    s = bm25.scores
    ptr, ind = s["indptr"], s["indices"]
    step = np.diff(ind.astype(np.int64))
    within = np.ones(len(step), dtype=bool)
    ends = ptr[1:-1]
    within[ends[(ends > 0) & (ends < len(ind))] - 1] = False  # the step from a column's last chunk to the next's first
    if (step[within] > 0).all():
        return True
    cols = np.repeat(np.arange(len(ptr) - 1, dtype=np.int64), np.diff(ptr))
    pairs = cols * np.int64(s["num_docs"]) + ind.astype(np.int64)
    return len(np.unique(pairs)) == len(pairs)


def token_ids(bm25, tokens: list[str]) -> list[int] | None:
    """The query's in-vocabulary token ids in order (bm25s's get_tokens_ids), or None when one lies
    outside the score matrix (bm25s raises for it: left to the query's own search)."""
    vocab = bm25.vocab_dict
    ids = [vocab[t] for t in tokens if t in vocab]
    return None if any(i >= len(bm25.scores["indptr"]) - 1 for i in ids) else ids


def scores_many(bm25, ids: list[list[int]]) -> np.ndarray:
    """Row i: bm25s's scores of the query whose token ids are ids[i] (`token_ids`)."""
    s = bm25.scores
    data, ind, ptr = s["data"], s["indices"], s["indptr"]
    out = np.zeros((len(ids), s["num_docs"]), dtype=np.dtype(bm25.dtype))
    flat = out.reshape(-1)  # a view: one index per cell is cheaper than a (row, column) pair
    for p in range(max(map(len, ids), default=0)):
        rows = [i for i, x in enumerate(ids) if len(x) > p]
        tok = np.fromiter((ids[i][p] for i in rows), np.int64, len(rows))
        starts = ptr[tok]
        lens = ptr[tok + 1] - starts
        total = int(lens.sum())
        if total:
            gather = np.arange(total, dtype=np.int64) + np.repeat(starts - (np.cumsum(lens) - lens), lens)
            cells = np.repeat(np.asarray(rows, np.int64) * out.shape[1], lens) + ind[gather]
            flat[cells] += data[gather]
    return out


def best_many(scores: np.ndarray, chunk_doc: np.ndarray, n_docs: int, one_chunk_each: bool,
              ks: list[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row of `scores` (query x chunk): the places and float64 scores of its ks[i] best
    documents among the chunks scoring above zero, a document scoring its best chunk, ordered by
    score descending, then doc id (place) descending: `Index._best_docs`'s order. Returned row
    after row in two arrays, with how many each row has."""
    cells = np.flatnonzero(scores > 0)  # row by row, chunks ascending
    q, c = np.divmod(cells, scores.shape[1])
    best = scores.reshape(-1)[cells].astype(np.float64)
    if one_chunk_each:
        docs = chunk_doc[c]
    else:  # a document's best chunk: the maximum over its chunks, per query
        key, which = np.unique(q * np.int64(n_docs) + chunk_doc[c], return_inverse=True)
        top = np.full(len(key), -np.inf)
        np.maximum.at(top, which, best)
        q, docs, best = key // n_docs, key % n_docs, top
    order = _order(q, best, docs, len(ks), n_docs)
    q, docs, best = q[order], docs[order], best[order]
    starts = np.searchsorted(q, np.arange(len(ks)))
    keep = np.arange(len(q)) - starts[q] < np.asarray(ks, np.int64)[q]  # the first k of each row
    return docs[keep], best[keep], np.bincount(q[keep], minlength=len(ks))


def _order(q: np.ndarray, best: np.ndarray, docs: np.ndarray, n_queries: int, n_docs: int) -> np.ndarray:
    """The order by query, score descending, doc place descending: `np.lexsort((-docs, -best, q))`.
    The scores are positive float32 values (as float64), whose bit patterns sort as they do, so
    when query, score bits and place fit in 63 bits together the order is one sort of one integer
    key, cheaper than the three-key sort; else the three-key sort."""
    doc_bits = max(int(n_docs - 1).bit_length(), 1)
    if not len(q) or (n_queries - 1).bit_length() + 32 + doc_bits > 63:
        return np.lexsort((-docs, -best, q))
    bits = best.astype(np.float32).view(np.uint32).astype(np.int64)
    key = (q << (32 + doc_bits)) | ((0xFFFFFFFF - bits) << doc_bits) | ((1 << doc_bits) - 1 - docs)
    return np.argsort(key, kind="stable")


def batchable(bm25) -> bool:
    """Whether this module computes what bm25s would for the index: float32 scores, no
    non-occurrence term (BM25L, BM25+) added to every document, each chunk once per column."""
    return (np.dtype(bm25.dtype) == np.float32 and getattr(bm25, "nonoccurrence_array", None) is None
            and columns_distinct(bm25))


def announce(index, queries: list[str], k: int, filters: list[dict]) -> None:
    """On the event loop, before a search goes to the retrieval thread: the BM25 searches it will
    ask the index for (`filters` for each query), so that the first search of the thread's batch
    does every announced one at once (`search_ahead`). Only within a run (the index's memo)."""
    memo = getattr(index, "memo", None)
    if memo is None or k < 1 or index._batchable is False:
        return
    if len(memo.expected) > memo.size:  # never drained (no search missed since): let them go
        memo.expected = []
    fk = filter_key(filters)
    # a search the run did already is reused, not announced: every announced one is a miss to come
    memo.expected.extend(((key, q, k, filters) for q in queries if (key := ("bm25", q, fk, k)) not in memo))


def search_ahead(index) -> None:
    """The BM25 searches announced for the retrieval thread and not done yet, all at once (a
    search calls this before it starts its clock), kept in the run's memo (`ahead`) for the turns
    that announced them, each with its share of the batch's milliseconds (as the dense lane's
    batches and the embedding batches record theirs). A query that cannot be prepared (a token
    outside the score matrix, a filter its metadata cannot be compared with) is left to its own
    search, which raises there, in its own turn; if the batch itself fails, every query is."""
    memo = getattr(index, "memo", None)
    if memo is None or not memo.expected:
        return
    batch, memo.expected = memo.expected, []
    if index._batchable is None:  # once per index, on the retrieval thread
        index._batchable = batchable(index.bm25)
    if not index._batchable:
        return
    t0 = time.perf_counter()
    todo = _prepared(index, memo, batch)
    if not todo:
        return
    try:
        done = _hits_of(index, list(todo.values()))
    except Exception:  # noqa: BLE001 (each query's own search meets the error, in its own turn)
        return
    ms = (time.perf_counter() - t0) * 1000 / len(done)
    if len(memo.ahead) > memo.size:  # announced and never asked for (a turn that failed first): let them go
        memo.ahead.clear()
    memo.ahead.update((key, (hits, ms)) for key, hits in zip(todo, done))


def _prepared(index, memo, batch: list[tuple]) -> dict:
    """key -> (token ids, k, chunk mask or None) of the batch's searches not done yet."""
    todo: dict = {}
    for key, q, k, f in batch:
        if key in todo or key in memo.ahead or key in memo:
            continue
        try:
            ids = token_ids(index.bm25, tokenize(q))
            mask = index._allowed_chunks(f) if f else None
        except Exception:  # noqa: BLE001 (left to the query's own search)
            continue
        if ids is not None:
            todo[key] = (ids, k, mask)
    return todo


def _hits_of(index, todo: list[tuple]) -> list[Hits]:
    """The ranked hits of prepared searches, MAX_CELLS scores at a time."""
    done: list[Hits] = []
    step = max(1, MAX_CELLS // max(int(index.bm25.scores["num_docs"]), 1))
    for s in range(0, len(todo), step):
        part = todo[s:s + step]
        scores = scores_many(index.bm25, [ids for ids, _, _ in part])
        for i, (_, _, mask) in enumerate(part):
            if mask is not None:
                scores[i, ~mask] = 0
        docs, best, counts = best_many(scores, index._chunk_doc, len(index._doc_names), index._chunk_per_doc,
                                       [k for _, k, _ in part])
        names, values, end = index._doc_name_objs[docs].tolist(), best.tolist(), 0  # two conversions a batch
        for n in counts.tolist():
            done.append(Hits(names[end:end + n], values[end:end + n], "bm25"))
            end += n
    return done
