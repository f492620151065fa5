"""Work shared within a run: the arms of a turn issue the same queries (the original turn, the
same offline rewrite, its variants), and a lane's ranking for a query, filters and depth (or an
offline role's output for a state) is the same whichever arm asks. A replay gives its index a
`Memo` for the run (harness/run/replay.py); the first arm to ask computes, the others reuse.

What a reuse costs is not what it would cost the arm alone: a hit carries the milliseconds the
work took when it was computed, and the arm records those (as a cached LLM reply records its
stored latency), so an arm's timings do not depend on which arm happened to ask first. BM25
searches the turns of one retrieval batch announced are done together (harness/corpus/bm25_many.py)
and kept here until asked for (`expected`, `ahead`): each counts its share of the batch.

Bounded (least recently used entries go first) and safe across threads. The replay runs a
turn's arms next to each other (turn-major jobs), so a few thousand entries cover the turns in
flight however large the eval set."""
from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Hashable

SIZE = 4096


@dataclass(frozen=True)
class Reused:
    """A value computed earlier in the run, and the milliseconds computing it took."""

    value: Any
    ms: float


class Memo:
    def __init__(self, size: int = SIZE):
        self.size = size
        self._entries: OrderedDict[Hashable, tuple[Any, float]] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        # BM25 searches the loop announced for the retrieval thread, (key, query, k, filters), and
        # those done ahead in one batch, key -> (hits, ms), until their turn asks (harness/corpus/bm25_many.py)
        self.expected: list[tuple] = []
        self.ahead: dict[Hashable, tuple[Any, float]] = {}

    def __contains__(self, key: Hashable) -> bool:
        """Whether the run computed `key` already (not counted as a reuse)."""
        return key in self._entries

    def get(self, key: Hashable) -> Reused | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            self._entries.move_to_end(key)
            self.hits += 1
        return Reused(*entry)

    def put(self, key: Hashable, value: Any, ms: float) -> None:
        with self._lock:
            self.misses += 1
            self._entries[key] = (value, ms)
            self._entries.move_to_end(key)
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)

    def __call__(self, key: Hashable, compute: Callable[[], Any]) -> tuple[Any, float, bool]:
        """(value, milliseconds it took when computed, whether it was computed before this call:
        reused, or done ahead in a batch, whose share it counts)."""
        seen = self.get(key)
        if seen is not None:
            return seen.value, seen.ms, True
        ahead = self.ahead.pop(key, None)
        if ahead is not None:
            self.put(key, *ahead)
            return ahead[0], ahead[1], True
        t0 = time.perf_counter()
        value = compute()
        ms = (time.perf_counter() - t0) * 1000
        self.put(key, value, ms)
        return value, ms, False


def shared(memo: Memo | None, key: Hashable, compute: Callable[[], Any]) -> Any:
    """`compute()`, or its value from `memo` as `Reused` (with the milliseconds it took) when an
    arm of the run computed it already. Without a memo, always `compute()`."""
    if memo is None:
        return compute()
    value, ms, reused = memo(key, compute)
    return Reused(value, ms) if reused else value
