"""The Lua scripts behind task state, claims and result commits (one atomic step each).

Every script starts with `FENCE_LUA` (``fence_ok``) and the transition table generated from
`mesh.dispatch.states.TRANSITIONS`, so a commit checks the fencing token, moves the state
and stores the result in one step: a stale token can never commit.

Shared helper ``advance(task, hist, states, by, note, agent, ttl, quiet, cur, extra,
expires)`` applies a path of states all or nothing (first step skipped when already
there), appends one history entry per step (one RPUSH) and returns ``(true, applied)`` or
``(false, current)``. `cur` is the state the caller read already (nil: read it, with
`expires`), `extra` more field/value pairs for the one HSET of the task hash, `expires`
the task hash's ``expires_ms`` the caller read (nil with a `cur`: the expiry is set).

Expiry: a record's PEXPIRE is sent again only when the expiry it has (``expires_ms``,
written with each PEXPIRE of the hash) is more than `EXPIRY_SLACK` of the TTL behind
now + TTL, so the steps of one task a moment apart (submitted ... processing, completed)
set the expiry of the task hash and its history once, not at every step: a record lives
at least 99 % of the TTL after its last step. A history list a step creates always gets
its PEXPIRE.

Each script reads a hash once (one HMGET of every field it needs), writes it once, and
asks Redis' clock once (``redis_now_ms`` keeps the first TIME of the call).

`LIBRARY` holds them all as one Redis function library (`mesh.functions`): FCALL, no EVAL.
"""

from __future__ import annotations

from mesh.dispatch.states import TERMINAL, lua_table
from mesh.functions import Library
from mesh.registry.fencing import FENCE_LUA

_TERMINAL = "{" + ", ".join(f'["{s}"]=true' for s in sorted(TERMINAL)) + "}"

#: the share of the TTL a record's expiry may lag now + TTL before a step sets it again
EXPIRY_SLACK = 0.01

PRELUDE = (
    FENCE_LUA
    + f"""
local ALLOWED = {lua_table()}
local TERMINAL = {_TERMINAL}
-- whether a record whose expiry ends at `expires` (its expires_ms; nil: unknown) must be
-- set again to now + ttl: only when it lags that by more than the slack
local function expiry_due(expires, ttl)
  if not expires then return true end
  local t = tonumber(ttl)
  return tonumber(expires) < redis_now_ms() + t - math.floor(t * {EXPIRY_SLACK})
end
local function advance(task, hist, states, by, note, agent, ttl, quiet, cur, extra, expires)
  if cur == nil then
    local h = redis.call('HMGET', task, 'state', 'expires_ms')
    cur, expires = h[1] or '', h[2]
  end
  local refresh = expiry_due(expires, ttl)
  local state = cur
  local applied = {{}}
  for i, to in ipairs(states) do
    if not (i == 1 and to == state) then
      if ALLOWED[state] == nil or ALLOWED[state][to] == nil then return false, cur end
      state = to
      applied[#applied + 1] = to
    end
  end
  local fields = extra or {{}}
  if #applied > 0 then
    local now = redis_now_ms()
    if quiet ~= '1' then
      local rows = {{}}
      for _, to in ipairs(applied) do
        rows[#rows + 1] = cjson.encode({{state=to, ts_ms=now, by=by, note=note}})
      end
      -- a list this step creates gets its expiry whatever the hash's says
      if redis.call('RPUSH', hist, unpack(rows)) == #rows and not refresh then
        redis.call('PEXPIRE', hist, ttl)
      end
    end
    fields[#fields + 1] = 'state'
    fields[#fields + 1] = state
    fields[#fields + 1] = 'updated_ms'
    fields[#fields + 1] = now
    if cur == '' then
      fields[#fields + 1] = 'created_ms'
      fields[#fields + 1] = now
    end
  end
  if agent ~= '' then
    fields[#fields + 1] = 'agent_id'
    fields[#fields + 1] = agent
  end
  if #fields > 0 then
    if refresh then
      fields[#fields + 1] = 'expires_ms'
      fields[#fields + 1] = redis_now_ms() + tonumber(ttl)
    end
    redis.call('HSET', task, unpack(fields))
  end
  if refresh then
    redis.call('PEXPIRE', task, ttl)
    redis.call('PEXPIRE', hist, ttl)
  end
  return true, applied
end
local function tail(from)
  local out = {{}}
  for i = from, #ARGV do out[#out + 1] = ARGV[i] end
  return out
end
"""
)

