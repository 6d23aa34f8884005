"""Every Lua script Parley runs. Each touches one hash tag's keys only (cluster-safe)."""

from __future__ import annotations

# KEYS: dedup claim, inbox stream, thread's arrival counter (all tagged {inbox})
# ARGV: claim ttl seconds, stream maxlen, event json, counter ttl seconds
# Claim the event id for 24 h, number the event in its thread's arrival order
# and publish it, atomically: all of it happens or none (a duplicate returns 0
# and publishes nothing).  Returns the event's arrival number, or -1 when the
# stream holds maxlen entries (nothing claimed: the platform is told to retry).
# Nothing is ever trimmed here: only TRIM_ACKED removes entries, acknowledged ones.
INGEST = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
if redis.call('XLEN', KEYS[2]) >= tonumber(ARGV[2]) then return -1 end
if not redis.call('SET', KEYS[1], '1', 'NX', 'EX', ARGV[1]) then return 0 end
local n = redis.call('INCR', KEYS[3])
local ok = redis.pcall('XADD', KEYS[2], '*', 'e', ARGV[3], 's', n)
if type(ok) == 'table' and ok.err then
  redis.call('DEL', KEYS[1])  -- Lua does not roll back: release the claim ourselves
  redis.call('DECR', KEYS[3])
  return ok
end
redis.call('EXPIRE', KEYS[3], ARGV[4])
return n
"""


# KEYS: inbox stream ; ARGV: consumer group
# Deletes the entries every consumer is done with: those before the oldest one
# still pending, or, with none pending, up to the last one delivered.  Entries
# not yet read or not yet acknowledged are never touched.  Returns how many went.
TRIM_ACKED = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local last = nil
for _, g in ipairs(redis.call('XINFO', 'GROUPS', KEYS[1])) do
  local name, delivered
  for i = 1, #g, 2 do
    if g[i] == 'name' then name = g[i + 1] end
    if g[i] == 'last-delivered-id' then delivered = g[i + 1] end
  end
  if name == ARGV[1] then last = delivered end
end
if not last then return 0 end
local pending = redis.call('XPENDING', KEYS[1], ARGV[1])
local keep
if pending[1] > 0 then
  keep = pending[2]
else
  local ms, seq = string.match(last, '^(%d+)-(%d+)$')
  if not ms then return 0 end
  local n = tonumber(seq)
  if n < 2 ^ 53 then
    keep = ms .. '-' .. string.format('%d', n + 1)
  else  -- past exact doubles: keep the last delivered one too (harmless)
    keep = last
  end
end
return redis.call('XTRIM', KEYS[1], 'MINID', keep)
"""


# KEYS: inbox stream ; ARGV: consumer group, this consumer ('' = none), min idle ms
# Removes from the group the consumers with nothing pending that are this one (a
# clean stop) or idle that long (a process that stopped or died).  A consumer with
# nothing pending holds nothing: XREADGROUP makes one again if it is still alive.
# Returns how many went.
DROP_CONSUMERS = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local dropped = 0
for _, c in ipairs(redis.call('XINFO', 'CONSUMERS', KEYS[1], ARGV[1])) do
  local name, pending, idle
  for i = 1, #c, 2 do
    if c[i] == 'name' then name = c[i + 1] end
    if c[i] == 'pending' then pending = c[i + 1] end
    if c[i] == 'idle' then idle = c[i + 1] end
  end
  if pending == 0 and (name == ARGV[2] or idle >= tonumber(ARGV[3])) then
    redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], name)
    dropped = dropped + 1
  end
end
return dropped
"""


# A turn's start, recorded where its reply parts are (fragment of HANDOFF and
# BEGIN, run by the lock holder right after reading the sent records, which
# therefore show the record an earlier execution left): the mailbox head's
# field '<event id>#s:0' names the owner that began it, as a MessageRef JSON
# whose message id is 'started:<owner>' (the shape every version of Parley
# reads in that hash: a rollback reads it as its own start record).  A later
# begin that finds another owner's record knows that execution never completed
# (its worker died or lost the lock): see agent_core.proactive.recovery.
# COMPLETE drops the record with the event; RELEASE drops the caller's own
# record on the head when it lets the thread go without finishing.  Expects
# locals `box` (the mailbox), KEYS[sent_key] and ARGV[owner_arg] set by the
# including script.
def _mark_start(sent_key: int, owner_arg: int) -> str:
    return f"""
if #box > 0 then
  local ok, head = pcall(cjson.decode, box[1])
  if ok and type(head) == 'table' and type(head['id']) == 'string' then
    redis.call('HSET', KEYS[{sent_key}], head['id'] .. '#s:0',
      cjson.encode({{c = '', v = '', m = 'started:' .. ARGV[{owner_arg}], t = '', x = ''}}))
  end
