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

from mesh.functions import Library
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

#: `_RECORD_LUA` as a Redis function library (`mesh.functions`: FCALL, no EVAL)
LIBRARY = Library.of("memory", record=_RECORD_LUA)

#: how long the once-per-outcome marker lives (a report later than this counts again)
MARKER_TTL_S = 7 * 86_400


def success_rate(good: int, bad: int) -> float:
    """Share of good outcomes with one imaginary success: 1.0 with no history, and one
    early failure does not sink a new agent to 0."""
    return (good + 1.0) / (good + bad + 1.0)


#: `record` answers: the slot written (>= 0), or why nothing was written
COUNTED_BEFORE, NOTHING_TO_LEARN, NOT_SAMPLED, ALREADY_KNOWN = -1, -2, -3, -4


@dataclass(frozen=True, slots=True)
class Outcome:
    """One outcome to record (`ExampleMemory.record_many`)."""

    agent_id: str
    task_id: str
    kind: Kind
    learn_text: str | None = None
    unlearn_text: str | None = None


@dataclass(frozen=True, slots=True)
class Memory:
    """One agent's learned texts (by reservoir slot) and outcome counters."""

    texts: tuple[str, ...]
    seen: int
    completed: int = 0
    failed: int = 0
    rejected: int = 0
    good: int = 0
    bad: int = 0
    #: the reservoir slot of each of `texts`
    slots: tuple[int, ...] = ()

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
        self._record = LIBRARY.bind(redis, "record")

    async def record(
        self,
        agent_id: str,
        task_id: str,
        kind: Kind,
        *,
        learn_text: str | None = None,
        unlearn_text: str | None = None,
    ) -> int:
        """Count one outcome of `task_id`; with `learn_text`, offer it to the reservoir
        (a text already held is not added twice); with `unlearn_text`, drop it (bad
        feedback on a task the agent completed: the text is not a good example of it).

        Returns the reservoir slot written, or `COUNTED_BEFORE` when this (task_id, kind)
        was counted already, `NOTHING_TO_LEARN`, `NOT_SAMPLED` or `ALREADY_KNOWN`.
        """
        (answer,) = await self.record_many(
            [Outcome(agent_id, task_id, kind, learn_text, unlearn_text)]
        )
        return answer

    async def record_many(self, outcomes: list[Outcome]) -> list[int]:
        """`record` for many outcomes in one pipelined round trip, answers in order."""
        if not outcomes:
            return []

        def fill(pipe: Any) -> None:
            for o in outcomes:
                self._record.queue(
                    pipe,
                    keys=[
                        self.keys.memory(o.agent_id),
                        self.keys.stats(o.agent_id),
                        self.keys.memory_marker(o.agent_id, f"{o.task_id}:{o.kind}"),
                        self.keys.memory_marker(o.agent_id, f"{o.task_id}:bad"),
                    ],
                    args=[
                        o.kind,
                        o.learn_text or "",
                        self.size,
                        MARKER_TTL_S,
                        self._rng.randrange(1 << 30),
                        o.unlearn_text or "",
                    ],
                )

        return [int(a) for a in await self._record.pipelined(fill)]

    async def load(self, agent_id: str) -> Memory:
        pipe = self.redis.pipeline(transaction=False)
        pipe.hgetall(self.keys.memory(agent_id))
        pipe.hgetall(self.keys.stats(agent_id))
        raw, stats = await pipe.execute()
        held = sorted(
            (int(f[len(b"slot:") :]), v.decode()) for f, v in raw.items() if f.startswith(b"slot:")
        )
        counts = {k.decode(): int(v) for k, v in stats.items()}
        return Memory(
            texts=tuple(text for _, text in held),
            slots=tuple(slot for slot, _ in held),
            seen=int(raw.get(b"seen", 0)),
            completed=counts.get("completed", 0),
            failed=counts.get("failed", 0),
            rejected=counts.get("rejected", 0),
            good=counts.get("good", 0),
            bad=counts.get("bad", 0),
        )

    async def forget(self, agent_id: str) -> None:
        await self.redis.delete(self.keys.memory(agent_id), self.keys.stats(agent_id))