#: KEYS task, hist. ARGV ttl_ms, by, note, agent, states... -> {1, applied...} | {0, current}
ADVANCE = (
    PRELUDE
    + """
local ok, r = advance(KEYS[1], KEYS[2], tail(5), ARGV[2], ARGV[3], ARGV[4], ARGV[1])
if not ok then return {0, r} end
local out = {1}
for _, s in ipairs(r) do out[#out + 1] = s end
return out
"""
)

#: ``seed(dispatched, view_task, task, processing, ttl, agent, trace_id, lifetime_end,
#: context, copy, context_ttl)``: under access control what a router writes before a
#: dispatch to `agent`: the agent in the task's dispatch set (whose sealed Result may be
#: forwarded), the task's record in that agent's view (the keys its worker claims and
#: commits in: created once, ``dispatched``, ``recovered`` when the mesh's record is), the
#: task in the mesh's ``processing`` set by the end of its maximum lifetime (the reaper's
#: input), and the context the task carries, saved in another agent's view (`context`),
#: copied into that agent's (`copy`, when not nil; `mesh.dispatch.context`). `SEED` runs it
#: alone, `SUBMIT` with a new task's record (one step).
SEED_LUA = """
local function seed(dispatched, view_task, task, processing, ttl, agent, trace_id, lifetime_end,
    context, copy, context_ttl)
  redis.call('SADD', dispatched, agent)
  redis.call('PEXPIRE', dispatched, ttl)
  if redis.call('EXISTS', view_task) == 0 then
    redis.call('HSET', view_task, 'state', 'dispatched', 'trace_id', trace_id,
      'created_ms', redis_now_ms())
    if redis.call('HGET', task, 'recovered') == '1' then
      redis.call('HSET', view_task, 'recovered', '1')
    end
  end
  redis.call('PEXPIRE', view_task, ttl)
  redis.call('ZADD', processing, 'NX', lifetime_end, task)
  if copy then
    -- pcall: a source that is no string (its agent's worker wrote one) copies nothing
    local saved = redis.pcall('GET', context)
    if type(saved) == 'string' then redis.call('SET', copy, saved, 'PX', context_ttl) end
  end
end
"""

#: KEYS task, hist, waiters, idem, trace owner, parent task, parent's dispatch set[,
#: dispatch set, agent's view task, processing[, context, its copy]]. ARGV ttl_ms, by,
#: reply_to, redelivered, trace_id, agent,
#: recovered ('1': the broker held a task whose record vanished; `APPLY_ONCE` refuses its
#: side effects), sender (the broker user who sent it, under access control, else ''),
#: sender's agent (a worker's: '' for anyone else), lifetime_end_ms ('': nothing seeded;
#: else a new task dispatched to `agent` is seeded in the same step, `seed`, with KEYS[8]
#: and on), context_ttl_ms, states... (a new task follows all of them in one step:
#: submitted, routing and, when the router chose already, dispatched to `agent`)
#: Under access control a task_id is its first sender's: anyone else's submission of it,
#: while its record lives, is {'foreign'} (never joined nor answered). A worker's task must
#: be a handoff of a task dispatched to its own agent, on that task's trace, and belongs to
#: that task's owner; a trace_id belongs to the client that used it first.
#: -> {'new'} | {'done', result} | {'answered'} | {'pending', state} | {'resume', state}
#:    | {'refused', state} | {'foreign'}
SUBMIT = (
    PRELUDE
    + SEED_LUA
    + """
local ttl = ARGV[1]
local task = redis.call('HMGET', KEYS[1], 'state', 'sender', 'owner')
local state = task[1]
local sender = ARGV[8]
local owner = sender
if sender ~= '' then
  if state then
    local first = task[2] or task[3]
    if first ~= sender then return {'foreign'} end
  end
  if ARGV[9] ~= '' then
    if redis.call('SISMEMBER', KEYS[7], ARGV[9]) == 0 then return {'foreign'} end
    local parent = redis.call('HMGET', KEYS[6], 'trace_id', 'owner')
    if parent[1] ~= ARGV[5] then return {'foreign'} end
    owner = parent[2] or ''
  end
  local trace_owner = redis.call('GET', KEYS[5])
  if trace_owner and trace_owner ~= owner then return {'foreign'} end
end
if state then
  local result = redis.call('HGET', KEYS[4], 'result')
  if result then
    -- a redelivered ingress message whose caller was answered already: nothing to send
    if ARGV[4] == '1' and ARGV[3] ~= '' and redis.call('HGET', KEYS[4], 'replied') == '1'
        and redis.call('SISMEMBER', KEYS[3], ARGV[3]) == 1 then
      return {'answered'}
    end
    return {'done', result}
  end
  if ARGV[3] ~= '' then
    redis.call('SADD', KEYS[3], ARGV[3])
    redis.call('PEXPIRE', KEYS[3], ttl)
  end
  local early = state == 'submitted' or state == 'routing' or state == 'dispatched'
  if ARGV[4] == '1' and early then
    return {'resume', state}
  end
  return {'pending', state}
end
local note = ARGV[7] == '1' and 'recovered' or 'ingress'
local extra = {'trace_id', ARGV[5]}
if sender ~= '' then
  extra[#extra + 1] = 'owner'
  extra[#extra + 1] = owner
  extra[#extra + 1] = 'sender'
  extra[#extra + 1] = sender
end
if ARGV[7] == '1' then
  extra[#extra + 1] = 'recovered'
  extra[#extra + 1] = '1'
end
local ok, r = advance(KEYS[1], KEYS[2], tail(12), ARGV[2], note, ARGV[6], ttl, nil, '', extra)
if not ok then return {'refused', r} end
if sender ~= '' and owner ~= '' then redis.call('SET', KEYS[5], owner, 'NX', 'PX', ttl) end
if ARGV[10] ~= '' and ARGV[6] ~= '' then
  seed(KEYS[8], KEYS[9], KEYS[1], KEYS[10], ttl, ARGV[6], ARGV[5], ARGV[10], KEYS[11],
    KEYS[12], ARGV[11])
end
if ARGV[3] ~= '' then
  redis.call('SADD', KEYS[3], ARGV[3])
  redis.call('PEXPIRE', KEYS[3], ttl)
end
return {'new'}
"""
)

