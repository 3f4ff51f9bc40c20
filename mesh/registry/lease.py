"""Leases in Redis: grant (with a fencing token), renew, release, and sweep lapsed ones.

Every write is one Redis function (`LIBRARY`, called by FCALL), so it is atomic against
any number of registry processes, and every script reads the time from Redis (``TIME``):
leases, the fencing check of `mesh.registry.fencing` and the sweep share one clock.

Layout (keys from `mesh.keys.Keys`), extending the instance hash of `fencing`:
- ``instance(iid)`` hash: ``agent_id instance_id token status(up|down) lease_expires_ms
  last_heartbeat_ms registered_ms in_flight max_concurrency stuck version`` and, once down,
  ``down_reason down_ms``. A down instance's hash expires after `DOWN_RETENTION_MS`.
- ``agent(agent_id)`` hash: ``registration`` (the last Registration, JSON), ``updated_ms``.
- ``agent_instances(agent_id)`` set, ``agents()`` set.
- ``leases()`` sorted set: live instance ids scored by lease expiry. Removing a member
  (ZREM inside a script that also flips ``status`` to ``down``) is the claim that makes
  exactly one registry publish each ``agent.down``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from mesh.functions import Library
from mesh.keys import Keys
from mesh.registry.fencing import NEXT_TOKEN_LUA
from mesh.schemas import Registration, encode

#: how long a down instance stays visible (``mesh agents``) before its hash expires
DOWN_RETENTION_MS = 3_600_000
#: most lapsed leases one sweep call claims (the sweep loops while it gets a full batch)
SWEEP_BATCH = 200

_NOW_LUA = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"""

_GRANT_LUA = (
    _NOW_LUA
    + NEXT_TOKEN_LUA
    + """
if ARGV[8] == '1' then
  -- a live instance id belongs to the session that holds it (access control)
  local v = redis.call('HMGET', KEYS[2], 'status', 'lease_expires_ms', 'session')
  if v[1] == 'up' and v[2] and tonumber(v[2]) >= now and v[3] and v[3] ~= ARGV[7] then
    return {-1, now, 0}
  end
  -- and an agent has at most ARGV[10] live instances (0: no cap)
  local cap = tonumber(ARGV[10])
  if cap > 0 and v[1] ~= 'up' then
    local live = 0
    for _, iid in ipairs(redis.call('SMEMBERS', KEYS[4])) do
      local w = redis.call('HMGET', ARGV[9] .. iid, 'status', 'lease_expires_ms')
      if w[1] == 'up' and w[2] and tonumber(w[2]) >= now then live = live + 1 end
    end
    if live >= cap then return {-2, now, 0} end
  end
end
local token = next_token(KEYS[1])
local exp = now + tonumber(ARGV[4])
redis.call('PERSIST', KEYS[2])
redis.call('HDEL', KEYS[2], 'down_reason', 'down_ms')
redis.call('HSET', KEYS[2], 'agent_id', ARGV[1], 'instance_id', ARGV[2],
  'token', string.format('%d', token),
  'status', 'up', 'lease_expires_ms', exp, 'last_heartbeat_ms', now, 'registered_ms', now,
  'in_flight', 0, 'max_concurrency', ARGV[5], 'version', ARGV[6], 'session', ARGV[7])
redis.call('HSET', KEYS[3], 'registration', ARGV[3], 'updated_ms', now)
redis.call('SADD', KEYS[4], ARGV[2])
redis.call('SADD', KEYS[5], ARGV[1])
redis.call('ZADD', KEYS[6], exp, ARGV[2])
return {token, now, exp}
"""
)

