"""Stuck-turn recovery: a turn that runs too long, a turn whose worker died.

The worker runs every turn through :meth:`TurnRecovery.run_turn`:

* **Processing mark.**  Before the turn, one script records in
  ``{thread}:turn`` that this owner is processing the mailbox head (event id,
  owner, start, attempts) and returns how many earlier executions of that same
  event started and never completed.  A completed turn's mark names an event
  that has left the mailbox, so no clean-up write is needed.  If an earlier
  execution exists and was not ours, its worker died (or stalled past its lock):
  the thread is Processing with no live lock.  The user is told the previous
  turn was interrupted; the first time the message is run again (so a SIGKILL
  loses nothing: the delivery invariant), the second time it is dropped (a
  message that kills its worker must not kill every worker in turn) and the
  thread's state is reset.
* **Timeout.**  A turn running longer than ``TURN_TIMEOUT_SECS`` is cancelled,
  the user is told, the message is consumed with the session as it was before
  the turn (the history stays valid) and the worker's completion releases the
  lock.  Messages injected into the cancelled turn stay queued and get turns of
  their own.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, cast

from agent_core.agent.reply import LockGuard, ReplyWriter
from agent_core.agent.session import Session, ThreadState
from agent_core.errors import ChannelError
from agent_core.events import OutboundMessage, ThreadKey
from agent_core.settings import CoreSettings
from agent_core.store import keys, scripts
from agent_core.store.delivery import TurnState

if TYPE_CHECKING:
    from agent_core.agent.agent import Agent, TurnResult

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 2  # executions of one message before it is dropped
MARK_TTL_MS = 86_400_000
INTERRUPTED_RETRY = (
    "⚠️ My previous turn here was interrupted (the process running it stopped). "
    "Picking your message up again."
)
INTERRUPTED_DROPPED = (
    "⚠️ My previous turn here was interrupted again (the process running it stopped), "
    "so I gave up on that message. Please send it again if you still need it."
)


def timeout_notice(secs: float) -> str:
    return (
        f"⏱ That took longer than {secs:g} seconds, so I stopped it. "
        "Try again, maybe with a smaller request."
    )


class TurnRecovery:
    def __init__(self, settings: CoreSettings, agent: Agent, owner: str) -> None:
        self.settings = settings
        self.agent = agent
        self.owner = owner
        self._mark = agent.redis.register_script(scripts.MARK_TURN)
        self.timeouts = 0
        self.recovered = 0

    async def run_turn(self, thread: ThreadKey, state: TurnState, guard: LockGuard) -> TurnResult:
        head = state.mailbox[0]
        res = await self._mark(
            keys=[keys.turn_mark(thread)],
            args=[head.event_id, self.owner, int(time.time() * 1000), MARK_TTL_MS],
        )
        earlier, who = int(res[0]), (res[1].decode() if isinstance(res[1], bytes) else str(res[1]))
        notes: list[str] = []
        if earlier and who != self.owner:
            self.recovered += 1
            log.warning(
                "[%s] previous turn on event %s was interrupted (owner %s); attempt %d",
                thread,
                head.event_id,
                who,
                earlier + 1,
            )
            if earlier >= MAX_ATTEMPTS:
                return await self._give_up(thread, state, guard, INTERRUPTED_DROPPED, "dropped")
            notes = await self._tell(thread, state, guard, INTERRUPTED_RETRY, "r")
        timeout = self.settings.turn_timeout_secs
        try:
            if timeout > 0:
                async with asyncio.timeout(timeout):
                    result = await self.agent.run_turn(thread, state, guard)
            else:
                result = await self.agent.run_turn(thread, state, guard)
        except TimeoutError:
            self.timeouts += 1
            log.warning(
                "[%s] turn on event %s timed out after %g s", thread, head.event_id, timeout
            )
            return await self._give_up(thread, state, guard, timeout_notice(timeout), "timeout")
        result.sent_fields.extend(notes)
        return result

    async def _tell(
        self, thread: ThreadKey, state: TurnState, guard: LockGuard, text: str, tag: str
    ) -> list[str]:
        """A notice as its own reply part (recorded, so a rerun never repeats it)."""
        head = state.mailbox[0]
        outbox = self.agent.outbox_for(head.channel)
        if outbox is None:
            return []
        writer = ReplyWriter(
            outbox,
            self.agent.delivery,
            thread,
            f"{head.event_id}#{tag}",
            state.sent,
            guard,
            head.reply_ref,
            pending=state.pending,
        )
        try:
            await writer.say(OutboundMessage(text, notice=True))
        except ChannelError as exc:
            log.warning("[%s] could not send notice: %s", thread, exc)
        return writer.fields

    async def _give_up(
        self, thread: ThreadKey, state: TurnState, guard: LockGuard, text: str, why: str
    ) -> TurnResult:
        from agent_core.agent.agent import TurnResult
        from agent_core.agent.turn import repair_history

        fields = await self._tell(thread, state, guard, text, why[0])
        head = state.mailbox[0]
        raw = cast(list[bytes], await self.agent.redis.hkeys(keys.sent(thread)))
        prefix = f"{head.event_id}:"
        fields += [f.decode() for f in raw if f.decode().startswith(prefix)]
        session = Session.load(str(thread), state.session_version, state.session_data)
        if session.state == ThreadState.PROCESSING:
            session.state = ThreadState.IDLE
        repair_history(session.history)
        session.updated_at = time.time()
        return TurnResult(session, 1, sorted(set(fields)), f"interrupted:{why}")
