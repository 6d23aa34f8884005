"""TelegramChannel: the Bot, the webhook route, the poller and the outbox, wired."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import re
from collections.abc import Sequence

import orjson
from starlette.routing import BaseRoute, Route
from telegram import Bot, BotCommand
from telegram.error import InvalidToken, NetworkError, RetryAfter, TelegramError

from agent_core.errors import ConfigError
from agent_core.events import Attachment
from agent_core.ingest import Ingest
from agent_core.store import keys
from agent_core.store.client import redact_url
from channels.base import Channel, ChannelDeps
from channels.telegram.aiohttp_request import AiohttpRequest
from channels.telegram.parse import CHANNEL, ParseContext
from channels.telegram.polling import Poller
from channels.telegram.sender import Limits, TelegramOutbox
from channels.telegram.settings import MIN_WEBHOOK_SECRET_CHARS, TelegramSettings
from channels.telegram.webhook import PATH, make_endpoint

log = logging.getLogger(__name__)

_COMMAND_NAME = re.compile(r"[a-z0-9_]{1,32}")
MAX_MENU = 100  # Telegram's limit on a bot's command list


def menu_commands(commands: Sequence[tuple[str, str, str]]) -> list[tuple[str, str]]:
    """What Telegram accepts of (name, description): names of 1-32 lower-case
    letters, digits and underscores; descriptions of 1-256 characters."""
    out: list[tuple[str, str]] = []
    for name, help_, _usage in commands:
        if not _COMMAND_NAME.fullmatch(name):
            continue
        text = " ".join(help_.split()) or name
        out.append((name, (text[:1].upper() + text[1:])[:256]))
    return out[:MAX_MENU]


def make_bot(settings: TelegramSettings, *, pool_size: int | None = None) -> Bot:
    """A long-lived Bot with a connection pool sized for concurrency."""
    size = pool_size or settings.telegram_connection_pool_size
    return Bot(
        settings.token,
        base_url=settings.telegram_api_base_url,
        base_file_url=settings.file_url,
        request=AiohttpRequest(connection_pool_size=size, pool_timeout=5.0),
        # getUpdates holds its own connection for the long poll.
        get_updates_request=AiohttpRequest(
            connection_pool_size=1, read_timeout=settings.telegram_poll_timeout + 10.0
        ),
    )


def limits_for(settings: TelegramSettings) -> Limits:
    """The sender's pacing from the TELEGRAM_* settings (0 = that pace is off)."""
    rate = settings.telegram_global_rate
    return Limits(
        chat_interval=settings.telegram_chat_interval_secs,
        group_interval=settings.telegram_group_interval_secs,
        global_interval=1.0 / rate if rate else 0.0,
        max_retry_wait=settings.telegram_max_retry_wait,
    )


# getMe again after these many seconds (then every last one) while Telegram cannot
# be reached
IDENTIFY_RETRY_SECS = (5.0, 10.0, 20.0, 30.0)


# a 429 on getMe asking for at most this many seconds is waited out once
SHORT_RETRY_AFTER_SECS = 3.0


class TelegramUnreachable(ConfigError):
    """getMe could not reach the Bot API (a network error, a timeout, Telegram's 5xx)."""

    retry_after = 0.0  # Telegram asked to wait this long first (flood control)
    fix = ""  # what to do instead of checking the network ("" = check the network)


class TelegramRateLimited(TelegramUnreachable):
    """getMe answered 429 (flood control, e.g. many processes restarting at once):
    Telegram asks to wait; the token is not at fault (nor checked yet)."""

    def __init__(self, retry_after: float) -> None:
        super().__init__(
            [
                "TELEGRAM_BOT_TOKEN: rate limited by Telegram (429 Too Many Requests on "
                f"getMe); retry in {retry_after:g} s (the token was not checked)"
            ]
        )
        self.retry_after = retry_after
        self.fix = f"retry in {retry_after:g} s (Telegram's flood control, not the token)"


