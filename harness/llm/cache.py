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


@functools.lru_cache(maxsize=256)  # a run hashes the same few system prompts on every call
def prompt_hash(text: str) -> str:
    """Short hash of a prompt text: the first 12 hex digits of sha256 over its UTF-8 bytes."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


def request_key(kind: str, path: str, body: dict) -> str:
    canon = json.dumps({"kind": kind, "path": path, "body": body}, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canon.encode("utf-8")).hexdigest()


class LLMCache:
    def __init__(self, folder: str | Path, mode: str = "readwrite"):
        if mode not in MODES:
            raise ValueError(f"cache mode {mode!r}: expected one of {', '.join(MODES)}")
        self.mode = mode
        self.folder = Path(folder)
        self.path = self.folder / "llm_cache.sqlite"
        self._local = threading.local()
        self._pending: dict[str, CachedReply] = {}  # written behind, not yet in the database
        self._writer: ThreadPoolExecutor | None = None
        self._writes: list[Future] = []
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
        SQLite. `get` sees the reply at once; `flush()` waits until it is in the database."""
        if self.mode in ("off", "replay"):
            return
        reply = CachedReply(body, latency_ms, time.time())
        self._pending[key] = reply

        def write():
            try:
                self.put(key, body, latency_ms, kind=kind, model=model, role=role)
            finally:
                if self._pending.get(key) is reply:
                    del self._pending[key]

        if self._writer is None:
            self._writer = ThreadPoolExecutor(1, thread_name_prefix="harness-llm-cache")
        self._writes = [f for f in self._writes if not f.done() or f.exception() is not None] + [self._writer.submit(write)]

    def flush(self) -> None:
        """Wait for the writes behind; the first failed one raises here."""
        writes, self._writes = self._writes, []
        for f in writes:
            f.result()

    def __len__(self) -> int:
        if self.mode == "off":
            return 0
        return self._conn().execute("SELECT COUNT(*) FROM replies").fetchone()[0]
