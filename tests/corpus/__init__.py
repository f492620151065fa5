"""Tests of harness/corpus: the index, its lanes, embeddings and caches."""