def retry_after_secs(exc: RetryAfter) -> float:
    """The wait a 429 asks for, in seconds (an int or a timedelta, by library version)."""
    wait = exc.retry_after
    return float(wait if isinstance(wait, int | float) else wait.total_seconds())


async def check_bot(bot: Bot, *, attempts: int = 3) -> None:
    """Bot.initialize() (getMe); one clear ConfigError line when the token is bad,
    :class:`TelegramUnreachable` when the Bot API cannot be reached, and
    :class:`TelegramRateLimited` when Telegram's flood control asks to wait longer
    than a few seconds (a short wait is waited out once)."""
    waited = False
    attempt = 0
    while True:
        try:
            await bot.initialize()
            return
        except InvalidToken:
            raise ConfigError(
                [
                    "TELEGRAM_BOT_TOKEN: rejected by Telegram (revoked or mistyped); "
                    "get a new one from @BotFather (/token)"
                ]
            ) from None
        except NetworkError as exc:
            if attempt == attempts - 1:
                where = redact_url(bot.base_url.replace(bot.token, "<token>"))
                why = f"{type(exc).__name__}: {exc.message}".replace(bot.token, "<token>")
                raise TelegramUnreachable(
                    [
                        f"TELEGRAM_BOT_TOKEN: could not reach the Telegram Bot API at {where} "
                        f"({why}); check this machine's network "
                        "(or TELEGRAM_API_BASE_URL, for a Bot API server of your own)"
                    ]
                ) from None
            await asyncio.sleep(1.0 + attempt)
            attempt += 1
        except RetryAfter as exc:
            secs = retry_after_secs(exc)
            if waited or secs > SHORT_RETRY_AFTER_SECS:
                raise TelegramRateLimited(secs) from None
            waited = True
            await asyncio.sleep(secs)
        except TelegramError as exc:
            raise ConfigError([f"TELEGRAM_BOT_TOKEN: getMe failed: {exc.message}"]) from None