end
"""


# KEYS: mailbox, seen, lock, next, session, sent, moved
# ARGV: event_id, event_json, now_ms, owner, lock_ttl_ms, seen_ttl_ms, seq, keep
# Puts the event in the thread's mailbox unless it was handed off before
# (idempotent on event id for seen_ttl), then tries the thread lock.  The
# mailbox stays in arrival order: an event handed off late (its first reader
# died) goes before later ones still waiting, never before the one running
# (arrival number below the thread's next: appended at the end).  keep > 0: the
# event goes back in line behind the first ``keep`` entries (the turn running
# them), before the first later arrival waiting after them (a message held
# during an approval wait, queued again by the turn that ends the wait: it came
# before what was sent since).
# Returns {appended 0/1, lock acquired 0/1, mailbox length}, and when the lock
# is this owner's, also what a turn begins from (as Delivery.begin reads it):
# mailbox, session version, session data, sent records (flat), next arrival,
# and where the conversation moved ('' if it did not).
HANDOFF = (
    """
local appended = 0
if not redis.call('ZSCORE', KEYS[2], ARGV[1]) then
  redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', tonumber(ARGV[3]) - tonumber(ARGV[6]))
  redis.call('PEXPIRE', KEYS[2], ARGV[6])
  local seq = tonumber(ARGV[7])
  local keep = tonumber(ARGV[8] or '0')
  local nxt = tonumber(redis.call('GET', KEYS[4]) or '1')
  local placed = false
  if keep > 0 or (seq > 0 and seq >= nxt) then
    local items = redis.call('LRANGE', KEYS[1], keep, -1)
    for i = 1, #items do
      local ev = cjson.decode(items[i])
      local other = tonumber(ev['sq'] or 0)
      local later = false
      if seq > 0 and other > 0 then
        later = other > seq
      elseif keep > 0 then
        -- no number to compare (forwarded after a move): behind the held messages
        -- queued again before it, before anything else
        later = string.sub(tostring(ev['id'] or ''), -5) ~= '~held'
      end
      if later then
        -- the head may be running; it cannot be while its number is beyond next
        if keep > 0 or i > 1 or other > nxt then
          redis.call('LINSERT', KEYS[1], 'BEFORE', items[i], ARGV[2])
          placed = true
        end
        break
      end
    end
  end
  if not placed then redis.call('RPUSH', KEYS[1], ARGV[2]) end
  appended = 1
end
local got = 0
if redis.call('SET', KEYS[3], ARGV[4], 'NX', 'PX', ARGV[5]) then got = 1 end
if got == 0 and redis.call('GET', KEYS[3]) ~= ARGV[4] then
  return {appended, got, redis.call('LLEN', KEYS[1])}
end
local box = redis.call('LRANGE', KEYS[1], 0, -1)
local sess = redis.call('HMGET', KEYS[5], 'v', 'd')
local sent = redis.call('HGETALL', KEYS[6])
"""
    + _mark_start(6, 4)
    + """
return {appended, got, #box, box, sess[1] or '', sess[2] or '', sent,
        redis.call('GET', KEYS[4]) or '', redis.call('GET', KEYS[7]) or ''}
"""
)

# KEYS: mailbox, session, lock, sent, next
# ARGV: owner, consumed (JSON list of the event ids the turn ran),
#       session_json ('' = unchanged), expected_version,
#       session_ttl_ms, lock_ttl_ms, next arrival number (0 = unchanged),
#       next's ttl_ms, sent fields to delete...
# Returns the mailbox length left, -1 if the lock is not ours, -2 on a version
# conflict (nothing changed in either case).  Releases the lock when the mailbox
# is empty, otherwise keeps (and renews) it for the next turn.  The entries
# removed are the ones the turn ran, by event id: normally the mailbox's first
# ones (LTRIM); if anything was put before or among them meanwhile, exactly
# those entries go (LREM), never another event in their place.
COMPLETE = """
if redis.call('GET', KEYS[3]) ~= ARGV[1] then return -1 end
if ARGV[3] ~= '' then
  local v = redis.call('HGET', KEYS[2], 'v') or '0'
  if v ~= ARGV[4] then return -2 end
  redis.call('HSET', KEYS[2], 'v', tonumber(ARGV[4]) + 1, 'd', ARGV[3])
end
if redis.call('EXISTS', KEYS[2]) == 1 then redis.call('PEXPIRE', KEYS[2], ARGV[5]) end
local ids = cjson.decode(ARGV[2])
local n = #ids
if n > 0 then
  local first = redis.call('LRANGE', KEYS[1], 0, n - 1)
  local same = #first == n
  for i = 1, #first do
    local ok, ev = pcall(cjson.decode, first[i])
    if not (ok and type(ev) == 'table' and ev['id'] == ids[i]) then same = false end
  end
  if same then
    redis.call('LTRIM', KEYS[1], n, -1)
  else
    local ran = {}
    for _, id in ipairs(ids) do ran[id] = true end
    for _, item in ipairs(redis.call('LRANGE', KEYS[1], 0, -1)) do
      local ok, ev = pcall(cjson.decode, item)
      if ok and type(ev) == 'table' and ran[ev['id']] then
        redis.call('LREM', KEYS[1], 1, item)
        ran[ev['id']] = nil
      end
    end
  end
  -- the consumed events' start records go with them (see _mark_start)
  -- (and their hand-back records: RELEASE)
  for _, id in ipairs(ids) do redis.call('HDEL', KEYS[4], id .. '#s:0', id .. '#hb') end
