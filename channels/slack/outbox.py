"""The Slack sender: OutboundMessage -> chat.postMessage / chat.update / reactions.

* Every message into a channel books a slot on that channel's shared pace
  (``SLACK_CHANNEL_PACE_SECS``, all worker processes together); a streamed
  (non-final) edit that would have to wait is skipped, never queued.
* 429s: a 429 on a message into a channel pauses the channel's shared pace
  (:meth:`SlackOutbox._call`).  A message the answer needs (its first post, the
  final edit, the rest of a long answer) goes through a client that never waits
  a 429 out by itself: :meth:`SlackOutbox._call_waiting` waits the
  ``Retry-After`` out and tries again, up to ``_TAIL_MAX_WAIT`` of waiting in all
  (its count is the only one); a streamed preview is skipped.  Other calls
  (``chat.postEphemeral``, ``chat.delete``) go through the SDK's retry handler:
  ``Retry-After`` waited out once.
* The working reaction (``reactions.add`` / ``reactions.remove``) never waits
  in the turn: a 429 on adding it skips it (the next typing tick after the
  ``Retry-After`` tries again); a 429 on taking it off is retried in the
  background after the ``Retry-After``, off the turn and its thread lock.
* A long answer is several messages in the thread; its MessageRef is the
  first one, ``extra`` listing the others, so a later edit updates them all.
* Slash commands used where the bot is not a member: the answer goes back
  through the command's ``response_url`` (ephemeral, only the user sees it).
* A user's photo, for a vision model: :meth:`SlackOutbox.fetch_attachment`
  (see :mod:`channels.slack.files`); a person's name for a group conversation:
  :meth:`SlackOutbox.user_display_name` (see :mod:`channels.slack.people`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

import aiohttp
from redis.exceptions import RedisError
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.web.async_slack_response import AsyncSlackResponse
from slack_sdk.webhook.async_client import AsyncWebhookClient

from agent_core.deadline import platform_wait
from agent_core.errors import (
    ChannelError,
    FormattingRejected,
    SendFailed,
    SendForbidden,
    SendRateLimited,
    SendUnconfirmed,
)
from agent_core.events import (
    Attachment,
    EventKind,
    InboundEvent,
    MessageRef,
    OutboundMessage,
    ThreadKey,
)
from agent_core.outbox import (
    current_part,
    edit_skipped,
    on_wire,
    wire_claim,
    wire_created,
    wire_retry,
)
from agent_core.store.pacing import Pacer
from channels import url_tokens
from channels.never_sent import never_sent

from .client import (
    POSTING_METHODS,
    SafeConnectionErrorRetryHandler,
    channel_pace,
    current_channel,
)
from .files import SlackFiles, complete, file_origins
from .find import find_part, part_metadata, reader
from .mrkdwn import to_mrkdwn
from .parse import CHANNEL, RESPONSE_URL_PREFIX, is_dm
from .people import SlackNames
from .render import SlackPost, render, render_preview, text_only
from .settings import DEFAULT_API_BASE_URL
from .state import SlackState

log = logging.getLogger(__name__)

_FORMAT_ERRORS = frozenset({"invalid_blocks", "invalid_blocks_format", "msg_too_long"})
_NOT_MEMBER = frozenset({"not_in_channel", "channel_not_found", "is_archived"})
# Errors after which, Slack's docs say, "some aspect of the operation" may have
# succeeded: a post answered so may be showing.
_MAYBE_DONE = frozenset({"internal_error", "fatal_error", "service_unavailable"})
_MEMO_MAX = 10_000
_DROPPABLE_MAX_WAIT = 0.1  # a streamed edit waits at most this for its slot, else is skipped
_TAIL_MAX_WAIT = 60.0  # rate-limit wait for one message an answer needs (not a preview)
# A working reaction whose removal got a 429 is taken off in the background: up to
# this many more tries, waiting each Retry-After, at most _UNREACT_MAX_WAIT in all.
_UNREACT_TRIES = 3
_UNREACT_MAX_WAIT = 120.0
_RESPONSE_URL_USES = 5  # posts Slack takes through one response_url (in 30 minutes)
_CUT_NOTE = (
    "_(The rest did not fit: Slack lets me answer privately only a few times. "
    "Invite me to this channel, or ask me in a direct message, for long answers.)_"
)
# ends the last message of a long answer Slack refused the rest of (not a rate limit)
_CUT_OFF = "_(cut off: Slack refused the rest of this answer)_"
UNKNOWN_TS = "?"  # in MessageRef.extra: a message posted whose ts never came back
# The message id of an answer shown privately through a response_url (MessageRef.extra
# "ru:<url>"): Slack gives no ts, but the answer can be replaced through the URL, so
# the id must not be empty (the agent core takes an empty id for "cannot be edited").
# Never a Slack ts: edit() sends such refs to the response_url, never to chat.update.
PRIVATE_ID = "ru"


async def _pause(seconds: float) -> None:
    """A rate limit's wait, off the turn's clock (agent_core.deadline; its own
    name: tests count who waits how long)."""
    await platform_wait(seconds)


def _rate_limited(exc: SlackApiError) -> bool:
    return exc.response is not None and (
        exc.response.status_code == 429 or exc.response.get("error") == "ratelimited"
    )


def _retry_after(exc: SlackApiError) -> float:
    try:
        return float(
            exc.response.headers.get("Retry-After", exc.response.headers.get("retry-after", 1))
        )
    except (TypeError, ValueError, AttributeError):
        return 1.0


class SlackOutbox:
    wire_hook = True  # calls agent_core.outbox.on_wire() before chat.postMessage

    def __init__(
        self,
        web: AsyncWebClient,
        pacer: Pacer,
        state: SlackState,
        session: aiohttp.ClientSession,
        *,
        stream_interval: float = 1.0,
        pace_secs: float = 1.0,
        reaction: str = "eyes",
        bot_token: str = "",
        api_base_url: str = DEFAULT_API_BASE_URL,
        bot_user_id: Callable[[], str] = lambda: "",
        slash_command: str = "/parley",
    ) -> None:
        self.web = web
        # slack_sdk's webhook client logs a response_url (a secret capability) at DEBUG
        for name in url_tokens.SLACK_WEBHOOK_LOGGERS:
            url_tokens.install(name)
        # A client that never waits a 429 out by itself (no rate-limit retry
        # handler): streamed edits (one that would have to wait is skipped, the turn
        # keeps reading the model, and this process's previews pause for the
        # Retry-After); the messages an answer needs (_call_waiting counts and
        # bounds their waiting itself); the working reaction (never waited for in
        # a turn).
        self._web_no_wait = AsyncWebClient(
            token=web.token,
            base_url=web.base_url,
            session=web.session,
            timeout=web.timeout,
            retry_handlers=[SafeConnectionErrorRetryHandler()],
        )
        self._previews_quiet_until = 0.0
        self._reactions_quiet_until = 0.0  # reactions.add got a 429: not before this
        self._background: set[asyncio.Task[None]] = set()  # reactions taken off later
        self._ru_uses: dict[str, int] = {}  # posts made through each response_url
        # response_urls of /parley commands answered privately (Parley not a member):
        # later parts of the answer go there without a chat.postMessage refused first
        self._ru_private: set[str] = set()
        self.pacer = pacer
        self.state = state
        self.session = session
        self.stream_interval: float | None = stream_interval
        self.pace_secs = pace_secs
        self.reaction = reaction
        self._last_edit: dict[str, float] = {}
        self._files = SlackFiles(session, bot_token, file_origins(api_base_url))
        self._names = SlackNames(web)
        self._reader: AsyncWebClient | None = None  # for find_part
        self._bot_user_id = bot_user_id  # from auth.test (channel.py)
        self.slash_command = slash_command

    def typed_command(self, thread: ThreadKey) -> str | None:
        """How typed words reach a conversation (agent_core.outbox, group text).  A
        DM, and a thread Parley answers in, take plain messages (None).  A channel's
        own conversation (top level, what /parley talks to) does not: a plain "yes"
        there is ignored (no mention) and "@Parley yes" starts a thread of its own;
        only the slash command's text reaches it ('' if none is set: the buttons)."""
        if thread.thread or is_dm(thread.conversation):
            return None
        return self.slash_command

    # -- Web API calls -----------------------------------------------------
    async def _call(
        self,
        method: str,
        channel: str,
        *,
        droppable: bool = False,
        sdk_waits: bool = True,
        **kwargs: Any,
    ) -> AsyncSlackResponse | None:
        """One paced Web API call. Returns None when a droppable call was skipped.

        ``sdk_waits``: a 429 is waited out once by slack_sdk's retry handler inside
        the call (False: SendRateLimited at once, the caller waits; a droppable call
        never waits, it is skipped)."""
        if self.pace_secs > 0:
            paces = [(channel_pace(channel), self.pace_secs)]
            # (a message the answer needs waits at most _TAIL_MAX_WAIT here: a pace
            # paused for longer is the reply writer's to wait out, SendRateLimited)
            max_wait = _DROPPABLE_MAX_WAIT if droppable else _TAIL_MAX_WAIT
            # a new message: the agent's part claim rides in the booking's round trip
            claim = wire_claim() if method == "chat.postMessage" else None
            delay, booked = await self.pacer.book(paces, max_wait=max_wait, claim=claim)
            if not booked:
                if droppable:
                    return None
                raise SendRateLimited(delay, f"Slack {method} (channel paused)")
            if delay > 0:
                if droppable:
                    await asyncio.sleep(delay)
                else:
                    await platform_wait(delay)  # off the turn's clock (agent_core.deadline)
        if method == "chat.postMessage":
            await on_wire()  # the agent claims a new message here (unless claimed above)
        token = current_channel.set(channel)
        try:
            body = {"channel": channel, **{k: v for k, v in kwargs.items() if v is not None}}
            web = self.web if sdk_waits and not droppable else self._web_no_wait
            return await web.api_call(method, json=body)
        except SlackApiError as exc:
            error = str(exc.response.get("error", "")) if exc.response is not None else ""
            if _rate_limited(exc):
                retry_after = _retry_after(exc)
                if droppable:
                    # chat.update's limit is per workspace, not per channel: only
                    # this process's previews hold back, posts go on
                    self._previews_quiet_until = time.monotonic() + retry_after
                    return None
                if method in POSTING_METHODS:  # not chat.delete's own limit
                    await self.pacer.pause(channel_pace(channel), retry_after)
                raise SendRateLimited(retry_after, f"Slack {method}") from exc
            if error in _FORMAT_ERRORS:
                raise FormattingRejected(f"Slack {method}: {error}") from exc
            status = exc.response.status_code if exc.response is not None else 0
            if method == "chat.postMessage" and (error in _MAYBE_DONE or status >= 500):
                # Slack failed on its side, perhaps after posting: not a refusal.
                raise SendUnconfirmed(f"Slack {method}: {error or status}") from exc
            refused = SendForbidden if error in _NOT_MEMBER else SendFailed  # not in it
            raise refused(f"Slack {method}: {error or 'failed'}") from exc
        except (aiohttp.ClientError, TimeoutError) as exc:
            if droppable:
                return None
            if never_sent(exc):  # nothing left this machine
                raise SendFailed(f"Slack {method}: {type(exc).__name__}") from exc
            # It left and no answer came back: Slack may have posted it.
            raise SendUnconfirmed(f"Slack {method}: {type(exc).__name__}") from exc
        finally:
            current_channel.reset(token)

    async def _respond(self, ref_extra: str, post: SlackPost, *, replace: bool) -> None:
        """Answer through a slash command / ephemeral message's response_url."""
        url = ref_extra.removeprefix(RESPONSE_URL_PREFIX)
        hook = AsyncWebhookClient(
            url,
            session=self.session,
            retry_handlers=[SafeConnectionErrorRetryHandler(always_creates=True)],
        )
        try:
            resp = await hook.send_dict(
                {
                    "response_type": "ephemeral",
                    "replace_original": replace,
                    "text": post.text,
                    "blocks": post.blocks,
                }
            )
        except (aiohttp.ClientError, TimeoutError) as exc:
            if never_sent(exc):
                raise SendFailed(f"Slack response_url: {type(exc).__name__}") from exc
            # It left and no answer came back: Slack may have shown it.
            raise SendUnconfirmed(f"Slack response_url: {type(exc).__name__}") from exc
        if resp.status_code == 429:
            raise SendRateLimited(1.0, "Slack response_url")
        if resp.status_code >= 500:  # Slack's side failed, perhaps after posting
            raise SendUnconfirmed(f"Slack response_url: HTTP {resp.status_code}")
        if resp.status_code >= 300:
            raise SendFailed(f"Slack response_url: HTTP {resp.status_code}")
        if len(self._ru_uses) > _MEMO_MAX:
            self._ru_uses.clear()
        self._ru_uses[ref_extra] = self._ru_uses.get(ref_extra, 0) + 1

    def _within_uses(self, ref_extra: str, posts: list[SlackPost]) -> list[SlackPost]:
        """``posts`` cut to the uses this response_url has left (counted in this
        process), the last one saying the answer stops there."""
        room = max(1, _RESPONSE_URL_USES - self._ru_uses.get(ref_extra, 0))
        if len(posts) <= room:
            return posts
        return [*posts[: room - 1], _cut_note(posts[room - 1])]

    async def _respond_within(self, ref_extra: str, posts: list[SlackPost]) -> None:
        """New private messages through a response_url, within its uses."""
        for post in self._within_uses(ref_extra, posts):
            await self._respond(ref_extra, post, replace=False)
            wire_created()  # partly shown: a failure of the rest keeps the claim

    async def _respond_all(self, ref_extra: str, posts: list[SlackPost]) -> None:
        """The final text of a streamed private answer: the first message replaces
        the preview, the rest follow, within the response_url's uses."""
        for i, post in enumerate(self._within_uses(ref_extra, posts)):
            await self._respond(ref_extra, post, replace=i == 0)

    async def find_part(
        self, thread: ThreadKey, part: str, claimed_ms: int, *, reply_to: MessageRef | None
    ) -> MessageRef | None:
        """The messages of a reply part whose sender died around posting it (None:
        Slack has none); raises SendFailed if Slack cannot say (channels/slack/find.py).
        A reply through a slash command's response_url may have gone out privately
        (ephemeral), where no history shows it: it cannot be looked up."""
        if reply_to is not None and reply_to.extra.startswith(RESPONSE_URL_PREFIX):
            raise SendFailed("a private answer cannot be looked up")
        if self._reader is None:
            self._reader = reader(self.web)
        return await find_part(
            self._reader,
            thread,
            part,
            claimed_ms,
            bot_user_id=self._bot_user_id(),
            settle_secs=float(self.web.timeout) + 5.0,  # the dead request is over by then
        )

    def message_ids(self, ref: MessageRef) -> list[str]:
        """The Slack messages an answer occupies ('?': posted, ts unknown)."""
        if ref.extra.startswith(RESPONSE_URL_PREFIX):
            return [ref.message_id]
        return [ref.message_id, *(ref.extra.split(",") if ref.extra else [])]

    # -- Outbox ------------------------------------------------------------
    async def send(
        self, thread: ThreadKey, message: OutboundMessage, *, reply_to: MessageRef | None = None
    ) -> MessageRef:
        if message.edit_of is not None:
            return await self.edit(message.edit_of, message)
        channel = thread.conversation
        thread_ts = thread.thread or None
        if message.private_to:
            return await self._ephemeral(thread, message.private_to, message, reply_to)
        extra = reply_to.extra if reply_to is not None else ""
        if extra in self._ru_private:  # Parley is not a member there (seen this answer)
            return await self._send_private(thread, message, extra)
        try:
            try:
                sent = await self._post_all(channel, thread_ts, render(message))
            except FormattingRejected:
                # nothing is showing: the whole answer again, text only (buttons kept)
                log.warning("[%s] Slack refused the formatting; sending text only", thread)
                posts = [text_only(p) for p in render(message)]
                sent = await self._post_all(channel, thread_ts, posts)
            except SendFailed as exc:
                if _not_member(exc) and extra.startswith(RESPONSE_URL_PREFIX):
                    # /parley used where the bot is not a member: answer privately
                    if len(self._ru_private) > _MEMO_MAX:
                        self._ru_private.clear()
                    self._ru_private.add(extra)
                    return await self._send_private(thread, message, extra)
                raise
        except SendRateLimited as exc:
            if exc.partial_ref is not None:  # partly out: finished by an edit later
                await self._joined(thread, refusal=message.refusal)
            raise
        await self._joined(thread, refusal=message.refusal)
        return MessageRef(CHANNEL, channel, sent[0], thread=thread.thread, extra=",".join(sent[1:]))

    async def _joined(self, thread: ThreadKey, *, refusal: bool) -> None:
        """Parley takes part in the thread it answered in.  An answer in the channel's
        own conversation (/parley) is top level: the thread people may open under
        it is not one Parley joined (replies there need a mention, which starts
        that thread's own conversation; they would not continue the channel's).
        An access refusal (OutboundMessage.refusal: a stranger, someone too fast)
        is not taking part: the thread stays pending, and is forgotten when the
        turn ends (turn_finished).  Any other post, a notice included (an LLM
        error's "try again", a budget refusal, "Stopped."), is: the person's plain
        reply to it in the thread is a follow-up."""
        if thread.thread and not is_dm(thread.conversation):
            try:
                await self.state.remember(
                    join=(thread.tenant, thread.conversation, thread.thread), refusal=refusal
                )
            except Exception as exc:  # follow-ups without mention suffer, the answer is out
                log.warning(
                    "[%s] could not record the Slack thread: %s", thread, type(exc).__name__
                )

    async def _send_private(
        self, thread: ThreadKey, message: OutboundMessage, extra: str
    ) -> MessageRef:
        """``message`` shown privately through the response_url in ``extra`` (within
        its uses); its ref has the placeholder id PRIVATE_ID, so later edits (the
        final text of a streamed answer, a decided approval prompt) replace it."""
        await on_wire()  # the part's claim (a no-op after a refused chat.postMessage)
        await self._respond_within(extra, render(message))
        return MessageRef(
            CHANNEL, thread.conversation, PRIVATE_ID, thread=thread.thread, extra=extra
        )

    async def _post_all(
        self, channel: str, thread_ts: str | None, posts: list[SlackPost]
    ) -> list[str]:
        """Post ``posts`` in order; the timestamps posted (UNKNOWN_TS: posted, ts unknown).

        Until the head is out an error propagates (nothing was shown).  After it,
        the rest must follow (:meth:`_tail`).  Still rate limited: SendRateLimited
        with the messages out as ``partial_ref`` (the core records them, waits and
        finishes the answer by editing them, never reposting them).  Refused for
        good: what is out is returned, the last of it marked cut off (logged).
        """
        sent: list[str] = []
        part = current_part()
        for i, post in enumerate(posts):
            args: dict[str, Any] = {"thread_ts": thread_ts, "unfurl_links": False}
            if part is not None:  # how a rerun finds the part if its sender dies (find.py)
                args["metadata"] = part_metadata(part, i)
            if not sent:
                resp = await self._call_waiting(
                    "chat.postMessage", channel, **args, **post.kwargs()
                )
                assert resp is not None
                sent.append(str(resp["ts"]))
                wire_created()  # the head is showing: the claim stays whatever follows
                continue
            try:
                sent.append(await self._tail("chat.postMessage", channel, post, args))
            except SendRateLimited as exc:
                # Still limited after _TAIL_MAX_WAIT: the core records what is out,
                # waits as long as Slack asks and finishes the answer by editing it
                # (ChannelError.partial_ref), never posting these messages again.
                log.warning(
                    "Slack answer rate limited after %d of %d messages; finished later",
                    i,
                    len(posts),
                )
                exc.partial_ref = MessageRef(
                    CHANNEL, channel, sent[0], thread=thread_ts or "", extra=",".join(sent[1:])
                )
                raise
            except ChannelError as exc:
                log.error("Slack answer cut after %d of %d messages: %s", i, len(posts), exc)
                await self._mark_cut(channel, sent[-1], posts[i - 1])
                break
        return sent

    async def _mark_cut(self, channel: str, ts: str, post: SlackPost) -> None:
        """End the last message written of an answer Slack refused the rest of with
        a "cut off" line, so the user does not take it for the whole (best effort)."""
        if ts == UNKNOWN_TS:
            return
        try:
            await self._call_waiting(
                "chat.update", channel, ts=ts, **_cut_off(post).kwargs(update=True)
            )
        except ChannelError as exc:
            log.warning("could not mark a cut Slack answer: %s", exc)

    async def _call_waiting(
        self, method: str, channel: str, **kwargs: Any
    ) -> AsyncSlackResponse | None:
        """:meth:`_call` for a message the answer needs (not a droppable preview):
        a 429 is waited out (its Retry-After) and the call made again, up to
        ``_TAIL_MAX_WAIT`` of waiting in all, then SendRateLimited.  The calls go
        through the client without slack_sdk's rate-limit handler: this count is
        the only wait (the SDK's would sleep and resend inside each call, uncounted
        and past the channel's shared pace), so Retry-After 30 means 3 requests and
        60 s.  chat.update is limited per workspace (~50 a minute, every
        conversation together), so a busy workspace 429s a final edit readily.  A
        post gives its part claim back during the wait (nothing was created) and
        claims again before the next try."""
        waited = 0.0
        while True:
            try:
                return await self._call(method, channel, sdk_waits=False, **kwargs)
            except SendRateLimited as exc:
                wait = max(exc.retry_after, 1.0)  # a Retry-After of 0 must not spin
                waited += wait
                if waited > _TAIL_MAX_WAIT:
                    raise
                log.info("Slack %s rate limited; trying again in %.0f s", method, wait)
                if method == "chat.postMessage":
                    try:
                        await wire_retry()  # no-op once a message of the part exists
                    except RedisError:
                        log.warning("could not take back a part claim (claimed again)")
                # the channel's pace is paused as long (all processes); this
                # process sleeps it too, pacing on or off (off the turn's clock)
                await _pause(wait)

    async def _tail(self, method: str, channel: str, post: SlackPost, args: dict[str, Any]) -> str:
        """One message after the head of a multi-message answer (its ts, or UNKNOWN_TS).

        The head is already showing, so the rest must follow: a refused format is
        sent again as text only, a rate limit is waited out (:meth:`_call_waiting`),
        a request whose answer was lost counts as posted (never repeated).
        """
        plain = False
        update = method == "chat.update"
        while True:
            try:
                resp = await self._call_waiting(
                    method, channel, **args, **post.kwargs(update=update)
                )
                return str(resp["ts"]) if resp is not None else UNKNOWN_TS
            except FormattingRejected:
                if plain:
                    raise
                log.warning("Slack refused the formatting of a later message; text only")
                post, plain = text_only(post), True
            except SendUnconfirmed:
                return str(args.get("ts", UNKNOWN_TS))

    async def _ephemeral(
        self, thread: ThreadKey, user: str, message: OutboundMessage, reply_to: MessageRef | None
    ) -> MessageRef:
        """A notice only ``user`` sees: chat.postEphemeral, or where Parley is not a
        member, the response_url of the /parley command (or button press) it answers."""
        extra = reply_to.extra if reply_to is not None else ""
        posts = render(message)
        for i, post in enumerate(posts):
            if extra in self._ru_private:  # Parley is not a member there (seen before)
                await self._respond_within(extra, posts[i:])
                break
            try:
                await self._call(
                    "chat.postEphemeral",
                    thread.conversation,
                    user=user,
                    thread_ts=thread.thread or None,
                    **post.kwargs(),
                )
            except SendFailed as exc:
                if not (_not_member(exc) and extra.startswith(RESPONSE_URL_PREFIX)):
                    raise
                await self._respond_within(extra, posts[i:])
                break
        # ephemeral messages cannot be edited through chat.update: no message id (a
        # notice is never edited; through a response_url it could only replace the
        # latest private message, which may be another one)
        return MessageRef(CHANNEL, thread.conversation, "", thread=thread.thread, extra="")

    async def edit(self, ref: MessageRef, message: OutboundMessage) -> MessageRef:
        if ref.extra.startswith(RESPONSE_URL_PREFIX):
            if message.final:  # response_url allows few uses: only final text
                await self._respond_all(ref.extra, render(message))
            return ref
        if not ref.message_id:
            return ref  # ephemeral: nothing to edit
        if not message.final:
            return await self._preview(ref, message)
        try:
            return await self._replace(ref, render(message))
        except FormattingRejected:
            log.warning("Slack refused the formatting of an edit; sending text only")
            return await self._replace(ref, [text_only(p) for p in render(message)])

    async def _preview(self, ref: MessageRef, message: OutboundMessage) -> MessageRef:
        now = time.monotonic()
        if now < self._previews_quiet_until:
            edit_skipped()  # the core edits again once it may (a catch-up edit)
            return ref  # a streamed edit was rate-limited: skip until its Retry-After
        last = self._last_edit.get(ref.message_id, 0.0)
        if self.stream_interval and now - last < self.stream_interval * 0.9:
            edit_skipped()
            return ref
        post = render_preview(message)
        try:
            resp = await self._call(
                "chat.update",
                ref.conversation,
                droppable=True,
                ts=ref.message_id,
                **post.kwargs(update=True),
            )
        except ChannelError as exc:
            log.debug("streamed Slack edit skipped: %s", exc)
            edit_skipped()
            return ref
        if resp is None:
            edit_skipped()  # no pacing slot, a 429 or a timeout: skipped
        else:
            if len(self._last_edit) > _MEMO_MAX:
                self._last_edit.clear()
            self._last_edit[ref.message_id] = now
        return ref

    async def _replace(self, ref: MessageRef, posts: list[SlackPost]) -> MessageRef:
        """Make the answer's messages show ``posts``: update those that exist, post
        the missing ones, delete the surplus.  UNKNOWN_TS stands for a message
        posted with an unknown ts (not editable).  After the head, a message still
        rate limited raises SendRateLimited with the messages the answer is now as
        ``partial_ref`` (the core waits and edits again from them); one refused for
        good stops the edit, marks the last message written cut off and keeps the
        rest as they are (logged)."""
        existing = [ref.message_id, *(ref.extra.split(",") if ref.extra else [])]
        tss: list[str] = []
        for i, post in enumerate(posts):
            if i < len(existing):
                args: dict[str, Any] = {"ts": existing[i]}
                method = "chat.update"
                if existing[i] == UNKNOWN_TS:
                    tss.append(UNKNOWN_TS)
                    continue
            else:
                args = {"thread_ts": ref.thread or None, "unfurl_links": False}
                method = "chat.postMessage"
            if i == 0:  # the final text's head: waited out, never skipped
                await self._call_waiting(
                    method, ref.conversation, **args, **post.kwargs(update=method == "chat.update")
                )
                tss.append(existing[0])
                continue
            try:
                tss.append(await self._tail(method, ref.conversation, post, args))
            except SendRateLimited as exc:
                # Still limited after _TAIL_MAX_WAIT: the core records the messages
                # the answer is now (ChannelError.partial_ref), waits as long as
                # Slack asks and makes the edit again from them (nothing posted twice).
                log.warning(
                    "Slack edit rate limited at message %d of %d; finished later",
                    i + 1,
                    len(posts),
                )
                shown = tss + existing[i:]
                exc.partial_ref = MessageRef(
                    CHANNEL,
                    ref.conversation,
                    shown[0],
                    thread=ref.thread,
                    extra=",".join(shown[1:]),
                )
                raise
            except ChannelError as exc:
                log.error("Slack edit cut at message %d of %d: %s", i + 1, len(posts), exc)
                await self._mark_cut(ref.conversation, tss[-1], posts[i - 1])
                tss.extend(existing[i:])
                break
        for ts in existing[len(tss) :]:
            if ts == UNKNOWN_TS:
                continue
            try:
                await self._call("chat.delete", ref.conversation, ts=ts)
            except ChannelError as exc:
                log.info("could not delete a surplus Slack message: %s", exc)
        self._last_edit.pop(ref.message_id, None)
        return MessageRef(
            CHANNEL, ref.conversation, tss[0], thread=ref.thread, extra=",".join(tss[1:])
        )

    async def typing(self, thread: ThreadKey) -> None:
        """Put the working reaction on the thread's newest message (once a turn).

        Never waits in the turn: reactions.add goes through the client without the
        rate-limit handler, and a 429 skips it; the record is dropped so that a
        later call (the turn calls this every few seconds) puts it on once the
        Retry-After is over, which this process's reactions.add calls wait for."""
        if not self.reaction or time.monotonic() < self._reactions_quiet_until:
            return
        target: tuple[str, str] | None = None
        try:
            target = await self.state.last_message(thread)
            # recorded in Redis first: whoever ends the turn takes off every reaction
            # put on (a message merged into the running turn is the thread's newest)
            if target is None or not await self.state.reacting(thread, target):
                return  # put on already in this turn (by any worker)
            await self._web_no_wait.reactions_add(
                channel=target[0], timestamp=target[1], name=self.reaction
            )
        except SlackApiError as exc:
            if _rate_limited(exc):
                self._reactions_quiet_until = time.monotonic() + _retry_after(exc)
                log.debug("[%s] Slack working reaction rate limited; later", thread)
                if target is not None:
                    with contextlib.suppress(Exception):  # else this turn goes without
                        await self.state.not_reacting(thread, target)
                return
            if exc.response is None or exc.response.get("error") != "already_reacted":
                log.debug(
                    "[%s] Slack working reaction failed: %s",
                    thread,
                    exc.response.get("error") if exc.response else exc,
                )
        except Exception as exc:  # an indicator never breaks a turn
            log.debug("[%s] Slack working reaction failed: %s", thread, type(exc).__name__)

    async def turn_finished(self, thread: ThreadKey, event: InboundEvent | None) -> None:
        """Take the working reaction off the turn's message and off every other
        message it was put on during the turn (messages merged into it).

        Runs in the turn's end, under the thread's lock: never waits out a 429.
        Those Slack refuses so are taken off in the background after the
        Retry-After (:meth:`_unreact_later`).

        A channel thread that only ``event`` brought Parley into and where it posted
        nothing but an access refusal (or nothing at all) is no longer followed."""
        await self._forget_unanswered(thread, event)
        if not self.reaction:
            return
        targets: list[tuple[str, str]] = []
        try:
            if (
                event is not None
                and event.kind != EventKind.ACTION
                and event.reply_ref
                and event.reply_ref.message_id
            ):
                targets.append((event.reply_ref.conversation, event.reply_ref.message_id))
            else:
                last = await self.state.last_message(thread)
                if last is not None:
                    targets.append(last)
            targets += [t for t in await self.state.take_reacted(thread) if t not in targets]
        except Exception as exc:  # Redis: the head's reaction still goes
            log.debug("[%s] reading the Slack reactions failed: %s", thread, type(exc).__name__)
        for i, target in enumerate(targets):
            retry_after = await self._unreact(thread, target)
            if retry_after is not None:  # the rest would be refused too: all later
                self._unreact_later(thread, targets[i:], retry_after)
                return

    async def _forget_unanswered(self, thread: ThreadKey, event: InboundEvent | None) -> None:
        if event is None or not thread.thread or is_dm(thread.conversation):
            return
        try:
            if await self.state.forget_pending(
                (thread.tenant, thread.conversation, thread.thread), event.event_id
            ):
                log.info("[%s] not answered there: the thread is not followed", thread)
        except Exception as exc:  # the thread stays followed until its TTL
            log.debug("[%s] could not forget the Slack thread: %s", thread, type(exc).__name__)

    async def _unreact(self, thread: ThreadKey, target: tuple[str, str]) -> float | None:
        """reactions.remove, never waited out: the Retry-After of a 429, else None."""
        try:
            await self._web_no_wait.reactions_remove(
                channel=target[0], timestamp=target[1], name=self.reaction
            )
        except SlackApiError as exc:
            if _rate_limited(exc):
                return _retry_after(exc)
            if exc.response is None or exc.response.get("error") != "no_reaction":
                log.debug(
                    "[%s] removing the Slack reaction failed: %s",
                    thread,
                    exc.response.get("error") if exc.response else exc,
                )
        except Exception as exc:
            log.debug("[%s] removing the Slack reaction failed: %s", thread, type(exc).__name__)
        return None

    def _unreact_later(
        self, thread: ThreadKey, targets: list[tuple[str, str]], retry_after: float
    ) -> None:
        task = asyncio.create_task(self._unreact_retrying(thread, targets, retry_after))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _unreact_retrying(
        self, thread: ThreadKey, targets: list[tuple[str, str]], retry_after: float
    ) -> None:
        """Reactions a 429 kept on, taken off after its Retry-After (off the turn):
        up to ``_UNREACT_TRIES`` more tries, ``_UNREACT_MAX_WAIT`` of waiting in all.
        A message a newer turn of the thread put the reaction on again is left to
        that turn's end."""
        waited = 0.0
        for _ in range(_UNREACT_TRIES):
            wait = max(retry_after, 1.0)
            waited += wait
            if waited > _UNREACT_MAX_WAIT:
                break
            await _pause(wait)
            try:
                again = await self.state.reacted(thread)
            except Exception:  # Redis: take them off all the same
                again = set()
            left = [t for t in targets if t not in again]
            targets = []
            for i, target in enumerate(left):
                later = await self._unreact(thread, target)
                if later is not None:
                    targets, retry_after = left[i:], later
                    break
            if not targets:
                return
        log.info(
            "[%s] Slack kept rate limiting reactions.remove: the working reaction stays "
            "on %d message(s)",
            thread,
            len(targets),
        )

    def close(self) -> None:
        """Stop the reactions still waiting to be taken off (the process ends)."""
        for task in list(self._background):
            task.cancel()

    async def user_display_name(self, user_id: str) -> str:
        """A person's display name (NameResolver): users.info, cached an hour."""
        return await self._names.name(user_id)

    async def name_mentions(self, text: str) -> str:
        """``text`` with mentioned people's names (MentionNamer): users.info, cached."""
        return await self._names.mentions(text)

    async def complete_attachments(
        self, attachments: tuple[Attachment, ...]
    ) -> tuple[Attachment, ...]:
        """Files Slack sent as their id only (Slack Connect), looked up with
        files.info (AttachmentCompleter; channels/slack/files.py)."""
        return await complete(self.web, attachments)

    async def fetch_attachment(self, attachment: Attachment, max_bytes: int) -> bytes:
        """A user's file for the agent (AttachmentFetcher), at most ``max_bytes``;
        SendFailed with the reason otherwise (the bot token goes to Slack's file
        host only)."""
        return await self._files.fetch(attachment, max_bytes)

    async def answer_action(self, event: InboundEvent, text: str) -> None:
        """A private notice to whoever pressed a button (chat.postEphemeral)."""
        if not text:
            return  # the press was acked when it arrived; nothing to say
        post = SlackPost(text=to_mrkdwn(text))
        ref = event.reply_ref
        try:
            if ref is not None and ref.extra.startswith(RESPONSE_URL_PREFIX):
                await self._respond(ref.extra, post, replace=False)
                return
            await self._call(
                "chat.postEphemeral",
                event.thread.conversation,
                user=event.user_id,
                text=post.text,
                thread_ts=event.thread.thread or None,
            )
        except ChannelError as exc:
            log.warning("[%s] could not answer the button press: %s", event.thread, exc)


def _not_member(exc: ChannelError) -> bool:
    """Whether Slack refused because Parley is not in the conversation."""
    cause = exc.__cause__
    if isinstance(cause, SlackApiError) and cause.response is not None:
        return str(cause.response.get("error", "")) in _NOT_MEMBER
    return False


def _cut_off(post: SlackPost) -> SlackPost:
    """``post`` ending with a line saying the answer was cut off there."""
    note: dict[str, Any] = {"type": "context", "elements": [{"type": "mrkdwn", "text": _CUT_OFF}]}
    blocks = [*post.blocks[:49], note] if post.blocks else []
    return SlackPost(f"{post.text}\n\n{_CUT_OFF}", blocks)


def _cut_note(post: SlackPost) -> SlackPost:
    """``post`` ending with a note that the answer stops there."""
    note: dict[str, Any] = {"type": "context", "elements": [{"type": "mrkdwn", "text": _CUT_NOTE}]}
    blocks = [*post.blocks[:49], note] if post.blocks else []
    return SlackPost(f"{post.text}\n\n{_CUT_NOTE}", blocks)
