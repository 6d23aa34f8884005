"""Who may talk to the agent: DM policy, allow list, pairing, per-user rate window.

Enforced by the worker at the start of a turn (see docs/agent.md, "Access"):
the event is consumed, and a refused user gets one short notice per window in
the chat.  Doing it there rather than at ingest means the notice can be sent
through the thread's outbox from any worker, and the web process needs none.

* ``DM_POLICY=open``: anyone may DM the bot; ``allowlist``: only ALLOWED_USERS
  (plus approvers, admins and paired users); ``pairing`` (default): an unknown
  person in a DM gets a one-time 8-character code (1 h, at most 3 pending per
  channel) that an operator approves with ``parley pairing approve CODE``.
* In groups the channel already answers only when addressed (GROUP_REPLY), and
  GROUP_POLICY says who: ``pairing`` (default) answers trusted people (admins,
  approvers, ALLOWED_USERS, paired users) anywhere, and everyone in an approved
  chat; a chat is approved when an admin or approver writes in it, or when the
  operator approves its code (``parley pairing approve CODE``, same command).  A
  stranger in a chat not approved gets the chat's code at most once an hour per
  chat, nothing else.  ``allowlist``: trusted people only (approved chats do not
  count).  ``open``: anyone, unless ALLOWED_USERS is set (then only trusted
  people), which was the behaviour before GROUP_POLICY.  A full routine's message
  (event id ``routine:…``, written by the scheduler, never by a platform) is the
  operator's: GROUP_POLICY leaves it as ``open`` did.
* The local channels (ACCESS_EXEMPT_CHANNELS, default ``web,console``) are the
  operator's own and are never gated.
* USER_RATE_LIMIT (``20/minute``): inbound messages per user, sliding window.
"""

from __future__ import annotations

import re
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson
from redis.asyncio import Redis

from agent_core.events import ThreadKey
from agent_core.store import keys, scripts

if TYPE_CHECKING:
    from agent_core.events import InboundEvent
    from agent_core.settings import CoreSettings

PAIRING_TTL_SECS = 3600
MAX_PENDING_PER_CHANNEL = 3
CODE_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"  # no 0/O, 1/I
REFUSAL_WINDOW_MS = 3_600_000
ROUTINE_EVENT = "routine:"  # a full routine's message (SYNTHETIC_PREFIXES)

_UNITS = {
    "s": 1,
    "sec": 1,
    "second": 1,
    "m": 60,
    "min": 60,
    "minute": 60,
    "h": 3600,
    "hour": 3600,
    "d": 86_400,
    "day": 86_400,
}
_RATE = re.compile(r"^\s*(\d+)\s*/\s*(\d*)\s*([a-z]+?)s?\s*$")


def parse_rate(text: str) -> tuple[int, float] | None:
    """``'20/minute'`` -> (20, 60.0); ``'5/10s'`` -> (5, 10.0); '' -> None."""
    if not text or not text.strip():
        return None
    m = _RATE.match(text.lower())
    if not m or m.group(3) not in _UNITS or int(m.group(1)) < 1:
        raise ValueError("must look like 20/minute, 5/second, 100/hour or 10/30s")
    mult = int(m.group(2)) if m.group(2) else 1
    return int(m.group(1)), float(_UNITS[m.group(3)] * max(1, mult))


def chat_of(thread: ThreadKey) -> str:
    """The group chat a thread is in (a Slack channel, a Telegram group, a Discord
    channel), sub-thread left out: ``telegram:<bot>:-100123``."""
    return str(ThreadKey(thread.channel, thread.tenant, thread.conversation))[:-1]


def new_code() -> str:
    return "".join(secrets.choice(CODE_ALPHABET) for _ in range(8))


@dataclass(frozen=True, slots=True)
class AccessVerdict:
    allowed: bool
    notice: str = ""  # '' = refuse silently (already told in this window)
    reason: str = ""


ALLOW = AccessVerdict(True)


