"""Capability vectors, computed once per text and model and cached in Redis.

Registration texts (capability text, examples, learned texts) are embedded when an agent
joins; every router of the mesh shares the results through Redis, keyed by the model id
and a hash of the text, so a router restart or a second router does not embed them again.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from mesh.keys import Keys
from mesh.router.embedding import Embedder

#: cached vectors expire when unused this long (they are cheap to recompute)
VECTOR_TTL_S = 30 * 86_400


def text_hash(text: str) -> str:
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


class VectorCache:
    """Embeds texts through `embedder`, reading and filling the Redis cache."""

    def __init__(self, redis: Any, keys: Keys, embedder: Embedder) -> None:
        self.redis = redis
        self.keys = keys
        self.embedder = embedder
        self.hits = 0
        self.misses = 0

    async def embed(self, texts: Sequence[str]) -> NDArray[np.float32]:
        """Unit vectors of `texts`, ``(len(texts), dim)``; misses are embedded in one batch."""
        dim = self.embedder.dim
        out = np.zeros((len(texts), dim), np.float32)
        if not texts:
            return out
        names = [self.keys.embedding(self.embedder.model_id, text_hash(t)) for t in texts]
        cached = await self.redis.mget(names)
        missing = []
        for i, blob in enumerate(cached):
            if blob is not None and len(blob) == dim * 4:
                out[i] = np.frombuffer(blob, np.float32)
            else:
                missing.append(i)
        self.hits += len(texts) - len(missing)
        self.misses += len(missing)
        if missing:
            unique = sorted({texts[i] for i in missing})
            vectors = await asyncio.to_thread(self.embedder.embed, unique)
            by_text = dict(zip(unique, vectors, strict=True))
            pipe = self.redis.pipeline(transaction=False)
            for i in missing:
                out[i] = by_text[texts[i]]
            for text, vec in by_text.items():
                key = self.keys.embedding(self.embedder.model_id, text_hash(text))
                pipe.set(key, np.asarray(vec, np.float32).tobytes(), ex=VECTOR_TTL_S)
            await pipe.execute()
        return out
