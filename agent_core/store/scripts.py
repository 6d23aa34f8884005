"""Every Lua script Parley runs. Each touches one thread's keys only (cluster-safe)."""

from __future__ import annotations

# KEYS: mailbox, seen, lock
# ARGV: event_id, event_json, now_ms, owner, lock_ttl_ms, seen_ttl_ms
# Appends the event to the thread's mailbox unless it was handed off before
# (idempotent on event id for seen_ttl), then tries the thread lock.
# Returns {appended 0/1, lock acquired 0/1, mailbox length}.
HANDOFF = """
local appended = 0
if not redis.call('ZSCORE', KEYS[2], ARGV[1]) then
  redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', tonumber(ARGV[3]) - tonumber(ARGV[6]))
  redis.call('PEXPIRE', KEYS[2], ARGV[6])
  redis.call('RPUSH', KEYS[1], ARGV[2])
  appended = 1
end
local got = 0
if redis.call('SET', KEYS[3], ARGV[4], 'NX', 'PX', ARGV[5]) then got = 1 end
return {appended, got, redis.call('LLEN', KEYS[1])}
"""

# KEYS: mailbox, session, lock, sent
# ARGV: owner, consumed, session_json ('' = unchanged), expected_version,
#       session_ttl_ms, lock_ttl_ms, sent fields to delete...
# Returns the mailbox length left, -1 if the lock is not ours, -2 on a version
# conflict (nothing changed in either case).  Releases the lock when the mailbox
# is empty, otherwise keeps (and renews) it for the next turn.
COMPLETE = """
if redis.call('GET', KEYS[3]) ~= ARGV[1] then return -1 end
if ARGV[3] ~= '' then
  local v = redis.call('HGET', KEYS[2], 'v') or '0'
  if v ~= ARGV[4] then return -2 end
  redis.call('HSET', KEYS[2], 'v', tonumber(ARGV[4]) + 1, 'd', ARGV[3])
end
if redis.call('EXISTS', KEYS[2]) == 1 then redis.call('PEXPIRE', KEYS[2], ARGV[5]) end
local n = tonumber(ARGV[2])
if n > 0 then redis.call('LTRIM', KEYS[1], n, -1) end
for i = 7, #ARGV do redis.call('HDEL', KEYS[4], ARGV[i]) end
local left = redis.call('LLEN', KEYS[1])
if left == 0 then
  redis.call('DEL', KEYS[3])
else
  redis.call('PEXPIRE', KEYS[3], ARGV[6])
end
return left
"""

# KEYS: lock ; ARGV: owner, ttl_ms.  1 if renewed, 0 if the lock is not ours.
RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
"""

# KEYS: lock ; ARGV: owner.  Compare-and-delete.
RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""

# KEYS: session ; ARGV: session_json, expected_version, ttl_ms
# Version-checked save outside a turn (commands run under the lock use COMPLETE).
SAVE_SESSION = """
local v = redis.call('HGET', KEYS[1], 'v') or '0'
if v ~= ARGV[2] then return -2 end
redis.call('HSET', KEYS[1], 'v', tonumber(ARGV[2]) + 1, 'd', ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return tonumber(ARGV[2]) + 1
"""

# KEYS: pace key ; ARGV: now_ms, interval_ms, max_wait_ms (-1 = unbounded)
# Reserves the next free send slot on a shared pace (one key per chat, one
# global...).  Returns the ms to wait before sending, or -1 if that would be
# longer than max_wait (nothing reserved: a droppable streaming edit).
PACE = """
local now = tonumber(ARGV[1])
local interval = tonumber(ARGV[2])
local nxt = tonumber(redis.call('GET', KEYS[1]) or '0')
local slot = math.max(now, nxt)
local wait = slot - now
local maxw = tonumber(ARGV[3])
if maxw >= 0 and wait > maxw then return -1 end
redis.call('SET', KEYS[1], slot + interval, 'PX', wait + interval + 1000)
return wait
"""

# KEYS: pace key ; ARGV: now_ms, pause_ms.  Nothing may be sent on this pace
# before now + pause (a platform 429 retry_after).
PACE_PAUSE = """
local until_ms = tonumber(ARGV[1]) + tonumber(ARGV[2])
local nxt = tonumber(redis.call('GET', KEYS[1]) or '0')
if until_ms > nxt then
  redis.call('SET', KEYS[1], until_ms, 'PX', tonumber(ARGV[2]) + 1000)
end
return 1
"""