end
for i = 9, #ARGV do redis.call('HDEL', KEYS[4], ARGV[i]) end
local n2 = tonumber(ARGV[7])
if n2 > 0 and n2 > tonumber(redis.call('GET', KEYS[5]) or '0') then
  redis.call('SET', KEYS[5], n2, 'PX', ARGV[8])
elseif redis.call('EXISTS', KEYS[5]) == 1 then
  -- not advanced (a turn of events without an arrival number): it still lives as
  -- long after this turn, never dying before the arrival counter (keys.SEQ_TTL_SECS)
  redis.call('PEXPIRE', KEYS[5], ARGV[8])
end
local left = redis.call('LLEN', KEYS[1])
if left == 0 then
  redis.call('DEL', KEYS[3])
else
  redis.call('PEXPIRE', KEYS[3], ARGV[6])
end
return left
"""

# KEYS: mailbox, next, sent ; ARGV: head event id, its arrival number, next's
#       ttl_ms, owner
# Gives up waiting for earlier arrivals: the mailbox head runs next (``next``
# becomes its number), only while it is still the head the caller read.  A late
# arrival handed off since went before it (HANDOFF: its number is beyond next):
# then nothing is set, the caller's start record on the old head goes (as in
# RELEASE), and 0 tells the caller to begin again (the late one runs first).
SKIP_GAP = """
local ok, head = pcall(cjson.decode, redis.call('LINDEX', KEYS[1], 0) or '')
if ok and type(head) == 'table' and head['id'] == ARGV[1] then
  redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
  return 1
end
local field = ARGV[1] .. '#s:0'
local rec_ok, rec = pcall(cjson.decode, redis.call('HGET', KEYS[3], field) or '')
if rec_ok and type(rec) == 'table' and rec['m'] == 'started:' .. ARGV[4] then
  redis.call('HDEL', KEYS[3], field)
end
return 0
"""

# KEYS: lock ; ARGV: owner, ttl_ms.  1 if renewed, 0 if the lock is not ours.
RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
"""

# KEYS: lock [, sent, mailbox] ; ARGV: owner.  Compare-and-delete of the lock;
# with the optional keys, also of the start record this owner left on the
# mailbox head (see _mark_start): it lets the thread go without finishing that
# event (a shutdown, Redis trouble, waiting for an earlier arrival), which must
# not count as an execution that died.  ARGV[2] (optional, ms > 0): the lock is
# not deleted but becomes a hold no one owns ('<owner>~later'), expiring then (a
# turn handed back until a platform's rate-limit wait is over); the head's field
# '<event id>#hb' then records when (ARGV[3], ms: shaped as a start record is, a
# MessageRef JSON with message id 'handback:<ms>'), so that the rerun heeds an
# /interrupt sent meanwhile (agent_core.agent.turn).  COMPLETE drops it.
RELEASE = """
local head_id = nil
if KEYS[3] then
  local ok, head = pcall(cjson.decode, redis.call('LINDEX', KEYS[3], 0) or '')
  if ok and type(head) == 'table' and type(head['id']) == 'string' then
    head_id = head['id']
    local field = head['id'] .. '#s:0'
    local rec_ok, rec = pcall(cjson.decode, redis.call('HGET', KEYS[2], field) or '')
    if rec_ok and type(rec) == 'table' and rec['m'] == 'started:' .. ARGV[1] then
      redis.call('HDEL', KEYS[2], field)
    end
  end
end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  if ARGV[2] and tonumber(ARGV[2]) > 0 then
    redis.call('SET', KEYS[1], ARGV[1] .. '~later', 'PX', ARGV[2])
    if head_id and ARGV[3] then
      local old = redis.call('HGET', KEYS[2], head_id .. '#hb')
      if not old then  -- the first hand-back's time: an earlier one's stands
        redis.call('HSET', KEYS[2], head_id .. '#hb',
          cjson.encode({c = '', v = '', m = 'handback:' .. ARGV[3], t = '', x = ''}))
      end
    end
    return 1
  end
  return redis.call('DEL', KEYS[1])
end
return 0
"""

# KEYS: mailbox, session, sent, next, moved ; ARGV: owner
# What a lock holder's next turn begins from (as HANDOFF returns it): mailbox,
# session version, session data, sent records (flat, as they were before this
# begin recorded its start), next arrival, where the conversation moved.
BEGIN = (
    """
local box = redis.call('LRANGE', KEYS[1], 0, -1)
local sess = redis.call('HMGET', KEYS[2], 'v', 'd')
local sent = redis.call('HGETALL', KEYS[3])
"""
    + _mark_start(3, 1)
    + """
return {box, sess[1] or '', sess[2] or '', sent, redis.call('GET', KEYS[4]) or '',
        redis.call('GET', KEYS[5]) or ''}
"""
)

# KEYS: session ; ARGV: session_json, expected_version, ttl_ms
# Version-checked save outside a turn (commands run under the lock use COMPLETE).
SAVE_SESSION = """
local v = redis.call('HGET', KEYS[1], 'v') or '0'
if v ~= ARGV[2] then return -2 end
redis.call('HSET', KEYS[1], 'v', tonumber(ARGV[2]) + 1, 'd', ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return tonumber(ARGV[2]) + 1
"""