# KEYS: leases, instance hashes...; ARGV: ttl_ms, retention_ms, then (token, in_flight,
# max_concurrency, stuck) per instance. Answers (code, lease_expires_ms, last_heartbeat_ms) each:
# 1 renewed, 0 lost (unknown, other token or down), 2 lapsed and claimed down by this call.
_RENEW_LUA = (
    _NOW_LUA
    + """
local ttl = tonumber(ARGV[1])
local out = {}
for i = 2, #KEYS do
  local a = (i - 2) * 4 + 3
  local v = redis.call('HMGET', KEYS[i], 'token', 'status', 'lease_expires_ms',
    'last_heartbeat_ms', 'instance_id')
  if v[1] == false or tonumber(v[1]) ~= tonumber(ARGV[a]) or v[2] ~= 'up' then
    out[#out + 1] = 0; out[#out + 1] = 0; out[#out + 1] = 0
  elseif tonumber(v[3]) < now then
    redis.call('ZREM', KEYS[1], v[5])
    redis.call('HSET', KEYS[i], 'status', 'down', 'down_reason', 'lease_expired', 'down_ms', now)
    redis.call('PEXPIRE', KEYS[i], ARGV[2])
    out[#out + 1] = 2; out[#out + 1] = tonumber(v[3]); out[#out + 1] = tonumber(v[4])
  else
    local exp = now + ttl
    redis.call('HSET', KEYS[i], 'lease_expires_ms', exp, 'last_heartbeat_ms', now,
      'in_flight', ARGV[a + 1], 'max_concurrency', ARGV[a + 2], 'stuck', ARGV[a + 3])
    redis.call('ZADD', KEYS[1], exp, v[5])
    out[#out + 1] = 1; out[#out + 1] = exp; out[#out + 1] = now
  end
end
return out
"""
)

# KEYS: instance, leases; ARGV: token, instance_id, retention_ms
_RELEASE_LUA = (
    _NOW_LUA
    + """
local v = redis.call('HMGET', KEYS[1], 'token', 'status', 'last_heartbeat_ms', 'lease_expires_ms')
if v[1] == false or tonumber(v[1]) ~= tonumber(ARGV[1]) or v[2] ~= 'up' then return {0, 0, 0} end
redis.call('ZREM', KEYS[2], ARGV[2])
redis.call('HSET', KEYS[1], 'status', 'down', 'down_reason', 'deregistered', 'down_ms', now)
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return {1, tonumber(v[3]), tonumber(v[4])}
"""
)

# KEYS: leases; ARGV: instance key prefix, limit, retention_ms.
# Answers flat (instance_id, agent_id, token, lease_expires_ms, last_heartbeat_ms) per claim,
# then the ms until the earliest lease left lapses (-1: none left).
_SWEEP_LUA = (
    _NOW_LUA
    + """
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. now, 'LIMIT', 0, tonumber(ARGV[2]))
local out = {}
for _, iid in ipairs(ids) do
  redis.call('ZREM', KEYS[1], iid)
  local key = ARGV[1] .. iid
  local v = redis.call('HMGET', key, 'status', 'lease_expires_ms', 'agent_id', 'token',
    'last_heartbeat_ms')
  if v[1] == 'up' and v[2] ~= false and tonumber(v[2]) < now then
    redis.call('HSET', key, 'status', 'down', 'down_reason', 'lease_expired', 'down_ms', now)
    redis.call('PEXPIRE', key, ARGV[3])
    out[#out + 1] = iid; out[#out + 1] = v[3]; out[#out + 1] = tonumber(v[4])
    out[#out + 1] = tonumber(v[2]); out[#out + 1] = tonumber(v[5])
  elseif v[1] == 'up' and v[2] ~= false then
    redis.call('ZADD', KEYS[1], tonumber(v[2]), iid)
  end
end
-- last: how soon the earliest lease left lapses (ms, by this clock; -1: no lease)
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
out[#out + 1] = first[2] and math.max(0, tonumber(first[2]) - now) or -1
return out
"""
)


#: the scripts above as a Redis function library (`mesh.functions`: FCALL, no EVAL)
LIBRARY = Library.of(
    "lease", grant=_GRANT_LUA, renew=_RENEW_LUA, release=_RELEASE_LUA, sweep=_SWEEP_LUA
)


@dataclass(frozen=True, slots=True)
class Grant:
    """A granted lease: the fencing token and the lease's end, by Redis' clock."""

    token: int
    now_ms: int
    lease_expires_ms: int


@dataclass(frozen=True, slots=True)
class Beat:
    """One heartbeat to apply: which instance, under which token, with what load."""

    agent_id: str
    instance_id: str
    token: int
    in_flight: int
    max_concurrency: int
    stuck: int = 0


RenewCode = Literal["renewed", "lost", "lapsed"]
_CODES: dict[int, RenewCode] = {1: "renewed", 0: "lost", 2: "lapsed"}


@dataclass(frozen=True, slots=True)
class Renewal:
    """What a heartbeat did: renewed, lost (re-register), or lapsed (claimed down now)."""

    beat: Beat
    code: RenewCode
    lease_expires_ms: int
    last_heartbeat_ms: int


