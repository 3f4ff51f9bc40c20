"""Fencing tokens: issued per agent_id, strictly increasing, checked atomically.

Redis layout (keys from `mesh.keys.Keys`):
- ``fence(agent_id)``: the last token issued for the agent. Each new token is the counter
  plus one, but never less than Redis' clock in microseconds (`NEXT_TOKEN_LUA`): tokens grow
  across registry restarts, across any number of registry processes, and across a Redis
  that restarted empty (the counter is gone, the clock is not), so a token issued after the
  loss is still greater than every token a live worker holds from before it.
- ``instance(instance_id)``: hash with at least ``agent_id``, ``token``, ``status``
  (``up``/``down``) and ``lease_expires_ms``.

A token is current when the instance hash holds that very token, its status is ``up`` and
its lease has not expired by Redis' own clock. `FENCE_LUA` is a Lua fragment defining
``fence_ok(instance_key, token)``; every script that commits work under a token (the
idempotency commit of a result, for one) prepends it, so check and commit are one atomic
step.
"""

from __future__ import annotations

from typing import Any

from mesh.errors import StaleFencingToken
from mesh.functions import Library
from mesh.keys import Keys

FENCE_LUA = """
local now_ms_of_call = nil
local function redis_now_ms()
  -- one TIME per call: a script is one atomic step, its clock need not move within it
  if now_ms_of_call == nil then
    local t = redis.call('TIME')
    now_ms_of_call = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return now_ms_of_call
end
local function fence_ok(instance_key, token)
  local v = redis.call('HMGET', instance_key, 'token', 'status', 'lease_expires_ms')
  if v[1] == false or tonumber(v[1]) ~= tonumber(token) then return false end
  if v[2] ~= 'up' then return false end
  if v[3] ~= false and tonumber(v[3]) < redis_now_ms() then return false end
  return true
end
"""

_CHECK_LUA = (
    FENCE_LUA
    + """
if fence_ok(KEYS[1], ARGV[1]) then return -1 end
local cur = redis.call('HGET', KEYS[1], 'token')
if cur == false then return 0 end
return tonumber(cur)
"""
)

#: Lua fragment: ``next_token(fence_key)``, the agent's next token, floored by the clock.
#: Microseconds keep the floor ahead of any counter (a million tokens a second) and fit a
#: double exactly until the year 2255.
NEXT_TOKEN_LUA = """
local function next_token(fence_key)
  local t = redis.call('TIME')
  local floor = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local token = redis.call('INCR', fence_key)
  if token < floor then
    token = floor
    redis.call('SET', fence_key, string.format('%d', token))
  end
  return token
end
"""

#: issue the next token of an agent (atomic)
ISSUE_LUA = NEXT_TOKEN_LUA + "return next_token(KEYS[1])"


#: the scripts above as a Redis function library (`mesh.functions`: FCALL, no EVAL)
LIBRARY = Library.of("fencing", issue=ISSUE_LUA, check=_CHECK_LUA)


async def issue_token(redis: Any, keys: Keys, agent_id: str) -> int:
    """Next fencing token of `agent_id`: strictly greater than every one issued before,
    even by a Redis that has since lost its data."""
    return int(await LIBRARY.bind(redis, "issue")(keys=[keys.fence(agent_id)]))


async def check_token(redis: Any, keys: Keys, agent_id: str, instance_id: str, token: int) -> None:
    """Raise `StaleFencingToken` unless `token` is the current, live token of the instance."""
    check = LIBRARY.bind(redis, "check")
    answer = int(await check(keys=[keys.instance(instance_id)], args=[token]))
    if answer != -1:
        raise StaleFencingToken(agent_id, token, answer or None)