class AccessControl:
    def __init__(
        self, redis: Redis, settings: CoreSettings, clock: Callable[[], float] = time.time
    ) -> None:
        self.redis = redis
        self.s = settings
        self.clock = clock
        self.allowed_users = settings.id_list(settings.allowed_users)
        self.trusted = (
            self.allowed_users
            | settings.id_list(settings.approver_ids)
            | settings.id_list(settings.admin_ids)
        )
        self.exempt = settings.id_list(settings.access_exempt_channels)
        # who writing in a group approves it (GROUP_POLICY=pairing)
        self.chat_approvers = settings.id_list(settings.approver_ids) | settings.id_list(
            settings.admin_ids
        )
        self.rate = parse_rate(settings.user_rate_limit)
        self._rate = redis.register_script(scripts.RATE_WINDOW)
        self._pair = redis.register_script(scripts.PAIR_REQUEST)

    def needs_redis(self, event: InboundEvent) -> bool:
        return (
            self.rate is not None
            or not self._trivially_allowed(event)
            or self._approves_chat(event)
        )

    def _group_policy(self, event: InboundEvent) -> str:
        # a full routine posting into a group is the operator's: as before GROUP_POLICY
        return "open" if event.event_id.startswith(ROUTINE_EVENT) else self.s.group_policy

    def _approves_chat(self, event: InboundEvent) -> bool:
        """An admin or approver writing in a group approves it (GROUP_POLICY=pairing)."""
        return (
            not event.is_direct
            and self._group_policy(event) == "pairing"
            and event.channel not in self.exempt
            and event.qualified_user in self.chat_approvers
        )

    def _trivially_allowed(self, event: InboundEvent) -> bool:
        if event.channel in self.exempt or event.qualified_user in self.trusted:
            return True
        if event.is_direct:
            return self.s.dm_policy == "open"
        return self._group_policy(event) == "open" and not self.allowed_users

    async def admits(self, event: InboundEvent) -> bool:
        """Whether the worker would let ``event``'s sender in (DM and group policy,
        allow list, pairing), without the side effects of :meth:`check`: no pairing
        code, no notice, no rate window, no chat approved.  For watchers that act on
        a message before the worker does (event-triggered routines) and for button
        presses: a stranger the worker refuses may not trigger or decide anything."""
        if self._trivially_allowed(event):
            return True
        if await self.redis.sismember(keys.PAIRED_USERS, event.qualified_user):
            return True
        return await self._chat_approved(event)

    async def _chat_approved(self, event: InboundEvent) -> bool:
        if event.is_direct or self._group_policy(event) != "pairing":
            return False
        return bool(await self.redis.sismember(keys.APPROVED_CHATS, chat_of(event.thread)))

    async def check(self, event: InboundEvent) -> AccessVerdict:
        verdict = await self._access(event)
        if not verdict.allowed:
            return verdict
        return await self._rate_window(event)

    async def _access(self, event: InboundEvent) -> AccessVerdict:
        if self._approves_chat(event):
            await self.redis.sadd(keys.APPROVED_CHATS, chat_of(event.thread))
        if self._trivially_allowed(event):
            return ALLOW
        user = event.qualified_user
        if await self.redis.sismember(keys.PAIRED_USERS, user):
            return ALLOW
        if event.is_direct and self.s.dm_policy == "pairing":
            return await self._pairing(event)
        if not event.is_direct and self._group_policy(event) == "pairing":
            if await self._chat_approved(event):
                return ALLOW
            return await self._chat_pairing(event)
        if not await self._first_notice(user, "access"):
            return AccessVerdict(False, "", "not allowed")
        if event.is_direct:
            return AccessVerdict(
                False, "Sorry, I only talk to people on this bot's allow list.", "not allowed"
            )
        return AccessVerdict(
            False,
            "Sorry, I only answer people on this bot's allow list here.",
            "not allowed",
        )

    async def _issue(
        self, event: InboundEvent, extra: dict[str, Any], owner_key: str, pending_key: str
    ) -> tuple[int, str]:
        """A pairing code for ``event``'s sender or chat (``owner_key``: its one
        code), within the channel's pending list: (status, the code).  Status 0: the
        list is full; 1: the code already issued; 2: a new one."""
        code = new_code()
        record = orjson.dumps(
            {
                **extra,
                "channel": event.channel,
                "user": event.qualified_user,
                "name": event.user_name,
                "thread": str(event.thread),
                "created": self.clock(),
            }
        )
        res: Any = await self._pair(
            keys=[keys.pairing_code(code), owner_key, pending_key],
            args=[
                code,
                record,
                int(self.clock() * 1000),
                PAIRING_TTL_SECS * 1000,
                MAX_PENDING_PER_CHANNEL,
            ],
        )
        got = res[1].decode() if isinstance(res[1], bytes) else str(res[1])
        return int(res[0]), got

    async def _chat_pairing(self, event: InboundEvent) -> AccessVerdict:
        """A stranger in a group chat not approved: the chat's code (one per chat,
        1 h), told in the chat at most once an hour; nothing else runs."""
        chat = chat_of(event.thread)
        extra = {"kind": "chat", "chat": chat}
        status, got = await self._issue(
            event, extra, keys.pairing_chat(chat), keys.pairing_pending_chats(event.channel)
        )
        # a new code (at most one an hour) is always told; otherwise once an hour
        told = await self._first_notice(chat, "chat-pairing")
        if status != 2 and not told:
            return AccessVerdict(False, "", "chat not approved")
        if status == 0:
            return AccessVerdict(
                False,
                "I only answer in chats this bot's operator has approved, and I can't "
                "take new requests right now. Please try again later.",
                "chat not approved",
            )
        return AccessVerdict(
            False,
            "I only answer in chats this bot's operator has approved. To use me here, "
            f"ask the operator of this bot to run:\n\n`parley pairing approve {got}`\n\n"
            "The code is valid for one hour.",
            "chat not approved",
        )

    async def _pairing(self, event: InboundEvent) -> AccessVerdict:
        user = event.qualified_user
        status, got = await self._issue(
            event, {}, keys.pairing_user(user), keys.pairing_pending(event.channel)
        )
        if status == 0:
            if not await self._first_notice(user, "pairing-full"):
                return AccessVerdict(False, "", "pairing full")
            return AccessVerdict(
                False,
                "I can't take new pairing requests right now (too many are waiting). "
                "Please try again later.",
                "pairing full",
            )
        if status == 1 and not await self._first_notice(user, "pairing"):
            return AccessVerdict(False, "", "pairing pending")
        if status == 2:
            await self._first_notice(user, "pairing")
        return AccessVerdict(
            False,
            "Hi! I don't know you yet. To start talking with me, ask the operator of this bot "
            f"to run:\n\n`parley pairing approve {got}`\n\nThe code is valid for one hour.",
            "pairing",
        )

    async def _rate_window(self, event: InboundEvent) -> AccessVerdict:
        if self.rate is None:
            return ALLOW
        limit, window = self.rate
        user = event.qualified_user
        res = int(
            await self._rate(
                keys=[keys.rate_window(user), keys.refusal_notice(user, "rate")],
                args=[int(self.clock() * 1000), int(window * 1000), limit, event.event_id],
            )
        )
        if res == 1:
            return ALLOW
        if res == 3:
            return AccessVerdict(False, "", "rate limited")
        return AccessVerdict(
            False,
            f"You're sending messages faster than I can take them (at most {limit} per "
            f"{_window_words(window)}). This one was not processed; please wait a moment.",
            "rate limited",
        )

    async def _first_notice(self, user: str, why: str) -> bool:
        return bool(
            await self.redis.set(
                keys.refusal_notice(user, why), b"1", nx=True, px=REFUSAL_WINDOW_MS
            )
        )


