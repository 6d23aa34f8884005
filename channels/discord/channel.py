"""The Discord channel: a gateway process listens, workers answer over REST."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import ClassVar

import aiohttp
import discord
from discord.http import Route

from agent_core.errors import ConfigError
from agent_core.ingest import Ingest
from agent_core.outbox import Outbox
from channels.base import Channel, ChannelDeps

from .gateway import GatewayClient, wait_first
from .http import ParleyHTTPClient
from .sender import DiscordOutbox
from .settings import DiscordSettings
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
        self.message_content: bool | None = None  # known after initialize()
        self.client: GatewayClient | None = None  # the running gateway client

    def _token(self) -> str:
        token = self.settings.discord_bot_token
        if token is None:
            raise ConfigError(["DISCORD_BOT_TOKEN: not set"])
        return token.get_secret_value()

    async def initialize(self) -> None:
        """Check the token and whether the Message Content intent is enabled."""
        http = ParleyHTTPClient(
            asyncio.get_running_loop(), api_base=self.settings.discord_api_base_url
        )
        try:
            await http.static_login(self._token())
            app = await http.request(Route("GET", "/oauth2/applications/@me"))
            flags = int(app.get("flags") or 0)
            self.message_content = bool(
                flags & (GATEWAY_MESSAGE_CONTENT | GATEWAY_MESSAGE_CONTENT_LIMITED)
            )
        except discord.LoginFailure:
            raise ConfigError([BAD_TOKEN]) from None
        except (discord.HTTPException, aiohttp.ClientError, OSError) as exc:
            log.warning(
                "Discord: cannot check the bot token now (%s); will retry", type(exc).__name__
            )
        finally:
            await http.close()

    async def shutdown(self) -> None:
        await self._outbox.close()

    @property
    def has_gateway(self) -> bool:
        return True

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
        while not stop.is_set():
            client = GatewayClient(
                self.settings,
                ingest,
                state,
                group_reply=self.deps.group_reply,
                message_content=content,
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
            except (
                discord.HTTPException,
                discord.ConnectionClosed,
                aiohttp.ClientError,
                OSError,
            ) as exc:
                log.error(
                    "Discord gateway stopped (%s); reconnecting in %.0fs", exc, RECONNECT_DELAY
                )
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(stop.wait(), RECONNECT_DELAY)
            finally:
                await client.close()