# The pace scripts read the time from the server (TIME), not from the caller:
# every process on every machine then books on one clock, and the wait they
# return counts from the moment the slot was booked, not from when the caller
# built its request (a caller that stalled for a while before its round trip
# would otherwise sleep that stall a second time).
_SERVER_MS = """
local _t = redis.call('TIME')
local now = tonumber(_t[1]) * 1000 + math.floor(tonumber(_t[2]) / 1000)
"""

# KEYS: pace key ; ARGV: interval_ms, max_wait_ms (-1 = unbounded)
# Reserves the next free send slot on a shared pace (one key per chat, one
# global...).  Returns the ms to wait before sending, or -1 if that would be
# longer than max_wait (nothing reserved: a droppable streaming edit).
PACE = (
    _SERVER_MS
    + """
local interval = tonumber(ARGV[1])
local nxt = tonumber(redis.call('GET', KEYS[1]) or '0')
local slot = math.max(now, nxt)
local wait = slot - now
local maxw = tonumber(ARGV[2])
if maxw >= 0 and wait > maxw then return -1 - wait end
redis.call('SET', KEYS[1], slot + interval, 'PX', wait + interval + 1000)
return wait
"""
)

# KEYS: pace key ; ARGV: pause_ms.  Nothing may be sent on this pace before
# now + pause (a platform 429 retry_after).
PACE_PAUSE = (
    _SERVER_MS
    + """
local until_ms = now + tonumber(ARGV[1])
local nxt = tonumber(redis.call('GET', KEYS[1]) or '0')
if until_ms > nxt then
  redis.call('SET', KEYS[1], until_ms, 'PX', tonumber(ARGV[1]) + 1000)
end
return 1
"""
)


# --- agent core (issue 4) ---

# KEYS: approval hash ; ARGV: decision, decider, decider_name, event_id, now_ms
#       [, made_ms: when the decision was made (its ingest time), judged against the
#       expiry instead of now_ms: a press made in time but taken up late counts]
# Exactly one decision wins.  Returns {code, decision}:
#   0 unknown approval (never existed here, or long gone)
#   1 this event holds the decision (first claim, or the rerun of the same event)
#   2 already decided by another event
#   3 expired (recorded as the decision, so nothing can run it later)
APPROVAL_CLAIM = """
local exp = redis.call('HGET', KEYS[1], 'exp')
if not exp then return {0, ''} end
local dec = redis.call('HGET', KEYS[1], 'dec')
if dec then
  if redis.call('HGET', KEYS[1], 'ev') == ARGV[4] then return {1, dec} end
  return {2, dec}
end
if tonumber(ARGV[6] or ARGV[5]) > tonumber(exp) then
  redis.call('HSET', KEYS[1], 'dec', 'expired', 'ev', ARGV[4], 'at', ARGV[5])
  return {3, 'expired'}
end
redis.call('HSET', KEYS[1], 'dec', ARGV[1], 'by', ARGV[2], 'byn', ARGV[3], 'ev', ARGV[4],
  'at', ARGV[5])
return {1, ARGV[1]}
"""

# KEYS: hash ; ARGV: field, value, ...  Writes only into a hash that exists: a
# record gone with its TTL is not brought back without one.  1 if written.
HSET_IF_EXISTS = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV))
return 1
"""

# KEYS: approval-prompts[, approval record] ; ARGV: now_ms, keep_ms, ttl_secs,
#       prompt ref JSON ('' = the record is not written), part, owner, part, owner...
# Records which approval (owner: its id, or WRITTEN_OVER) each reply part shows now,
# as '<owner>|<ms written>'; entries written more than keep_ms ago go (their
# approvals expired and their records are gone), and one without a time (written
# by an earlier version) gets now.  With a ref, the approval record (if it still
# exists) gets 'ref' and 'part' (the first part given).  The hash lives ttl_secs.
APPROVAL_PROMPTS = """
local now = tonumber(ARGV[1])
if ARGV[4] ~= '' and KEYS[2] and redis.call('EXISTS', KEYS[2]) == 1 then
  redis.call('HSET', KEYS[2], 'ref', ARGV[4], 'part', ARGV[5])
end
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  local at = tonumber(string.match(all[i + 1], '|(%d+)$'))
  if not at then
    redis.call('HSET', KEYS[1], all[i], all[i + 1] .. '|' .. ARGV[1])
  elseif at < now - tonumber(ARGV[2]) then
    redis.call('HDEL', KEYS[1], all[i])
  end
end
for i = 5, #ARGV, 2 do
  redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1] .. '|' .. ARGV[1])
end
redis.call('EXPIRE', KEYS[1], ARGV[3])
return 1
"""

# KEYS: routine state ; ARGV: the last fire this process wrote, the one before ('': none)
# Gives a cut-off cron fire back: its last fire goes back to what it was, unless
# another leader has fired since (compare and set, so that fire is never undone).
LAST_FIRE_RESTORE = """
if redis.call('HGET', KEYS[1], 'last_fire') ~= ARGV[1] then return 0 end
if ARGV[2] == '' then
  redis.call('HDEL', KEYS[1], 'last_fire')
