"""SlackChannel: wires settings, clients, inbound (HTTP / Socket Mode) and the outbox."""

from __future__ import annotations

import asyncio
import logging

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient
from starlette.routing import BaseRoute

from agent_core.errors import ConfigError
from agent_core.ingest import Ingest
from agent_core.outbox import Outbox
from agent_core.store.client import redact_url

from ..base import Channel, ChannelDeps
from .client import make_session, make_web_client
from .inbound import EventsEndpoint, SlackInbound
from .outbox import SlackOutbox
from .scopes import granted, missing
from .settings import SlackSettings
from .socket_mode import SocketModeGateway
from .state import SlackState

log = logging.getLogger(__name__)

_BAD_TOKEN = frozenset(
    {"invalid_auth", "not_authed", "token_revoked", "token_expired", "account_inactive"}
)


class SlackChannel(Channel):
    name = "slack"

    def __init__(self, settings: SlackSettings, deps: ChannelDeps) -> None:
        self.settings = settings
        self.deps = deps
        self.state = SlackState(deps.redis, settings.slack_thread_ttl_secs)
        self.bot_user_id = ""
        self.team_id = ""
        # "scope: what goes missing", from auth.test (None: not known, Slack not reached)
        self.missing_scopes: list[str] | None = None
        self.unreachable = ""  # the problem while auth.test has not answered
        self._session: aiohttp.ClientSession | None = None
        self._web: AsyncWebClient | None = None
        self._outbox: SlackOutbox | None = None

    @property
    def web(self) -> AsyncWebClient:
        if self._web is None:
            raise RuntimeError("SlackChannel.initialize() was not called")
        return self._web

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("SlackChannel.initialize() was not called")
        return self._session

    async def initialize(self) -> None:
        s = self.settings
        self._session = make_session(timeout=s.slack_http_timeout)
        self._web = make_web_client(
            s.secret("slack_bot_token"),
            s.slack_api_base_url,
            self._session,
            pacer=self.deps.pacer,
            timeout=s.slack_http_timeout,
        )
        try:
            auth = await self._web.auth_test()
        except SlackApiError as exc:
            error = str(exc.response.get("error", "")) if exc.response is not None else ""
            if error in _BAD_TOKEN:
                await self.shutdown()
                raise ConfigError(
                    [
                        f"SLACK_BOT_TOKEN: rejected by Slack ({error}); copy the Bot User OAuth Token (xoxb-...)"
                    ]
                ) from None
            # Slack rate limited, failing (ratelimited, service_unavailable, a 5xx):
            # not the token's fault; start, as when Slack cannot be reached
            self.unreachable = (
                f"SLACK_BOT_TOKEN: auth.test failed ({error or 'unknown error'}); "
                "the token is not checked"
            )
            log.warning("Slack auth.test failed (%s); continuing", error or "unknown error")
            return
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            # Slack unreachable at start: keep going, events carry the bot id too
            self.unreachable = (
                f"SLACK_BOT_TOKEN: could not reach the Slack API at {redact_url(s.slack_api_base_url)} "
                f"({type(exc).__name__}); the token is not checked"
            )
            log.warning("Slack auth.test failed (%s); continuing", type(exc).__name__)
            return
        self.unreachable = ""
        self.bot_user_id = str(auth.get("user_id") or "")
        self.team_id = str(auth.get("team_id") or "")
        self.missing_scopes = missing(granted(auth.headers))
        if self.missing_scopes:
            log.warning(
                "Slack: the bot token lacks scopes Parley uses: %s. Add them (OAuth & "
                "Permissions, or the manifest in deploy/) and reinstall the app",
                "; ".join(self.missing_scopes),
            )
        log.info(
            "Slack: signed in as %s in team %s",
            auth.get("user") or self.bot_user_id,
            auth.get("team") or self.team_id,
        )

    async def shutdown(self) -> None:
        if self._outbox is not None:
            self._outbox.close()
        if self._session is not None and not self._session.closed:
            await self._session.close()
        self._session = None
        self._web = None
        self._outbox = None

    def _inbound(self, ingest: Ingest) -> SlackInbound:
        return SlackInbound(
            ingest,
            self.state,
            bot_user_id=lambda: self.bot_user_id,
            team_id=lambda: self.team_id,
            group_reply=self.deps.group_reply,
            slash_command=self.settings.slack_slash_command,
        )

    def routes(self, ingest: Ingest) -> list[BaseRoute]:
        secret = self.settings.secret("slack_signing_secret")
        if not secret:
            return []
        return EventsEndpoint(
            self._inbound(ingest), secret, max_body_bytes=self.settings.slack_max_body_bytes
        ).routes()

    @property
    def has_gateway(self) -> bool:
        return self.settings.slack_app_token is not None

    async def run_gateway(self, ingest: Ingest, stop: asyncio.Event) -> None:
        if not self.has_gateway:
            return
        gateway = SocketModeGateway(
            self._inbound(ingest),
            self.web,
            self.session,
            self.settings.secret("slack_app_token"),
            ping_interval=self.settings.slack_socket_ping_interval,
        )
        await gateway.run(stop)

    def outbox(self) -> Outbox:
        if self._outbox is None:
            self._outbox = SlackOutbox(
                self.web,
                self.deps.pacer,
                self.state,
                self.session,
                stream_interval=self.settings.slack_stream_interval,
                pace_secs=self.settings.slack_channel_pace_secs,
                reaction=self.settings.slack_working_reaction,
                bot_token=self.settings.secret("slack_bot_token"),
                api_base_url=self.settings.slack_api_base_url,
                bot_user_id=lambda: self.bot_user_id,
                slash_command=self.settings.slack_slash_command,
            )
        return self._outbox
