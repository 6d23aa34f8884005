"""Every Redis key Parley uses, in one place.

Per-thread keys embed the thread's hash tag (``{telegram:bot1:42:}``) so that
all of one thread's keys live on one Redis Cluster slot and one Lua script can
touch them together.  Global keys (the inbound stream, the active-thread index,
counters) are never touched by the same script as a thread's keys.
"""

from __future__ import annotations

from agent_core.events import ThreadKey

PREFIX = "parley:"

# --- global ---------------------------------------------------------------
# The inbound stream and the dedup claims share the hash tag {inbox}, so one
# script claims and publishes an event in one round trip (also on a Cluster,
# where they therefore live on one node).
INBOX_STREAM = PREFIX + "{inbox}"  # Redis Stream of InboundEvent JSON
INBOX_GROUP = "workers"  # its consumer group
ACTIVE_THREADS = PREFIX + "active"  # ZSET thread -> first-queued time; non-empty mailboxes


def dedup(channel: str, event_id: str) -> str:
    return f"{PREFIX}{{inbox}}:dedup:{channel}:{event_id}"


# A thread's arrival counter (``seq``) lives 30 days after its last event, and its
# ``next`` at least as long after its last turn, whatever the session's own TTL: a
# ``next`` gone while the counter lives would make the next message wait for
# arrivals that never come (agent_core.worker: ``_waits_for_earlier``).
SEQ_TTL_SECS = 30 * 86_400


def seq(t: ThreadKey) -> str:
    """INCR counter numbering one thread's events in arrival order (tagged {inbox})."""
    return f"{PREFIX}{{inbox}}:seq:{t}"


def web_session(session_id: str) -> str:
    return f"{PREFIX}web:{session_id}"


# --- per thread (all share the thread's hash tag) --------------------------
def mailbox(t: ThreadKey) -> str:
    """LIST of InboundEvent JSON waiting for (or in) a turn, in arrival order."""
    return f"{PREFIX}{t.tag}:mailbox"


def seen(t: ThreadKey) -> str:
    """ZSET event_id -> handed-off time: hand-off is idempotent for 24 h."""
    return f"{PREFIX}{t.tag}:seen"


def next_seq(t: ThreadKey) -> str:
    """STRING: the arrival number of the thread's next event to run."""
    return f"{PREFIX}{t.tag}:next"


def lock(t: ThreadKey) -> str:
    """STRING owner token, PX: the thread's turn lock."""
    return f"{PREFIX}{t.tag}:lock"


def session(t: ThreadKey) -> str:
    """STRING JSON of the thread's session, with a version number."""
    return f"{PREFIX}{t.tag}:session"


def sent(t: ThreadKey) -> str:
    """HASH '<event_id>:<part>' -> MessageRef JSON of replies already sent ('pending:<ms>'
    while one is on its way); also '<event_id>#r:c' / '#r:0' (rerun once alongside others / once
    alone), '<event_id>#<tag>:<n>' (notices) and '<event_id>#s:0', who began the
    event's turn (a MessageRef JSON whose message id is 'started:<owner>': see
    scripts._mark_start)."""
    return f"{PREFIX}{t.tag}:sent"


def outbox_stream(t: ThreadKey) -> str:
    """STREAM of rendered output for local channels (web, console)."""
    return f"{PREFIX}{t.tag}:out"


def archive(t: ThreadKey) -> str:
    """LIST of archived (compacted away) history messages."""
    return f"{PREFIX}{t.tag}:archive"


# --- runtime (leases, metrics) ----------------------------------------------
METRICS = PREFIX + "metrics"  # HASH 'name|label=value,...' -> number, summed over processes


def lease(name: str) -> str:
    """STRING owner token, PX: one holder among all processes (gateway, scheduler)."""
    return f"{PREFIX}lease:{name}"


# --- agent core (issue 4) ---
# Per thread (the thread's hash tag):
def approval(t: ThreadKey, approval_id: str) -> str:
    """HASH: one PendingApproval ('d' JSON) and its decision fields (claimed once)."""
    return f"{PREFIX}{t.tag}:approval:{approval_id}"


def approval_prompts(t: ThreadKey) -> str:
    """HASH: reply part ('<event id>:<n>') -> the approval whose prompt it shows."""
    return f"{PREFIX}{t.tag}:approval-prompts"


# ZSET '["<thread>", "<approval id>"]' -> expires_at (s): the prompts the scheduler
# closes when their time runs out (agent_core/proactive/approval_expiry.py)
APPROVALS_DUE = PREFIX + "{approvals}:due"


def interrupt(t: ThreadKey) -> str:
    """STRING ms timestamp: '/interrupt' was asked for at that time (set by Ingest)."""
    return f"{PREFIX}{t.tag}:interrupt"