else
  redis.call('HSET', KEYS[1], 'last_fire', ARGV[2])
end
return 1
"""

# KEYS: key ; ARGV: value.  Deletes the key only while it still holds value.
DELETE_IF_HELD = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""

# --- runs in flight (agent_core/proactive/scheduler.py) ---
# A record per run the leader took, in {routines}:inflight (run id -> JSON with 'o'
# its owner, 'a' its attempts and 't' when it was first taken), written by the script that takes the run, with
# the owner's alive key (PX) beside it; removed when the run ends.  Numbers in the
# JSON that must survive cjson (times) are strings.

# KEYS: routine state, fire claim, in flight, owner's alive key
# ARGV: now (the last fire), owner, claim ttl s, run id, record, in-flight ttl s, alive ttl ms
# Marks a cron fire as fired (its last fire: always; its claim: SET NX) and, if this
# process claimed it, records it as in flight.  1 claimed, 0 another leader did.
FIRE_CLAIM = """
redis.call('HSET', KEYS[1], 'last_fire', ARGV[1])
if not redis.call('SET', KEYS[2], ARGV[2], 'NX', 'EX', ARGV[3]) then return 0 end
redis.call('HSET', KEYS[3], ARGV[4], ARGV[5])
redis.call('EXPIRE', KEYS[3], ARGV[6])
redis.call('SET', KEYS[4], '1', 'PX', ARGV[7])
return 1
"""

# KEYS: routine queue, in flight, owner's alive key
# ARGV: count, owner, run id prefix, in-flight ttl s, alive ttl ms, now (taken at)
# Takes up to count queued runs (manual, event) and records each as in flight
# (run id: prefix .. 'n' .. its place; 't' when it was taken); returns them, oldest
# first.
QUEUE_TAKE = """
local items = redis.call('LPOP', KEYS[1], ARGV[1])
if not items then return {} end
for i, item in ipairs(items) do
  local rec = cjson.encode({o = ARGV[2], a = 1, q = item, t = ARGV[6]})
  redis.call('HSET', KEYS[2], ARGV[3] .. 'n' .. i, rec)
end
redis.call('EXPIRE', KEYS[2], ARGV[4])
redis.call('SET', KEYS[3], '1', 'PX', ARGV[5])
return items
"""

# KEYS: in flight ; ARGV: run id, owner
# A run ended (any outcome): its record goes, if it is still this owner's (a later
# leader that took it over owns it now).  1 removed, 0 not.
INFLIGHT_DONE = """
local ok, rec = pcall(cjson.decode, redis.call('HGET', KEYS[1], ARGV[1]) or '')
if ok and type(rec) == 'table' and rec['o'] == ARGV[2] then
  return redis.call('HDEL', KEYS[1], ARGV[1])
end
return 0
"""

# KEYS: in flight, old owner's alive key, new owner's alive key
# ARGV: run id, record as read, new owner, most attempts, in-flight ttl s, alive ttl ms
# Takes over a run whose owner died: only while its owner's alive key is gone and
# the record is still the one read (two leaders never both take it).  Under
# ``most`` attempts so far it becomes the new owner's, one attempt more:
# {1, record}; else it is removed: {0, record} (given up).  nil: not taken.
INFLIGHT_TAKEOVER = """
if redis.call('EXISTS', KEYS[2]) == 1 then return nil end
local raw = redis.call('HGET', KEYS[1], ARGV[1])
if raw ~= ARGV[2] then return nil end
local ok, rec = pcall(cjson.decode, raw)
if not ok or type(rec) ~= 'table' then
  redis.call('HDEL', KEYS[1], ARGV[1])
  return {0, raw}
end
local tries = tonumber(rec['a']) or 1
if tries >= tonumber(ARGV[4]) then
  redis.call('HDEL', KEYS[1], ARGV[1])
  return {0, raw}
end
rec['a'] = tries + 1
rec['o'] = ARGV[3]
local new = cjson.encode(rec)
redis.call('HSET', KEYS[1], ARGV[1], new)
redis.call('EXPIRE', KEYS[1], ARGV[5])
redis.call('SET', KEYS[3], '1', 'PX', ARGV[6])
return {1, new}
"""

# KEYS: undo, redo, ops ; ARGV: event_id, snapshot, max, ttl_ms
# Pushes a checkpoint taken before the turn of event_id (once per event) and
# clears redo.  Returns 1 if pushed, 0 if this event already checkpointed.
UNDO_CHECKPOINT = """
local f = 'c:' .. ARGV[1]
if redis.call('HEXISTS', KEYS[3], f) == 1 then return 0 end
if redis.call('HLEN', KEYS[3]) > 64 then redis.call('DEL', KEYS[3]) end
redis.call('HSET', KEYS[3], f, '1')
redis.call('LPUSH', KEYS[1], ARGV[2])
redis.call('LTRIM', KEYS[1], 0, tonumber(ARGV[3]) - 1)
redis.call('DEL', KEYS[2])
for i = 1, 3 do
  if redis.call('EXISTS', KEYS[i]) == 1 then redis.call('PEXPIRE', KEYS[i], ARGV[4]) end