def _window_words(secs: float) -> str:
    for unit, n in (("day", 86_400), ("hour", 3600), ("minute", 60)):
        if secs == n:
            return unit
        if secs % n == 0:
            return f"{int(secs // n)} {unit}s"
    return f"{secs:g} seconds"


# --- operator side (the `parley pairing` command) ------------------------------
async def list_pairings(redis: Redis, channels: tuple[str, ...]) -> list[dict[str, Any]]:
    """Pending requests of people (DMs) and of group chats (records with
    ``kind: chat``), per channel."""
    now = int(time.time() * 1000)
    out: list[dict[str, Any]] = []
    for ch in channels:
        for pending in (keys.pairing_pending(ch), keys.pairing_pending_chats(ch)):
            codes = await redis.zrangebyscore(pending, now, "+inf")
            for c in codes:
                code = c.decode() if isinstance(c, bytes) else str(c)
                raw = await redis.get(keys.pairing_code(code))
                if raw:
                    out.append({"code": code, **orjson.loads(raw)})
    return out


async def approve_pairing(redis: Redis, code: str) -> dict[str, Any] | None:
    """Let the code's user in, or approve the code's group chat (one time); None if
    the code is unknown or expired."""
    code = code.strip().upper()
    raw = await redis.get(keys.pairing_code(code))
    if not raw:
        return None
    rec: dict[str, Any] = orjson.loads(raw)
    script = redis.register_script(scripts.PAIR_APPROVE)
    if rec.get("kind") == "chat":
        keys_ = [
            keys.pairing_code(code),
            keys.pairing_chat(rec["chat"]),
            keys.pairing_pending_chats(rec["channel"]),
            keys.APPROVED_CHATS,
        ]
        member = rec["chat"]
    else:
        keys_ = [
            keys.pairing_code(code),
            keys.pairing_user(rec["user"]),
            keys.pairing_pending(rec["channel"]),
            keys.PAIRED_USERS,
        ]
        member = rec["user"]
    ok = await script(keys=keys_, args=[code, member])
    return rec if int(ok) == 1 else None
