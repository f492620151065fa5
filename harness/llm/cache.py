"""Content-addressed LLM response cache in SQLite (WAL mode, safe for concurrent runs).

Key: sha256 of the canonical request (endpoint kind, model, HTTP path, JSON body with sorted
keys). Authorization and api-key headers never reach the key or the store, so a cache folder
shared between CI runs holds no secret. A row keeps the reply body, token usage and the
original latency. Errors are never cached.

Modes: readwrite (default), replay (a miss is an error naming the role and prompt), refresh
(ask again and overwrite), off."""
from __future__ import annotations

import functools
import hashlib
import json
import sqlite3
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from harness.errors import BadInput

MODES = ("readwrite", "replay", "refresh", "off")


def _retry(fn, attempts: int = 40):
    """Run an SQLite operation, retrying on "database is locked" with a growing pause (~20 s in all)."""
    for i in range(attempts):
        try:
            return fn()
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) and "busy" not in str(e) or i == attempts - 1:
                raise
            time.sleep(min(1.0, 0.02 * (i + 1)))


@dataclass
class CachedReply:
    body: bytes
    latency_ms: float
    created: float


# json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=False), its encoder built once:
# dumps builds one per call with these arguments, and a request takes a dozen
_ENCODE = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode


@functools.lru_cache(maxsize=256)  # a run hashes the same few system prompts on every call
def prompt_hash(text: str) -> str:
    """Short hash of a prompt text: the first 12 hex digits of sha256 over its UTF-8 bytes."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


def canonical_json(body: dict, known: dict[str, tuple[object, str]] | None = None) -> str:
    """A request body as the cache key serialises it (keys sorted, no spaces, UTF-8 kept): the
    LLM client sends this same text, so a request is serialised once. `known`: top-level values
    serialised before, {key: (value, its canonical_json)}, used where the body holds that very
    object (a role's response_format, the same on every call)."""
    if not known:
        return _ENCODE(body)
    parts = []
    for k in sorted(body):
        v = body[k]
        obj, text = known.get(k, _UNKNOWN)
        if obj is not v or text is None:
            text = _ENCODE(v)
        parts.append((_KEYS.get(k) or _key(k)) + text)
    return "{" + ",".join(parts) + "}"


_UNKNOWN = (None, None)
_KEYS: dict[str, str] = {}  # a body's key as canonical_json writes it, with its colon: a request has a handful


def _key(k: str) -> str:
    if len(_KEYS) > 256:
        _KEYS.clear()
    text = _KEYS[k] = _ENCODE(k) + ":"
    return text


def key_of_json(kind: str, path: str, body_json: str) -> str:
    """The cache key of a request whose body is given as its `canonical_json`: sha256 of
    {"body", "kind", "path"} serialised canonically (not serialised again)."""
    canon = '{"body":' + body_json + ',"kind":' + _ENCODE(kind) + ',"path":' + _ENCODE(path) + "}"
    return hashlib.sha256(canon.encode("utf-8")).hexdigest()


def request_key(kind: str, path: str, body: dict) -> str:
    """The cache key of a request body (see key_of_json)."""
    return key_of_json(kind, path, canonical_json(body))


class LLMCache:
    def __init__(self, folder: str | Path, mode: str = "readwrite"):
        if mode not in MODES:
            raise BadInput(f"cache mode {mode!r}: expected one of {', '.join(MODES)}")
        self.mode = mode
        self.folder = Path(folder)
        self.path = self.folder / "llm_cache.sqlite"
        self._local = threading.local()
        self._pending: dict[str, CachedReply] = {}  # written behind, not yet in the database
        self._writer: ThreadPoolExecutor | None = None
        self._writes: list[Future] = []
        self._queue: list[tuple] = []  # rows for the writer, taken in one transaction per batch
        self._lock = threading.Lock()
        self._draining = False
        # (event loop, key) -> asyncio.Event of a request sent and not yet settled (harness.llm.client)
        self.in_flight: dict[tuple[int, str], object] = {}
        if mode != "off":
            self.folder.mkdir(parents=True, exist_ok=True)
            c = self._conn()
            _retry(lambda: c.execute("CREATE TABLE IF NOT EXISTS replies (key TEXT PRIMARY KEY, kind TEXT, model TEXT, "
                                     "role TEXT, body BLOB NOT NULL, latency_ms REAL, created REAL)"))

    def _conn(self) -> sqlite3.Connection:
        c = getattr(self._local, "conn", None)
        if c is None:
            c = sqlite3.connect(self.path, timeout=30, isolation_level=None)
            c.execute("PRAGMA busy_timeout=30000")
            # switching to WAL needs an exclusive lock and may answer "locked" at once, without
            # the busy handler, while another process opens the same cache: retry with backoff
            _retry(lambda: c.execute("PRAGMA journal_mode=WAL"))
            c.execute("PRAGMA synchronous=NORMAL")
            self._local.conn = c
        return c

    def get(self, key: str) -> CachedReply | None:
        if self.mode in ("off", "refresh"):
            return None
        if (pending := self._pending.get(key)) is not None:
            return pending
        row = _retry(lambda: self._conn().execute("SELECT body, latency_ms, created FROM replies WHERE key=?", (key,)).fetchone())
        return CachedReply(bytes(row[0]), row[1], row[2]) if row else None

    def put(self, key: str, body: bytes, latency_ms: float, kind: str = "", model: str = "", role: str = "") -> None:
        if self.mode in ("off", "replay"):
            return
        _retry(lambda: self._conn().execute("INSERT OR REPLACE INTO replies VALUES (?,?,?,?,?,?,?)",
                                            (key, kind, model, role, body, latency_ms, time.time())))

    def put_later(self, key: str, body: bytes, latency_ms: float, kind: str = "", model: str = "", role: str = "") -> None:
        """`put` on the cache's writer thread, so the caller (the event loop) never waits for
        SQLite. `get` sees the reply at once; `flush()` waits until it is in the database. Replies
        that come in while the writer is busy are written together, in one transaction."""
        if self.mode in ("off", "replay"):
            return
        reply = CachedReply(body, latency_ms, time.time())
        self._pending[key] = reply
        with self._lock:
            self._queue.append((key, kind, model, role, body, latency_ms, reply.created, reply))
            if self._draining:
                return
            self._draining = True
        if self._writer is None:
            self._writer = ThreadPoolExecutor(1, thread_name_prefix="harness-llm-cache")
        self._writes = [f for f in self._writes if not f.done() or f.exception() is not None] + [self._writer.submit(self._drain)]

    def _drain(self) -> None:
        """Write the queued replies, batch by batch, until the queue is empty."""
        while True:
            with self._lock:
                batch, self._queue = self._queue, []
                if not batch:
                    self._draining = False
                    return
            try:
                _retry(lambda: self._write_batch([r[:7] for r in batch]))
            except BaseException:
                with self._lock:  # rows queued behind this batch: the next put_later or flush writes them
                    self._draining = False
                raise
            finally:
                for key, *_, reply in batch:
                    if self._pending.get(key) is reply:
                        del self._pending[key]

    def _write_batch(self, rows: list[tuple]) -> None:
        c = self._conn()
        c.execute("BEGIN IMMEDIATE")
        try:
            c.executemany("INSERT OR REPLACE INTO replies VALUES (?,?,?,?,?,?,?)", rows)
            c.execute("COMMIT")
        except BaseException:
            if c.in_transaction:
                c.execute("ROLLBACK")
            raise

    def flush(self) -> None:
        """Wait for the writes behind; the first failed one raises here (after the rows queued
        behind it are written)."""
        writes, self._writes = self._writes, []
        error = None
        for f in writes:
            try:
                f.result()
            except BaseException as e:
                error = error or e
        with self._lock:
            leftover = bool(self._queue) and not self._draining
            self._draining = self._draining or leftover
        if leftover:
            self._writer.submit(self._drain).result()
        if error is not None:
            raise error

    def __len__(self) -> int:
        if self.mode == "off":
            return 0
        return self._conn().execute("SELECT COUNT(*) FROM replies").fetchone()[0]
