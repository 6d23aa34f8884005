"""The heartbeat: every HEARTBEAT_INTERVAL_SECS, the model reads a checklist.

The checklist is the text an admin set from chat (`/heartbeat set …`, kept in
Redis) or else the file ``HEARTBEAT_FILE``.  An empty checklist skips the tick
(no model call).  The model (the cheap one when configured) answers
``HEARTBEAT_OK`` when nothing needs attention and nothing is sent; anything else
is sent to ``HEARTBEAT_NOTIFY`` (unset: to the admins' DMs; reaching none of them is
a failure).  Failures are counted in Redis; reaching
``HEARTBEAT_MAX_FAILURES`` in a row is logged as an error (once per streak) and
the loop goes on.  Ticks are driven by the scheduler, so only its one leader
ticks; the first tick waits one interval.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, cast

from redis.asyncio import Redis

from agent_core.agent import metered
from agent_core.agent.budget import BudgetRefused
from agent_core.llm.base import ChatMessage, CompletionRequest
from agent_core.proactive.notify import Notifier
from agent_core.proactive.runner import is_ok
from agent_core.settings import CoreSettings
from agent_core.store import keys

if TYPE_CHECKING:
    from agent_core.agent.agent import Agent

log = logging.getLogger(__name__)

HEARTBEAT_ACCOUNT = "heartbeat"  # the account its model calls are billed to (budgets)

HEARTBEAT_OK = "HEARTBEAT_OK"
SYSTEM = (
    "You are {name}, running a periodic check. Go through the checklist. If nothing needs "
    "the user's attention, answer exactly HEARTBEAT_OK and nothing else. Otherwise answer "
    "with a short message telling them what needs attention. Current time (UTC): {now}."
)


NO_ADMIN_DM = "no admin DM known: an admin must write to the bot first, or set HEARTBEAT_NOTIFY"


class NotDelivered(Exception):
    """An attention message that reached nobody (the message says why)."""


class Heartbeat:
    def __init__(
        self,
        settings: CoreSettings,
        agent: Agent,
        notifier: Notifier,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.agent = agent
        self.redis: Redis = agent.redis
        self.notifier = notifier
        self.clock = clock
        self.interval = settings.heartbeat_interval_secs

    async def checklist(self) -> str:
        raw = await self.redis.get(keys.HEARTBEAT_CHECKLIST)
        if raw is not None:
            return (raw.decode() if isinstance(raw, bytes) else str(raw)).strip()
        path = Path(self.settings.heartbeat_file)
        try:
            return (await asyncio.to_thread(path.read_text, encoding="utf-8")).strip()
        except FileNotFoundError:
            return ""
        except OSError as exc:
            log.warning("heartbeat: cannot read %s (%s)", path, exc.strerror or exc)
            return ""

    async def due(self, now: float) -> bool:
        """True (once) when a tick is due; the first one waits one interval."""
        raw = await self.redis.hget(keys.HEARTBEAT_STATE, "last_tick")
        if raw is None:
            await self.redis.hsetnx(keys.HEARTBEAT_STATE, "last_tick", repr(now))
            return False
        if now < float(raw) + self.interval:
            return False
        # two leaders overlapping for a moment both read the same last tick: one claims it
        claim = keys.heartbeat_claim(int(float(raw)))
        if not await self.redis.set(claim, b"1", nx=True, ex=max(60, int(self.interval * 2))):
            return False
        await self.redis.hset(keys.HEARTBEAT_STATE, "last_tick", repr(now))
        return True

    async def tick(self, now: float | None = None) -> str:
        """One check; returns the outcome (skipped / ok / sent / error: …).  Never raises."""
        now = self.clock() if now is None else now
        try:
            outcome = await self._tick(now)
        except Exception as exc:
            failures = int(await self._safe_incr())
            if isinstance(exc, NotDelivered):
                outcome = f"error: {exc}"
            else:
                outcome = f"error: {type(exc).__name__}: {str(exc)[:200]}"
            if failures == self.settings.heartbeat_max_failures:
                log.error(
                    "heartbeat failed %d times in a row (last: %s); still trying every %.0f s",
                    failures,
                    outcome,
                    self.interval,
                )
            else:
                log.warning("heartbeat failed (%d in a row): %s", failures, outcome)
        else:
            await self.redis.hset(keys.HEARTBEAT_STATE, "failures", 0)
        await self._store_outcome(now, outcome)
        return outcome

    async def _safe_incr(self) -> int:
        try:
            return int(await self.redis.hincrby(keys.HEARTBEAT_STATE, "failures", 1))
        except Exception:
            return -1

    async def _store_outcome(self, now: float, outcome: str) -> None:
        try:
            await self.redis.hset(
                keys.HEARTBEAT_STATE, mapping={"outcome": outcome, "at": repr(now)}
            )
        except Exception as exc:
            log.debug("heartbeat: could not store outcome (%s)", type(exc).__name__)

    async def _tick(self, now: float) -> str:
        checklist = await self.checklist()
        if not checklist:
            return "skipped (empty checklist)"
        stamp = time.strftime("%Y-%m-%d %H:%M", time.gmtime(now))
        system = SYSTEM.format(name=self.settings.agent_name, now=stamp)
        req = CompletionRequest(
            (ChatMessage("system", system), ChatMessage("user", "Checklist:\n" + checklist)),
            temperature=0.2,
        )
        try:
            completion, _ = await metered.complete(
                self.agent.cheap_llm(), req, self.agent.meter(HEARTBEAT_ACCOUNT)
            )
        except BudgetRefused as exc:
            log.warning("heartbeat: not run, over budget: %s", exc)
            return "skipped: over budget"
        text = completion.text.strip()
        if is_ok(text, HEARTBEAT_OK):
            return "ok"
        target = self.settings.heartbeat_notify
        if not target:
            if not await self.agent.notify_admins(text):
                raise NotDelivered(NO_ADMIN_DM)
            return "sent to admins (HEARTBEAT_NOTIFY is not set)"
        ref = await self.notifier.notify(target, text, f"hb:{int(now)}")
        return "sent" if ref is not None else "sent before (not repeated)"

    async def status(self) -> dict[str, str]:
        raw = cast(dict[bytes, bytes], await self.redis.hgetall(keys.HEARTBEAT_STATE))
        return {k.decode(): v.decode() for k, v in raw.items()}
