"""The registry's read model: agents and their instances, as loaded from Redis.

`load_state` reads everything in three pipelined round trips; `AgentSnapshot` keeps the
same objects up to date from events, and `mesh agents` prints them. Liveness is decided at
read time from ``lease_expires_ms``: an instance whose lease has lapsed is not live even if
no ``agent.down`` has been seen yet.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from mesh.functions import Library
from mesh.keys import Keys
from mesh.schemas import InvalidEnvelope, Registration, decode


@dataclass(frozen=True, slots=True)
class InstanceState:
    """One process of an agent, as the registry last knew it."""

    instance_id: str
    agent_id: str
    token: int
    status: str
    lease_expires_ms: int
    last_heartbeat_ms: int = 0
    registered_ms: int = 0
    in_flight: int = 0
    max_concurrency: int = 1
    #: tasks the worker reports stuck (handler ended long ago, delivery never settled)
    stuck: int = 0
    version: str = ""
    down_reason: str | None = None
    #: when the registry marked it down (epoch ms; 0: up, or not known)
    down_ms: int = 0

    def is_live(self, now_ms: int) -> bool:
        """Up and its lease not lapsed at `now_ms` (the fencing rule, evaluated locally)."""
        return self.status == "up" and self.lease_expires_ms >= now_ms

    @property
    def lease_ended_ms(self) -> int:
        """When its lease ended (or ends): the lease's end, or the moment it went down
        when that was earlier (a deregistration ends the lease before its time)."""
        if self.status != "up" and self.down_ms:
            return min(self.lease_expires_ms, self.down_ms)
        return self.lease_expires_ms

    def display_status(self, now_ms: int) -> str:
        """``idle``, ``busy``, ``stuck`` or ``down`` (a lapsed lease counts as down)."""
        if not self.is_live(now_ms):
            return "down"
        if self.stuck > 0:
            return "stuck"
        return "busy" if self.in_flight > 0 else "idle"

    @classmethod
    def from_hash(cls, raw: dict[Any, Any]) -> InstanceState | None:
        """Parse an instance hash (bytes or str fields); None when it is incomplete."""
        h = {_s(k): _s(v) for k, v in raw.items()}
        try:
            return cls(
                instance_id=h["instance_id"],
                agent_id=h["agent_id"],
                token=int(h["token"]),
                status=h["status"],
                lease_expires_ms=int(h["lease_expires_ms"]),
                last_heartbeat_ms=int(h.get("last_heartbeat_ms", 0)),
                registered_ms=int(h.get("registered_ms", 0)),
                in_flight=int(h.get("in_flight", 0)),
                max_concurrency=int(h.get("max_concurrency", 1)),
                stuck=int(h.get("stuck", 0)),
                version=h.get("version", ""),
                down_reason=h.get("down_reason"),
                down_ms=int(h.get("down_ms", 0)),
            )
        except (KeyError, ValueError):
            return None


@dataclass(slots=True)
class AgentState:
    """A logical agent: its capability data and its instances (live or not)."""

    agent_id: str
    registration: Registration | None = None
    instances: dict[str, InstanceState] = field(default_factory=dict)

    def live_instances(self, now_ms: int) -> list[InstanceState]:
        return [i for i in self.instances.values() if i.is_live(now_ms)]

    def is_live(self, now_ms: int) -> bool:
        return any(i.is_live(now_ms) for i in self.instances.values())

    def last_live_ms(self, now_ms: int) -> int | None:
        """`now_ms` while an instance is live, else when the last lease ended (None: no
        instance is known, or the registry forgot them, an hour after they went down)."""
        if self.is_live(now_ms):
            return now_ms
        return max((i.lease_ended_ms for i in self.instances.values()), default=None)

    def awaited(self, now_ms: int, window_ms: int) -> bool:
        """No live instance, but a lease ended at most `window_ms` ago: a restart or a
        deploy, whose tasks wait in the agent's queue for an instance to return."""
        if window_ms <= 0 or self.registration is None or self.is_live(now_ms):
            return False
        last = self.last_live_ms(now_ms)
        return last is not None and now_ms - last <= window_ms

    def load(self, now_ms: int) -> int:
        """Tasks in flight, summed over live instances."""
        return sum(i.in_flight for i in self.live_instances(now_ms))

    def capacity(self, now_ms: int) -> int:
        """max_concurrency, summed over live instances."""
        return sum(i.max_concurrency for i in self.live_instances(now_ms))

    def load_ratio(self, now_ms: int) -> float:
        """load / capacity in [0, 1+]; 1.0 for an agent with no live capacity."""
        cap = self.capacity(now_ms)
        return 1.0 if cap == 0 else self.load(now_ms) / cap

    def tokens(self, now_ms: int) -> dict[str, int]:
        """Current fencing token of each live instance."""
        return {i.instance_id: i.token for i in self.live_instances(now_ms)}

    def copy(self) -> AgentState:
        return replace(self, instances=dict(self.instances))


