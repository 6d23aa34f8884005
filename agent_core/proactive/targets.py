"""Notification targets: a short, channel-qualified string -> a ThreadKey.

Syntax (documented in docs/proactive.md)::

    telegram:<chat_id>[/<topic_id>]            tenant = the bot id (from the token)
    slack:<team>/<channel>[/<thread_ts>]       or slack:<channel> (team last seen there)
    discord:<guild|dm>/<channel>[/<thread>]    or discord:<channel> (guild last seen, else dm)
    web:<session_id>   console:<name>
    {telegram:123:42:}                         a full thread key, as in the logs

A tenant that the target leaves out comes from ``tenants`` (given by the
runtime: the Telegram bot id) or from the tenant last seen on that conversation
(recorded by the event-trigger filter at ingest).
"""

from __future__ import annotations

from collections.abc import Mapping

from redis.asyncio import Redis

from agent_core.events import CHANNELS, ThreadKey
from agent_core.store import keys

LOCAL_TENANT = "local"


class TargetError(ValueError):
    """A target that cannot be turned into a thread (the message says why)."""


def parse_target(
    target: str, tenants: Mapping[str, str] | None = None, learned: str = ""
) -> ThreadKey:
    """Parse ``target``; ``learned`` is the tenant last seen on that conversation."""
    raw = target.strip()
    if not raw:
        raise TargetError("empty target")
    if raw.startswith("{") and raw.endswith("}"):
        try:
            return ThreadKey.parse(raw)
        except ValueError as exc:
            raise TargetError(str(exc)) from None
    channel, sep, rest = raw.partition(":")
    channel = channel.lower()
    if not sep or not rest or channel not in CHANNELS:
        raise TargetError(
            f"target {target!r}: expected <channel>:<id> with channel one of {', '.join(CHANNELS)}"
        )
    parts = rest.split("/")
    if any(not p for p in parts):
        raise TargetError(f"target {target!r}: empty part")
    tenants = tenants or {}
    if channel in ("web", "console"):
        if len(parts) != 1:
            raise TargetError(f"target {target!r}: expected {channel}:<id>")
        return ThreadKey(channel, LOCAL_TENANT, parts[0], "")
    if channel == "telegram":
        if len(parts) > 2:
            raise TargetError(f"target {target!r}: expected telegram:<chat_id>[/<topic_id>]")
        tenant = tenants.get("telegram") or learned
        if not tenant:
            raise TargetError(
                f"target {target!r}: the Telegram bot id is unknown (set TELEGRAM_BOT_TOKEN)"
            )
        return ThreadKey("telegram", tenant, parts[0], parts[1] if len(parts) == 2 else "")
    # slack / discord: <tenant>/<conversation>[/<thread>] or <conversation>
    if len(parts) == 1:
        tenant = learned or tenants.get(channel, "")
        if not tenant:
            if channel == "discord":
                tenant = "dm"
            else:
                raise TargetError(
                    f"target {target!r}: the Slack team is unknown; write slack:<team>/<channel>"
                )
        return ThreadKey(channel, tenant, parts[0], "")
    if len(parts) > 3:
        raise TargetError(f"target {target!r}: too many parts")
    return ThreadKey(channel, parts[0], parts[1], parts[2] if len(parts) == 3 else "")


def is_direct(thread: ThreadKey) -> bool:
    """Whether ``thread`` is a one-to-one chat with the bot, as the channel's own
    events say (``InboundEvent.is_direct``): a Telegram private chat (a positive
    chat id; groups and channels are negative or an ``@username``), a Slack DM (``D…``), a Discord DM
    (tenant ``dm``), a web or console session.  Anything else is a group."""
    if thread.channel == "telegram":  # an @username names a channel or supergroup
        return thread.conversation.isdigit()
    if thread.channel == "slack":
        return thread.conversation.startswith("D")
    if thread.channel == "discord":
        return thread.tenant == "dm"
    return True


def retarget(target: str, old: ThreadKey, new: ThreadKey) -> str | None:
    """``target`` rewritten to name ``new`` if it names ``old`` (None: it does not).

    The short form stays short (``telegram:-42`` -> ``telegram:-1001234567890``);
    anything else becomes the full thread key.
    """
    raw = target.strip()
    try:
        if parse_target(raw, {old.channel: old.tenant}, old.tenant) != old:
            return None
    except TargetError:
        return None
    same = (new.channel, new.tenant, new.thread) == (old.channel, old.tenant, old.thread)
    if raw.startswith("{") or not same:
        return new.tag
    channel, _, rest = raw.partition(":")
    parts = rest.split("/")
    at = 1 if channel.lower() in ("slack", "discord") and len(parts) > 1 else 0
    parts[at] = new.conversation
    return f"{channel}:{'/'.join(parts)}"


def conversation_of(target: str) -> tuple[str, str] | None:
    """(channel, conversation) of a short target that may need a learned tenant."""
    channel, sep, rest = target.strip().partition(":")
    if not sep or "/" in rest or target.startswith("{"):
        return None
    return channel.lower(), rest


async def resolve_target(
    redis: Redis, target: str, tenants: Mapping[str, str] | None = None
) -> ThreadKey:
    """:func:`parse_target`, with the tenant last seen on the conversation if needed."""
    learned = ""
    conv = conversation_of(target)
    if conv is not None and conv[0] in ("slack", "discord"):
        async with redis.pipeline(transaction=False) as pipe:
            # a conversation notifications still go to keeps its tenant
            pipe.getex(keys.tenant(*conv), ex=keys.TENANT_TTL_SECS)
            pipe.hget(keys.TENANTS, f"{conv[0]}:{conv[1]}")  # an earlier version's
            now, before = await pipe.execute()
        raw = now or before
        if raw:
            learned = raw.decode() if isinstance(raw, bytes) else str(raw)
    return parse_target(target, tenants, learned)
