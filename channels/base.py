"""What the runtime needs from a channel.

A channel owns its platform completely: parsing raw events, rendering markdown
into the platform's dialect, splitting, buttons, pacing.  The runtime (bots/)
asks each configured channel for

* ``routes()``      HTTP endpoints for the web process (webhooks),
* ``run_gateway()`` a long-lived inbound connection for the gateway process,
* ``outbox()``      the sender a worker uses to answer in this channel.

Inbound events go to :class:`agent_core.ingest.Ingest` and nowhere else: a
channel never runs the agent itself.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from redis.asyncio import Redis
from starlette.routing import BaseRoute

from agent_core.ingest import Ingest
from agent_core.outbox import Outbox
from agent_core.store.pacing import Pacer


@dataclass
class ChannelDeps:
    """What the runtime gives every channel it builds."""

    redis: Redis
    pacer: Pacer
    public_url: str = ""  # e.g. https://myapp.herokuapp.com (no trailing slash)
    group_reply: str = "mention"  # mention | all: answer in groups only when addressed?


class Channel(ABC):
    name: ClassVar[str]

    async def initialize(self) -> None:  # noqa: B027 - optional hook
        """Open clients, check tokens. Raise ConfigError with one clear line on bad config."""

    async def shutdown(self) -> None:  # noqa: B027 - optional hook
        """Close clients."""

    def routes(self, ingest: Ingest) -> list[BaseRoute]:
        """HTTP routes served by the web process (webhooks)."""
        return []

    @property
    def has_gateway(self) -> bool:
        return False

    @property
    def gateway_lease(self) -> str:
        """The name of the connection only one process may hold at a time (a Redis
        lease); a channel that can split its connection names each part."""
        return self.name

    async def run_gateway(self, ingest: Ingest, stop: asyncio.Event) -> None:  # noqa: B027
        """Hold the platform connection until ``stop`` is set (gateway process)."""

    async def publish_commands(self, commands: Sequence[tuple[str, str, str]]) -> None:  # noqa: B027
        """Show the agent's commands, (name, description, usage such as "[name]"), in
        the platform's command menu where it has one.  Called at start by the processes that receive this
        channel's messages; must not fail the start (log instead)."""

    @abstractmethod
    def outbox(self) -> Outbox:
        """The sender workers use to answer in this channel."""


# Each channel package (channels/telegram, channels/slack, ...) exposes:
#
#   SETTINGS: type[ParleySettings]            its settings class
#   def status(settings) -> tuple[bool, str]  enabled?, and why (for the start-up summary,
#                                             e.g. (False, "TELEGRAM_BOT_TOKEN not set"));
#                                             Telegram's also takes public_url (its mode)
#   def create(settings, deps: ChannelDeps) -> Channel