async def load_state(redis: Any, keys: Keys, *, prune: bool = True) -> dict[str, AgentState]:
    """Every known agent with its instances, read from Redis (three pipelined round trips).

    With `prune`, instance ids whose hash expired are dropped from their agent's set. A
    reader whose Redis user may only read those keys (a router or an observer under
    access control) passes False; the registry prunes (`RegistryService`).
    """
    agent_ids = sorted(_s(a) for a in await redis.smembers(keys.agents()))
    if not agent_ids:
        return {}
    pipe = redis.pipeline(transaction=False)
    for agent_id in agent_ids:
        pipe.hget(keys.agent(agent_id), "registration")
        pipe.smembers(keys.agent_instances(agent_id))
    answers = await pipe.execute()
    agents: dict[str, AgentState] = {}
    wanted: list[tuple[str, str]] = []
    for n, agent_id in enumerate(agent_ids):
        raw_reg, members = answers[2 * n], answers[2 * n + 1]
        agents[agent_id] = AgentState(agent_id, _registration(raw_reg))
        wanted += [(agent_id, iid) for iid in sorted(_s(m) for m in members)]
    if wanted:
        pipe = redis.pipeline(transaction=False)
        for _, iid in wanted:
            pipe.hgetall(keys.instance(iid))
        forgotten = []
        for (agent_id, iid), raw in zip(wanted, await pipe.execute(), strict=True):
            inst = InstanceState.from_hash(raw) if raw else None
            if inst is None:
                forgotten.append((agent_id, iid))
            elif inst.agent_id in agents:
                agents[inst.agent_id].instances[inst.instance_id] = inst
        if forgotten and prune:
            await _prune(redis, keys, forgotten)
    return agents


#: drop an instance id from its agent's set once its hash has expired (`DOWN_RETENTION_MS`
#: after it went down); checked in the script, so a re-registration in between is kept
_PRUNE_LUA = """
if redis.call('EXISTS', KEYS[2]) == 0 then
  return redis.call('SREM', KEYS[1], ARGV[1])
end
return 0
"""


#: `_PRUNE_LUA` as a Redis function library (`mesh.functions`: FCALL, no EVAL)
LIBRARY = Library.of("state", prune=_PRUNE_LUA)


async def _prune(redis: Any, keys: Keys, forgotten: list[tuple[str, str]]) -> None:
    """Forget instance ids whose hash expired: process restarts leave a new id each time,
    and the sets would otherwise grow for ever."""
    prune = LIBRARY.bind(redis, "prune")

    def fill(pipe: Any) -> None:
        for agent_id, iid in forgotten:
            prune.queue(pipe, [keys.agent_instances(agent_id), keys.instance(iid)], [iid])

    await prune.pipelined(fill)


def _registration(raw: bytes | str | None) -> Registration | None:
    if raw is None:
        return None
    body = raw if isinstance(raw, bytes) else raw.encode()
    try:
        return decode(Registration, body)
    except InvalidEnvelope:
        return None


def _s(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


async def load_instance(redis: Any, keys: Keys, instance_id: str) -> InstanceState | None:
    """One instance's state, or None when Redis does not know it (or forgot it)."""
    raw = await redis.hgetall(keys.instance(instance_id))
    return InstanceState.from_hash(raw) if raw else None
