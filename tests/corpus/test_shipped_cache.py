"""The bundled eval sets ship their embedding cache: every chunk of every demo config is in it,
so `make demo` on a fresh machine embeds no document."""
import re

import pytest

from harness.config import load_config
from harness.corpus.chunk import chunk_document
from harness.corpus.embed import EmbeddingCache, make_embedder
from harness.evalset.load import load_eval_set
from tests.conftest import ROOT


def demo_configs():
    text = (ROOT / "Makefile").read_text()
    m = re.search(r"^DEMO_CONFIGS \?= (.+)$", text, re.M)
    return m.group(1).split()


@pytest.mark.parametrize("config", demo_configs())
def test_shipped_cache_covers_every_chunk(config):
    cfg, _ = load_config(ROOT / config)
    es = load_eval_set(ROOT / cfg.eval_set)
    emb = make_embedder(cfg.index.embedder)
    texts = [c.text for d in es.docs.values() for c in chunk_document(d.doc_id, d.title, d.text, cfg.index.max_chars)]
    missing = EmbeddingCache(ROOT / cfg.eval_set / "embeddings").covers(emb.name, "passage", texts)
    assert not missing, f"{len(missing)} of {len(texts)} chunks of {cfg.eval_set} are not in the shipped cache"
