"""The Discord channel: a gateway process listens, workers answer over REST.

Parley's commands become Discord slash commands: ``publish_commands`` (called at
start by the web and gateway processes) only keeps the list; the process that
holds the gateway registers it (:mod:`channels.discord.commands`), so a web
process never writes the application's commands.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from typing import Any, ClassVar

import aiohttp
import discord
from discord.http import Route
from redis.exceptions import RedisError

from agent_core.errors import ConfigError
from agent_core.ingest import Ingest
from agent_core.outbox import Outbox
from agent_core.store.client import redact_url
from agent_core.store.lease import holds
from channels.base import Channel, ChannelDeps

from .commands import app_commands, sync_commands
from .gateway import GatewayClient, wait_first
from .http import ParleyHTTPClient
from .sender import DiscordOutbox
from .settings import DiscordSettings, gateway_lease
from .state import DiscordState

log = logging.getLogger(__name__)

# Application flags: the Message Content intent is enabled in the developer portal.
GATEWAY_MESSAGE_CONTENT = 1 << 19
GATEWAY_MESSAGE_CONTENT_LIMITED = 1 << 18

BAD_TOKEN = (
    "DISCORD_BOT_TOKEN: Discord refused the bot token (401); "
    "copy it again from the developer portal (Bot -> Reset Token)"
)
NO_CONTENT_INTENT = (
    "Discord: the Message Content intent is not enabled for this bot "
    "(developer portal -> Bot -> Privileged Gateway Intents); "
    "Parley will only see DMs and messages that mention it"
)
RECONNECT_DELAY = 5.0


class DiscordChannel(Channel):
    name: ClassVar[str] = "discord"

    def __init__(self, settings: DiscordSettings, deps: ChannelDeps) -> None:
        self.settings = settings
        self.deps = deps
        self._outbox = DiscordOutbox(settings, deps.pacer)
        # GROUP_REPLY=mention: a plain "yes" in a server channel never reaches Parley
        # (a reply to its message, or in a thread it follows, does): see agent_core.outbox
        self._outbox.group_text_reaches = deps.group_reply == "all"
        self.message_content: bool | None = None  # known after initialize()
        self.unreachable = ""  # why initialize() could not check the token ("" if it did)
        self.client: GatewayClient | None = None  # the running gateway client
        # Parley's commands as Discord takes them, once publish_commands gave them
        self.commands: list[dict[str, Any]] | None = None
        self.command_names: frozenset[str] | None = None
        self._commands_known = asyncio.Event()

    def _token(self) -> str:
        token = self.settings.discord_bot_token
        if token is None:
            raise ConfigError(["DISCORD_BOT_TOKEN: not set"])
        return token.get_secret_value()

    async def initialize(self) -> None:
        """Check the token and whether the Message Content intent is enabled."""
        http = ParleyHTTPClient(
            asyncio.get_running_loop(),
            api_base=self.settings.discord_api_base_url,
            request_timeout=self.settings.discord_http_timeout,
        )
        try:
            await http.static_login(self._token())
            app = await http.request(Route("GET", "/oauth2/applications/@me"))
            flags = int(app.get("flags") or 0)
            self.message_content = bool(
                flags & (GATEWAY_MESSAGE_CONTENT | GATEWAY_MESSAGE_CONTENT_LIMITED)
            )
            if not self.message_content:  # a plain "yes" arrives with no text
                self._outbox.group_text_reaches = False
        except discord.LoginFailure:
            raise ConfigError([BAD_TOKEN]) from None
        except (discord.DiscordException, aiohttp.ClientError, OSError) as exc:
            self.unreachable = (
                f"DISCORD_BOT_TOKEN: could not reach the Discord API at "
                f"{redact_url(self.settings.discord_api_base_url)} ({type(exc).__name__}); "
                "the token is not checked"
            )
            log.warning(  # RateLimited (a long 429) included
                "Discord: cannot check the bot token now (%s); will retry", type(exc).__name__
            )
        finally:
            await http.close()

    async def publish_commands(self, commands: Sequence[tuple[str, str, str]]) -> None:
        """Keep Parley's commands: the gateway registers them (see ``run_gateway``)
        and refuses invocations of any other command."""
        self.commands = app_commands(commands)
        self.command_names = frozenset(c["name"] for c in self.commands)
        self._commands_known.set()

    async def _register_commands(self) -> None:
        """The application's global commands become Parley's (read first, written
        only when different: Discord allows 200 creations a day).  A failure is
        logged, never fatal: commands still work typed to the bot."""
        await self._commands_known.wait()
        wanted = self.commands or []
        http = ParleyHTTPClient(
            asyncio.get_running_loop(),
            api_base=self.settings.discord_api_base_url,
            max_ratelimit_timeout=self.settings.discord_max_retry_wait,
            request_timeout=self.settings.discord_http_timeout,
        )
        try:
            await http.static_login(self._token())
            if await sync_commands(http, wanted):
                log.info(
                    "discord: %d slash commands registered (Discord may take a moment to "
                    "show them)",
                    len(wanted),
                )
            else:
                log.debug("discord: the slash commands are up to date")
        except (discord.DiscordException, aiohttp.ClientError, OSError, TimeoutError) as exc:
            log.warning("discord: could not register the slash commands: %s", exc)
        except Exception:
            log.warning("discord: could not register the slash commands", exc_info=True)
        finally:
            await http.close()

    async def shutdown(self) -> None:
        await self._outbox.close()

    @property
    def has_gateway(self) -> bool:
        return True

    @property
    def gateway_lease(self) -> str:
        """One lease per shard set: ``DISCORD_SHARDS=0-3/8`` and ``4-7/8`` are two
        gateway processes running side by side; two processes with the same set (or
        both ``auto``) are one running and one standing by."""
        return gateway_lease(self.settings.discord_shards)

    def outbox(self) -> Outbox:
        return self._outbox

    async def run_gateway(self, ingest: Ingest, stop: asyncio.Event) -> None:
        token = self._token()
        if self.message_content is None:
            await self.initialize()
        content = self.message_content is not False
        if not content:
            log.warning(NO_CONTENT_INTENT)
        state = DiscordState(self.deps.redis)
        registering = (
            asyncio.create_task(self._register_commands(), name="discord-commands")
            if self.settings.discord_commands
            else None
        )
        try:
            await self._hold_gateway(token, content, state, ingest, stop)
        finally:
            if registering is not None:
                registering.cancel()
                await asyncio.gather(registering, return_exceptions=True)

    async def _hold_gateway(
        self, token: str, content: bool, state: DiscordState, ingest: Ingest, stop: asyncio.Event
    ) -> None:
        while not stop.is_set():
            client = GatewayClient(
                self.settings,
                ingest,
                state,
                group_reply=self.deps.group_reply,
                message_content=content,
                command_names=lambda: self.command_names,
                valid=holds(stop),
            )
            self.client = client
            try:
                await client.login(token)
                await wait_first(client.connect(reconnect=True), stop.wait())
            except discord.LoginFailure:
                raise ConfigError([BAD_TOKEN]) from None
            except discord.PrivilegedIntentsRequired:
                if not content:
                    raise
                log.warning(NO_CONTENT_INTENT)
                content = False
                continue
            except (discord.DiscordException, aiohttp.ClientError, OSError, RedisError) as exc:
                # Anything else Discord or Redis can fail with is passing: GatewayNotFound
                # (a failed GET /gateway/bot with DISCORD_SHARDS=auto), RateLimited (a
                # long 429 on login), ConnectionClosed, a RedisError from loading the
                # state in setup_hook.  Retried; only the two above are configuration.
                log.error(
                    "Discord gateway stopped (%s); reconnecting in %.0fs", exc, RECONNECT_DELAY
                )
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(stop.wait(), RECONNECT_DELAY)
            finally:
                # handles what the session received first (bounded), closes the
                # connection, then marks what is left for the next catch-up
                await client.close()
