"""Micro-batching of query embeddings: envelopes queued together are embedded together.

`QueryBatcher.embed(text)` returns the text's vector. Texts that arrive while a batch is
being embedded wait for the next one, which takes up to `batch_size` of them in one call
of the embedder (in a worker thread, so the event loop keeps consuming). A single query on
an idle router is embedded at once: batching adds no latency, it only absorbs bursts.

Under load (the last batch held several texts, or texts arrived while one was embedded)
a batch waits `GATHER_S` for more before it goes: one call and one hop to the worker
thread for many texts, and the wait is small beside the queueing it saves. The model's own
cost per text hardly falls with the batch (USE-m3 on one thread, measured 2026-12-06: 0.80
ms of CPU per text alone, 0.70-0.76 in batches of 4 to 16).

A lone text on a router that is not under load is embedded on the event loop itself when
the last lone text took at most `INLINE_S`: at a few tasks a second, the hop to the worker
thread and back (a wake-up of each thread, on another core with cold caches) cost more CPU
than the half millisecond of the int8 model it hands over. A slower model (or a slow
moment) sends lone texts to the worker thread again, where they are timed anew.
"""

from __future__ import annotations

import asyncio
import logging
import time

import numpy as np
from numpy.typing import NDArray

from mesh.router.embedding import Embedder, cached_vectors

logger = logging.getLogger(__name__)

#: under load, how long a batch waits for more texts before it is embedded
GATHER_S = 0.002
#: a lone text is embedded on the event loop while the last lone text took at most this
INLINE_S = 0.002


class QueryBatcher:
    def __init__(self, embedder: Embedder, batch_size: int = 64) -> None:
        self.embedder = embedder
        self.batch_size = batch_size
        self._queue: list[tuple[str, asyncio.Future[NDArray[np.float32]]]] = []
        self._running: asyncio.Task[None] | None = None
        self.batches = 0
        self.texts = 0
        #: the last batch held several texts, or texts queued while it was embedded
        self._loaded = False
        #: seconds the last lone text took to embed (None: none yet)
        self._lone_s: float | None = None
        #: lone texts embedded on the event loop
        self.inline = 0

    async def embed(self, text: str) -> NDArray[np.float32]:
        fut: asyncio.Future[NDArray[np.float32]] = asyncio.get_running_loop().create_future()
        self._queue.append((text, fut))
        if self._running is None or self._running.done():
            self._running = asyncio.create_task(self._drain())
        return await fut

    async def _drain(self) -> None:
        while self._queue:
            if self._loaded and len(self._queue) < self.batch_size:
                await asyncio.sleep(GATHER_S)
            batch, self._queue = self._queue[: self.batch_size], self._queue[self.batch_size :]
            texts = [t for t, _ in batch]
            try:
                # texts the cache holds (a retry, a repeated request) skip the worker thread
                vectors = cached_vectors(self.embedder, texts)
                if vectors is None:
                    vectors = await self._embed(texts)
            except Exception as exc:  # handed to every waiter; the batcher keeps going
                logger.error("embedding a batch of %d failed", len(texts), exc_info=True)
                for _, fut in batch:
                    if not fut.done():
                        fut.set_exception(exc)
                continue
            self.batches += 1
            self.texts += len(texts)
            self._loaded = len(texts) > 1 or bool(self._queue)
            for (_, fut), vec in zip(batch, vectors, strict=True):
                if not fut.done():
                    fut.set_result(vec)

    async def _embed(self, texts: list[str]) -> NDArray[np.float32]:
        lone = len(texts) == 1
        last = self._lone_s
        started = time.perf_counter()
        if lone and not self._loaded and last is not None and last <= INLINE_S:
            vectors = self.embedder.embed(texts)
            self.inline += 1
        else:
            vectors = await asyncio.to_thread(self.embedder.embed, texts)
        if lone:
            self._lone_s = time.perf_counter() - started
        return vectors

    async def close(self) -> None:
        task, self._running = self._running, None
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
