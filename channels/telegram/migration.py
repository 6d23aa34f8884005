"""Groups that became supergroups: which chat a message for a chat id goes to now.

When a basic group is upgraded to a supergroup (an admin changes certain
settings or enables topics, or the group grows), Telegram gives it a new chat
id, and every call naming the old id is answered ``400 Bad Request: group chat
was upgraded to a supergroup chat`` with ``parameters.migrate_to_chat_id``
(python-telegram-bot raises ``ChatMigrated``).  The old group's messages stay
in the old chat under their old ids, so they can no longer be edited: Parley
sends a new message into the supergroup instead (see ``TelegramOutbox.edit``).

:class:`ChatRedirects` remembers old -> new: learned from that answer, or read
from Redis (``keys.redirect`` of the old chat's thread, written by whichever
process learned it first and by the conversation move, kept for
``keys.MOVED_TTL_SECS``), so later sends for the old conversation go straight
to the new id.  Only basic groups can migrate: their ids are negative and above
-10^12, while supergroup and channel ids are ``-100`` and ten or more digits;
private chats, supergroups and channels are never looked up.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from redis.asyncio import Redis
from redis.exceptions import RedisError

from agent_core.events import ThreadKey
from agent_core.store import keys

log = logging.getLogger(__name__)

CHANNEL = "telegram"
BASIC_GROUP_FLOOR = -(10**12)  # supergroup / channel ids are at or below it
NOT_MOVED_SECS = 60.0  # a group found not moved is looked up again after this long
MAX_REMEMBERED = 10_000


def is_basic_group(chat_id: int) -> bool:
    return BASIC_GROUP_FLOOR < chat_id < 0


class ChatRedirects:
    """Old group id -> its supergroup's id, for one bot (memory, backed by Redis)."""

    def __init__(
        self,
        redis: Redis | None,
        bot_id: str,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._redis = redis
        self._bot_id = bot_id
        self._clock = clock
        self._moved: dict[int, int] = {}
        self._checked: dict[int, float] = {}  # not moved as of this time

    def _key(self, chat_id: int) -> str:
        return keys.redirect(ThreadKey(CHANNEL, self._bot_id, str(chat_id), ""))

    async def resolve(self, chat_id: int) -> int:
        """The chat to write to for ``chat_id`` (itself unless it moved)."""
        new = self._moved.get(chat_id)
        if new is not None:
            return new
        if self._redis is None or not is_basic_group(chat_id):
            return chat_id
        now = self._clock()
        checked = self._checked.get(chat_id)
        if checked is not None and now - checked < NOT_MOVED_SECS:
            return chat_id
        try:
            raw = await self._redis.get(self._key(chat_id))
        except RedisError as exc:
            log.debug("telegram: redirect lookup failed (%s)", type(exc).__name__)
            return chat_id  # a send to the old id still learns it from Telegram
        if raw:
            return self._remember(chat_id, int(raw))
        if len(self._checked) >= MAX_REMEMBERED:
            self._checked.clear()
        self._checked[chat_id] = now
        return chat_id

    async def learn(self, old: int, new: int) -> int:
        """Telegram said ``old`` became ``new``: remember it here and in Redis; ``new``."""
        if self._moved.get(old) != new:
            log.info("telegram: group %s became supergroup %s; writing there", old, new)
        self._remember(old, new)
        if self._redis is not None:
            try:
                await self._redis.set(self._key(old), str(new), ex=keys.MOVED_TTL_SECS)
            except RedisError as exc:
                log.warning("telegram: could not record that %s moved (%s)", old, exc)
        return new

    def _remember(self, old: int, new: int) -> int:
        if len(self._moved) >= MAX_REMEMBERED:
            self._moved.clear()
        self._moved[old] = new
        self._checked.pop(old, None)
        return new
