"""The index's lexical statistics over its own chunks: the chunks of the documents, a BM25 index
over their tokens and the identifier lane (a BM25 index over the identifiers of each document),
built once per content and kept on disk beside the embeddings new vectors go to
(`<embedding cache>/lexical/<key>`), so every process of a run, and every run after, loads them
instead of building them again.

The key is a hash of everything the statistics are computed from: each document (id, title, text,
metadata) in order, `max_chars`, the source of the code that computes them (this module, the
chunker, the tokenizer, the identifier finder) and the versions of bm25s, numpy and Python. So an
entry can never be stale: any change to what goes in makes another key. An entry is written under
a temporary name and renamed, so a reader never sees half of one; an entry that cannot be read is
built again (and replaced)."""
from __future__ import annotations

import hashlib
import importlib
import json
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from harness.corpus.chunk import Chunk, chunk_document
from harness.corpus.tokenize import tokenize

FORMAT = 1  # what an entry holds; raised when that changes
_PACKAGE = Path(__file__).resolve().parents[1]
SOURCES = ("corpus/lexical.py", "corpus/chunk.py", "corpus/tokenize.py", "guards/identifiers.py")


def bm25s_module():
    """bm25s, imported without numba and scipy unless they are loaded already: its lanes use bm25s's
    numpy backend and numpy CSC builder (`bm25s.BM25()`'s defaults), and bm25s imports both when it
    can, and both are slow to import (the same scores either way: tests/corpus/test_shared_work.py)."""
    if "bm25s" in sys.modules:
        return sys.modules["bm25s"]
    absent = [m for m in ("numba", "scipy.sparse") if m not in sys.modules]
    sys.modules.update(dict.fromkeys(absent))  # `import numba` raises ImportError: bm25s's own fallback
    try:
        return importlib.import_module("bm25s")
    finally:
        for m in absent:
            del sys.modules[m]


def bm25(tokens: list[list[str]]):
    """A BM25 index (bm25s, numpy backend, whether or not numba or scipy is around) over `tokens`."""
    index = bm25s_module().BM25(backend="numpy", csc_backend="numpy")
    index.index(tokens, show_progress=False)
    return index


@dataclass
class Lexical:
    chunks: list[Chunk]
    bm25: object  # over the chunks' tokens
    id_docs: list[str]  # the documents with identifiers, in order
    identifiers: object | None  # over their identifiers (None: no document has one)


def chunks_of(docs: dict, max_chars: int) -> list[Chunk]:
    return [c for d in docs.values() for c in chunk_document(d.doc_id, d.title, d.text, max_chars)]


def identifier_lane(docs: dict) -> tuple[list[str], object | None]:
    """A BM25 index over identifier tokens only (part numbers, EANs, drawing numbers in a
    document's title, text and string metadata), each identifier one whole token."""
    from harness.guards.identifiers import find_identifiers

    id_docs: list[str] = []
    toks: list[list[str]] = []
    for d in docs.values():
        strings = [d.title, d.text] + [str(v) for v in d.metadata.values() if isinstance(v, (str, int))]
        ids = find_identifiers(" ".join(strings))
        if ids:
            id_docs.append(d.doc_id)
            toks.append([i.lower() for i in ids])
    return id_docs, bm25(toks) if toks else None


def of_chunks(chunks: list[Chunk], docs: dict) -> Lexical:
    """The statistics of given chunks of `docs` (the index's own, or an existing collection's)."""
    id_docs, identifiers = identifier_lane(docs)
    return Lexical(chunks, bm25([tokenize(c.text) or ["_empty_"] for c in chunks]), id_docs, identifiers)


def build(docs: dict, max_chars: int) -> Lexical:
    return of_chunks(chunks_of(docs, max_chars), docs)


def key(docs: dict, max_chars: int) -> str:
    """The hash of everything the statistics of `docs` are computed from (the module's docstring)."""
    h = hashlib.sha256(json.dumps([FORMAT, max_chars, bm25s_module().__version__, np.__version__, sys.version]).encode())
    for rel in SOURCES:
        h.update(rel.encode() + b"\0" + (_PACKAGE / rel).read_bytes() + b"\0")
    for d in docs.values():
        meta = json.dumps(d.metadata, sort_keys=True, ensure_ascii=False, default=repr)
        h.update(json.dumps([d.doc_id, d.title, d.text, meta], ensure_ascii=False).encode() + b"\0")
    return h.hexdigest()[:32]


def statistics(docs: dict, max_chars: int, folder: Path | None) -> Lexical:
    """The lexical statistics of `docs`: loaded from `folder/<key>` when there, else built and
    written there (`folder` None: built, not kept)."""
    if folder is None:
        return build(docs, max_chars)
    bm25s_module()
    entry = Path(folder) / key(docs, max_chars)
    if entry.is_dir():
        try:
            return _load(entry)
        except (OSError, ValueError, KeyError) as e:  # damaged: build it again
            print(f"warning: {entry}: unreadable ({type(e).__name__}: {e}); building it again", file=sys.stderr)
            shutil.rmtree(entry, ignore_errors=True)
    lex = build(docs, max_chars)
    try:
        _save(lex, entry)
    except OSError as e:  # a read-only or full disk costs the next run the build, nothing else
        print(f"warning: {entry}: not written ({e})", file=sys.stderr)
    return lex


def _save(lex: Lexical, entry: Path) -> None:
    entry.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{entry.name}-", dir=entry.parent))
    try:
        (tmp / "chunks.json").write_text(json.dumps({"chunks": [[c.chunk_id, c.doc_id, c.text] for c in lex.chunks],
                                                     "id_docs": lex.id_docs}, ensure_ascii=False), encoding="utf-8")
        lex.bm25.save(tmp / "bm25", show_progress=False)
        if lex.identifiers is not None:
            lex.identifiers.save(tmp / "identifiers", show_progress=False)
        try:
            os.rename(tmp, entry)
        except OSError:  # another process wrote it meanwhile: the same content
            if not entry.is_dir():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _load(entry: Path) -> Lexical:
    bm25s = bm25s_module()
    raw = json.loads((entry / "chunks.json").read_text(encoding="utf-8"))
    chunks = [Chunk(*c) for c in raw["chunks"]]
    identifiers = bm25s.BM25.load(entry / "identifiers") if (entry / "identifiers").is_dir() else None
    if bool(raw["id_docs"]) != (identifiers is not None):
        raise ValueError("the identifier lane and its documents disagree")
    return Lexical(chunks, bm25s.BM25.load(entry / "bm25"), raw["id_docs"], identifiers)