#: KEYS idem, task, hist, processing, trace visits. ARGV ttl_ms, instance_prefix, me, token,
#: fenced, redelivered, lifetime_end_ms, agent_id, count_visit ('1': a first run counts one
#: more visit of the trace to the agent, for loop detection), pristine ('1': a first
#: delivery of a first dispatch, which nobody can have run), trace_id
#: -> {'claimed', takeover, visits, recovered} | {'done', result, replied} | {'busy', holder}
#:    | {'stale'} | {'refused', state}
#: A task without a record that is not pristine was known before its record vanished (Redis
#: lost its data, or the record expired): it is marked ``recovered``, and `APPLY_ONCE`
#: refuses its side effects, since whether they ran is no longer known.
CLAIM = (
    PRELUDE
    + """
local ttl, prefix, me, token, fenced = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local h = redis.call('HMGET', KEYS[1], 'result', 'replied', 'holder', 'token', 'fenced', 'claims')
if h[1] then return {'done', h[1], h[2] or '0'} end
if fenced == '1' and not fence_ok(prefix .. me, token) then return {'stale'} end
local takeover = '0'
if h[3] and h[3] ~= '' then
  local alive
  if h[5] == '1' then
    alive = fence_ok(prefix .. h[3], h[4])
  else
    -- a holder without a lease (no registry): only the broker's redelivery says it is gone
    alive = ARGV[6] ~= '1'
  end
  -- our own claim with no local run left (a reconnect redelivered it): run it again
  if alive and not (h[3] == me and h[4] == token) then return {'busy', h[3]} end
  takeover = '1'
end
local note = takeover == '1' and 'takeover' or ''
local recovered = '0'
local task = redis.call('HMGET', KEYS[2], 'state', 'recovered', 'trace_id', 'created_ms',
  'expires_ms')
local extra = {}
if not (task[1] or task[2] or task[3] or task[4]) then
  extra = {'trace_id', ARGV[11]}
  if ARGV[10] ~= '1' then
    recovered = '1'
    note = 'recovered'
    extra[3] = 'recovered'
    extra[4] = '1'
  end
elseif task[2] == '1' then
  recovered = '1'
end
local ok, r = advance(KEYS[2], KEYS[3], {'accepted', 'processing'}, me, note, ARGV[8], ttl,
  nil, task[1] or '', extra, task[5])
if not ok then return {'refused', r} end
redis.call('HSET', KEYS[1], 'holder', me, 'token', token, 'fenced', fenced,
  'claimed_ms', redis_now_ms(), 'claims', (tonumber(h[6]) or 0) + 1,
  'expires_ms', redis_now_ms() + tonumber(ttl))
redis.call('PEXPIRE', KEYS[1], ttl)
redis.call('ZADD', KEYS[4], ARGV[7], KEYS[2])
local visits = 0
if ARGV[9] == '1' and takeover == '0' then
  visits = redis.call('HINCRBY', KEYS[5], ARGV[8], 1)
  -- the trace's first visit to the agent sets the expiry (a new hash always has one)
  if visits == 1 then redis.call('PEXPIRE', KEYS[5], ttl) end
end
return {'claimed', takeover, visits, recovered}
"""
)

