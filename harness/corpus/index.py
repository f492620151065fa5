"""The index: chunks with embeddings in a dense engine (Qdrant Edge embedded in the process by
default, exact search; a Qdrant server or cluster at `index.qdrant_url`, where the index can also
attach to an existing collection: harness/corpus/dense.py), a bm25s lexical index and an
identifier lane beside it. Searches return document rankings (a document's score is its best
chunk's score), ordered by score then doc id descending."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from harness.corpus import lexical
from harness.corpus.chunk import split_sentences
from harness.corpus.dense import Attach, DenseLane, exact_top
from harness.corpus.dense_edge import EdgeLane
from harness.errors import BadInput
from harness.corpus.embed import EmbeddingCache, Embedder
from harness.corpus.filters import filter_key as _filter_key, matches
from harness.corpus.hits import Hit, Hits, reused as _reused  # noqa: F401  (Hit: the lanes' item type)
from harness.corpus.fusion import order, rrf
from harness.corpus.memo import Memo
from harness.corpus.tokenize import tokenize


@dataclass
class IndexStats:
    chunks: int = 0
    embedded: int = 0  # cache misses while building
    seconds: float = 0.0
    extra: dict = field(default_factory=dict)


def open_lane(vecs: np.ndarray, payloads: Callable[[], list[dict]], client=None, where: str = "") -> DenseLane:
    """The engine for the index's own chunk vectors (point i = chunk row i): Qdrant Edge without a
    qdrant-client `client`, else a collection built on the server it talks to (`where`: its URL;
    tests give qdrant-client's local mode). `payloads()` gives each chunk's payload there
    (doc_id, chunk_id, text, meta)."""
    if client is None:
        return EdgeLane(vecs, [{"meta": p["meta"]} for p in payloads()])
    from harness.corpus.dense_qdrant import build_collection  # qdrant-client: seconds to import, a server's only

    return build_collection(client, vecs, payloads(), where)


class Index:
    def __init__(self, docs: dict, embedder: Embedder, cache: EmbeddingCache, max_chars: int = 2000,
                 qdrant_url: str | None = None, collection: str | None = None, vector: str | None = None,
                 id_field: str = "doc_id", text_field: str = "text", client=None):
        """The dense lane runs on Qdrant Edge unless a server is given (`qdrant_url`, or `client`: a
        qdrant-client client standing for one, e.g. its local mode in tests). With `collection`,
        the index attaches to that existing collection on the server (its points are the chunks:
        `id_field` and `text_field` name their payload fields, `vector` their named vector) and
        neither embeds passages nor writes anything there; else it chunks `docs` (`max_chars`)
        and embeds them through `cache`."""
        t0 = time.perf_counter()
        self.docs = docs
        self.embedder = embedder
        self.cache = cache
        self.max_chars = max_chars

        self.meta = {d.doc_id: d.metadata for d in docs.values()}
        self._masks: dict[str, np.ndarray] = {}
        self.memo: Memo | None = None  # a replay's, for its run: work its arms share (harness/corpus/memo.py)
        self._batchable: bool | None = None  # whether bm25_many can do this BM25's searches (known when first asked)
        self._reference = None
        self.stats = IndexStats()
        self._lex: lexical.Lexical | None = None  # the own chunks' statistics, until the index holds them
        if collection and not (qdrant_url or client):
            raise BadInput("an existing collection needs a server: qdrant_url (or client)")
        made = client is None and qdrant_url is not None
        if made:
            from harness.corpus.dense_qdrant import connect

            client = connect(qdrant_url)  # before embedding anything: a bad URL fails at once
        try:
            spec = Attach(collection, vector, id_field, text_field) if collection else None
            self._lane = self._attach(client, qdrant_url, spec) if spec else self._own(client, qdrant_url)
        except BaseException:
            if made:
                client.close()
            raise
        if client is not None:
            self._lane.owns_client = made
        self._vecs64 = self._vecs.astype(np.float64)  # what dense scores are computed from (dense.exact_top)
        self.stats.chunks = len(self.chunks)
        self.stats.extra["dense"] = self._lane.where
        lex = self._lex or lexical.of_chunks(self.chunks, self.docs)  # an existing collection's chunks: built here
        self._lex = None
        self.bm25, self.id_docs, self.identifiers = lex.bm25, lex.id_docs, lex.identifiers
        if self.identifiers is not None:
            self._id_doc_arr = np.array(self.id_docs)
        # each chunk's document as its place among the ids sorted (integers sort as the ids do, faster)
        self._doc_names, self._chunk_doc = np.unique(np.array([c.doc_id for c in self.chunks]), return_inverse=True)
        self._chunk_per_doc = len(self._doc_names) == len(self.chunks)  # every document one chunk (_best_docs)
        # the same names as Python strings, made once: a ranking takes them without making 2 strings a hit
        self._doc_name_objs = np.array(self._doc_names.tolist(), dtype=object)
        self._rows: dict[str, list[int]] = {}  # doc_id -> its chunks' rows
        for i, c in enumerate(self.chunks):
            self._rows.setdefault(c.doc_id, []).append(i)
        self._latent: dict = {}
        self.stats.seconds = time.perf_counter() - t0

    def _own(self, client, url: str | None):
        """The index's own chunks of the documents, embedded through the cache, in Qdrant Edge, or
        in a collection it builds on the server `client` talks to."""
        if not self.docs:
            raise BadInput("empty corpus: nothing to index")
        # the chunks and their lexical statistics, loaded when this content was indexed before
        self._lex = lexical.statistics(self.docs, self.max_chars, Path(self.cache.write_root) / "lexical")
        self.chunks = self._lex.chunks
        misses0 = self.cache.misses
        vecs = self.cache.get_or_compute(self.embedder, "passage", [c.text for c in self.chunks])
        self.cache.flush()
        self.stats.embedded = self.cache.misses - misses0
        self._vecs = vecs / np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)
        return open_lane(self._vecs, self._payloads, client, url or "qdrant-client")

    def _attach(self, client, url: str | None, spec: Attach):
        """An existing collection's points as the chunks, with their vectors and texts."""
        from harness.corpus.dense_qdrant import attach

        lane, self.chunks, self._vecs = attach(client, url or "qdrant-client", spec, self.docs,
                                               getattr(self.embedder, "dim", 0), self._allowed_chunks)
        self.stats.extra["docs_without_points"] = len(set(self.docs) - {c.doc_id for c in self.chunks})
        return lane

    def _payloads(self) -> list[dict]:
        """Each chunk's payload in a collection the index builds (what `index.id_field: doc_id`
        and `index.text_field: text` read when another run attaches to it)."""
        return [{"doc_id": c.doc_id, "chunk_id": c.chunk_id, "text": c.text, "meta": self.meta[c.doc_id]}
                for c in self.chunks]

    @property
    def client(self):
        """A qdrant-client client on the dense points: the server's, else a copy of the embedded
        engine's points in qdrant-client's local mode, made on first use (the reference the
        embedded engine is compared with), its collection `self.collection`."""
        lane_client = getattr(self._lane, "client", None)
        if lane_client is not None:
            return lane_client
        if self._reference is None:
            from qdrant_client import QdrantClient

            from harness.corpus.dense_qdrant import build_collection

            self._reference = build_collection(QdrantClient(location=":memory:"), self._vecs, self._payloads(),
                                               "qdrant-client local mode")
            self._reference.owns_client = True
        return self._reference.client

    @property
    def collection(self) -> str:
        from harness.corpus.dense_qdrant import COLLECTION

        return getattr(self._lane, "collection", COLLECTION)

    def query_vector(self, query: str) -> np.ndarray:
        """The query's embedding (through the cache), normalised: the `q` of `similarity`,
        `sentence_scores` and `reference`."""
        q = self.embed_queries([query])[0]
        return q / (np.linalg.norm(q) or 1.0)

    def similarity(self, q: np.ndarray, doc_ids: list[str]) -> dict[str, float]:
        """Cosine similarity of a query vector to each document (its best chunk), from the index's vectors."""
        return {d: float((self._vecs[self._rows[d]] @ q).max()) if d in self._rows else 0.0 for d in doc_ids}

    def best_chunk_vectors(self, q: np.ndarray, doc_ids: list[str]) -> np.ndarray:
        """Each document's chunk vector most similar to the query vector (what a dense hit
        scored on), normalised, one row per document."""
        rows = [self._rows[d][int(np.argmax(self._vecs[self._rows[d]] @ q))] for d in doc_ids if d in self._rows]
        return self._vecs[rows] if rows else np.zeros((0, self._vecs.shape[1]))

    def sentence_scores(self, q: np.ndarray, doc_ids: list[str]) -> dict[str, list[tuple[str, float]]]:
        """Cosine similarity of a query vector to every sentence of each document, in document
        order. Sentence vectors go through the embedding cache."""
        sents = {d: self.sentences(d) for d in dict.fromkeys(doc_ids)}
        flat = [s for d in sents for s in sents[d]]
        if not flat:
            return {}
        vecs = self.cache.get_or_compute(self.embedder, "passage", flat)
        vecs = vecs / np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)
        sims = vecs @ q
        out, i = {}, 0
        for d, ss in sents.items():
            out[d] = [(s, float(x)) for s, x in zip(ss, sims[i:i + len(ss)])]
            i += len(ss)
        return out

    def reference(self, q: np.ndarray) -> tuple[float, float]:
        """Mean and standard deviation of a query vector's similarity to every chunk of the
        knowledge base: the baseline against which a hit's support is judged. Raw cosines
        are not comparable across queries (e5's scores are compressed, and more so across
        languages); how far the best evidence stands out from the whole knowledge base is."""
        sims = self._vecs @ q
        return float(sims.mean()), float(sims.std())

    def latent(self, unit: str = "sentence"):
        """The knowledge base's latent-term view over its sentences or chunks (built once)."""
        if unit not in self._latent:
            from harness.corpus.latent import LatentView

            texts = [c.text for c in self.chunks] if unit == "chunk" else [s for d in self.docs for s in self.sentences(d)]
            self._latent[unit] = LatentView(texts, self.cache)
        return self._latent[unit]

    def sentences(self, doc_id: str) -> list[str]:
        return split_sentences(self.docs[doc_id].text) or [self.docs[doc_id].text]

    def chunk_texts(self, doc_id: str) -> list[str]:
        return [self.chunks[i].text for i in self._rows.get(doc_id, [])]

    def identifier_lane(self, identifiers: list[str], k: int, filters: list[dict] | None = None) -> Hits:
        """Exact identifier matches (4711-32 never matches 4711-33), filters applied."""
        if self.identifiers is None or not identifiers:
            return Hits([], [], "identifier")
        scores = self.identifiers.get_scores([i.lower() for i in identifiers])
        best = {}
        for i in np.nonzero(scores > 0)[0]:
            d = str(self._id_doc_arr[i])
            if not filters or matches(self.meta[d], filters):
                best[d] = float(scores[i])
        return _hits(best, k, "identifier")

    # --- lanes -------------------------------------------------------------------------------
    def embed_queries(self, texts: list[str]) -> np.ndarray:
        return self.cache.get_or_compute(self.embedder, "query", texts)

    def dense(self, queries: list[str], k: int, filters: list[list[dict]] | None = None,
              vectors: np.ndarray | None = None) -> list[Hits]:
        """Batched dense search; `vectors` overrides the query embeddings (e.g. HyDE mixes). A
        document scores its best chunk among the query's k * 3 best chunks (dense.exact_top).
        With a run's memo, a query searched before (same text or vector, filters, k) is reused."""
        if not queries:
            return []
        filters = filters or [[] for _ in queries]
        if self.memo is None:
            return self._dense(queries, k, filters, vectors)
        keys = [("dense", q, _filter_key(f), k, None if vectors is None else vectors[i].tobytes())
                for i, (q, f) in enumerate(zip(queries, filters))]
        out: list[Hits | None] = [None] * len(queries)
        for i, key in enumerate(keys):
            if (seen := self.memo.get(key)) is not None:
                out[i] = _reused(seen.value, seen.ms)
        todo = [i for i, h in enumerate(out) if h is None]
        if todo:
            t0 = time.perf_counter()
            got = self._dense([queries[i] for i in todo], k, [filters[i] for i in todo],
                              None if vectors is None else vectors[todo])
            ms = (time.perf_counter() - t0) * 1000 / len(todo)  # a batch: each query its share
            for i, hits in zip(todo, got):
                hits.ms = ms
                self.memo.put(keys[i], hits, ms)
                out[i] = hits
        return out

    def _dense(self, queries: list[str], k: int, filters: list[list[dict]], vectors: np.ndarray | None) -> list[Hits]:
        vecs = vectors if vectors is not None else self.embed_queries(queries)
        vecs = vecs / np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)
        return [self._best_docs(rows, scores, k, "dense") for rows, scores in self._dense_top(vecs, filters, k)]

    def _dense_top(self, vecs: np.ndarray, filters: list[list[dict]], k: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per query, the k * 3 best chunks (exact_top), where a document is the best of its
        chunks among them. When every document is one chunk, the k + 1 best suffice: if the k-th
        scores above the next, the k best documents are those k chunks whatever the rest (the
        engine returns about a third as many points as for k * 3); a tie there (or a NaN) asks for
        the k * 3."""
        if not self._chunk_per_doc or k < 1:
            return exact_top(self._lane, self._vecs64, vecs, filters, k * 3)
        found = exact_top(self._lane, self._vecs64, vecs, filters, k + 1)
        tied = [i for i, (_, scores) in enumerate(found) if len(scores) > k and not scores[k] < scores[k - 1]]  # NaN too
        if tied:
            for i, top in zip(tied, exact_top(self._lane, self._vecs64, vecs[tied], [filters[i] for i in tied], k * 3)):
                found[i] = top
        return found

    def _allowed_chunks(self, filters: list[dict]) -> np.ndarray:
        """Which chunks a filter keeps (`matches`, the identifier lane's predicate), per chunk
        row; built once per distinct filter; the lexical lane masks its scores with it."""
        key = _filter_key(filters)
        if key not in self._masks:
            self._masks[key] = np.array([matches(self.meta[c.doc_id], filters) for c in self.chunks], dtype=bool)
        return self._masks[key]

    def lexical(self, queries: list[str], k: int, filters: list[list[dict]] | None = None) -> list[Hits]:
        """BM25 per query; with a run's memo, a query searched before (filters, k) is reused, and one
        done ahead in a batch (bm25_many.search_ahead) counts its share of the batch's milliseconds."""
        filters = filters or [[] for _ in queries]
        if self.memo is None:
            return [self._lexical(q, k, f) for q, f in zip(queries, filters)]
        out = []
        for q, f in zip(queries, filters):
            hits, ms, reused = self.memo(("bm25", q, _filter_key(f), k), lambda: self._lexical(q, k, f))
            hits.ms = ms
            out.append(_reused(hits, ms) if reused else hits)
        return out

    def _lexical(self, q: str, k: int, f: list[dict]) -> Hits:
        toks = tokenize(q)
        if not toks:
            return Hits([], [], "bm25")
        scores = self.bm25.get_scores(toks)
        if f:
            scores = np.where(self._allowed_chunks(f), scores, 0.0)
        rows = np.nonzero(scores > 0)[0]
        return self._best_docs(rows, scores[rows], k, "bm25")

    def _best_docs(self, rows: np.ndarray, scores: np.ndarray, k: int, lane: str) -> Hits:
        """The k best documents of scored chunk rows (a document scores its best chunk), in
        `fusion.order`'s order (score descending, then doc id descending), without a Python
        loop over every matching chunk."""
        if not len(rows):
            return Hits([], [], lane)
        if self._chunk_per_doc:  # a chunk is its document: no grouping (the same order, half the time)
            docs, best = self._chunk_doc[rows], scores.astype(np.float64)
        else:
            docs, which = np.unique(self._chunk_doc[rows], return_inverse=True)  # ids ascending (their places)
            best = np.full(len(docs), -np.inf)
            np.maximum.at(best, which, scores.astype(np.float64))
        docs, best = _at_least_kth(docs, best, k)
        top = np.lexsort((-docs, -best))[:k]
        # one conversion per array, not one numpy scalar per hit
        return Hits(self._doc_name_objs[docs[top]].tolist(), best[top].tolist(), lane)

    def hybrid(self, queries: list[str], k: int, filters: list[list[dict]] | None = None,
               rrf_k: int = 60, depth: int | None = None) -> list[tuple[list[Hit], list[Hit]]]:
        """Dense and BM25 fused by RRF. Returns (fused hits, lane hits) per query."""
        depth = depth or max(k, 50)
        dense = self.dense(queries, depth, filters)
        lex = self.lexical(queries, depth, filters)
        out = []
        for dh, lh in zip(dense, lex):
            fused = rrf([[h.doc_id for h in dh], [h.doc_id for h in lh]], k=rrf_k, cap=k)
            out.append(([Hit(d, s, i + 1, "hybrid") for i, (d, s) in enumerate(fused)], dh + lh))
        return out

    def close(self):
        """Close the dense engine (the embedded one's shard folder is removed) and the local-mode copy, if made."""
        self._lane.close()
        if self._reference is not None:
            self._reference.close()


def _at_least_kth(docs: np.ndarray, best: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The documents scoring at least the k-th best score (all of them when there are k or fewer):
    the sort that orders the top k then sorts these only. Every document tied with the k-th stays,
    so the order of the top k, ties by doc id included, is the full sort's."""
    if len(best) <= k or k <= 0 or np.isnan(best).any():  # NaN: partition's order is not the sort's
        return docs, best
    kth = np.partition(best, len(best) - k)[len(best) - k]
    keep = best >= kth
    return docs[keep], best[keep]


def _hits(best: dict[str, float], k: int, lane: str) -> Hits:
    top = order(best)[:k]
    return Hits([d for d, _ in top], [s for _, s in top], lane)


def build_index(es, cfg) -> Index:
    """The index of a run config's `index:` section over the eval set's embedding cache (the
    shipped shards read-only, new vectors in `cfg.embedding_cache` or .cache/embeddings), or
    attached to the existing collection `cfg.collection` names. A problem with the server or
    the collection is a dense.IndexSetupError naming the field."""
    from harness.corpus.embed import eval_set_cache, make_embedder

    return Index(es.docs, make_embedder(cfg.embedder), eval_set_cache(es, cfg.embedding_cache),
                 max_chars=cfg.max_chars, qdrant_url=cfg.qdrant_url, collection=cfg.collection, vector=cfg.vector,
                 id_field=cfg.id_field or "doc_id", text_field=cfg.text_field or "text")
