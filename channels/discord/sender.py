"""The worker side: send, edit, type and answer presses over Discord's REST API.

No gateway connection is needed: discord.py's HTTP client logs in with the bot
token (``GET /users/@me``) and every call goes through its per-route bucket
handling.  On top of that every message passes the shared
:class:`~agent_core.store.pacing.Pacer` (one pace per channel, one for the
whole bot), so any number of workers together stay under Discord's limits, and
a 429 seen by any worker pauses the channel's pace for all of them.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import secrets
import time
from typing import Any

import aiohttp
import discord
from discord.http import Route

from agent_core.deadline import outside_turn, platform_wait
from agent_core.errors import (
    ChannelError,
    SendFailed,
    SendForbidden,
    SendRateLimited,
    SendUnconfirmed,
)
from agent_core.events import Attachment, InboundEvent, MessageRef, OutboundMessage, ThreadKey
from agent_core.outbox import current_part, edit_skipped, on_wire, wire_claim, wire_created
from agent_core.store.pacing import Pacer, pace_key
from channels.download import fetch_capped, origin
from channels.never_sent import never_sent

from .http import ParleyHTTPClient
from .render import (
    NO_MENTIONS,
    decode_extra,
    decode_invoker,
    decode_preview,
    encode_extra,
    message_ids,
    render,
)
from .settings import DEFAULT_API_BASE_URL, DiscordSettings

log = logging.getLogger(__name__)

GLOBAL_PACE = pace_key("discord", "global")
TYPING_EVERY = 8.0  # Discord shows "typing" for 10 s per call
TYPING_TIMEOUT = 3.0  # never hold a turn up for an indicator
# A follow-up to a press not deferred yet: Discord answers 404 Unknown Webhook (10015);
# 10062 Unknown Interaction is the same situation.  Retried this long after the press.
FOLLOWUP_TOO_EARLY = frozenset({10015, 10062})
FOLLOWUP_WAIT_SECS = 4.0
EPHEMERAL = 64  # message flag: only the interaction's invoker sees it
# Where Discord serves the files people post (``attachments[].url`` / ``proxy_url``).
CDN_ORIGINS = frozenset({"https://cdn.discordapp.com", "https://media.discordapp.net"})
# Discord's "Unknown Message": the message was deleted (by a person or a moderator).
UNKNOWN_MESSAGE = 10008
# Discord's refusals of any post in a channel: what the bot lacks there (a hint for
# the operator; the channel's own permission overwrites can take them away).
MISSING_PERMISSION_HINTS = {
    50013: "Send Messages (Send Messages in Threads in a thread)",  # Missing Permissions
    50001: "View Channel",  # Missing Access
}
# A streamed edit waits at most this long (or the stream interval, if longer) for
# its request: discord.py would otherwise sleep through a 429 (up to
# DISCORD_MAX_RETRY_WAIT) and then send the stale text.
STREAMED_EDIT_WAIT = 1.0


class _Skipped(Exception):
    """A streamed edit was given up (rate-limited or slow): the old text stays."""


class _Gone(Exception):
    """The message to edit no longer exists (404, code 10008)."""


def channel_pace(channel_id: str) -> str:
    return pace_key("discord", "ch", channel_id)


def message_nonce(dest: str, k: int, part: str | None = None) -> str:
    """The nonce of the ``k``-th Discord message of a reply part.

    Sent with ``enforce_nonce``: a second create with the same nonce within a few
    minutes returns the first message instead of posting another.  discord.py
    retries a create that got a 500/502/504/524 by itself, and a gateway error can
    come back for a message Discord did create; with the nonce such a retry (or a
    send of the same part again) cannot show the answer twice.  ``part`` names the
    reply part (default: the one the agent is sending; a streamed edit that adds a
    message names it by the message it extends), so every attempt gets the same
    nonce; a create with no name gets a fresh one, which still covers discord.py's
    retries of that one request.  24 hex characters (Discord allows 25).
    """
    part = part if part is not None else current_part()
    if part is None:
        return secrets.token_hex(12)
    return hashlib.blake2b(f"{dest}|{part}|{k}".encode(), digest_size=12).hexdigest()


class DiscordOutbox:
    """Implements :class:`agent_core.outbox.Outbox` for Discord."""

    wire_hook = True  # calls agent_core.outbox.on_wire() before creating a message
    group_text_reaches = True  # set from GROUP_REPLY by the channel (agent_core.outbox)

    def __init__(self, settings: DiscordSettings, pacer: Pacer) -> None:
        self.stream_interval: float | None = settings.discord_stream_interval
        self._settings = settings
        self._pacer = pacer
        self._http: ParleyHTTPClient | None = None
        self._login_lock = asyncio.Lock()
        self._typing_at: dict[str, float] = {}
        self._files: aiohttp.ClientSession | None = None
        api = settings.discord_api_base_url
        # A REST base other than Discord's (tests, a proxy) serves the files too.
        self._file_origins = CDN_ORIGINS | (
            {origin(api)} if api.rstrip("/") != DEFAULT_API_BASE_URL else set()
        )
        # streamed edits given up on while discord.py still held them (see _patch)
        self._abandoned: set[asyncio.Task[Any]] = set()

    # --- client -------------------------------------------------------------

    async def http(self) -> ParleyHTTPClient:
        if self._http is not None:
            return self._http
        async with self._login_lock:
            if self._http is None:
                token = self._settings.discord_bot_token
                if token is None:
                    raise SendFailed("DISCORD_BOT_TOKEN is not set")
                client = ParleyHTTPClient(
                    asyncio.get_running_loop(),
                    api_base=self._settings.discord_api_base_url,
                    on_rate_limited=self._rate_limited,
                    max_ratelimit_timeout=self._settings.discord_max_retry_wait,
                    request_timeout=self._settings.discord_http_timeout,
                )
                try:
                    await client.static_login(token.get_secret_value())
                except discord.LoginFailure:
                    await client.close()
                    raise SendFailed("Discord refused the bot token (401)") from None
                except (discord.HTTPException, aiohttp.ClientError, OSError) as exc:
                    await client.close()
                    raise SendFailed(f"cannot reach Discord: {type(exc).__name__}") from exc
                self._http = client
        assert self._http is not None
        return self._http

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()
            self._http = None
        if self._files is not None:
            await self._files.close()
            self._files = None

    async def fetch_attachment(self, attachment: Attachment, max_bytes: int) -> bytes:
        """For the agent: a file a person posted, from Discord's CDN, up to ``max_bytes``.

        Attachment URLs are signed and public (no token is sent); Discord lets them
        expire after about a day, after which the CDN answers 404.
        """
        if attachment.size and attachment.size > max_bytes:
            raise SendFailed(f"file is larger than {max_bytes} bytes")
        if self._files is None:
            self._files = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=8), trust_env=False
            )
        data, _ = await fetch_capped(
            self._files,
            attachment.ref,
            origins=self._file_origins,
            max_bytes=max_bytes,
            timeout=self._settings.discord_http_timeout,
        )
        return data

    async def _rate_limited(self, scope: str, retry_after: float) -> None:
        """A 429 on the wire pauses the shared pace it concerns, for every worker."""
        if scope == "global":
            key, what = GLOBAL_PACE, "the bot (global limit)"
        elif scope.startswith("channel:"):
            key, what = channel_pace(scope.removeprefix("channel:")), scope
        else:
            log.debug("discord 429 on a route of its own: %.2fs", retry_after)
            return
        log.info("discord 429 on %s: pausing %.2fs for every worker", what, retry_after)
        await self._pacer.pause(key, retry_after)

    async def _pace(
        self, channel_id: str, *, droppable: bool = False, creates: bool = False
    ) -> bool:
        """Wait for a slot; ``creates``: a new message, whose part claim the agent
        makes in the booking's round trip when no wait is due.

        A droppable edit gets False rather than waiting.  Any other send waits at
        most DISCORD_MAX_RETRY_WAIT: a longer wait (a long 429 some worker met,
        which pauses the pace for its full retry_after) raises SendRateLimited, as
        discord.py does for such a 429, instead of sleeping it out."""
        paces = [
            (channel_pace(channel_id), self._settings.discord_channel_pace_secs),
            (GLOBAL_PACE, self._settings.discord_global_pace_secs),
        ]
        longest = 0.25 if droppable else self._settings.discord_max_retry_wait
        delay, booked = await self._pacer.book(
            paces, max_wait=longest, claim=wire_claim() if creates else None
        )
        if not booked:
            if not droppable:  # for as long as the pace is paused still
                raise SendRateLimited(delay, "Discord asks for a longer wait than allowed")
            return False
        if delay > 0:  # a droppable call waits at most 0.25 s: not worth counting
            if droppable:
                await asyncio.sleep(delay)
            else:
                await platform_wait(delay)  # off the turn's clock (agent_core.deadline)
        return True

    async def _call(self, route: Route, **kwargs: Any) -> Any:
        http = await self.http()
        try:
            return await http.request(route, **kwargs)
        except discord.RateLimited as exc:
            raise SendRateLimited(exc.retry_after) from exc
        except discord.DiscordServerError as exc:
            # discord.py retried a 5xx a few times: an earlier attempt may have been
            # carried out (a gateway 502 after Discord made the message), so a
            # create is unconfirmed, not refused (_create asks once more).
            raise SendUnconfirmed(f"Discord answered {exc.status}") from exc
        except discord.HTTPException as exc:
            what = f"Discord answered {exc.status} (code {exc.code}: {exc.text or 'no message'})"
            hint = MISSING_PERMISSION_HINTS.get(exc.code) if exc.status == 403 else None
            if hint is not None:
                where = getattr(route, "channel_id", None)
                raise SendForbidden(
                    f"{what} in channel {where}: give the bot {hint} there" if where else what
                ) from exc
            raise SendFailed(what) from exc
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            if never_sent(exc):
                raise SendFailed(f"cannot reach Discord: {type(exc).__name__}") from exc
            # It left and no answer came back: Discord may have created it.
            raise SendUnconfirmed(f"Discord did not answer: {type(exc).__name__}") from exc

    async def _create(
        self, dest: str, k: int, payload: dict[str, Any], *, part: str | None = None
    ) -> str:
        """POST one message (idempotently, see :func:`message_nonce`); its id."""
        body = {**payload, "nonce": message_nonce(dest, k, part), "enforce_nonce": True}
        route = Route("POST", "/channels/{channel_id}/messages", channel_id=dest)
        try:
            data = await self._call(route, json=body)
        except SendUnconfirmed as exc:
            # It left and no answer came back.  Asking again with the same nonce is
            # safe: Discord returns the message if it made it, or makes it once.
            log.info("discord: create in %s unconfirmed (%s); asking again", dest, exc)
            try:
                data = await self._call(route, json=body)
            except ChannelError:
                raise exc from None  # it may still be showing: say so, not "failed"
        message_id = str(data["id"])
        wanted = str(payload.get("content") or "").strip()
        if str(data.get("content", wanted) or "").strip() != wanted:
            # Discord handed back the message an earlier attempt created with other
            # text (a preview whose answer never came back): bring it up to date.
            patch = {key: v for key, v in payload.items() if key != "message_reference"}
            try:
                await self._call(
                    Route(
                        "PATCH",
                        "/channels/{channel_id}/messages/{message_id}",
                        channel_id=dest,
                        message_id=message_id,
                    ),
                    json=patch,
                )
            except ChannelError as err:  # it exists: keep its id, the next edit may fix it
                log.warning("discord: could not update message %s: %s", message_id, err)
        return message_id

    # --- Outbox -------------------------------------------------------------

    def message_ids(self, ref: MessageRef) -> list[str]:
        """The Discord messages an answer occupies."""
        return message_ids(ref)

    async def send(
        self, thread: ThreadKey, message: OutboundMessage, *, reply_to: MessageRef | None = None
    ) -> MessageRef:
        dest = thread.thread or thread.conversation
        if message.private_to and reply_to is not None:
            private = await self._send_private(thread, message, reply_to)
            if private is not None:
                return private
        ids: list[str] = []
        for k, payload in enumerate(render(message)):
            if k == 0 and reply_to is not None and reply_to.message_id:
                payload = {
                    **payload,
                    "message_reference": {
                        "message_id": reply_to.message_id,
                        "fail_if_not_exists": False,
                    },
                }
            await self._pace(dest, creates=True)
            await on_wire()  # the agent claims a new message here (unless claimed above)
            ids.append(await self._create(dest, k, payload))
            wire_created()  # partly on screen: a failure of the rest keeps the claim
        extra = encode_extra(ids[1:], preview=not message.final)
        return MessageRef("discord", thread.conversation, ids[0], thread.thread, extra)

    async def _send_private(
        self, thread: ThreadKey, message: OutboundMessage, reply_to: MessageRef
    ) -> MessageRef | None:
        """``message`` as an ephemeral follow-up to the slash command it answers,
        when ``private_to`` invoked it: only they see it.  None when that is not
        possible (a typed message: Discord has no ephemeral message outside an
        interaction; another user's command; the follow-up refused, e.g. after
        the token's 15 minutes): the caller posts it in the channel.  A follow-up
        that may have been made (no answer came back) or is rate limited raises, as
        any send does: it is never posted publicly as well."""
        interaction = decode_extra(reply_to.extra)[1]
        if interaction is None or decode_invoker(reply_to.extra) != message.private_to:
            return None
        app_id, token = interaction
        ids: list[str] = []
        for payload in render(message):
            body = {**payload, "flags": EPHEMERAL}
            await on_wire()  # the agent claims the part here (once)
            try:
                data = await self._followup(app_id, token, body, time.time())
            except (SendUnconfirmed, SendRateLimited):
                raise  # it may be showing, or is to be tried again: never posted as well
            except ChannelError as exc:
                if ids:
                    raise
                log.warning(
                    "[%s] private notice not sent as a follow-up (%s); posting it", thread, exc
                )
                return None
            ids.append(str(data["id"]))
            wire_created()
        return MessageRef(
            "discord", thread.conversation, ids[0], thread.thread, encode_extra(ids[1:])
        )

    async def edit(self, ref: MessageRef, message: OutboundMessage) -> MessageRef:
        dest = ref.thread or ref.conversation
        old = message_ids(ref)
        payloads = render(message)
        droppable = not message.final
        # A streamed answer (a preview, or the final edit of one) whose message was
        # deleted is posted anew: the answer is still being given.  Any other message
        # a moderator (or its author) deleted, e.g. an approval prompt, stays deleted.
        streamed = droppable or decode_preview(ref.extra)
        # While streaming, parts before the last one already shown only grow at the
        # end; the final edit rewrites every part.
        first = len(old) - 1 if droppable else 0
        ids: list[str] = []
        for k, payload in enumerate(payloads):
            if k < len(old):
                ids.append(old[k])
                if k < first:
                    continue
                if not await self._pace(dest, droppable=droppable):
                    edit_skipped()  # the core edits again once it may (a catch-up edit)
                    return ref if k == 0 else self._ref(ref, ids + old[len(ids) :], preview=True)
                try:
                    await self._patch(dest, old[k], payload, droppable=droppable)
                except _Skipped:
                    edit_skipped()
                    return ref if k == 0 else self._ref(ref, ids + old[len(ids) :], preview=True)
                except _Gone:
                    if not streamed:
                        log.info(
                            "discord: message %s in %s was deleted; it stays deleted",
                            old[k],
                            dest,
                        )
                        if k == 0:
                            return ref  # the message itself (an approval prompt, say)
                        continue  # a part of a long one: the parts after it are edited

                    # Deleted (a moderator, the user): this part is posted anew.  Its
                    # nonce comes from the deleted message, so a rerun of this edit
                    # after a crash (the new id not recorded yet) finds the same
                    # message instead of posting a second one.
                    log.info(
                        "discord: message %s in %s is gone; posting this streamed answer anew",
                        old[k],
                        dest,
                    )
                    ids[-1] = await self._create(dest, k, payload, part=f"~{old[k]}")
            else:
                if not await self._pace(dest, droppable=droppable):
                    if droppable:
                        edit_skipped()
                    return self._ref(ref, ids, preview=droppable)
                ids.append(await self._create(dest, k, payload, part=f"+{ref.message_id}"))
        if not droppable:
            for extra_id in old[len(payloads) :]:
                try:
                    await self._call(
                        Route(
                            "DELETE",
                            "/channels/{channel_id}/messages/{message_id}",
                            channel_id=dest,
                            message_id=extra_id,
                        )
                    )
                except ChannelError:
                    log.warning("could not delete surplus part %s in %s", extra_id, dest)
        return self._ref(ref, ids, preview=droppable)

    async def _patch(
        self, dest: str, message_id: str, payload: dict[str, Any], *, droppable: bool
    ) -> None:
        """Edit one message.  Raises _Gone if it was deleted, and, for a streamed
        (droppable) edit, _Skipped if it is rate-limited or does not come back
        within the stream interval: a later edit carries newer text anyway, and
        waiting would hold the answer up.  A final edit waits and lands."""
        route = Route(
            "PATCH",
            "/channels/{channel_id}/messages/{message_id}",
            channel_id=dest,
            message_id=message_id,
        )
        try:
            if not droppable:
                await self._call(route, json=payload)
                return
            # A task of its own, off the turn's deadline: a 429 discord.py would
            # sleep out in it (http trace hook) must not move the deadline back, the
            # edit is skipped rather than waited for (agent_core.deadline).
            with outside_turn():
                task = asyncio.ensure_future(self._call(route, json=payload))
            try:
                done, _ = await asyncio.wait({task}, timeout=self._streamed_edit_wait())
            except asyncio.CancelledError:  # /stop: the final edit comes next, and last
                task.cancel()
                raise
            if not done:
                # Not awaited: discord.py may still be in its rate-limit bookkeeping
                # (a sleep it does even when cancelled).  The stale edit is not sent.
                task.cancel()
                self._abandoned.add(task)
                task.add_done_callback(self._forget)
                log.debug("discord: streamed edit of %s skipped (slow or rate-limited)", message_id)
                raise _Skipped
            task.result()
        except SendRateLimited as exc:
            if droppable:
                raise _Skipped from exc
            raise
        except SendFailed as exc:
            cause = exc.__cause__
            if isinstance(cause, discord.HTTPException) and cause.code == UNKNOWN_MESSAGE:
                raise _Gone from exc
            raise

    def _streamed_edit_wait(self) -> float:
        return max(STREAMED_EDIT_WAIT, self.stream_interval or 0.0)

    def _forget(self, task: asyncio.Task[Any]) -> None:
        self._abandoned.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: an abandoned edit's error is of no interest

    @staticmethod
    def _ref(ref: MessageRef, ids: list[str], *, preview: bool) -> MessageRef:
        _, interaction = decode_extra(ref.extra)
        extra = encode_extra(ids[1:], interaction, preview=preview)
        return MessageRef(ref.channel, ref.conversation, ids[0], ref.thread, extra)

    async def typing(self, thread: ThreadKey) -> None:
        dest = thread.thread or thread.conversation
        now = time.monotonic()
        if now - self._typing_at.get(dest, -TYPING_EVERY) < TYPING_EVERY:
            return
        self._typing_at[dest] = now
        if len(self._typing_at) > 10_000:
            self._typing_at.clear()
        try:
            await asyncio.wait_for(
                self._call(Route("POST", "/channels/{channel_id}/typing", channel_id=dest)),
                TYPING_TIMEOUT,
            )
        except Exception as exc:  # best effort
            log.debug("[%s] typing failed: %s", thread, exc)

    async def turn_finished(self, thread: ThreadKey, event: InboundEvent | None) -> None:
        # Discord clears "typing" by itself when the bot posts (or after 10 s).
        self._typing_at.pop(thread.thread or thread.conversation, None)

    async def answer_action(self, event: InboundEvent, text: str) -> None:
        """An ephemeral follow-up to the press, seen only by its presser."""
        if not text:
            return  # the interaction was deferred when it arrived; nothing to say
        interaction = decode_extra(event.reply_ref.extra)[1] if event.reply_ref else None
        if interaction is None:
            log.warning("[%s] press %s carries no interaction token", event.thread, event.event_id)
            return
        app_id, token = interaction
        body = {"content": text[:2000], "flags": EPHEMERAL, "allowed_mentions": NO_MENTIONS}
        try:
            await self._followup(app_id, token, body, event.received_at)
        except ChannelError as exc:
            log.warning("[%s] could not answer press %s: %s", event.thread, event.event_id, exc)

    async def _followup(
        self, app_id: str, token: str, body: dict[str, Any], since: float
    ) -> dict[str, Any]:
        """POST a follow-up message to an interaction; the message."""
        delay = 0.1
        while True:
            try:
                data: dict[str, Any] = await self._call(
                    Route(
                        "POST",
                        "/webhooks/{webhook_id}/{webhook_token}",
                        webhook_id=app_id,
                        webhook_token=token,
                    ),
                    json=body,
                )
                return data
            except ChannelError as exc:
                # The gateway publishes an interaction before it answers it, so this
                # worker can be here before Discord knows it: wait for the answer (it
                # is sent within 3 s of the interaction, or never).
                cause = exc.__cause__
                early = (
                    isinstance(cause, discord.HTTPException)
                    and cause.code in FOLLOWUP_TOO_EARLY
                    and time.time() - since < FOLLOWUP_WAIT_SECS
                )
                if not early:
                    raise
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.5)
