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
INBOX_STREAM = PREFIX + "inbox"  # Redis Stream of InboundEvent JSON
INBOX_GROUP = "workers"  # its consumer group
ACTIVE_THREADS = PREFIX + "active"  # ZSET thread -> first-queued time; non-empty mailboxes
WORKERS = PREFIX + "workers"  # ZSET worker name -> last heartbeat (ms)


def dedup(channel: str, event_id: str) -> str:
    return f"{PREFIX}dedup:{channel}:{event_id}"


def web_session(session_id: str) -> str:
    return f"{PREFIX}web:{session_id}"


# --- per thread (all share the thread's hash tag) --------------------------
def mailbox(t: ThreadKey) -> str:
    """LIST of InboundEvent JSON waiting for (or in) a turn, in arrival order."""
    return f"{PREFIX}{t.tag}:mailbox"


def seen(t: ThreadKey) -> str:
    """ZSET event_id -> handed-off time: hand-off is idempotent for 24 h."""
    return f"{PREFIX}{t.tag}:seen"


def lock(t: ThreadKey) -> str:
    """STRING owner token, PX: the thread's turn lock."""
    return f"{PREFIX}{t.tag}:lock"


def session(t: ThreadKey) -> str:
    """STRING JSON of the thread's session, with a version number."""
    return f"{PREFIX}{t.tag}:session"


def sent(t: ThreadKey) -> str:
    """HASH '<event_id>:<part>' -> MessageRef JSON of replies already sent."""
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
