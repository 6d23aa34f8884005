"""Proactive tests: the agent-core World (real workers, real Valkey, recording outbox)
plus the proactive service with a fake clock."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from agent_core.proactive.service import Proactive
from agent_core.store.client import RedisClients
from tests.fakes.llm_servers import FakeClock
from tests.integration.agent.conftest import World

TENANTS = {"telegram": "bot1"}


class PWorld(World):
    def proactive(self, clock: Any = None, owner: str = "p0", **overrides: Any) -> Proactive:
        """A Proactive on the first worker's agent (start() first)."""
        agent = self.workers[0][0].agent
        settings = self.settings.model_copy(update=overrides) if overrides else self.settings
        return Proactive(
            settings, agent, self.ingest, owner=owner, tenants=TENANTS, clock=clock or FakeClock()
        )


@pytest.fixture
async def pworld(redis_clients: RedisClients) -> AsyncIterator[Callable[..., PWorld]]:
    made: list[PWorld] = []

    def make(model: Any, **settings: Any) -> PWorld:
        w = PWorld(redis_clients, model, **settings)
        made.append(w)
        return w

    yield make
    for w in made:
        await w.stop()