end
return 1
"""

# KEYS: from, to, ops ; ARGV: event_id, current_snapshot, max, ttl_ms
# Undo (from=undo, to=redo) or redo (from=redo, to=undo): pops the newest
# snapshot of ``from`` and pushes the current one onto ``to``.  Returns the
# popped snapshot ('' when ``from`` is empty); a rerun of the same event gets
# the same snapshot without moving anything again.
UNDO_MOVE = """
local f = 'u:' .. ARGV[1]
local done = redis.call('HGET', KEYS[3], f)
if done then return done end
local snap = redis.call('LPOP', KEYS[1])
if not snap then return '' end
if redis.call('HLEN', KEYS[3]) > 64 then redis.call('DEL', KEYS[3]) end
redis.call('LPUSH', KEYS[2], ARGV[2])
redis.call('LTRIM', KEYS[2], 0, tonumber(ARGV[3]) - 1)
redis.call('HSET', KEYS[3], f, snap)
for i = 1, 3 do
  if redis.call('EXISTS', KEYS[i]) == 1 then redis.call('PEXPIRE', KEYS[i], ARGV[4]) end
end
return snap
"""

# KEYS: day spent, user spent, reservations (hash), user's action window (zset)
# ARGV: now_ms, day_limit, user_limit, estimate, reservation_id, hourly_limit,
#       ttl_s, user
# All amounts are integer micro-dollars; a limit of 0 means none.  Refuses when
# what is spent plus what calls in flight have reserved reaches a limit, else
# reserves ``estimate`` (and counts one action).  Returns {code, day, user}:
# 1 ok, 0 day budget, -1 user budget, -2 hourly action limit; 2 / -3: the day's /
# the user's budget is not spent, but calls in flight have reserved the rest (they
# settle at their real cost within seconds: the caller asks again).
BUDGET_RESERVE = """
local now = tonumber(ARGV[1])
local spent = tonumber(redis.call('GET', KEYS[1]) or '0')
local uspent = tonumber(redis.call('GET', KEYS[2]) or '0')
local res = redis.call('HGETALL', KEYS[3])
local rtot, ruser = 0, 0
for i = 1, #res, 2 do
  local est, ts, u = string.match(res[i + 1], '^(%d+)|(%d+)|(.*)$')
  if (not est) or now - tonumber(ts) > 600000 then
    redis.call('HDEL', KEYS[3], res[i])
  else
    rtot = rtot + tonumber(est)
    if u == ARGV[8] then ruser = ruser + tonumber(est) end
  end
end
local dl, ul = tonumber(ARGV[2]), tonumber(ARGV[3])
if dl > 0 and spent >= dl then return {0, spent, uspent} end
if ul > 0 and uspent >= ul then return {-1, spent, uspent} end
local hl = tonumber(ARGV[6])
if hl > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now - 3600000)
  if redis.call('ZCARD', KEYS[4]) >= hl then return {-2, spent, uspent} end
end
if dl > 0 and spent + rtot >= dl then return {2, spent, uspent} end
if ul > 0 and uspent + ruser >= ul then return {-3, spent, uspent} end
if hl > 0 then
  redis.call('ZADD', KEYS[4], now, ARGV[5])
  redis.call('PEXPIRE', KEYS[4], 3600000)
end
redis.call('HSET', KEYS[3], ARGV[5], ARGV[4] .. '|' .. ARGV[1] .. '|' .. ARGV[8])
redis.call('EXPIRE', KEYS[3], ARGV[7])
return {1, spent, uspent}
"""

# KEYS: day spent, user spent, reservations, recorded marker[, user's hourly actions]
# ARGV: reservation_id, cost, ttl_s, marker ttl_s
# Replaces a reservation by the real cost, once per reservation: the marker
# (SET NX, an hour: retries come with the next flush) makes a retry after an
# unknown outcome (an error, a reply lost or cut off) add nothing the second
# time, while it still drops the reservation.  With the fifth key the reservation is given back for a
# call never made (its check was cut off): its hourly action goes too.
# Returns {day total, user total, 1 if added now else 0}.
BUDGET_RECORD = """
redis.call('HDEL', KEYS[3], ARGV[1])
if KEYS[5] then redis.call('ZREM', KEYS[5], ARGV[1]) end
if not redis.call('SET', KEYS[4], '1', 'NX', 'EX', ARGV[4]) then
  return {tonumber(redis.call('GET', KEYS[1]) or '0'),
          tonumber(redis.call('GET', KEYS[2]) or '0'), 0}
end
local d = redis.call('INCRBY', KEYS[1], ARGV[2])
redis.call('EXPIRE', KEYS[1], ARGV[3])
local u = redis.call('INCRBY', KEYS[2], ARGV[2])
redis.call('EXPIRE', KEYS[2], ARGV[3])
return {d, u, 1}
"""

# KEYS: flush token, then counters ; ARGV: ttl_s, then one amount per counter
# Adds the amounts a process counted for later (Budget.book_later), once per token:
# a flush retried after an unknown outcome (its reply lost or too late, the caller
# cancelled) with the same token adds nothing the second time.  Returns 1 if added.
BUDGET_FLUSH = """
if not redis.call('SET', KEYS[1], '1', 'NX', 'EX', ARGV[1]) then
  return 0
