"""The gateway process: discord.py's AutoShardedClient feeding Ingest.

* MESSAGE_CREATE payloads are taken raw (before discord.py builds objects) and
  handled in arrival order by one consumer task: parse -> (auto-thread, only for
  a message addressed to the bot) -> ``Ingest.submit`` -> remember the last seen
  message id of the conversation.  The bot's managed role in the guild (from
  discord.py's guild cache, kept current by GUILD_ROLE_* events) counts as a
  mention of the bot.
* Slash commands (INTERACTION_CREATE type 2) are taken raw too, each in its
  own task: published as the message ``/<name> <text>`` addressed to the bot
  in that channel (never opening a thread), then answered within Discord's 3 s
  with an echo of the invocation (see :mod:`channels.discord.commands`).
* Button presses reach :class:`ApprovalButton`, a persistent
  ``DynamicItem`` matching ``parley:<payload>``, so a press on a prompt sent
  before any restart still works.  The press is published, then deferred
  (DEFERRED_UPDATE_MESSAGE) well within Discord's 3 s.
* After every READY (a fresh IDENTIFY: start-up or a reconnect that could not
  resume) the conversations active recently are re-read from their last seen
  message over REST and published; Ingest's dedup makes overlaps harmless.
  Those last seen marks are read at READY, in the consumer's order, before any
  message of the new session is handled (which moves them forward): the catch-up
  itself starts later (after the guild-ready wait) from that snapshot.
* Under the gateway lease, a message is handled only while the lease is surely
  this process's (``valid``, no Redis): one that arrives after a pause longer than
  the lease (another process has taken the gateway over) is dropped, its last seen
  mark left alone; the new holder's own session receives it (or its catch-up
  does).  Interactions are not dropped: Discord sends each to one session only
  and never again, and Ingest's dedup covers an overlap.
* Redis refusing a message (down, failing over, the inbox full) holds the queue:
  the message is retried for as long as the lease is ours, with no time limit,
  and the conversation's later messages wait behind it.  Giving up would lose it
  for good: the next message would move the last seen mark past it.
* At a stop (a deploy's SIGTERM, the lease lost, the connection closed), what the
  session received is still handled for up to ``STOP_DRAIN_SECS`` while the lease
  is ours, before the connection closes: Discord would not send it again (the next
  process IDENTIFYs; only a RESUME replays).  A message still unhandled then has
  its conversation marked active with its last seen mark set back to just before
  it, so the next session's catch-up re-reads it, a first message (a new DM, a
  first mention) too.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import re
import time
from collections.abc import Callable
from typing import Any, cast

import aiohttp
import discord
from discord.http import Route
from redis.exceptions import RedisError

from agent_core.errors import StoreUnavailable
from agent_core.events import InboundEvent, MessageRef, ThreadKey
from agent_core.ingest import Ingest, Submitted
from channels.mentions import BARE_MENTION_TEXT

from .commands import (
    FAILED_COMMAND_TEXT,
    REFUSED_COMMAND_TEXT,
    echo,
    private,
    refusal,
    respond,
)
from .http import ParleyHTTPClient
from .parse import (
    APPLICATION_COMMAND,
    CHANNEL,
    MessageContext,
    Press,
    RawInteraction,
    RawMessage,
    addressed_in_server,
    interaction_thread_parent,
    parse_command,
    parse_message,
    parse_press,
)
from .render import CUSTOM_ID_TEMPLATE, NO_MENTIONS, custom_id
from .settings import DiscordSettings, parse_shards
from .state import DiscordState, newer

log = logging.getLogger(__name__)

# (channel id, last seen message id, guild id, parent id) of the conversations to
# catch up, read at a READY; None when they could not be read
Marks = asyncio.Future[list[tuple[str, str, str, str]] | None]

PRESS_SUBMIT_TIMEOUT = 2.0  # the deferral must reach Discord within 3 s
# A message Redis refuses is retried while the lease is ours, with no time limit:
# first after SUBMIT_FIRST_DELAY, then twice as long each time up to SUBMIT_MAX_DELAY;
# one warning at the first failure and then one every SUBMIT_WARN_EVERY.
SUBMIT_FIRST_DELAY = 0.2
SUBMIT_MAX_DELAY = 5.0
SUBMIT_WARN_EVERY = 30.0
# At a stop: how long what was received is still handled (within the 2.4 s a lost
# lease leaves, and well within a deploy's shutdown), then how long marking what is
# left for the next catch-up may take.
STOP_DRAIN_SECS = 2.0
STOP_MARK_SECS = 1.0
# Without the Message Content intent, a reply to the bot sent with Discord's "@" toggle
# off arrives with no text: the sender is told (at most once per channel this often).
UNREADABLE_TEXT = (
    "I can't read replies that don't @mention me here: keep the @ on when you reply, or mention me."
)
UNREADABLE_NOTICE_SECS = 600.0
FAILED_PRESS_TEXT = "Sorry, I could not record that just now. Please press again in a moment."
# What one REST call through discord.py can raise when Discord or the connection
# fails: its own errors (RateLimited included), and aiohttp's, which its
# HTTPClient lets through unless they are OSErrors (ServerDisconnectedError, a
# payload cut short).  TimeoutError is an OSError.
REST_ERRORS = (discord.DiscordException, aiohttp.ClientError, OSError)


def gateway_intents(message_content: bool) -> discord.Intents:
    intents = discord.Intents.none()
    intents.guilds = True
    intents.guild_messages = True
    intents.dm_messages = True
    intents.message_content = message_content
    return intents


class ApprovalButton(
    discord.ui.DynamicItem[discord.ui.Button[Any]],
    template=re.compile(CUSTOM_ID_TEMPLATE),
):
    """Any ``parley:<payload>`` button, whenever it was sent."""

    def __init__(self, payload: str) -> None:
        super().__init__(discord.ui.Button(custom_id=custom_id(payload)))
        self.payload = payload

    @classmethod
    async def from_custom_id(
        cls,
        interaction: discord.Interaction[Any],
        item: discord.ui.Item[Any],
        match: re.Match[str],
    ) -> ApprovalButton:
        return cls(match["payload"])

    async def callback(self, interaction: discord.Interaction[Any]) -> None:
        client = interaction.client
        if isinstance(client, GatewayClient):
            await client.on_press(interaction, self.payload)


class GatewayClient(discord.AutoShardedClient):
    def __init__(
        self,
        settings: DiscordSettings,
        ingest: Ingest,
        state: DiscordState,
        *,
        group_reply: str,
        message_content: bool,
        command_names: Callable[[], frozenset[str] | None] = lambda: None,
        valid: Callable[[], bool] = lambda: True,
    ) -> None:
        # Parley never joins voice: discord.py's warnings that voice libraries are
        # missing would only puzzle whoever reads the log
        discord.VoiceClient.warn_nacl = discord.VoiceClient.warn_dave = False
        shard_ids, shard_count = parse_shards(settings.discord_shards)
        options: dict[str, Any] = {"shard_count": shard_count}
        if shard_ids is not None:
            options["shard_ids"] = shard_ids
        super().__init__(
            intents=gateway_intents(message_content),
            guild_ready_timeout=settings.discord_guild_ready_timeout,
            chunk_guilds_at_startup=False,
            member_cache_flags=discord.MemberCacheFlags.none(),
            max_messages=None,
            **options,
        )
        # Our REST client (API base / gateway URL from the settings), replacing the
        # one discord.py built, before anything used it.
        self.http = ParleyHTTPClient(
            self.loop,
            api_base=settings.discord_api_base_url,
            gateway_url=settings.discord_gateway_url,
            max_ratelimit_timeout=settings.discord_max_retry_wait,
            request_timeout=settings.discord_http_timeout,
        )
        self._connection.http = self.http
        self.settings = settings
        self.ingest = ingest
        self.state = state
        self.group_reply = group_reply
        self.message_content = message_content
        self._unreadable_at: dict[str, float] = {}  # channel id -> last notice (monotonic)
        self.command_names = command_names  # Parley's command names, once known
        self.valid = valid  # the gateway lease is still surely ours (see the module doc)
        # messages to handle, in order, and (at a READY) the future the consumer
        # fills with the catch-up marks before handling any later message
        self._queue: asyncio.Queue[tuple[RawMessage, str] | Marks] = asyncio.Queue()
        self._marks: dict[int, Marks] = {}  # shard id -> marks read at its last READY
        self._consumer: asyncio.Task[None] | None = None
        self._current: tuple[RawMessage, str] | None = None  # what the consumer handles
        self._tasks: set[asyncio.Task[Any]] = set()
        self._commands: set[asyncio.Task[Any]] = set()  # slash commands in flight
        self._draining = False
        self._tracked: set[str] = set()
        self.catchups = 0  # completed catch-up passes (tests, metrics)

    # --- lifecycle ------------------------------------------------------------

    async def setup_hook(self) -> None:
        self.add_dynamic_items(ApprovalButton)
        parsers: dict[str, Callable[[Any], None]] = self._connection.parsers
        original = parsers["MESSAGE_CREATE"]

        def message_create(data: Any) -> None:
            self._queue.put_nowait((data, ""))
            original(data)

        parsers["MESSAGE_CREATE"] = message_create
        ready = parsers["READY"]

        def ready_payload(data: Any) -> None:
            # before discord.py handles READY, so before any message of this session
            # A second READY before the first one's catch-up keeps the first marks:
            # what was said before the first session is still to be caught up.
            shard = _ready_shard(data)
            if shard not in self._marks:
                marks: Marks = asyncio.get_running_loop().create_future()
                self._marks[shard] = marks
                self._queue.put_nowait(marks)
            ready(data)

        parsers["READY"] = ready_payload
        interaction_create = parsers["INTERACTION_CREATE"]

        def interaction(data: Any) -> None:
            if data.get("type") == APPLICATION_COMMAND:
                # no CommandTree here: discord.py would only build an unused Interaction
                task = self._spawn(self.on_command(data), "discord-command")
                self._commands.add(task)
                task.add_done_callback(self._commands.discard)
            else:
                interaction_create(data)

        parsers["INTERACTION_CREATE"] = interaction
        await self.state.load()
        self._consumer = asyncio.create_task(self._consume(), name="discord-inbound")

    async def before_identify_hook(self, shard_id: int | None, *, initial: bool = False) -> None:
        if not initial:
            await asyncio.sleep(self.settings.discord_reidentify_delay)

    async def close(self) -> None:
        """Handle what was received (bounded, see :meth:`_drain`), close the
        connection, then mark what is left for the next catch-up."""
        try:
            if not self._draining:
                self._draining = True
                await self._drain(STOP_DRAIN_SECS)
        finally:
            # whatever happened above (cancelled: a lost lease's deadline), the
            # connection closes
            if self._consumer is not None:
                self._consumer.cancel()
                await asyncio.gather(self._consumer, return_exceptions=True)
            for task in list(self._tasks):
                task.cancel()
            await super().close()
        await self._mark_unhandled()

    async def _drain(self, within: float) -> None:
        """Let the consumer handle what this session received (and slash commands
        in flight finish) for at most ``within`` seconds, while the lease is ours.
        The connection is still open: what arrives meanwhile is handled too."""
        consumer = self._consumer
        if consumer is None or consumer.done() or not self.valid():
            return
        if self._queue.empty() and self._current is None and not self._commands:
            return
        joined = asyncio.ensure_future(self._queue.join())
        try:
            await asyncio.wait([joined, *self._commands], timeout=within)
            drained = joined.done()
        finally:
            joined.cancel()
        if not drained:
            log.warning(
                "discord: stopping with %d received message(s) not handled within %.0fs",
                self._queue.qsize() + (self._current is not None),
                within,
            )

    async def _mark_unhandled(self) -> None:
        """Messages received but not handled (left in the queue, or cancelled while
        being handled) when the connection closed: Discord will not send them
        again.  Each conversation they are for (a message Parley would answer) is
        marked active, its last seen mark set back to just before the first of
        them, so that the next session's catch-up re-reads them (Ingest's dedup
        drops what was published after all)."""
        items: list[tuple[RawMessage, str]] = []
        if self._current is not None:
            items.append(self._current)
            self._current = None
        while not self._queue.empty():
            item = self._queue.get_nowait()
            self._queue.task_done()
            if not isinstance(item, asyncio.Future):
                items.append(item)
        if not items:
            return
        if not self.valid():
            log.info(
                "discord: %d received message(s) not handled: the gateway lease is no longer "
                "ours (the new holder's session or catch-up has them)",
                len(items),
            )
            return
        marks: dict[str, tuple[str, str, str]] = {}  # channel -> (mark, guild, parent)
        for raw, parent_hint in items:
            mark = _before(raw.get("id"))
            channel_id = str(raw.get("channel_id") or "")
            if not mark or not channel_id:
                continue
            try:
                ctx = self._context(raw, parent_hint)
                if parse_message(raw, ctx) is None:
                    continue  # not for Parley: nothing to catch up
            except Exception:  # the consumer would have failed on it as well
                log.debug("discord: unhandled message %s not parsed", raw.get("id"), exc_info=True)
                continue
            known = marks.get(channel_id)
            if known is None or newer(known[0], mark):
                marks[channel_id] = (mark, str(raw.get("guild_id") or ""), ctx.thread_parent)
        if not marks:
            return
        try:
            await asyncio.wait_for(self.state.rewind(marks), STOP_MARK_SECS)
        except (TimeoutError, RedisError, OSError) as exc:
            log.error(
                "discord: %d received message(s) were not handled before the connection "
                "closed and could not be marked for the next catch-up (%s): only those in "
                "conversations it already follows will be read again",
                len(items),
                type(exc).__name__,
            )
            return
        log.warning(
            "discord: %d received message(s) not handled before the connection closed; "
            "%d conversation(s) marked for the next catch-up",
            len(items),
            len(marks),
        )

    def _spawn(self, coro: Any, name: str) -> asyncio.Task[Any]:
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    @property
    def bot_id(self) -> str:
        return str(self.user.id) if self.user else ""

    # --- messages -------------------------------------------------------------

    async def _consume(self) -> None:
        while True:
            item = await self._queue.get()
            try:
                if isinstance(item, asyncio.Future):
                    await self._read_marks(item)
                    continue
                raw, parent_hint = item
                self._current = item  # left set if cancelled: see _mark_unhandled
                try:
                    await self._handle_message(raw, parent_hint)
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception(
                        "discord message %s in %s not handled",
                        raw.get("id"),
                        raw.get("channel_id"),
                    )
                self._current = None
            finally:
                self._queue.task_done()

    async def _read_marks(self, marks: Marks) -> None:
        """The catch-up's starting points, as they are at a READY (None: unreadable)."""
        try:
            found = await self.state.active_since(self.settings.discord_catchup_window_secs)
        except Exception:
            log.exception("discord catch-up: cannot read tracked conversations")
            found = None
        if not marks.done():
            marks.set_result(found)

    def _thread_parent(self, channel_id: str, guild_id: str) -> tuple[str, bool]:
        """(parent id, active) when ``channel_id`` is a Discord thread, else ("", False)."""
        if not guild_id:
            return "", False
        parent = self.state.threads.get(channel_id)
        if parent and self.state.thread_active(channel_id):
            return parent, True
        channel = self.get_channel(int(channel_id))
        if isinstance(channel, discord.Thread) and channel.parent_id:
            return str(channel.parent_id), channel.owner_id == (self.user.id if self.user else 0)
        return parent or "", False

    def _bot_roles(self, guild_id: str) -> frozenset[str]:
        """The bot's managed role in ``guild_id`` (``<@&id>`` is a mention of the bot)."""
        guild = self.get_guild(int(guild_id)) if guild_id else None
        role = guild.self_role if guild is not None else None
        return frozenset((str(role.id),)) if role is not None else frozenset()

    async def _handle_message(self, raw: RawMessage, parent_hint: str = "") -> None:
        channel_id = raw["channel_id"]
        if not self.valid():
            log.info(
                "discord message %s in %s dropped: the gateway lease is no longer ours",
                raw.get("id"),
                channel_id,
            )
            return
        guild_id = raw.get("guild_id", "")
        ctx = self._context(raw, parent_hint)
        parent = ctx.thread_parent
        event = parse_message(raw, ctx)
        if event is None:
            if not self.message_content and addressed_in_server(raw, ctx):
                self._unreadable(raw)
            if channel_id in self._tracked and not (raw.get("author") or {}).get("bot"):
                await self.state.seen(channel_id, raw["id"], guild_id, parent)
            return
        if parent and event.mentions_bot:
            await self._add_thread(channel_id, parent, event)
        elif not parent and guild_id and event.mentions_bot and self.settings.discord_auto_thread:
            # only a message addressed to the bot opens a thread (not, with
            # GROUP_REPLY=all, every message people write in the channel)
            event = await self._auto_thread(event, raw)
        if not await self._submit(event):
            return  # not published, not marked: the next holder's catch-up has it
        where = event.thread.thread or event.thread.conversation
        self._tracked.add(where)
        try:
            if where != channel_id and not parent:
                # a thread was opened on this message: the channel stays active too, so
                # a new mention there during a reconnect is caught up
                self._tracked.add(channel_id)
                await self.state.seen(channel_id, raw["id"], guild_id, "")
            # A thread opened on a message has that message's id, so the id works there.
            parent_of_where = event.thread.conversation if event.thread.thread else ""
            await self.state.seen(where, raw["id"], guild_id, parent_of_where)
        except RedisError as exc:
            # published: only the mark lags (a catch-up re-reads a little more)
            log.warning("[%s] event %s: last seen mark not recorded: %s", where, raw["id"], exc)

    def _context(self, raw: RawMessage, parent_hint: str = "") -> MessageContext:
        channel_id = raw["channel_id"]
        guild_id = raw.get("guild_id", "")
        parent, active = self._thread_parent(channel_id, guild_id)
        if not parent and parent_hint:
            parent, active = parent_hint, self.state.thread_active(channel_id)
        return MessageContext(
            bot_id=self.bot_id,
            group_reply=self.group_reply,
            thread_parent=parent,
            thread_active=active,
            bot_roles=self._bot_roles(guild_id),
        )

    async def _add_thread(self, thread_id: str, parent_id: str, event: InboundEvent) -> None:
        """Follow a thread; Redis failing does not cost the message (only the thread
        is not followed: a follow-up needs a mention)."""
        try:
            await self.state.add_thread(thread_id, parent_id)
        except RedisError as exc:
            log.warning("[%s] could not record thread %s: %s", event.thread, thread_id, exc)

    def _unreadable(self, raw: RawMessage) -> None:
        """A reply to the bot that arrived without its text (no Message Content
        intent, no @mention): tell the sender how to be read, and the operator why,
        at most once per channel every UNREADABLE_NOTICE_SECS."""
        channel_id = raw["channel_id"]
        now = time.monotonic()
        last = self._unreadable_at.get(channel_id)
        if last is not None and now - last < UNREADABLE_NOTICE_SECS:
            log.debug(
                "discord message %s in %s: no text (notice already sent)", raw["id"], channel_id
            )
            return
        if len(self._unreadable_at) > 10_000:
            self._unreadable_at.clear()
        self._unreadable_at[channel_id] = now
        log.warning(
            "discord message %s in %s: a reply to the bot arrived without its text (it does "
            "not @mention the bot and the Message Content intent is off); the sender is told "
            "to keep the @ on. Turn on the Message Content intent (developer portal, Bot) "
            "to read such replies",
            raw["id"],
            channel_id,
        )
        self._spawn(self._post_unreadable(channel_id, raw["id"]), "discord-unreadable")

    async def _post_unreadable(self, channel_id: str, message_id: str) -> None:
        body = {
            "content": UNREADABLE_TEXT,
            "message_reference": {"message_id": message_id, "fail_if_not_exists": False},
            "allowed_mentions": NO_MENTIONS,
        }
        route = Route("POST", "/channels/{channel_id}/messages", channel_id=channel_id)
        try:
            await self.http.request(route, json=body)
        except REST_ERRORS as exc:
            log.warning(
                "discord: could not post the unreadable-reply notice in %s: %s", channel_id, exc
            )

    async def _submit(self, event: InboundEvent) -> bool:
        """Publish ``event``, retried for as long as Redis refuses it and the lease
        is ours (no time limit: the conversation's later messages wait behind it).
        False when the lease is no longer surely ours: the message is left
        unmarked, for the next holder's catch-up."""
        loop = asyncio.get_running_loop()
        delay = SUBMIT_FIRST_DELAY
        started = loop.time()
        warned: float | None = None
        while True:
            try:
                await self.ingest.submit(event)
            except StoreUnavailable as exc:
                if not self.valid():
                    log.warning(
                        "[%s] event %s not published (%s) and the gateway lease is no longer "
                        "ours: left to the next holder's catch-up",
                        event.thread,
                        event.event_id,
                        exc,
                    )
                    return False
                now = loop.time()
                if warned is None or now - warned >= SUBMIT_WARN_EVERY:
                    warned = now
                    log.warning(
                        "[%s] event %s waits (%s) for %.0fs; retrying until Redis takes it "
                        "(this conversation's later messages wait behind it)",
                        event.thread,
                        event.event_id,
                        exc,
                        now - started,
                    )
                await asyncio.sleep(delay)
                delay = min(delay * 2, SUBMIT_MAX_DELAY)
                continue
            if warned is not None:
                log.info(
                    "[%s] event %s published after %.0fs",
                    event.thread,
                    event.event_id,
                    loop.time() - started,
                )
            return True

    async def _auto_thread(self, event: InboundEvent, raw: RawMessage) -> InboundEvent:
        channel_id = raw["channel_id"]
        # a bare "@Parley" reaches the agent as a placeholder, not a title
        text = "" if event.text == BARE_MENTION_TEXT else event.text
        first_line = text.split("\n", 1)[0].strip() or "Parley"
        name = self.settings.discord_thread_name.replace("{text}", first_line)[:100] or "Parley"
        try:
            data = await self.http.start_thread_with_message(
                channel_id,
                raw["id"],
                name=name,
                auto_archive_duration=self.settings.discord_thread_archive_minutes,  # type: ignore[arg-type]
            )
        except REST_ERRORS as exc:
            log.warning(
                "[%s] could not open a thread (%s); answering in the channel", event.thread, exc
            )
            return event
        thread_id = str(data["id"])
        await self._add_thread(thread_id, channel_id, event)
        key = ThreadKey(CHANNEL, event.thread.tenant, channel_id, thread_id)
        ref = MessageRef(CHANNEL, channel_id, raw["id"], thread_id)
        return dataclasses.replace(event, thread=key, reply_ref=ref)

    # --- presses --------------------------------------------------------------

    async def on_press(self, interaction: discord.Interaction[Any], payload: str) -> None:
        channel_id = str(interaction.channel_id or "")
        guild_id = str(interaction.guild_id or "")
        # a Discord thread's parent, from the interaction's own channel (discord.py
        # builds a Thread from the payload even when the thread is not in its cache,
        # e.g. an archived one), as for a slash command; else what the cache knows
        channel = interaction.channel
        parent = ""
        if guild_id and isinstance(channel, discord.Thread) and channel.parent_id:
            parent = str(channel.parent_id)
        parent = parent or self._thread_parent(channel_id, guild_id)[0]
        user = interaction.user
        press = Press(
            interaction_id=str(interaction.id),
            application_id=str(interaction.application_id),
            token=interaction.token,
            payload=payload,
            user_id=str(user.id),
            user_name=user.display_name,  # a Member's: the server nickname, as for messages
            channel_id=channel_id,
            message_id=str(interaction.message.id) if interaction.message else "",
            guild_id=guild_id,
            thread_parent=parent,
        )
        event = parse_press(press)
        try:
            await asyncio.wait_for(self.ingest.submit(event), PRESS_SUBMIT_TIMEOUT)
            body: dict[str, Any] = {"type": 6}  # DEFERRED_UPDATE_MESSAGE: no visible change
        except (TimeoutError, StoreUnavailable):
            log.error("[%s] press %s not recorded: Redis unavailable", event.thread, event.event_id)
            body = {"type": 4, "data": {"content": FAILED_PRESS_TEXT, "flags": 64}}
        try:  # not held by a global 429 discord.py is sleeping out (see ParleyHTTPClient)
            await self.http.interaction_callback(press.interaction_id, press.token, body)
        except REST_ERRORS as exc:
            log.warning("[%s] could not defer press %s: %s", event.thread, event.event_id, exc)

    # --- slash commands -------------------------------------------------------

    async def on_command(self, raw: RawInteraction) -> None:
        try:
            await self._on_command(raw)
        except Exception:  # its own task: nothing above it would log or answer
            log.exception("slash command %s failed", raw.get("id"))

    async def _on_command(self, raw: RawInteraction) -> None:
        """Publish a slash command like a message addressed to the bot in its
        channel (a Discord thread's own conversation; no auto-thread), then answer
        the interaction: an echo when published, else a private explanation."""
        channel_id = str(raw.get("channel_id") or "")
        guild_id = str(raw.get("guild_id") or "")
        parent = interaction_thread_parent(raw) or self._thread_parent(channel_id, guild_id)[0]
        event = parse_command(raw, thread_parent=parent)
        why = refusal(raw, self.command_names())
        where = event.thread if event is not None else channel_id
        published = False
        if event is None or why is not None:
            body = private(why or REFUSED_COMMAND_TEXT)
        else:
            try:
                result = await asyncio.wait_for(self.ingest.submit(event), PRESS_SUBMIT_TIMEOUT)
                published = result != Submitted.REFUSED
                body = echo(event.text) if published else private(REFUSED_COMMAND_TEXT)
            except (TimeoutError, StoreUnavailable):
                log.error("[%s] command %s not recorded: Redis unavailable", where, raw["id"])
                body = private(FAILED_COMMAND_TEXT)
        await respond(self.http, raw, body, where)
        if published and event is not None and event.thread.thread:
            try:  # follow-ups in the Discord thread need no mention, as after a mention
                await self.state.add_thread(channel_id, parent)
            except RedisError as exc:
                log.warning("[%s] could not record thread %s: %s", where, channel_id, exc)

    # --- catch-up -------------------------------------------------------------

    async def on_shard_ready(self, shard_id: int) -> None:
        self._spawn(self.catch_up(shard_id), f"discord-catchup-{shard_id}")

    def _owns(self, guild_id: str, shard_id: int) -> bool:
        count = self.shard_count or 1
        if not guild_id:
            return shard_id == 0
        return (int(guild_id) >> 22) % count == shard_id

    async def catch_up(self, shard_id: int) -> None:
        """Publish what was said in active conversations while we were away, from
        the marks read at this shard's READY (see :meth:`_read_marks`)."""
        marks = self._marks.pop(shard_id, None)
        if marks is None:  # no READY seen (cannot happen): read them now
            marks = asyncio.get_running_loop().create_future()
            await self._read_marks(marks)
        conversations = await marks
        if conversations is None:
            return
        found = 0
        for channel_id, last_id, guild_id, parent in conversations:
            if not self._owns(guild_id, shard_id):
                continue
            self._tracked.add(channel_id)
            try:
                messages, skipped = await self._fetch_recent(channel_id, last_id)
            except REST_ERRORS as exc:
                log.warning("discord catch-up: cannot read channel %s: %s", channel_id, exc)
                continue
            if skipped:
                log.warning(
                    "discord catch-up: channel %s had more than %d new messages; the newest "
                    "%d are re-read, %s older one(s) skipped",
                    channel_id,
                    len(messages),
                    len(messages),
                    f"at least {skipped}" if skipped >= 100 else skipped,
                )
            for raw in messages:
                if guild_id:
                    raw["guild_id"] = guild_id
                self._queue.put_nowait((raw, parent))
                found += 1
        if found:
            log.info(
                "discord catch-up (shard %s): %d message(s) re-read after reconnect",
                shard_id,
                found,
            )
        self.catchups += 1

    async def _fetch_recent(self, channel_id: str, after: str) -> tuple[list[RawMessage], int]:
        """The newest DISCORD_CATCHUP_MAX_MESSAGES messages of ``channel_id`` newer
        than ``after``, oldest first, and how many newer than ``after`` were left
        out before them (counted on one more page: 100 means "100 or more").

        Read from the newest backwards: when more was said during the outage than
        is re-read, the recent messages (what people still wait for) are answered.
        """
        out: list[RawMessage] = []
        limit = self.settings.discord_catchup_max_messages
        before: str | None = None
        while True:
            room = limit - len(out)
            want = min(100, room) if room > 0 else 100
            page: list[Any] = await self.http.logs_from(channel_id, want, before=before)
            newer = sorted(
                (m for m in page if _snowflake(m["id"]) > _snowflake(after)),
                key=lambda m: _snowflake(m["id"]),
            )
            if room <= 0:
                return out, len(newer)  # the page beyond the limit: what is skipped
            out[:0] = cast(list[RawMessage], newer)
            if len(newer) < len(page) or len(page) < want:
                return out, 0  # reached ``after`` (or the channel's first message)
            before = str(newer[0]["id"])


def _ready_shard(data: Any) -> int:
    shard = data.get("shard") if isinstance(data, dict) else None
    return int(shard[0]) if shard else 0


def _before(message_id: Any) -> str:
    """The snowflake right before ``message_id`` ("" if it is not one): a last seen
    mark from which a catch-up reads ``message_id`` again."""
    text = str(message_id or "")
    return str(int(text) - 1) if text.isdigit() and int(text) > 0 else ""


def _snowflake(message_id: Any) -> tuple[int, str]:
    text = str(message_id or "")
    return len(text), text


async def wait_first(*aws: Any) -> None:
    tasks = [asyncio.ensure_future(a) for a in aws]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for t in done:
            t.result()
    finally:
        for t in tasks:
            t.cancel()
            with contextlib.suppress(BaseException):
                await t
