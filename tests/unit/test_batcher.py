from __future__ import annotations

import asyncio

import numpy as np

from mesh.router.batcher import QueryBatcher
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
