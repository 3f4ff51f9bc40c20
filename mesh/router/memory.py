"""What the mesh learns from outcomes, kept in Redis so it survives router restarts.

Per agent:
- a bounded reservoir (Algorithm R, `example_memory_size` slots, default 50) of the texts
  of tasks it completed well (completed and not rerouted, or `good` feedback);
- outcome counters (completed, failed, rejected, good and bad feedback), from which the
  router derives the success rate it weighs.

Every outcome is counted once per (task_id, kind), whichever router or client reports it,
so competing routers and repeated feedback cannot inflate the memory or the counters.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Literal

from mesh.keys import Keys

Kind = Literal["completed", "failed", "rejected", "good", "bad"]

#: KEYS: memory hash, stats hash, once-per-outcome marker, veto marker (its presence
#: forbids learning: a completion that `bad` feedback overtook)
#: ARGV: kind, text to learn ('' = none), size, marker ttl, random, text to unlearn ('' = none)
#: Returns the slot written, or -1 counted before, -2 nothing to learn, -3 not sampled,
#: -4 already known.
_RECORD_LUA = """
if redis.call('SET', KEYS[3], '1', 'NX', 'EX', tonumber(ARGV[4])) == false then
  return -1
end
redis.call('HINCRBY', KEYS[2], ARGV[1], 1)
local flat = redis.call('HGETALL', KEYS[1])
local filled = {}
local count = 0
for i = 1, #flat, 2 do
  if string.sub(flat[i], 1, 5) == 'slot:' then
    if ARGV[6] ~= '' and flat[i + 1] == ARGV[6] then
      redis.call('HDEL', KEYS[1], flat[i])
    else
      if flat[i + 1] == ARGV[2] then return -4 end
      filled[flat[i]] = true
      count = count + 1
    end
  end
end
if ARGV[2] == '' or redis.call('EXISTS', KEYS[4]) == 1 then return -2 end
local size = tonumber(ARGV[3])
local n = redis.call('HINCRBY', KEYS[1], 'seen', 1)
if count < size then
  for s = 0, size - 1 do
    if not filled['slot:' .. s] then
      redis.call('HSET', KEYS[1], 'slot:' .. s, ARGV[2])
      return s
    end
  end
end
local slot = tonumber(ARGV[5]) % n
if slot >= size then return -3 end
redis.call('HSET', KEYS[1], 'slot:' .. slot, ARGV[2])
return slot
"""

#: how long the once-per-outcome marker lives (a report later than this counts again)
MARKER_TTL_S = 7 * 86_400


def success_rate(good: int, bad: int) -> float:
    """Share of good outcomes with one imaginary success: 1.0 with no history, and one
    early failure does not sink a new agent to 0."""
    return (good + 1.0) / (good + bad + 1.0)


@dataclass(frozen=True, slots=True)
class Memory:
    """One agent's learned texts and outcome counters."""

    texts: tuple[str, ...]
    seen: int
    completed: int = 0
    failed: int = 0
    rejected: int = 0
    good: int = 0
    bad: int = 0

    @property
    def success_rate(self) -> float:
        return success_rate(self.completed + self.good, self.failed + self.rejected + self.bad)

    @property
    def outcomes(self) -> int:
        return self.completed + self.failed + self.rejected


class ExampleMemory:
    """Reads and records outcomes and learned examples in Redis."""

    def __init__(self, redis: Any, keys: Keys, size: int = 50) -> None:
        self.redis = redis
        self.keys = keys
        self.size = size
        self._rng = random.Random()

    async def record(
        self,
        agent_id: str,
        task_id: str,
        kind: Kind,
        *,
        learn_text: str | None = None,
        unlearn_text: str | None = None,
    ) -> bool:
        """Count one outcome of `task_id`; with `learn_text`, offer it to the reservoir
        (a text already held is not added twice); with `unlearn_text`, drop it (bad
        feedback on a task the agent completed: the text is not a good example of it).

        Returns False when this (task_id, kind) was already counted.
        """
        answer = await self.redis.eval(
            _RECORD_LUA,
            4,
            self.keys.memory(agent_id),
            self.keys.stats(agent_id),
            self.keys.memory_marker(agent_id, f"{task_id}:{kind}"),
            self.keys.memory_marker(agent_id, f"{task_id}:bad"),
            kind,
            learn_text or "",
            self.size,
            MARKER_TTL_S,
            self._rng.randrange(1 << 30),
            unlearn_text or "",
        )
        return int(answer) != -1

    async def load(self, agent_id: str) -> Memory:
        pipe = self.redis.pipeline(transaction=False)
        pipe.hgetall(self.keys.memory(agent_id))
        pipe.hgetall(self.keys.stats(agent_id))
        raw, stats = await pipe.execute()
        texts = [v.decode() for f, v in sorted(raw.items()) if f.startswith(b"slot:")]
        counts = {k.decode(): int(v) for k, v in stats.items()}
        return Memory(
            texts=tuple(texts),
            seen=int(raw.get(b"seen", 0)),
            completed=counts.get("completed", 0),
            failed=counts.get("failed", 0),
            rejected=counts.get("rejected", 0),
            good=counts.get("good", 0),
            bad=counts.get("bad", 0),
        )

    async def forget(self, agent_id: str) -> None:
        await self.redis.delete(self.keys.memory(agent_id), self.keys.stats(agent_id))
