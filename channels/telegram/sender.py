"""The Telegram Outbox: render, split, pace and send through python-telegram-bot.

Pacing (shared by every worker through Redis, see ``agent_core.store.pacing``):

* one message (send or edit) per second per chat,
* one per 3 s per group (Telegram's 20 per minute),
* 30 per second per bot overall.

A 429 pauses the chat's pace (all sends, when several chats are hit at once)
for exactly ``retry_after``; anything sent to that chat waits as long (a failure
notice included).  The sender itself waits at most ``max_retry_wait``
(TELEGRAM_MAX_RETRY_WAIT) for a call the answer needs: a shorter flood wait is
slept here and the call made again; a longer one (``retry after 3600``), a chat
paused for longer by any worker, or a refusal after ``max_retry_wait`` of
waiting in all raises SendRateLimited, which the turn's reply writer waits out
(``agent_core.agent.reply``: /interrupt ends that wait, a stopping worker hands
the turn back for the rest of it).  Every such wait is off the turn's clock
(``agent_core.deadline``).
Streamed (non-final) edits never wait for a slot: with none free, or on a 429,
they are skipped, so an approval prompt or a final answer is never queued
behind them.

An answer is sent as a reply to its question; if the question was deleted
meanwhile and Telegram refuses the reply (it does in forum topics, whatever
``allow_sending_without_reply`` says), it is sent again once without it, in the
same chat and topic.

A group that became a supergroup (``ChatMigrated``) is written to under its new
id from then on (:mod:`channels.telegram.migration`): a send is made there, and
an edit of a message in the old group, which can no longer be edited, becomes
one new message there with the new text.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dtm
import logging
import re
import time
import warnings
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from redis.asyncio import Redis
from redis.exceptions import RedisError
from telegram import Bot, InlineKeyboardMarkup, ReplyParameters
from telegram.constants import ChatAction
from telegram.error import (
    BadRequest,
    ChatMigrated,
    EndPointNotFound,
    Forbidden,
    InvalidToken,
    NetworkError,
    RetryAfter,
    TelegramError,
    TimedOut,
)
from telegram.warnings import PTBUserWarning

from agent_core.deadline import platform_wait
from agent_core.errors import (
    ChannelError,
    FormattingRejected,
    SendFailed,
    SendForbidden,
    SendRateLimited,
    SendUnconfirmed,
)
from agent_core.events import Attachment, InboundEvent, MessageRef, OutboundMessage, ThreadKey
from agent_core.outbox import edit_skipped, on_wire, wire_claim, wire_created, wire_retry
from agent_core.store.pacing import Pacer, pace_key
from channels.never_sent import never_sent
from channels.telegram import refs
from channels.telegram.migration import ChatRedirects
from channels.telegram.render import Part, keyboard, render_text

log = logging.getLogger(__name__)

# TelegramOutbox._api calls known methods through Bot.do_api_request on purpose;
# python-telegram-bot warns about that on every call.
warnings.filterwarnings(
    "ignore",
    message=r"Please use 'Bot\.(send_message|edit_message_text|send_chat_action)'",
    category=PTBUserWarning,
)

T = TypeVar("T")
CHANNEL = "telegram"
MAX_DOWNLOAD_BYTES = 20 * 1024 * 1024  # Bot API getFile limit
# A press waiting behind a running turn is answered this long after it arrived,
# unless its own turn answers it first (Telegram takes an answer for ~10-15 s).
PRESS_NOTE_AFTER = 5.0
PRESS_ANSWER_WINDOW = 15.0  # older presses are not answered by a note (Telegram refuses)
PRESS_NOTE = "Got it: this is handled when the current reply is done."
MAX_PRESS_NOTES = 10_000  # timers held at once (one per waiting press)


@dataclass(frozen=True, slots=True)
class Limits:
    chat_interval: float = 1.0
    group_interval: float = 3.0
    global_interval: float = 1 / 30
    typing_interval: float = 4.0
    typing_max_secs: float = 600.0
    edit_max_wait: float = 0.25  # a non-final edit waits at most this for a slot, else skips
    max_retry_wait: float = 60.0


class _Skipped(Exception):
    """A droppable call found no slot (or was rate limited): skip it."""


class _NotModified(Exception):
    pass


class _NotFound(Exception):
    pass


class _ReplyGone(SendFailed):
    """The message a send replies to is gone (the user deleted it): in a forum
    topic Telegram refuses the reply even with ``allow_sending_without_reply``."""


# Telegram's wordings over the years ("message to be replied not found" now).
_REPLY_GONE = re.compile(r"(message to be replied|replied message|reply message) not found")


class _Migrated(Exception):
    """The chat is a group that became a supergroup with this id."""

    def __init__(self, new_chat_id: int) -> None:
        super().__init__(f"the group became supergroup {new_chat_id}")
        self.new_chat_id = new_chat_id


def _seconds(value: int | float | dtm.timedelta) -> float:
    if isinstance(value, dtm.timedelta):
        return value.total_seconds()
    return float(value)


def _retry_after(exc: RetryAfter) -> float:
    raw = getattr(exc, "_retry_after", None)  # exact (PTB keeps a timedelta)
    if isinstance(raw, dtm.timedelta):
        return max(raw.total_seconds(), 0.0)
    return max(_seconds(exc.retry_after), 0.0)


def _known(parts: list[tuple[int, str]]) -> bool:
    """Whether any of an answer's messages has a confirmed id (the ref can be edited)."""
    return any(mid != refs.UNKNOWN for mid, _ in parts)