end
for i = 2, #KEYS do
  redis.call('INCRBY', KEYS[i], ARGV[i])
  redis.call('EXPIRE', KEYS[i], ARGV[1])
end
return 1
"""

# KEYS: window zset, notice flag ; ARGV: now_ms, window_ms, limit, member
# Sliding window of inbound messages per user.  1 allowed; 2 refused and the
# user should be told; 3 refused, already told in this window.  Idempotent on
# ``member`` (the event id): a rerun is not counted twice.
RATE_WINDOW = """
local now = tonumber(ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[2]))
if redis.call('ZSCORE', KEYS[1], ARGV[4]) then return 1 end
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[3]) then
  if redis.call('SET', KEYS[2], '1', 'NX', 'PX', ARGV[2]) then return 2 end
  return 3
end
redis.call('ZADD', KEYS[1], now, ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
"""

# KEYS: code key, user key, channel's pending zset
# ARGV: code, record_json, now_ms, ttl_ms, max_pending
# Returns {1, code} the user's existing code, {2, code} a new one, {0, ''} too
# many pending requests on this channel.
PAIR_REQUEST = """
local existing = redis.call('GET', KEYS[2])
if existing then return {1, existing} end
local now = tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
if redis.call('ZCARD', KEYS[3]) >= tonumber(ARGV[5]) then return {0, ''} end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[4])
redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[4])
redis.call('ZADD', KEYS[3], now + tonumber(ARGV[4]), ARGV[1])
redis.call('PEXPIRE', KEYS[3], ARGV[4])
return {2, ARGV[1]}
"""

# KEYS: code key, user key, channel's pending zset, paired set
# ARGV: code, qualified user.  One-time: 1 approved, 0 unknown / expired code.
PAIR_APPROVE = """
if not redis.call('GET', KEYS[1]) then return 0 end
redis.call('DEL', KEYS[1])
if redis.call('GET', KEYS[2]) == ARGV[1] then redis.call('DEL', KEYS[2]) end
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('SADD', KEYS[4], ARGV[2])
return 1
"""

# KEYS: lock, sent ; ARGV: owner, field, stamp
# Fenced claim of a reply part before it is sent: only the lock holder may
# claim, and a part claimed (or sent) before is reported instead of claimed
# again.  Returns {-1} if the lock is not ours, {0} if newly claimed, {1, value}
# if the part exists (value: MessageRef JSON, or 'pending:<stamp>' while another
# execution of this turn is sending it).  Finding exactly the marker this call
# writes is {0} too: the same send claiming again (its earlier claim was made
# with a pacing booking and could not be taken back, or its request is being
# repeated); every send has a stamp of its own (time and a random suffix).
# Optional ARGV[4]: a dead execution's marker this claim replaces (the part was
# looked up on the platform and is not there); only exactly that marker.
CLAIM_PART = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return {-1} end
local v = redis.call('HGET', KEYS[2], ARGV[2])
if v == 'pending:' .. ARGV[3] then return {0} end
if v and v ~= ARGV[4] then return {1, v} end
redis.call('HSET', KEYS[2], ARGV[2], 'pending:' .. ARGV[3])
return {0}
"""

# KEYS: sent hash ; ARGV: field, marker.  Takes back a CLAIM_PART claim that is
# still exactly the one written (its 'pending:<ms>' marker): 1 taken back, 0 not.
UNCLAIM_PART = """
if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then
  redis.call('HDEL', KEYS[1], ARGV[1])
  return 1
end
return 0
"""

# KEYS: lock ; ARGV: owner.  1 if the lock is ours.
HOLDS = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return 1 end
return 0
"""


# --- proactive (issue 12) ---
# KEYS: running zset ; ARGV: run_id, now_ms, expiry_ms, max
# Takes one of ``max`` concurrent slots of a routine (expired runs are dropped
# first, so a dead worker's slot frees itself).  1 taken, 0 all busy, 2 this run
# holds one already (a fire run again after a shutdown while its turn is in flight).
SLOT_ACQUIRE = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[2])
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 2 end
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[4]) then return 0 end
redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[3]) - tonumber(ARGV[2]))
return 1
"""


# KEYS: once key, routine queue ; ARGV: once ttl seconds, queue item
# Queues a routine run once per key (an event trigger: the inbound event's id, so a
# platform's redelivery of the same event queues nothing).  1 queued, 0 not.
QUEUE_RUN_ONCE = """
if not redis.call('SET', KEYS[1], '1', 'NX', 'EX', ARGV[1]) then return 0 end
redis.call('RPUSH', KEYS[2], ARGV[2])
return 1
"""


