"""The proactive parts of one worker process, built once by the runtime."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from agent_core.proactive.approval_expiry import ApprovalExpiry
from agent_core.proactive.heartbeat import Heartbeat
from agent_core.proactive.notify import Notifier
from agent_core.proactive.routines import RoutineStore
from agent_core.proactive.runner import RoutineRunner
from agent_core.proactive.scheduler import Scheduler
from agent_core.settings import CoreSettings

if TYPE_CHECKING:
    from agent_core.agent.agent import Agent
    from agent_core.ingest import Ingest


class Proactive:
    """Notifier + routine store + runner + heartbeat + scheduler, wired together.

    Registers the runner's ``after_turn`` hook on the agent (full jobs record
    their outcome in whichever worker ran them).  :meth:`run` is the
    scheduler loop; every worker process runs it, one of them leads.
    """

    def __init__(
        self,
        settings: CoreSettings,
        agent: Agent,
        ingest: Ingest,
        *,
        owner: str,
        tenants: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        redis = agent.redis
        self.settings = settings
        self.notifier = Notifier(redis, agent.outboxes, tenants)
        self.store = RoutineStore(redis, history=settings.routine_run_history)
        self.runner = RoutineRunner(settings, agent, ingest, self.notifier, self.store, clock=clock)
        self.heartbeat = (
            Heartbeat(settings, agent, self.notifier, clock=clock)
            if settings.heartbeat_enabled
            else None
        )
        self.scheduler = Scheduler(
            redis,
            self.store,
            self.runner,
            self.heartbeat,
            owner=owner,
            tick_secs=settings.scheduler_tick_secs,
            lease_secs=settings.scheduler_lease_secs,
            clock=clock,
            expiry=ApprovalExpiry(redis, ingest),
        )
        agent.hooks.after_turn.append(self.runner.after_turn)

    async def run(self, stop: asyncio.Event) -> None:
        if self.settings.scheduler_enabled:
            await self.scheduler.run(stop)
