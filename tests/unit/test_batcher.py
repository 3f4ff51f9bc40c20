from __future__ import annotations

import asyncio
import threading
import time

import numpy as np
import pytest

from mesh.router import batcher as batcher_module
from mesh.router.batcher import INLINE_S, QueryBatcher
from mesh.router.embedding import HashEmbedder


async def test_concurrent_queries_share_batches_and_get_their_own_vectors() -> None:
    embedder = HashEmbedder(dim=64)
    embedder.start()
    batcher = QueryBatcher(embedder, batch_size=8)
    texts = [f"query number {i}" for i in range(20)]
    vectors = await asyncio.gather(*(batcher.embed(t) for t in texts))
    expected = embedder.embed(texts)
    assert np.allclose(np.stack(vectors), expected)
    assert batcher.texts == 20
    assert batcher.batches < 20  # bursts were batched
    await batcher.close()


async def test_a_failing_batch_fails_its_waiters_only() -> None:
    class Flaky(HashEmbedder):
        def embed(self, texts):  # type: ignore[no-untyped-def]
            if "boom" in texts:
                raise RuntimeError("model crashed")
            return super().embed(texts)

    embedder = Flaky(dim=16)
    embedder.start()
    batcher = QueryBatcher(embedder, batch_size=1)
    bad, good = await asyncio.gather(
        batcher.embed("boom"), batcher.embed("fine"), return_exceptions=True
    )
    assert isinstance(bad, RuntimeError)
    assert isinstance(good, np.ndarray)
    await batcher.close()


class Recording(HashEmbedder):
    def __init__(self) -> None:
        super().__init__(dim=16)
        self.sizes: list[int] = []

    def embed(self, texts):  # type: ignore[no-untyped-def]
        self.sizes.append(len(texts))
        return super().embed(texts)


async def test_an_idle_router_embeds_a_lone_query_alone_and_a_loaded_one_gathers() -> None:
    embedder = Recording()
    embedder.start()
    batcher = QueryBatcher(embedder, batch_size=8)
    await batcher.embed("alone")  # idle: embedded at once, on its own
    await asyncio.gather(*(batcher.embed(f"burst {i}") for i in range(3)))
    assert embedder.sizes == [1, 3]

    # under load, a text that comes a moment after another joins its batch
    async def late() -> np.ndarray:
        await asyncio.sleep(0)  # one turn of the loop: the first text's batch has begun
        return await batcher.embed("second")

    first, second = await asyncio.gather(batcher.embed("first"), late())
    assert embedder.sizes == [1, 3, 2]
    assert np.allclose(np.stack([first, second]), embedder.embed(["first", "second"]))
    await batcher.close()


class Threads(HashEmbedder):
    """Records the thread each call ran on; `delay_s` makes the model slow."""

    def __init__(self, delay_s: float = 0.0) -> None:
        super().__init__(dim=16)
        self.delay_s = delay_s
        self.threads: list[int] = []

    def embed(self, texts):  # type: ignore[no-untyped-def]
        self.threads.append(threading.get_ident())
        if self.delay_s:
            time.sleep(self.delay_s)
        return super().embed(texts)


async def test_a_lone_query_on_an_idle_router_is_embedded_on_the_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # how quick counts as quick is not what is tested: a slow moment of a shared machine
    # must not send the test's lone texts to the worker thread
    monkeypatch.setattr(batcher_module, "INLINE_S", 1.0)
    embedder = Threads()
    embedder.start()
    batcher = QueryBatcher(embedder)
    loop_thread = threading.get_ident()
    first = await batcher.embed("one")  # its cost is not known yet: the worker thread
    second = await batcher.embed("two")  # known to be quick: on the loop
    third = await batcher.embed("three")
    assert embedder.threads[0] != loop_thread
    assert embedder.threads[1:] == [loop_thread, loop_thread]
    assert batcher.inline == 2
    assert np.allclose(np.stack([first, second, third]), embedder.embed(["one", "two", "three"]))
    # a burst goes to the worker thread again
    embedder.threads.clear()
    await asyncio.gather(*(batcher.embed(f"burst {i}") for i in range(3)))
    assert loop_thread not in embedder.threads
    await batcher.close()


async def test_a_slow_model_never_runs_on_the_loop() -> None:
    embedder = Threads(delay_s=2 * INLINE_S)
    embedder.start()
    batcher = QueryBatcher(embedder)
    for i in range(3):
        await batcher.embed(f"lone {i}")
    assert threading.get_ident() not in embedder.threads and batcher.inline == 0
    await batcher.close()