#: KEYS idem, task, hist, waiters, processing[, sealed[, view idem]]. ARGV ttl_ms,
#: instance_prefix, me ('' = the mesh itself: router, reaper), token, fenced, result_json,
#: by, note, agent, quiet ('1': the states move without history lines: a router finishing
#: the mesh's record of a task whose steps the agent's view recorded), states...
#: A view idem (KEYS[7]) takes the result too when the mesh ends the task itself: a late
#: commit in the agent's view then finds the task done.
#: A holder's commit whose task record vanished while its claim lived (a Redis failover)
#: recovers the record through ``accepted``, ``processing`` (``recovered``, as `CLAIM` does)
#: and commits.
#: -> {'ok', waiter...} | {'done', result} | {'stale'} | {'refused', state}
FINISH = (
    PRELUDE
    + """
local ttl, prefix, me, token, fenced = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local h = redis.call('HMGET', KEYS[1], 'result', 'holder', 'token', 'expires_ms')
if h[1] then return {'done', h[1]} end
local states, note, cur, expires, extra = tail(11), ARGV[8], nil, nil, nil
if me ~= '' then
  if h[2] ~= me or h[3] ~= token then return {'stale'} end
  if fenced == '1' and not fence_ok(prefix .. me, token) then return {'stale'} end
  local task = redis.call('HMGET', KEYS[2], 'state', 'expires_ms')
  cur, expires = task[1] or '', task[2]
  if cur == '' then
    -- the task's record vanished under a live claim (a Redis failover lost it): the claim
    -- says the task was ours, so it is recovered through the steps it missed, as CLAIM
    -- recovers one, and its Result is stored and answered, never dropped
    table.insert(states, 1, 'processing')
    table.insert(states, 1, 'accepted')
    extra = {'recovered', '1'}
    note = note ~= '' and ('recovered; ' .. note) or 'recovered'
  end
end
local ok, r = advance(KEYS[2], KEYS[3], states, ARGV[7], note, ARGV[9], ttl, ARGV[10], cur,
  extra, expires)
if not ok then return {'refused', r} end
-- the holder goes with the result (an empty holder is none: `holder_of` leaves it out)
local fields = {'result', ARGV[6], 'finished_ms', redis_now_ms(), 'holder', ''}
local refresh = expiry_due(h[4], ttl)
if refresh then
  fields[7] = 'expires_ms'
  fields[8] = redis_now_ms() + tonumber(ttl)
end
redis.call('HSET', KEYS[1], unpack(fields))
if KEYS[7] then
  redis.call('HSETNX', KEYS[7], 'result', ARGV[6])
  redis.call('PEXPIRE', KEYS[7], ttl)
end
if refresh then redis.call('PEXPIRE', KEYS[1], ttl) end
redis.call('ZREM', KEYS[5], KEYS[2])
-- KEYS[6], under access control: the committing agent's own copy, which no other
-- agent's Redis user may write (`Keys.sealed`); a router forwards only that
if KEYS[6] and KEYS[6] ~= KEYS[1] then redis.call('SET', KEYS[6], ARGV[6], 'PX', ttl) end
local out = {'ok'}
-- KEYS[4] is KEYS[1] again when the caller does not answer the callers itself (a worker
-- under access control: a router does, and the worker may not even read the waiters)
if KEYS[4] ~= KEYS[1] then
  for _, w in ipairs(redis.call('SMEMBERS', KEYS[4])) do out[#out + 1] = w end
end
return out
"""
)

#: KEYS dispatched_to, view task, task, processing[, context, its copy]. ARGV ttl_ms,
#: agent_id, trace_id, lifetime_end_ms, context_ttl_ms: `seed` before a dispatch to
#: `agent_id` (one not seeded with its submission: a reroute, a resumed or returned task).
#: -> 1
SEED = (
    PRELUDE
    + SEED_LUA
    + """
seed(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1], ARGV[2], ARGV[3], ARGV[4], KEYS[5],
  KEYS[6], ARGV[5])
return 1
"""
)

