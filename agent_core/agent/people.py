"""Who said it, who they mention, and what they attached: details for the model.

In a group the model reads each message as ``<name>: <text>``
(:func:`agent_core.agent.agent.user_message_text`), so that it can tell people
apart.  Some platforms leave the name out of their events (Slack's
``app_mention`` has only the user id); a channel whose outbox implements the
optional :class:`NameResolver` is asked for it then.  Some write the people a
message mentions as ids the model cannot read (Slack: ``@U0123ABCD``); a
channel whose outbox implements :class:`MentionNamer` puts names in their place,
in any conversation.  Some send a file as its id only (Slack Connect); a channel
whose outbox implements :class:`AttachmentCompleter` fills in its name, type, size
and address.  All within :data:`NAME_TIMEOUT_SECS` together (the turn never waits
longer for them, and goes on without them if a lookup fails).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import Protocol, runtime_checkable

from agent_core.events import Attachment, InboundEvent

log = logging.getLogger(__name__)

NAME_TIMEOUT_SECS = 2.0


@runtime_checkable
class NameResolver(Protocol):
    """Optional: an Outbox that can look up a person's display name ("" if unknown)."""

    async def user_display_name(self, user_id: str) -> str: ...


@runtime_checkable
class MentionNamer(Protocol):
    """Optional: an Outbox whose platform writes mentioned people as ids; ``text``
    with their names instead (ids it cannot name stay as they are)."""

    async def name_mentions(self, text: str) -> str: ...


@runtime_checkable
class AttachmentCompleter(Protocol):
    """Optional: an Outbox whose platform may leave out what a file is; the
    attachments with what the platform tells when asked (each unchanged if not)."""

    async def complete_attachments(
        self, attachments: tuple[Attachment, ...]
    ) -> tuple[Attachment, ...]: ...


async def author_name(outbox: object, event: InboundEvent) -> str:
    """The name of ``event``'s author for Parley's own texts (who decided an
    approval, whose decision it waits for): the event's name, else the one the
    channel's :class:`NameResolver` gives (the lookup :func:`named` made for the
    model, kept by the channel), else '' (the caller falls back to the id or to
    "the person who asked").  Within :data:`NAME_TIMEOUT_SECS`."""
    if event.user_name or not event.user_id or not isinstance(outbox, NameResolver):
        return event.user_name
    try:
        return await asyncio.wait_for(outbox.user_display_name(event.user_id), NAME_TIMEOUT_SECS)
    except Exception as exc:  # a name is a nicety: never fails a decision
        log.info("[%s] name not looked up: %s", event.thread, type(exc).__name__)
        return ""


async def named(outbox: object, event: InboundEvent) -> InboundEvent:
    """``event`` with its author's name filled in where a group needs it, the
    people it mentions named where the platform wrote ids, and its files
    completed where the platform sent ids only."""
    author = (
        not event.is_direct
        and not event.user_name
        and bool(event.user_id)
        and isinstance(outbox, NameResolver)
    )
    mentions = "@" in event.text and isinstance(outbox, MentionNamer)
    files = bool(event.attachments) and isinstance(outbox, AttachmentCompleter)
    if not author and not mentions and not files:
        return event  # most messages: nothing to look up, no task started
    user_name, text, attachments = event.user_name, event.text, event.attachments

    async def name_author() -> None:
        nonlocal user_name
        assert isinstance(outbox, NameResolver)
        user_name = await outbox.user_display_name(event.user_id) or user_name

    async def name_mentioned() -> None:
        nonlocal text
        assert isinstance(outbox, MentionNamer)
        text = await outbox.name_mentions(event.text)

    async def complete_files() -> None:
        nonlocal attachments
        assert isinstance(outbox, AttachmentCompleter)
        attachments = await outbox.complete_attachments(event.attachments)

    wanted = ((name_author, author), (name_mentioned, mentions), (complete_files, files))
    jobs = [job() for job, want in wanted if want]
    results = await asyncio.gather(
        *(asyncio.wait_for(job, NAME_TIMEOUT_SECS) for job in jobs), return_exceptions=True
    )
    for result in results:
        if isinstance(result, BaseException):
            log.info("[%s] names or files not looked up: %s", event.thread, type(result).__name__)
    if (user_name, text, attachments) == (event.user_name, event.text, event.attachments):
        return event
    return dataclasses.replace(event, user_name=user_name, text=text, attachments=attachments)
