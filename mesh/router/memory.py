"""The learned example memory of each agent, kept in Redis so it survives router restarts.

Per agent a bounded reservoir (Algorithm R, `example_memory_size` slots, default 50) of the
texts of tasks it completed well, plus a count of bad outcomes (bad feedback, rejections).
Every outcome is counted once per task_id, whichever router or client reports it, so
competing routers and repeated feedback cannot inflate the memory.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from mesh.keys import Keys

#: KEYS: memory hash, once-per-task marker; ARGV: text, size, good (1/0), marker ttl, random
_RECORD_LUA = """
if redis.call('SET', KEYS[2], '1', 'NX', 'EX', tonumber(ARGV[4])) == false then
  return -1
end
if ARGV[3] ~= '1' then
  redis.call('HINCRBY', KEYS[1], 'bad', 1)
  return -2
end
local size = tonumber(ARGV[2])
local n = redis.call('HINCRBY', KEYS[1], 'seen', 1)
local slot = n - 1
if n > size then
  slot = tonumber(ARGV[5]) % n
  if slot >= size then return -3 end
end
redis.call('HSET', KEYS[1], 'slot:' .. slot, ARGV[1])
return slot
"""

#: how long the once-per-task marker lives (feedback later than this counts again)
MARKER_TTL_S = 7 * 86_400


@dataclass(frozen=True, slots=True)
class Memory:
    """One agent's learned texts and counters."""

    texts: tuple[str, ...]
    seen: int
    bad: int


class ExampleMemory:
    """Reads and records learned examples in Redis."""

    def __init__(self, redis: Any, keys: Keys, size: int = 50) -> None:
        self.redis = redis
        self.keys = keys
        self.size = size
        self._rng = random.Random()

    async def record(self, agent_id: str, task_id: str, text: str, *, good: bool) -> bool:
        """Count one outcome of `task_id` for `agent_id`; False when it was counted before.

        `task_id` may be suffixed by the caller to separate kinds of outcome (a task's
        completion and later feedback on it are two outcomes).
        """
        answer = await self.redis.eval(
            _RECORD_LUA,
            2,
            self.keys.memory(agent_id),
            self.keys.memory_marker(agent_id, task_id),
            text,
            self.size,
            "1" if good else "0",
            MARKER_TTL_S,
            self._rng.randrange(1 << 30),
        )
        return int(answer) != -1

    async def load(self, agent_id: str) -> Memory:
        raw: dict[bytes, bytes] = await self.redis.hgetall(self.keys.memory(agent_id))
        texts = []
        for field, value in sorted(raw.items()):
            if field.startswith(b"slot:"):
                texts.append(value.decode())
        return Memory(
            texts=tuple(texts),
            seen=int(raw.get(b"seen", 0)),
            bad=int(raw.get(b"bad", 0)),
        )

    async def forget(self, agent_id: str) -> None:
        await self.redis.delete(self.keys.memory(agent_id))