# The three scripts below act for one run of a routine only while the routine it
# ran for is still stored under that name: ARGV[2] is its ``created_at``, compared
# with the stored definition's (a definition without one, from an older version,
# counts as the same).  A routine removed while the run was in flight, perhaps added
# again under the same name, gets nothing of it.  KEYS share the {routines} tag.
_SAME_ROUTINE = """
local raw = redis.call('HGET', KEYS[1], ARGV[1])
if not raw then return nil end
local ok, def = pcall(cjson.decode, raw)
if not ok or type(def) ~= 'table' then return nil end
local at = def['created_at']
if at ~= nil and tonumber(at) ~= tonumber(ARGV[2]) then return nil end
return raw
"""

# KEYS: defs, state, runs ; ARGV: name, created_at, last_run, outcome, duration,
#       run json, history
# Records a run (state fields, run count, the last runs): 1, or 0 (not the same routine).
ROUTINE_RECORD = (
    "local function same()"
    + _SAME_ROUTINE
    + """end
if not same() then return 0 end
redis.call('HSET', KEYS[2], 'last_run', ARGV[3], 'outcome', ARGV[4], 'duration', ARGV[5])
redis.call('HINCRBY', KEYS[2], 'runs', 1)
redis.call('LPUSH', KEYS[3], ARGV[6])
redis.call('LTRIM', KEYS[3], 0, tonumber(ARGV[7]) - 1)
return 1
"""
)

# KEYS: defs, state ; ARGV: name, created_at
# One more permanent send failure in a row: the count, or -1 (not the same routine).
ROUTINE_SEND_FAILURE = (
    "local function same()"
    + _SAME_ROUTINE
    + """end
if not same() then return -1 end
return redis.call('HINCRBY', KEYS[2], 'send_failures', 1)
"""
)

# KEYS: defs ; ARGV: name, created_at, definition read before, new definition
# Replaces the definition if it is still the one read (and the same routine):
# 1 done, 0 changed meanwhile (read it again), -1 not the same routine.
ROUTINE_REPLACE = (
    "local function same()"
    + _SAME_ROUTINE
    + """end
local raw = same()
if not raw then return -1 end
if raw ~= ARGV[3] then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[4])
return 1
"""
)


# --- conversation moves (agent_core/store/moves.py) ---
# KEYS: moved_in (hash), session, then each key to write
# ARGV: source thread, now_ms, marker_ttl_ms, session_json ('' = leave it),
#       expected session version, session_ttl_ms, then per key from KEYS[3]:
#       mode ('list' | 'hash' replace it, 'prepend' items before its own,
#       'clear' delete it; n is then 0),
#       ttl_ms (0: none), n, and n values (hash: field, value, ...)
# Writes a moved conversation into its new thread, once per source: 1 written,
# 0 this source was written here before (nothing changed), -2 the session's
# version is not the expected one (nothing changed).
MOVE_IN = """
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then return 0 end
if ARGV[4] ~= '' then
  local v = redis.call('HGET', KEYS[2], 'v') or '0'
  if v ~= ARGV[5] then return -2 end
  redis.call('HSET', KEYS[2], 'v', tonumber(ARGV[5]) + 1, 'd', ARGV[4])
  redis.call('PEXPIRE', KEYS[2], ARGV[6])
end
local a = 7
for k = 3, #KEYS do
  local mode, ttl, n = ARGV[a], tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  a = a + 3
  if mode == 'prepend' then
    for i = a + n - 1, a, -1 do redis.call('LPUSH', KEYS[k], ARGV[i]) end
  else
    redis.call('DEL', KEYS[k])
    if mode == 'hash' then
      for i = a, a + n - 2, 2 do redis.call('HSET', KEYS[k], ARGV[i], ARGV[i + 1]) end
    else
      for i = a, a + n - 1 do redis.call('RPUSH', KEYS[k], ARGV[i]) end
    end
  end
  if n > 0 and ttl > 0 and redis.call('PTTL', KEYS[k]) < ttl then
    redis.call('PEXPIRE', KEYS[k], ttl)
  end
  a = a + n
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
"""

# KEYS: lock, moved, redirect ; ARGV: owner, destination thread, destination
#       conversation ('' = no redirect), marker ttl seconds
# The first step of a move, only while the source's lock is ``owner``'s: marks
# the source as moved, so that from now on its events are forwarded to the
# destination (nothing runs there any more) and the channel sends to the new
# conversation id.  1 done (or done before), 0 the lock is not ours, -1 the
# source moved somewhere else before (nothing changed).
MOVE_FENCE = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
local to = redis.call('GET', KEYS[2])
if to and to ~= ARGV[2] then return -1 end
redis.call('SET', KEYS[2], ARGV[2], 'EX', ARGV[4])
if ARGV[3] ~= '' then redis.call('SET', KEYS[3], ARGV[3], 'EX', ARGV[4]) end
return 1
"""

# KEYS: lock, then each key to delete ; ARGV: owner
# The last step of a move, only while the source's lock is ``owner``'s: deletes
# the moved state and releases the lock.  1 done, 0 the lock is not ours
# (nothing changed).
MOVE_OUT = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
for k = 2, #KEYS do redis.call('DEL', KEYS[k]) end
redis.call('DEL', KEYS[1])
return 1
"""