def undo(t: ThreadKey) -> str:
    """LIST of history snapshots (newest first), at most MAX_UNDO_CHECKPOINTS."""
    return f"{PREFIX}{t.tag}:undo"


def redo(t: ThreadKey) -> str:
    """LIST of history snapshots undone (newest first); cleared by a new turn."""
    return f"{PREFIX}{t.tag}:redo"


def undo_ops(t: ThreadKey) -> str:
    """HASH event_id -> result of an undo/redo/checkpoint already applied (rerun-safe)."""
    return f"{PREFIX}{t.tag}:undoops"


def album(channel: str, tenant: str, chat: str, group: str) -> str:
    """STRING with TTL: this album (media group) was addressed to the bot, so its
    other items are too, whichever web process receives them."""
    return f"{PREFIX}album:{channel}:{tenant}:{chat}:{group}"


def bot_identity(channel: str, bot_id: str) -> str:
    """STRING JSON {"id", "username"}: a bot's identity as the platform last told it
    (Telegram's getMe), used at a start until the platform answers again.  No TTL:
    one small key per bot, replaced whenever the platform answers."""
    return f"{PREFIX}identity:{channel}:{bot_id}"


def demo_notes(t: ThreadKey) -> str:
    """LIST of notes written by the harmless ``demo_approval`` tool."""
    return f"{PREFIX}{t.tag}:demo"


# Conversation moves (a platform gave a conversation a new id).  How long the
# old id keeps pointing at the new one: replies that still name the old id,
# presses on old prompts and routines that notify it are sent on long after.
MOVED_TTL_SECS = 400 * 86_400


def moved(t: ThreadKey) -> str:
    """STRING the thread ``t``'s state moved to: its later events are forwarded there."""
    return f"{PREFIX}{t.tag}:moved"


def moved_in(t: ThreadKey) -> str:
    """HASH source thread -> ms: conversations merged into ``t`` (each exactly once)."""
    return f"{PREFIX}{t.tag}:movedin"


def redirect(t: ThreadKey) -> str:
    """STRING the platform conversation id that replaced ``t``'s conversation (a
    Telegram group's supergroup): the channel sends there instead."""
    return f"{PREFIX}{t.tag}:redirect"


# Global, one hash tag per concern so one script touches one slot:
def user_notes(qualified_user: str) -> str:
    """HASH note id -> text: the ``remember`` tool's notes for one user."""
    return f"{PREFIX}{{notes}}:{qualified_user}"


def budget_day(day: str) -> str:
    """STRING micro-dollars spent by everyone on ``day`` (YYYYMMDD, UTC)."""
    return f"{PREFIX}{{budget}}:day:{day}"


def budget_user(day: str, qualified_user: str) -> str:
    return f"{PREFIX}{{budget}}:user:{day}:{qualified_user}"


def budget_flushed(token: str) -> str:
    """STRING set when a batch of spend counted for later was added (idempotent retry)."""
    return f"{PREFIX}{{budget}}:flushed:{token}"


def budget_recorded(reservation: str) -> str:
    """STRING set when a reservation's real cost was booked (idempotent retry)."""
    return f"{PREFIX}{{budget}}:recorded:{reservation}"


def budget_reserved(day: str) -> str:
    """HASH reservation id -> micro-dollars held by LLM calls in flight."""
    return f"{PREFIX}{{budget}}:reserved:{day}"


def budget_actions(qualified_user: str) -> str:
    """ZSET of one user's LLM calls in the last hour (sliding window)."""
    return f"{PREFIX}{{budget}}:actions:{qualified_user}"


def budget_warned(day: str, scope: str) -> str:
    """STRING set once per day when ``scope`` passed 80 %."""
    return f"{PREFIX}{{budget}}:warned:{day}:{scope}"


def rate_window(qualified_user: str) -> str:
    """ZSET of one user's inbound messages in the current sliding window."""
    return f"{PREFIX}{{access}}:rate:{qualified_user}"


def refusal_notice(qualified_user: str, why: str) -> str:
    """STRING: a refusal notice was sent to this user in this window."""
    return f"{PREFIX}{{access}}:notified:{why}:{qualified_user}"


PAIRED_USERS = PREFIX + "{access}:paired"  # SET of channel-qualified ids let in by pairing
# SET of approved group chats (GROUP_POLICY=pairing): "<channel>:<tenant>:<conversation>"
APPROVED_CHATS = PREFIX + "{access}:chats"


def pairing_code(code: str) -> str:
    """STRING JSON of a pending pairing request, EX 1 h."""
    return f"{PREFIX}{{access}}:pair:{code}"


