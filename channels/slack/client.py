"""The long-lived Slack Web API client (slack_sdk AsyncWebClient on one aiohttp session)."""

from __future__ import annotations

import logging
from contextvars import ContextVar
from typing import Any

import aiohttp
from slack_sdk.http_retry.async_handler import AsyncRetryHandler
from slack_sdk.http_retry.builtin_async_handlers import (
    AsyncConnectionErrorRetryHandler,
    AsyncRateLimitErrorRetryHandler,
)
from slack_sdk.http_retry.request import HttpRequest
from slack_sdk.http_retry.response import HttpResponse
from slack_sdk.http_retry.state import RetryState
from slack_sdk.web.async_client import AsyncWebClient

from agent_core.deadline import held
from agent_core.store.pacing import Pacer, pace_key
from channels.never_sent import never_sent

log = logging.getLogger(__name__)


def channel_pace(channel: str) -> str:
    """The shared pace of one Slack channel (all worker processes)."""
    return pace_key("slack", channel)


# The Slack channel the current Web API call is about, set by the sender: the
# retry handler sees only the HTTP request (JSON bodies are not exposed to it).
current_channel: ContextVar[str] = ContextVar("slack_current_channel", default="")


# The calls whose 429 pauses a channel's posting pace: the messages of a channel
# (Slack's ~1 a second per channel).  Other limits (reactions.add/remove,
# users.info, chat.delete, history: per method and workspace) say nothing about
# posting into that channel, so their 429 never pauses it.  (The outbox sends the
# messages an answer needs, the streamed edits and the working reaction through a
# client without this handler: those 429s are never waited out inside the call.)
POSTING_METHODS = frozenset({"chat.postMessage", "chat.postEphemeral", "chat.update"})


def _request_method(request: HttpRequest) -> str:
    """The Web API method of a request (``…/api/chat.postMessage`` -> chat.postMessage)."""
    return request.url.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]


def _request_channel(request: HttpRequest) -> str:
    params: Any = request.body_params
    if isinstance(params, dict) and params.get("channel"):
        return str(params["channel"])
    return current_channel.get()


def _retry_after(response: HttpResponse) -> float:
    for k, v in response.headers.items():
        if k.lower() == "retry-after":
            try:
                return float(v[0] if isinstance(v, list) else v)
            except (TypeError, ValueError):
                return 1.0
    return 1.0


# The longest Retry-After slept inside a call: a longer one is the caller's (a
# SlackApiError 429; the outbox raises SendRateLimited, which the turn's reply
# writer waits out where /interrupt and a stopping worker end the wait).
RETRY_MAX_WAIT = 60.0


class PacedRateLimitRetryHandler(AsyncRateLimitErrorRetryHandler):
    """Honours Retry-After (sleep, retry once) up to :data:`RETRY_MAX_WAIT`; a 429
    on a message of a channel (:data:`POSTING_METHODS`) also pauses the channel's
    shared pace, so every worker process backs off from that channel, not only
    this one."""

    def __init__(self, pacer: Pacer | None, max_retry_count: int = 1) -> None:
        super().__init__(max_retry_count=max_retry_count)
        self._pacer = pacer

    async def _can_retry_async(
        self,
        *,
        state: RetryState,
        request: HttpRequest,
        response: HttpResponse | None = None,
        error: Exception | None = None,
    ) -> bool:
        if response is not None and _retry_after(response) > RETRY_MAX_WAIT:
            return False  # not slept here, where nothing can end the wait
        return await super()._can_retry_async(
            state=state, request=request, response=response, error=error
        )

    async def prepare_for_next_attempt_async(
        self,
        *,
        state: RetryState,
        request: HttpRequest,
        response: HttpResponse | None = None,
        error: Exception | None = None,
    ) -> None:
        if (
            response is not None
            and self._pacer is not None
            and _request_method(request) in POSTING_METHODS
        ):
            channel = _request_channel(request)
            if channel:
                try:
                    await self._pacer.pause(channel_pace(channel), _retry_after(response))
                except Exception as exc:  # pacing is advisory; the retry still waits
                    log.debug("could not pause Slack pace: %s", exc)
        # slack_sdk sleeps the Retry-After (plus up to 1 s of jitter) below: off the
        # turn's clock (agent_core.deadline)
        # (a message's: not a best-effort call's, such as the working reaction)
        posting = _request_method(request) in POSTING_METHODS
        wait = _retry_after(response) + 1.0 if response is not None and posting else 0.0
        with held(wait):
            await super().prepare_for_next_attempt_async(
                state=state, request=request, response=response, error=error
            )


# Calls that create something the user sees: repeating one whose answer was lost
# can show it twice.
_CREATING = ("chat.postMessage", "chat.postEphemeral", "chat.scheduleMessage", "chat.meMessage")


class SafeConnectionErrorRetryHandler(AsyncConnectionErrorRetryHandler):
    """slack_sdk's connection-error retry, minus the one case that duplicates.

    The stock handler repeats a call after any ``ServerConnectionError`` -
    including a read timeout or a dropped connection *after* Slack received the
    request, so a ``chat.postMessage`` whose answer was lost was posted twice
    (tests/integration/slack/test_slack_outbox.py).  Here a call that creates a
    message is repeated only when it never left (no connection could be made);
    otherwise the sender reports it unconfirmed (agent_core.errors.SendUnconfirmed).
    ``always_creates``: every call of this client creates (a response_url's
    webhook client), whatever its URL.
    """

    def __init__(self, *, always_creates: bool = False) -> None:
        super().__init__()
        self.always_creates = always_creates

    async def _can_retry_async(
        self,
        *,
        state: RetryState,
        request: HttpRequest,
        response: HttpResponse | None = None,
        error: Exception | None = None,
    ) -> bool:
        if never_sent(error):
            return True  # never reached Slack
        if self.always_creates or request.url.rstrip("/").endswith(_CREATING):
            return False
        return await super()._can_retry_async(
            state=state, request=request, response=response, error=error
        )


def make_web_client(
    token: str,
    base_url: str,
    session: aiohttp.ClientSession,
    *,
    pacer: Pacer | None = None,
    timeout: int = 15,
) -> AsyncWebClient:
    handlers: list[AsyncRetryHandler] = [
        SafeConnectionErrorRetryHandler(),
        PacedRateLimitRetryHandler(pacer),
    ]
    return AsyncWebClient(
        token=token or None,
        base_url=base_url,
        session=session,
        timeout=timeout,
        retry_handlers=handlers,
    )


def make_session(limit: int = 100, timeout: float = 15) -> aiohttp.ClientSession:
    """One keep-alive pool for every Web API call of this process.

    The timeout belongs here: slack_sdk applies its own ``timeout`` only to the
    sessions it creates, so a session handed to it keeps aiohttp's 5-minute default
    unless set (SLACK_HTTP_TIMEOUT was silently ignored before).
    """
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=limit, limit_per_host=limit, ttl_dns_cache=300),
        timeout=aiohttp.ClientTimeout(total=timeout),
    )