class TelegramChannel(Channel):
    name = "telegram"

    def __init__(
        self, settings: TelegramSettings, deps: ChannelDeps, *, limits: Limits | None = None
    ) -> None:
        self.settings = settings
        self.deps = deps
        self.mode = settings.resolved_mode(deps.public_url)
        self.bot = make_bot(settings)
        self._limits = limits or limits_for(settings)
        self._outbox: TelegramOutbox | None = None
        self._ctx = ParseContext(
            bot_id=settings.bot_id,
            group_reply=deps.group_reply,
            edited_messages=settings.telegram_edited_messages,
        )
        self.poller: Poller | None = None
        self._identify: asyncio.Task[None] | None = None
        self.identify_retry_secs = IDENTIFY_RETRY_SECS
        self._menu: Sequence[tuple[str, str, str]] | None = None  # to publish once identified
        self.unreachable = ""  # the problem while getMe has not answered ("" once it has)
        self.unreachable_fix = ""  # what to do about it, when not "check the network"

    @property
    def context(self) -> ParseContext:
        return self._ctx

    async def initialize(self) -> None:
        if self.mode == "webhook" and self.settings.telegram_webhook_secret is None:
            raise ConfigError(
                [
                    "TELEGRAM_WEBHOOK_SECRET: required in webhook mode "
                    "(1-256 characters of A-Z, a-z, 0-9, _ and -)"
                ]
            )
        secret = self.settings.telegram_webhook_secret
        n = len(secret.get_secret_value()) if secret is not None else 0
        if self.mode == "webhook" and n < MIN_WEBHOOK_SECRET_CHARS:
            log.warning(
                "TELEGRAM_WEBHOOK_SECRET is %d characters long: use at least %d random "
                "ones (e.g. openssl rand -hex 32); anyone who guesses it can post "
                "updates as any user",
                n,
                MIN_WEBHOOK_SECRET_CHARS,
            )
        try:
            await check_bot(self.bot)
        except TelegramUnreachable as exc:
            self.unreachable = exc.problems[0]
            self.unreachable_fix = exc.fix
            first = max(self.identify_retry_secs[0], exc.retry_after)
            # Not a setting's fault, and Slack and Discord in this process must not go
            # down with it: start, and learn the bot's @name once Telegram answers.
            # Until then nothing that may name the bot is judged without its name:
            # polling waits (run_gateway), and the webhook answers a group message
            # with an "@" in it 503, so Telegram delivers it again later.  A revoked
            # token still stops here.  Flood control (429) is taken the same way,
            # first asked again once the wait is over.
            log.warning(
                "telegram: %s; starting anyway, asking again in %g s",
                exc.problems[0].split(": ", 1)[1],
                first,
            )
            # The @name getMe gave last time (kept in Redis) stands in meanwhile: no
            # 503s, no polling wait.  None stored (the very first start): as above.
            stored = await self._stored_username()
            if stored:
                self._ctx = self._context(self.settings.bot_id, stored)
                log.info("telegram: using @%s (stored) until getMe answers", stored)
            self._identify = asyncio.create_task(self._identify_later(first), name="telegram-getme")
            return
        await self._identified()

    def _context(self, bot_id: str, username: str) -> ParseContext:
        return ParseContext(
            bot_id=bot_id,
            username=username,
            group_reply=self.deps.group_reply,
            edited_messages=self.settings.telegram_edited_messages,
        )

    async def _identified(self) -> None:
        self.unreachable = ""
        self.unreachable_fix = ""
        self._ctx = self._context(str(self.bot.id), self.bot.username or "")
        log.info("telegram: @%s ready (%s mode)", self.bot.username, self.mode)
        await self._store_identity()

    async def _store_identity(self) -> None:
        """Keep the bot's id and @name in Redis for the next start (replacing a
        renamed bot's old name); best effort."""
        if not self.bot.username:
            return
        value = orjson.dumps({"id": str(self.bot.id), "username": self.bot.username})
        try:
            await self.deps.redis.set(keys.bot_identity(CHANNEL, str(self.bot.id)), value)
        except Exception as exc:  # the next start may wait for getMe: nothing worse
            log.warning("telegram: could not store the bot's @name in Redis (%s)", exc)

    async def _stored_username(self) -> str:
        """The @name stored by the last start that getMe answered; "" if none."""
        bot_id = self.settings.bot_id
        try:
            raw = await self.deps.redis.get(keys.bot_identity(CHANNEL, bot_id))
            stored = orjson.loads(raw) if raw else None
        except Exception as exc:
            log.warning("telegram: could not read the bot's stored @name (%s)", exc)
            return ""
        if not isinstance(stored, dict) or str(stored.get("id")) != bot_id:
            return ""
        username = stored.get("username")
        return username if isinstance(username, str) else ""

    async def _identify_later(self, first: float) -> None:
        """getMe until it answers (the bot's @name, for mentions in groups); then the
        command menu, if it was asked for meanwhile.  ``first``: the first wait."""
        wait = first
        for attempt in itertools.count(1):
            await asyncio.sleep(wait)
            delays = self.identify_retry_secs
            wait = delays[min(attempt, len(delays) - 1)]
            try:
                await self.bot.initialize()
            except InvalidToken:
                log.error(
                    "telegram: TELEGRAM_BOT_TOKEN rejected by Telegram (revoked or mistyped); "
                    "get a new one from @BotFather (/token)"
                )
                return
            except RetryAfter as exc:
                wait = max(wait, retry_after_secs(exc))
                log.info("telegram: getMe rate limited by Telegram; asking again in %g s", wait)
                continue
            except TelegramError as exc:
                log.info("telegram: Bot API still unreachable (%s)", type(exc).__name__)
                continue
            await self._identified()
            if self._menu is not None:
                try:
                    await self.publish_commands(self._menu)
                except Exception:  # the commands still work typed; shutdown must not see it
                    log.warning("telegram: could not set the command menu", exc_info=True)
            return

    async def publish_commands(self, commands: Sequence[tuple[str, str, str]]) -> None:
        """The bot's "/" menu lists Parley's commands (all chats, every language).

        Read first and written only when it differs, so restarts and several
        processes do not rewrite it.  A failure is logged: the commands work typed.
        """
        if not self.settings.telegram_command_menu:
            return
        waiting = self._identify is not None and not self._identify.done()
        if waiting and self._identify is not asyncio.current_task():
            self._menu = commands  # Telegram not reached yet: published once it is
            return
        wanted = menu_commands(commands)
        try:
            current = await self.bot.get_my_commands()
            if [(c.command, c.description) for c in current] == wanted:
                return
            await self.bot.set_my_commands([BotCommand(n, d) for n, d in wanted])
            log.info("telegram: command menu set (%d commands)", len(wanted))
        except TelegramError as exc:
            log.warning("telegram: could not set the command menu: %s", exc)

    async def shutdown(self) -> None:
        if self._identify is not None:
            self._identify.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._identify
        if self._outbox is not None:
            await self._outbox.close()
        with contextlib.suppress(TelegramError):
            await self.bot.shutdown()

    def routes(self, ingest: Ingest) -> list[BaseRoute]:
        if self.mode != "webhook":
            return []
        secret = self.settings.telegram_webhook_secret
        endpoint = make_endpoint(
            secret=secret.get_secret_value() if secret else "",
            ingest=ingest,
            bot=lambda: self.bot,
            context=lambda: self._ctx,
            max_body_bytes=self.settings.telegram_max_body_bytes,
            redis=self.deps.redis,
        )
        return [Route(PATH, endpoint, methods=["POST"], name="telegram_webhook")]

    @property
    def has_gateway(self) -> bool:
        return self.mode == "polling"

    async def run_gateway(self, ingest: Ingest, stop: asyncio.Event) -> None:
        if self.mode != "polling":
            return
        if not await self._identified_or_stopped(stop):
            return
        self.poller = Poller(
            self.bot, lambda: self._ctx, timeout=self.settings.telegram_poll_timeout
        )
        await self.poller.run(ingest, stop)

    async def _identified_or_stopped(self, stop: asyncio.Event) -> bool:
        """Wait until getMe has answered (or given up on a rejected token); False when
        ``stop`` came first.  Polling before the bot knows its @name would take the
        group messages naming it (the ones that piled up while the process was down)
        for messages to others, drop them and confirm them to Telegram: they wait
        at Telegram instead (kept there 24 h).  No wait when an earlier start stored
        the @name (it stands in until getMe answers)."""
        identify = self._identify
        if identify is None or identify.done() or self._ctx.username:
            return not stop.is_set()  # known, or the @name stored by an earlier start
        log.info("telegram: polling waits for getMe (the bot's @name) to answer")
        stopper = asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait({identify, stopper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopper.cancel()
        # a token rejected meanwhile: the poller's getUpdates says so and fails the
        # gateway (TELEGRAM_BOT_TOKEN: rejected ...)
        return not stop.is_set()

    def outbox(self) -> TelegramOutbox:
        if self._outbox is None:
            self._outbox = TelegramOutbox(
                self.bot,
                self.deps.pacer,
                self.settings.bot_id,
                self._limits,
                redis=self.deps.redis,
            )
            # GROUP_REPLY=mention: a group's plain "yes" never reaches Parley (a reply
            # to its message does): the approval prompt says so (agent_core.outbox)
            self._outbox.group_text_reaches = self.deps.group_reply == "all"
        return self._outbox

    async def download(self, attachment: Attachment) -> bytes:
        return await self.outbox().download(attachment)