def pairing_user(qualified_user: str) -> str:
    """STRING the pending code of one user (so they get the same one again)."""
    return f"{PREFIX}{{access}}:pairuser:{qualified_user}"


def pairing_chat(chat: str) -> str:
    """STRING the pending code of one group chat (so it gets the same one again)."""
    return f"{PREFIX}{{access}}:pairchat:{chat}"


def pairing_pending_chats(channel: str) -> str:
    """ZSET code -> expiry ms: the pending group-chat requests of one channel."""
    return f"{PREFIX}{{access}}:pairpendingchats:{channel}"


def pairing_pending(channel: str) -> str:
    """ZSET code -> expiry ms: the pending requests of one channel (at most 3)."""
    return f"{PREFIX}{{access}}:pairpending:{channel}"


def admin_thread(qualified_user: str) -> str:
    """STRING the thread an admin last wrote from (where budget warnings go)."""
    return f"{PREFIX}{{access}}:adminthread:{qualified_user}"


# --- proactive (issue 12) ---
# Routines: one hash tag for all of them, so one script may touch several keys.
ROUTINES = PREFIX + "{routines}:defs"  # HASH routine id -> Routine JSON
ROUTINE_QUEUE = PREFIX + "{routines}:queue"  # LIST of trigger JSON (manual / event), FIFO


def routine_state(routine_id: str) -> str:
    """HASH last_fire, last_run, outcome, duration, runs: the routine's record."""
    return f"{PREFIX}{{routines}}:state:{routine_id}"


def routine_runs(routine_id: str) -> str:
    """LIST of the last runs (JSON, newest first)."""
    return f"{PREFIX}{{routines}}:runs:{routine_id}"


def routine_fire(routine_id: str, due: int) -> str:
    """STRING: the fire due at ``due`` (epoch s) was claimed (exactly once)."""
    return f"{PREFIX}{{routines}}:fire:{routine_id}:{due}"


def routine_running(routine_id: str) -> str:
    """ZSET run id -> expiry ms: runs in flight (max concurrent)."""
    return f"{PREFIX}{{routines}}:running:{routine_id}"


# HASH run id -> JSON of a run the leader took (a cron fire, a queued run) and has
# not finished: its owner, attempts, when it was first taken, what to run again if
# the owner dies (see agent_core/proactive/scheduler.py).  Expires INFLIGHT_SECS
# (scheduler.py) after its last write: every run's write refreshes it, so entries
# are removed one by one, never by expiry.
ROUTINE_INFLIGHT = PREFIX + "{routines}:inflight"


def routine_alive(owner: str) -> str:
    """STRING PX: the scheduler process ``owner`` is alive with runs in flight
    (renewed every lease/3, expires after a lease)."""
    return f"{PREFIX}{{routines}}:alive:{owner}"


def routine_cooldown(routine_id: str) -> str:
    """STRING PX: an event trigger fired recently."""
    return f"{PREFIX}{{routines}}:cooldown:{routine_id}"


def routine_dedup(routine_id: str, digest: str) -> str:
    """STRING PX: the same message text triggered this routine recently."""
    return f"{PREFIX}{{routines}}:dedup:{routine_id}:{digest}"


def routine_triggered(routine_id: str, channel: str, event_id: str) -> str:
    """STRING EX: this inbound event queued this routine (a redelivery queues nothing)."""
    return f"{PREFIX}{{routines}}:by:{routine_id}:{channel}:{event_id}"


# Heartbeat
HEARTBEAT_CHECKLIST = PREFIX + "{heartbeat}:checklist"  # STRING set by /heartbeat set
HEARTBEAT_STATE = PREFIX + "{heartbeat}:state"  # HASH last_tick, failures, outcome, at


def heartbeat_claim(after: int) -> str:
    """STRING: the check due after the tick at ``after`` (epoch s) was claimed (once)."""
    return f"{PREFIX}{{heartbeat}}:claim:{after}"


# Notifications
def notified(dedup_key: str) -> str:
    """STRING: a proactive notification with this key was sent (or is on the wire)."""
    return f"{PREFIX}{{proactive}}:notified:{dedup_key}"


# HASH '<channel>:<conversation>' -> tenant, written by earlier versions (no TTL): only
# read now (a fallback), its fields dropped as their conversations write again
TENANTS = PREFIX + "{proactive}:tenants"
# A Slack/Discord conversation's tenant last seen lives this long after its last
# message (rewritten at most once a day per process) or its last use by a notification.
TENANT_TTL_SECS = 400 * 86_400


def tenant(channel: str, conversation: str) -> str:
    """STRING: the tenant last seen on a Slack/Discord conversation (for short targets)."""
    return f"{PREFIX}{{proactive}}:tenant:{channel}:{conversation}"