def _target(thread: ThreadKey) -> tuple[int, int | None]:
    topic = int(thread.thread) if thread.thread.lstrip("-").isdigit() else None
    return int(thread.conversation), topic


class TelegramOutbox:
    """Implements :class:`agent_core.outbox.Outbox` for Telegram."""

    stream_interval: float | None = 1.0

    wire_hook = True  # calls agent_core.outbox.on_wire() before creating a message
    group_text_reaches = True  # set from GROUP_REPLY by the channel (agent_core.outbox)

    def __init__(
        self,
        bot: Bot,
        pacer: Pacer,
        bot_id: str,
        limits: Limits | None = None,
        *,
        redis: Redis | None = None,
    ) -> None:
        self._bot = bot
        self._pacer = pacer
        self._bot_id = bot_id
        self.redirects = ChatRedirects(redis, bot_id)  # groups that became supergroups
        self.limits = limits or Limits()
        self.stream_interval = max(self.limits.chat_interval, 0.0) or None
        self._typing: dict[ThreadKey, asyncio.Task[None]] = {}
        self._typing_stop: dict[ThreadKey, asyncio.Event] = {}
        # callback id -> its press's note, until the turn's own answer takes over
        self._press_notes: dict[str, asyncio.Task[None]] = {}
        self._press_sending: set[str] = set()  # callback ids whose note is on the wire
        self._note_tasks: set[asyncio.Task[None]] = set()  # every note, for close()
        self._press_retries: set[asyncio.Task[None]] = set()  # answers waiting out a 429
        self._recent_429: dict[int, float] = {}
        self._global_key = pace_key(CHANNEL, bot_id, "all")

    # -- pacing and error translation ------------------------------------------

    def _paces(self, chat_id: int) -> list[tuple[str, float]]:
        lim = self.limits
        paces = [
            (pace_key(CHANNEL, self._bot_id, "chat", str(chat_id)), lim.chat_interval),
            (self._global_key, lim.global_interval),
        ]
        if chat_id < 0:  # groups, supergroups, channels
            paces.append(
                (pace_key(CHANNEL, self._bot_id, "group", str(chat_id)), lim.group_interval)
            )
        return paces

    async def _reserve(self, chat_id: int, droppable: bool) -> None:
        """Wait for a slot.  A droppable call that finds none soon is skipped
        (_Skipped); any other call waits at most ``max_retry_wait`` here: a slot
        further away (a chat paused for a long flood wait, by this worker or
        another) raises SendRateLimited for as long, which the turn's reply
        writer waits out where /interrupt and a stopping worker end the wait."""
        claim = wire_claim()  # the agent's part claim rides along (a new message)
        try:
            delay, booked = await self._pacer.book(
                self._paces(chat_id),
                max_wait=self.limits.edit_max_wait if droppable else self.limits.max_retry_wait,
                claim=claim,
            )
        except RedisError:
            if claim is not None:
                raise  # the claim may or may not have been made: not sent blind
            log.warning("telegram pacing unavailable (Redis); sending unpaced")
            return
        if not booked:
            if droppable:
                raise _Skipped
            raise SendRateLimited(delay, "Telegram flood control (chat paused)")
        if delay > 0:  # (a droppable call never waits here: max_wait above)
            await platform_wait(delay)  # off the turn's clock (agent_core.deadline)

    async def _on_429(self, chat_id: int, seconds: float) -> bool:
        """Pause the chat (or everything); False when the shared pacer is unreachable."""
        now = time.monotonic()
        others = [c for c, t in self._recent_429.items() if c != chat_id and now - t < 1.0]
        self._recent_429 = {c: t for c, t in self._recent_429.items() if now - t < 1.0}
        self._recent_429[chat_id] = now
        keys = [pace_key(CHANNEL, self._bot_id, "chat", str(chat_id))]
        if others:  # several chats limited at once: the bot as a whole is
            keys.append(self._global_key)
        log.warning(
            "telegram rate limited chat %s for %.1fs%s",
            chat_id,
            seconds,
            " (all chats)" if others else "",
        )
        try:
            for key in keys:
                await self._pacer.pause(key, seconds)
        except RedisError:
            return False
        return True

    async def _call(
        self,
        chat_id: int,
        fn: Callable[[], Awaitable[T]],
        *,
        droppable: bool = False,
        idempotent: bool = False,
    ) -> T:
        """One Bot API call, paced, with Telegram's errors translated.

        ``idempotent``: the call may be repeated whatever became of it (an edit,
        a delete): a timeout or 504 is then tried again like a 502, up to the
        same bound, instead of being left unconfirmed.  Not for droppable calls
        (a streamed edit is skipped rather than held up by a second timeout).
        """
        waited = 0.0
        server_errors = 0
        started = time.monotonic()
        while True:
            await self._reserve(chat_id, droppable)
            await on_wire()  # the agent claims a new message (no-op: edits, claimed above)
            try:
                return await fn()
            except RetryAfter as exc:
                secs = _retry_after(exc)
                paused = await self._on_429(chat_id, secs)
                if droppable:
                    raise _Skipped from exc
                # A wait longer than max_retry_wait (Telegram's 'retry after 3600'),
                # or a refusal after that long in all, is not slept here: the turn's
                # reply writer waits it out, where /interrupt and a stopping worker
                # end it (and hand the turn back for the rest).
                if secs > self.limits.max_retry_wait or waited >= self.limits.max_retry_wait:
                    raise SendRateLimited(secs, "Telegram flood control") from exc
                waited += secs
                await self._unclaim_for_retry()  # not created: claimed again after the wait
                # Loop: the paused pace makes the next reserve wait exactly `secs`.
                if not paused:
                    await platform_wait(secs)  # off the turn's clock (at most max_retry_wait)
            except BadRequest as exc:
                msg = exc.message.lower()
                if "not modified" in msg:
                    raise _NotModified from exc
                if "message to edit not found" in msg:
                    raise _NotFound from exc
                if _REPLY_GONE.search(msg):
                    raise _ReplyGone(f"Telegram refused the reply: {exc.message}") from exc
                if "entit" in msg:  # can't parse entities, ENTITIES_TOO_LONG, …
                    raise FormattingRejected(exc.message) from exc
                refused = SendForbidden if "have no rights" in msg else SendFailed
                raise refused(f"Telegram refused the message: {exc.message}") from exc
            except ChatMigrated as exc:
                raise _Migrated(int(exc.new_chat_id)) from exc
            except Forbidden as exc:
                raise SendForbidden(
                    f"the bot cannot write to chat {chat_id} (blocked, or removed from the group)"
                ) from exc
            except (InvalidToken, EndPointNotFound) as exc:
                # do_api_request reports a 401/404 as EndPointNotFound once the
                # bot is initialised; for these methods it means the token.
                raise SendFailed("Telegram rejected the bot token") from exc
            except NetworkError as exc:  # TimedOut included
                # Four kinds: the request never left (no connection: safe to
                # repeat); it left and no answer came back, or Telegram's front
                # proxy answered 504 (the API may have created the message: never
                # repeated blindly); the proxy answered 502 / 503 (an HTML page:
                # the API was not reached); or the API itself answered 5xx in
                # JSON (it refused the call).  The last two are repeated.
                sent_nothing = never_sent(exc)
                cause = exc.__cause__
                proxy = isinstance(cause, TelegramError)  # a 5xx page that is not JSON
                transport = cause is not None and not proxy  # no answer at all
                maybe_done = proxy and "(504)" in exc.message
                unconfirmed = not sent_nothing and (
                    isinstance(exc, TimedOut) or transport or maybe_done
                )
                repeatable = idempotent and not droppable and server_errors < 2
                if unconfirmed and not repeatable:
                    raise SendUnconfirmed(
                        "Telegram did not answer in time"
                        if isinstance(exc, TimedOut)
                        else f"Telegram call failed: {exc.message}"
                    ) from exc
                if sent_nothing:
                    # No connection (or no free slot in our own pool: thousands of
                    # turns sending at once) within the connect timeout.  Nothing
                    # left, so waiting longer is safe; give up only after the
                    # same budget a 429 gets, instead of dropping the answer.
                    if droppable or time.monotonic() - started > self.limits.max_retry_wait:
                        raise SendFailed(f"Telegram call failed: {exc.message}") from exc
                    log.warning("telegram call could not start (%s); retrying", exc.message)
                    await self._unclaim_for_retry()
                    await asyncio.sleep(0.5)
                    continue
                if server_errors >= 2:  # (an idempotent call's timeout is repeated here too)
                    raise SendFailed(f"Telegram call failed: {exc.message}") from exc
                server_errors += 1
                log.warning("telegram call failed (%s); retrying", exc.message)
                await self._unclaim_for_retry()  # refused, or the API was not reached
                await asyncio.sleep(0.5 if server_errors == 1 else 1.5)
            except TelegramError as exc:
                raise SendFailed(f"Telegram call failed: {exc.message}") from exc

    async def _unclaim_for_retry(self) -> None:
        """A message that was not created waits to be tried again: its part claim
        is taken back meanwhile (a crash in the wait then leaves it to the rerun
        instead of 'maybe sent'), and made again before the next try."""
        try:
            await wire_retry()
        except RedisError:
            log.warning("telegram: could not take back a part claim (claimed again after the wait)")

    # -- primitives ----------------------------------------------------------

    async def _api(self, method: str, **params: object) -> object:
        """Bot API call through python-telegram-bot's request stack (same
        parameter serialisation, errors and timeouts as ``Bot.send_message``),
        returning the raw result: building a ``Message`` from every answer cost
        ~0.3 ms per turn (bench/README.md, hot spot 11) and only its id is used."""
        return await self._bot.do_api_request(method, api_kwargs=params)

    async def _send_part(
        self,
        chat_id: int,
        topic: int | None,
        part: Part,
        markup: InlineKeyboardMarkup | None,
        reply_to: MessageRef | None,
        droppable: bool,
    ) -> tuple[int, Part]:
        reply = None
        if (
            reply_to is not None
            and reply_to.conversation == str(chat_id)
            and reply_to.message_id.isdigit()
        ):
            reply = ReplyParameters(
                message_id=int(reply_to.message_id), allow_sending_without_reply=True
            )

        async def go(p: Part) -> int:
            sent = await self._api(
                "send_message",
                chat_id=chat_id,
                text=p.text,
                entities=list(p.entities) or None,
                reply_markup=markup,
                message_thread_id=topic,
                reply_parameters=reply,
            )
            return int(sent["message_id"]) if isinstance(sent, dict) else 0

        async def attempt(p: Part) -> int:
            nonlocal reply
            try:
                return await self._call(chat_id, lambda: go(p), droppable=droppable)
            except _ReplyGone:
                if reply is None:
                    raise
                # The question was deleted meanwhile (in a forum topic Telegram
                # ignores allow_sending_without_reply): the answer goes to the
                # same chat and topic as a plain message.
                log.info("telegram: message replied to in chat %s is gone; not replying", chat_id)
                reply = None
                return await self._call(chat_id, lambda: go(p), droppable=droppable)

        try:
            return await attempt(part), part
        except FormattingRejected:
            log.warning("telegram refused formatting in chat %s; resending plain", chat_id)
            plain = part.plain()
            return await attempt(plain), plain

    async def _edit_part(
        self,
        chat_id: int,
        message_id: int,
        part: Part,
        markup: InlineKeyboardMarkup | None,
        droppable: bool,
    ) -> Part:
        async def go(p: Part) -> object:
            return await self._api(
                "edit_message_text",
                chat_id=chat_id,
                message_id=message_id,
                text=p.text,
                entities=list(p.entities) or None,
                reply_markup=markup,  # None removes the keyboard
            )

        try:
            try:
                await self._call(chat_id, lambda: go(part), droppable=droppable, idempotent=True)
                return part
            except FormattingRejected:
                log.warning("telegram refused formatting in chat %s; editing plain", chat_id)
                plain = part.plain()
                await self._call(chat_id, lambda: go(plain), droppable=droppable, idempotent=True)
                return plain
        except _NotModified:
            return part

    # -- Outbox ----------------------------------------------------------------
    def message_ids(self, ref: MessageRef) -> list[str]:
        """The Telegram messages an answer occupies (without content fingerprints),
        chat included: an answer that moved to a supergroup is other messages."""
        return [f"{ref.conversation}:{m}" for m, _ in refs.decode_parts(ref.extra, ref.message_id)]

    async def send(
        self, thread: ThreadKey, message: OutboundMessage, *, reply_to: MessageRef | None = None
    ) -> MessageRef:
        chat_id, topic = _target(thread)
        target = await self.redirects.resolve(chat_id)
        try:
            return await self._send(thread.thread, target, topic, message, reply_to)
        except _Migrated as exc:
            # The group became a supergroup: the whole answer goes there (parts
            # already sent stay in the old group's history).
            new = await self.redirects.learn(target, exc.new_chat_id)
            return await self._moved_send(ref_thread=thread.thread, chat_id=new, message=message)

    async def _moved_send(
        self, *, ref_thread: str, chat_id: int, message: OutboundMessage
    ) -> MessageRef:
        topic = int(ref_thread) if ref_thread.lstrip("-").isdigit() else None
        try:
            return await self._send(ref_thread, chat_id, topic, message, None)
        except _Migrated as exc:
            raise SendFailed(f"chat {chat_id} moved again, to {exc.new_chat_id}") from exc

    async def _send(
        self,
        ref_thread: str,
        chat_id: int,
        topic: int | None,
        message: OutboundMessage,
        reply_to: MessageRef | None,
    ) -> MessageRef:
        markup = keyboard(message.buttons)
        parts = render_text(message.text)
        sent: list[tuple[int, str]] = []
        try:
            for i, part in enumerate(parts):
                if not message.final and i == len(parts) - 1 and _known(sent):
                    # The growing tail of a streamed preview: sent once complete, or by
                    # the final edit, of the ref returned here.  Unless none of the
                    # messages before it was confirmed: that ref could not be edited
                    # (the core takes it for unconfirmed and keeps the preview as is),
                    # so the tail goes now and grows by edits like a first message.
                    break
                m = markup if i == len(parts) - 1 else None
                try:
                    sent.append(
                        await self._new_part(
                            chat_id, topic, part, m, reply_to if i == 0 else None, droppable=False
                        )
                    )
                except _Skipped as exc:  # cannot happen for non-droppable sends
                    raise SendFailed("send skipped") from exc
                except (_NotModified, _NotFound) as exc:
                    raise SendFailed(str(exc)) from exc
                wire_created()  # partly on screen: a retry of the rest keeps the claim
        except ChannelError as exc:
            # Some messages of the answer are out (a 429 on a later one): the core
            # records them and finishes the answer by editing this ref, so they are
            # not sent again (ChannelError.partial_ref).
            if _known(sent):
                exc.partial_ref = self._ref(ref_thread, str(chat_id), sent)
            raise
        return self._ref(ref_thread, str(chat_id), sent)

    def _ref(self, ref_thread: str, conversation: str, parts: list[tuple[int, str]]) -> MessageRef:
        """The ref of an answer shown as ``parts``; its message id is the first one
        known (none: every send was unconfirmed, SendUnconfirmed for the core)."""
        first = next((mid for mid, _ in parts if mid), 0)
        if not first:
            raise SendUnconfirmed("Telegram confirmed none of the answer's messages")
        return MessageRef(CHANNEL, conversation, str(first), ref_thread, refs.encode_parts(parts))

    async def _new_part(
        self,
        chat_id: int,
        topic: int | None,
        part: Part,
        markup: InlineKeyboardMarkup | None,
        reply_to: MessageRef | None,
        droppable: bool,
    ) -> tuple[int, str]:
        """Send one message of an answer: its (id, digest).  A send that left and
        was not answered (SendUnconfirmed) may show: it becomes a placeholder (id
        0, refs.UNKNOWN) that is never sent again nor edited, and the answer's
        later messages are sent all the same (they certainly never left)."""
        try:
            mid, shown = await self._send_part(chat_id, topic, part, markup, reply_to, droppable)
        except SendUnconfirmed as exc:
            log.warning(
                "telegram: a message of an answer in chat %s unconfirmed (%s); "
                "not sending it again, sending the rest",
                chat_id,
                exc,
            )
            return refs.UNKNOWN, part.digest(markup)
        return mid, shown.digest(markup)

    async def edit(self, ref: MessageRef, message: OutboundMessage) -> MessageRef:
        chat_id = int(ref.conversation)
        old = refs.decode_parts(ref.extra, ref.message_id)
        parts = render_text(message.text)
        markup = keyboard(message.buttons)
        digests = [p.digest(markup if i == len(parts) - 1 else None) for i, p in enumerate(parts)]
        if [d for _, d in old] == digests:
            return ref  # shows this already
        target = await self.redirects.resolve(chat_id)
        try:
            if target == chat_id:
                return await self._edit(ref, chat_id, old, parts, digests, markup, message.final)
        except _Migrated as exc:
            target = await self.redirects.learn(chat_id, exc.new_chat_id)
        # A message in a group that became a supergroup cannot be edited any more
        # (it stays in the old chat under its old id): the new text is sent to the
        # supergroup once, and the returned ref points there, so later edits edit it.
        log.info("telegram: message %s of group %s resent in %s", ref.message_id, chat_id, target)
        return await self._moved_send(ref_thread=ref.thread, chat_id=target, message=message)

    async def _edit(
        self,
        ref: MessageRef,
        chat_id: int,
        old: list[tuple[int, str]],
        parts: list[Part],
        digests: list[str],
        markup: InlineKeyboardMarkup | None,
        final: bool,
    ) -> MessageRef:
        topic = int(ref.thread) if ref.thread.lstrip("-").isdigit() else None
        droppable = not final
        new: list[tuple[int, str]] = []
        j = 0  # the next of the old messages to reuse
        try:
            for i, (part, digest) in enumerate(zip(parts, digests, strict=True)):
                m = markup if i == len(parts) - 1 else None
                while j < len(old) and old[j][0] == refs.UNKNOWN and old[j][1] != digest:
                    # An unconfirmed message that does not show this text: it cannot
                    # be edited, so it stays as it may be and the text goes on below.
                    log.info("telegram: unconfirmed message in chat %s left as it is", chat_id)
                    j += 1
                if j < len(old):
                    mid, old_digest = old[j]
                    if old_digest == digest:
                        new.append((mid, old_digest))
                    else:
                        try:
                            shown = await self._edit_part(chat_id, mid, part, m, droppable)
                        except _NotFound:
                            # The user deleted it: send this part anew.
                            new.append(
                                await self._new_part(chat_id, topic, part, m, None, droppable)
                            )
                        else:
                            new.append((mid, shown.digest(m)))
                    j += 1  # (not before: a skipped edit leaves old[j] showing)
                elif droppable and i == len(parts) - 1 and _known(new):
                    # A streamed edit does not start the growing tail in a message of
                    # its own: were that send unconfirmed, the message could not be
                    # edited, and the tail would show twice (cut short, then whole).
                    # It is sent once complete (the text outgrew it) or by the final
                    # edit, unless no message before it is known (all deleted by the
                    # user or unconfirmed): the core would edit the ref no more, and
                    # the tail would never be added, so it goes now (as in ``_send``).
                    break
                else:
                    new.append(await self._new_part(chat_id, topic, part, m, None, droppable))
            for mid, _ in old[j:]:
                if mid != refs.UNKNOWN:
                    await self._delete(chat_id, mid)
        except _Skipped:
            edit_skipped()  # the core edits again once it may (a catch-up edit)
            new.extend(old[j:])  # what is not redone still shows the old text
        except ChannelError as exc:
            # Refused part-way (a 429 past TELEGRAM_MAX_RETRY_WAIT, a failure): the
            # messages already sent or rewritten are the answer's now, with the old
            # ones not yet redone.  The core repeats the edit from this ref (and
            # records it), never from the old one, which would send them again.
            shown = new + old[j:]
            if shown != old and _known(shown):
                exc.partial_ref = MessageRef(
                    CHANNEL,
                    ref.conversation,
                    str(next(mid for mid, _ in shown if mid)),
                    ref.thread,
                    refs.encode_parts(shown),
                )
            raise
        if not new:
            return ref
        first = next((mid for mid, _ in new if mid), 0)
        return MessageRef(
            CHANNEL,
            ref.conversation,
            str(first) if first else "",  # none known: the core edits it no more
            ref.thread,
            refs.encode_parts(new),
        )

    async def delete(self, ref: MessageRef) -> None:
        """Remove every message of a reply part (``Outbox.delete``; best effort)."""
        for mid, _ in refs.decode_parts(ref.extra, ref.message_id):
            if mid != refs.UNKNOWN:
                await self._delete(int(ref.conversation), mid)

    async def _delete(self, chat_id: int, message_id: int) -> None:
        try:
            await self._call(
                chat_id,
                lambda: self._bot.delete_message(chat_id=chat_id, message_id=message_id),
                idempotent=True,
            )
        except (ChannelError, _NotModified, _NotFound, _Migrated):
            log.info("could not delete surplus message %s in chat %s", message_id, chat_id)

    async def typing(self, thread: ThreadKey) -> None:
        task = self._typing.get(thread)
        if task is not None and not task.done():
            return
        self._typing_stop[thread] = stop = asyncio.Event()
        self._typing[thread] = asyncio.create_task(
            self._typing_loop(thread, stop), name=f"telegram-typing-{thread}"
        )

    async def _typing_loop(self, thread: ThreadKey, stop: asyncio.Event) -> None:
        chat_id, topic = _target(thread)
        chat_id = await self.redirects.resolve(chat_id)
        deadline = time.monotonic() + self.limits.typing_max_secs
        while time.monotonic() < deadline and not stop.is_set():
            delay = self.limits.typing_interval
            try:
                await self._api(
                    "send_chat_action",
                    chat_id=chat_id,
                    action=ChatAction.TYPING,
                    message_thread_id=topic,
                )
            except RetryAfter as exc:
                delay = max(delay, _retry_after(exc))
            except ChatMigrated as exc:
                chat_id = await self.redirects.learn(chat_id, int(exc.new_chat_id))
                delay = 0.0
            except TelegramError as exc:
                log.debug("[%s] typing indicator failed: %s", thread, exc)
                if isinstance(exc, (Forbidden, InvalidToken)):
                    return
            except Exception:  # best effort: never kill anything over a typing dot
                log.debug("[%s] typing indicator failed", thread, exc_info=True)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), delay)

    async def turn_finished(self, thread: ThreadKey, event: InboundEvent | None) -> None:
        # Stop the loop between calls rather than cancelling it: cancelling an
        # in-flight sendChatAction closes that pooled connection.
        self._typing.pop(thread, None)
        stop = self._typing_stop.pop(thread, None)
        if stop is not None:
            stop.set()

    @staticmethod
    def _callback_id(event: InboundEvent) -> str:
        return refs.decode_callback(event.reply_ref.extra) if event.reply_ref else ""

    def press_waiting(self, event: InboundEvent) -> None:
        """A press waits behind a turn already running in its chat: unless its own
        turn answers it first, answer it ``PRESS_NOTE_AFTER`` seconds after it
        arrived with PRESS_NOTE, so the button's spinner stops while Telegram still
        takes an answer (~10-15 s).  The turn's answer calls the note off while it
        waits (its timer, or the wait out of a 429), not while its request is on the
        wire: if the note wins, the turn's own answer for it is refused by Telegram
        (logged); if it loses, the note is refused (or, refused with a 429, not
        retried)."""
        cq = self._callback_id(event)
        if (
            not cq
            or cq in self._press_notes
            or cq in self._press_sending
            or len(self._press_notes) >= MAX_PRESS_NOTES
        ):
            return
        age = time.time() - event.received_at  # received_at: the webhook host's clock
        if age > PRESS_ANSWER_WINDOW:
            return  # Telegram would refuse it (a press reclaimed long after a crash)
        delay = min(PRESS_NOTE_AFTER, max(0.0, PRESS_NOTE_AFTER - age))
        task = asyncio.create_task(self._note_press(cq, event, delay))
        self._press_notes[cq] = task
        self._note_tasks.add(task)

        def forget(done: asyncio.Task[None]) -> None:
            self._note_tasks.discard(done)
            if self._press_notes.get(cq) is done:
                del self._press_notes[cq]

        task.add_done_callback(forget)

    async def _note_press(self, cq: str, event: InboundEvent, delay: float) -> None:
        me = asyncio.current_task()
        await asyncio.sleep(delay)
        # while the request is on the wire the note goes out whole: answer_action does
        # not cancel it then (a cancelled request closes its pooled connection)
        self._press_sending.add(cq)
        try:
            await self._bot.answer_callback_query(cq, text=PRESS_NOTE)
        except RetryAfter as exc:  # flood control: once more, if still in time
            self._press_sending.discard(cq)
            if self._press_notes.get(cq) is not me:
                return  # the turn's own answer came meanwhile: it, not the note
            # the wait is this task's (close() cancels it), and the turn's answer
            # calls it off again until the second request goes out
            await self._answer_press_again(cq, PRESS_NOTE, event, exc, note=True)
        except TelegramError as exc:  # answered already (its turn, elsewhere) or too old
            log.debug("[%s] press note not shown: %s", event.thread, exc)
        except Exception:
            log.debug("[%s] press note failed", event.thread, exc_info=True)
        finally:
            self._press_sending.discard(cq)

    async def answer_action(self, event: InboundEvent, text: str) -> None:
        cq = self._callback_id(event)
        if not cq:
            return
        note = self._press_notes.pop(cq, None)
        if note is not None and cq not in self._press_sending:
            note.cancel()  # its timer, or its wait out of a 429: this answer instead
        answer = text[:200] or None
        try:
            await self._bot.answer_callback_query(cq, text=answer)
        except RetryAfter as exc:
            # Flood control: answered once more after the wait, if Telegram still
            # takes it then; in the background, so the turn does not wait with it.
            if len(self._press_retries) >= MAX_PRESS_NOTES:
                log.debug("[%s] press answer dropped: rate limited (%s)", event.thread, exc)
                return
            task = asyncio.create_task(self._answer_press_again(cq, answer, event, exc))
            self._press_retries.add(task)
            task.add_done_callback(self._press_retries.discard)
        except TelegramError as exc:
            # Too old (over ~15 s) or already answered: nothing left to do.
            log.info("[%s] could not answer button press: %s", event.thread, exc)

    async def _answer_press_again(
        self, cq: str, text: str | None, event: InboundEvent, exc: RetryAfter, note: bool = False
    ) -> None:
        """A press's answer refused by flood control (429): wait as Telegram asked and
        answer once more, if that is still within the time Telegram takes an answer
        in (``PRESS_ANSWER_WINDOW`` from when the press arrived); else drop it.  A
        ``note`` is marked on the wire again for its second request."""
        wait = _retry_after(exc)
        if time.time() + wait - event.received_at > PRESS_ANSWER_WINDOW:
            log.debug(
                "[%s] press answer dropped: rate limited for %g s, past the press's window",
                event.thread,
                wait,
            )
            return
        await asyncio.sleep(wait)
        if note:
            self._press_sending.add(cq)
        try:
            await self._bot.answer_callback_query(cq, text=text)
        except TelegramError as again:
            log.info("[%s] could not answer button press after a 429: %s", event.thread, again)
        except Exception:
            log.debug("[%s] press answer failed after a 429", event.thread, exc_info=True)

    async def download(self, attachment: Attachment) -> bytes:
        """Fetch an attachment's bytes (on demand; Bot API files up to 20 MB)."""
        if attachment.size and attachment.size > MAX_DOWNLOAD_BYTES:
            raise SendFailed("file is larger than the 20 MB Telegram lets bots download")
        try:
            f = await self._bot.get_file(attachment.ref)
            return bytes(await f.download_as_bytearray())
        except TelegramError as exc:
            raise SendFailed(f"could not download the file: {exc.message}") from exc

    async def fetch_attachment(self, attachment: Attachment, max_bytes: int) -> bytes:
        """For the agent: an image for a vision model, refused above ``max_bytes``."""
        if attachment.size and attachment.size > max_bytes:
            raise SendFailed(f"file is larger than {max_bytes} bytes")
        data = await self.download(attachment)
        if len(data) > max_bytes:
            raise SendFailed(f"file is larger than {max_bytes} bytes")
        return data

    async def close(self) -> None:
        tasks = [*self._typing.values(), *self._note_tasks, *self._press_retries]
        self._typing.clear()
        self._press_notes.clear()
        self._press_sending.clear()
        self._note_tasks.clear()
        self._press_retries.clear()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