@dataclass(frozen=True, slots=True)
class Lapse:
    """A lease the sweep found lapsed and claimed: exactly one registry reports it down."""

    instance_id: str
    agent_id: str
    token: int
    lease_expires_ms: int
    last_heartbeat_ms: int


class LeaseStore:
    """The registry's writes to Redis: the functions of `LIBRARY` (FCALL)."""

    def __init__(self, redis: Any, keys: Keys, lease_ttl_s: float) -> None:
        self.keys = keys
        self.ttl_ms = round(lease_ttl_s * 1000)
        self._redis = redis
        self._grant = LIBRARY.bind(redis, "grant")
        self._renew = LIBRARY.bind(redis, "renew")
        self._release = LIBRARY.bind(redis, "release")
        self._sweep = LIBRARY.bind(redis, "sweep")
        #: after a `sweep`: ms until the earliest lease left lapses, by Redis' clock (None:
        #: no lease left). No lease granted later lapses sooner: every one gets the full TTL.
        self.next_lapse_in_ms: int | None = None

    async def grant(
        self,
        registration: Registration,
        *,
        session: str = "",
        guard: bool = False,
        max_instances: int = 0,
    ) -> Grant | Literal["in_use", "too_many"]:
        """Register an instance: a new token (strictly greater than any before), lease up.

        The token is floored by Redis' clock (`NEXT_TOKEN_LUA`), so it stays greater than
        every earlier one even after Redis lost its data. `session` names the registering
        session (its reply queue); with `guard`, an instance id that another session holds
        with a live lease is not taken over (``in_use``), and a new instance beyond
        `max_instances` live ones of the agent (0: no cap) is refused (``too_many``).
        """
        k = self.keys
        agent_id, iid = registration.agent_id, registration.instance_id
        token, now, exp = await self._grant(
            keys=[
                k.fence(agent_id),
                k.instance(iid),
                k.agent(agent_id),
                k.agent_instances(agent_id),
                k.agents(),
                k.leases(),
            ],
            args=[
                agent_id,
                iid,
                encode(registration),
                self.ttl_ms,
                registration.max_concurrency,
                registration.version,
                session,
                "1" if guard else "0",
                k.instance(""),
                max_instances,
            ],
        )
        if int(token) == -1:
            return "in_use"
        if int(token) == -2:
            return "too_many"
        return Grant(int(token), int(now), int(exp))

    async def renew(self, beats: Sequence[Beat]) -> list[Renewal]:
        """Apply a batch of heartbeats in one script call."""
        if not beats:
            return []
        keys = [self.keys.leases(), *(self.keys.instance(b.instance_id) for b in beats)]
        args: list[Any] = [self.ttl_ms, DOWN_RETENTION_MS]
        for b in beats:
            args += [b.token, b.in_flight, b.max_concurrency, b.stuck]
        flat = await self._renew(keys=keys, args=args)
        return [
            Renewal(b, _CODES[int(flat[3 * i])], int(flat[3 * i + 1]), int(flat[3 * i + 2]))
            for i, b in enumerate(beats)
        ]

    async def release(self, instance_id: str, token: int) -> tuple[bool, int, int]:
        """Deregister: down at once when `token` is the instance's current one.

        Returns (released, last_heartbeat_ms, lease_expires_ms); released is False for an
        unknown instance, a stale token or an instance already down.
        """
        done, last, exp = await self._release(
            keys=[self.keys.instance(instance_id), self.keys.leases()],
            args=[token, instance_id, DOWN_RETENTION_MS],
        )
        return bool(int(done)), int(last), int(exp)

    async def sweep(self, limit: int = SWEEP_BATCH) -> list[Lapse]:
        """Claim lapsed leases (atomically: each is returned to one caller only)."""
        flat = await self._sweep(
            keys=[self.keys.leases()],
            args=[self.keys.instance(""), limit, DOWN_RETENTION_MS],
        )
        next_in = int(flat[-1])
        self.next_lapse_in_ms = None if next_in < 0 else next_in
        out = []
        for i in range(0, len(flat) - 1, 5):
            iid, agent_id = flat[i], flat[i + 1]
            out.append(
                Lapse(
                    iid.decode() if isinstance(iid, bytes) else str(iid),
                    agent_id.decode() if isinstance(agent_id, bytes) else str(agent_id),
                    int(flat[i + 2]),
                    int(flat[i + 3]),
                    int(flat[i + 4]),
                )
            )
        return out