#: KEYS dispatched_to, idem, task, hist, waiters, processing. ARGV ttl_ms, agent_id (whose
#: worker user sent the notice), task_id, by, note, sealed (the key of agent_id's sealed
#: copy of the task: an ARGV, like `fence_ok`'s instance key, since FCALL checks its KEYS
#: for writing and a router may only read it).
#: Under access control a router takes a worker's result notice in this one step: the
#: agent must be in the task's dispatch set (only routers write it), its sealed copy must be
#: a Result of this very task with a terminal status, and the mesh's record is finished from
#: it (quietly: the agent's view has the steps) unless it ended before (the first end wins).
#: The copy is returned as stored, for the router to forward as it is.
#: -> {'ok', result, waiter...} | {'again', result, waiter...} (finished from this very
#:    Result before, its callers not told yet: a redelivered notice) | {'done', status}
#:    | {'foreign', agent...} | {'unsealed'} | {'invalid'} | {'refused', state}
RELAY = (
    PRELUDE
    + """
local ttl, agent = ARGV[1], ARGV[2]
if redis.call('SISMEMBER', KEYS[1], agent) == 0 then
  local out = {'foreign'}
  for _, a in ipairs(redis.call('SMEMBERS', KEYS[1])) do out[#out + 1] = a end
  return out
end
local sealed = redis.call('GET', ARGV[6])
if not sealed then return {'unsealed'} end
local decoded, r = pcall(cjson.decode, sealed)
if not decoded or type(r) ~= 'table' or r.task_id ~= ARGV[3] or not TERMINAL[r.status] then
  return {'invalid'}
end
local function answer(status)
  local out = {status, sealed}
  for _, w in ipairs(redis.call('SMEMBERS', KEYS[5])) do out[#out + 1] = w end
  return out
end
local h = redis.call('HMGET', KEYS[2], 'result', 'replied')
if h[1] then
  local read, before = pcall(cjson.decode, h[1])
  if not read or type(before) ~= 'table' then return {'done', ''} end
  if h[2] ~= '1' and before.instance_id == r.instance_id then return answer('again') end
  return {'done', tostring(before.status)}
end
local ok, cur = advance(KEYS[3], KEYS[4], {'accepted', 'processing', r.status}, ARGV[4],
  ARGV[5], agent, ttl, '1')
if not ok then return {'refused', cur} end
redis.call('HSET', KEYS[2], 'result', sealed, 'finished_ms', redis_now_ms(), 'holder', '')
redis.call('PEXPIRE', KEYS[2], ttl)
redis.call('ZREM', KEYS[6], KEYS[3])
return answer('ok')
"""
)

#: KEYS idem, task, hist, processing. ARGV ttl_ms, me, token, by, note, states...
#: Hand a claimed task back (retry, reject): the next delivery claims it afresh.
#: -> {'ok'} | {'stale'} | {'refused', state}
RELEASE = (
    PRELUDE
    + """
local h = redis.call('HMGET', KEYS[1], 'holder', 'token')
if h[1] ~= ARGV[2] or h[2] ~= ARGV[3] then return {'stale'} end
local ok, r = advance(KEYS[2], KEYS[3], tail(6), ARGV[4], ARGV[5], '', ARGV[1])
if not ok then return {'refused', r} end
redis.call('HDEL', KEYS[1], 'holder', 'token', 'fenced')
redis.call('ZREM', KEYS[4], KEYS[2])
return {'ok'}
"""
)

#: KEYS idem, done_marker, counter, task. ARGV ttl_ms, instance_prefix, me, token, fenced,
#: amount -> 1 applied | 0 already applied by this task | -1 stale token (refused)
#:   | -2 unknown: the task's record was recovered, its earlier markers may be lost (refused)
APPLY_ONCE = (
    PRELUDE
    + """
local h = redis.call('HMGET', KEYS[1], 'holder', 'token')
if h[1] ~= ARGV[3] or h[2] ~= ARGV[4] then return -1 end
if ARGV[5] == '1' and not fence_ok(ARGV[2] .. ARGV[3], ARGV[4]) then return -1 end
if redis.call('EXISTS', KEYS[2]) == 0 and redis.call('HGET', KEYS[4], 'recovered') == '1' then
  return -2
end
if redis.call('SET', KEYS[2], ARGV[3], 'NX', 'PX', ARGV[1]) == false then return 0 end
redis.call('INCRBY', KEYS[3], ARGV[6])
return 1
"""
)

#: every script above, as the function library the dispatch calls (`TaskStore`)
LIBRARY = Library.of(
    "dispatch",
    advance=ADVANCE,
    submit=SUBMIT,
    claim=CLAIM,
    finish=FINISH,
    seed=SEED,
    relay=RELAY,
    release=RELEASE,
    apply_once=APPLY_ONCE,
)

__all__ = [
    "ADVANCE",
    "APPLY_ONCE",
    "CLAIM",
    "FINISH",
    "LIBRARY",
    "RELAY",
    "RELEASE",
    "SEED",
    "SEED_LUA",
    "SUBMIT",
]
