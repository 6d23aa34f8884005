"""Who said it: the display name of a person in a group conversation.

In a group the model reads each message as ``<name>: <text>``
(:func:`agent_core.agent.agent.user_message_text`), so that it can tell people
apart.  Some platforms leave the name out of their events (Slack's
``app_mention`` has only the user id); a channel whose outbox implements the
optional :class:`NameResolver` is asked for it then, within
:data:`NAME_TIMEOUT_SECS` (the turn never waits longer for a name, and goes on
without one if the lookup fails).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import Protocol, runtime_checkable

from agent_core.events import InboundEvent

log = logging.getLogger(__name__)

NAME_TIMEOUT_SECS = 2.0


@runtime_checkable
class NameResolver(Protocol):
    """Optional: an Outbox that can look up a person's display name ("" if unknown)."""

    async def user_display_name(self, user_id: str) -> str: ...


async def named(outbox: object, event: InboundEvent) -> InboundEvent:
    """``event`` with its author's name filled in where a group needs it."""
    if event.is_direct or event.user_name or not event.user_id:
        return event
    if not isinstance(outbox, NameResolver):
        return event
    try:
        name = await asyncio.wait_for(outbox.user_display_name(event.user_id), NAME_TIMEOUT_SECS)
    except Exception as exc:
        log.info("[%s] no name for %s: %s", event.thread, event.user_id, type(exc).__name__)
        return event
    return dataclasses.replace(event, user_name=name) if name else event
