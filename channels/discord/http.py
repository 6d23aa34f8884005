"""discord.py's REST client, pointed where the settings say.

discord.py builds every REST URL from the class attribute ``Route.BASE`` and
connects the gateway to ``DiscordWebSocket.DEFAULT_GATEWAY`` (or the READY
``resume_gateway_url``) without asking REST.  Rather than changing those
globals, :class:`ParleyHTTPClient` rewrites URLs per instance:

* ``request`` swaps the ``Route.BASE`` prefix for ``DISCORD_API_BASE_URL``;
* ``ws_connect`` replaces the scheme/host/path of every gateway URL with
  ``DISCORD_GATEWAY_URL`` (keeping discord.py's ``v``/``encoding``/``compress``
  query), so IDENTIFY, RESUME and re-IDENTIFY after an invalid session all go
  to the configured gateway.

Both settings also serve proxies.  A 429 seen on the wire is reported to an
optional async hook (the shared :class:`~agent_core.store.pacing.Pacer`), so
every worker backs off, not only the one discord.py's bucket lives in.

An interaction's response (``POST /interactions/<id>/<token>/callback``) goes
through :meth:`ParleyHTTPClient.interaction_callback`, on a session of its own
outside discord.py's rate limiting: discord.py holds every request while it
sleeps out a global 429, but Discord does not apply the global limit to
interaction responses, which must arrive within 3 s.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable
from types import SimpleNamespace
from typing import Any

import aiohttp
import discord
import yarl
from discord.http import HTTPClient, Route, json_or_text

from agent_core.deadline import hold
from channels import url_tokens

log = logging.getLogger(__name__)

# (the pace a 429 pauses: "global", "channel:<id>" or "" for a route of its own,
# retry_after)
RateLimitHook = Callable[[str, float], Awaitable[None]]

_CHANNEL_IN_PATH = re.compile(r"/channels/(\d+)")
# posting, editing or deleting a message: what the shared per-channel pace spaces out
_MESSAGE_ROUTE = re.compile(r"/channels/(\d+)/messages(?:/\d+)?/?$")
_MESSAGE_METHODS = frozenset({"POST", "PATCH", "DELETE"})


def _scope(headers: Any) -> str:
    return str(headers.get("X-RateLimit-Scope", "")).lower()


def _retry_after(headers: Any) -> float:
    """Seconds a 429 asks to wait, from its headers (the body's ``retry_after`` is
    not read here).  ``Retry-After`` is whole seconds (rounded up); for a limit of
    the bot's own on one route (scope ``user``) ``X-RateLimit-Reset-After`` is the
    same wait to the millisecond.  For a ``shared`` limit the reset headers are the
    bot's own bucket's, not the resource's: only ``Retry-After`` tells."""
    names = ("Retry-After", "X-RateLimit-Reset-After")
    if _scope(headers) == "user":
        names = ("X-RateLimit-Reset-After", "Retry-After")
    for name in names:
        value = headers.get(name)
        if value:
            try:
                return float(value)
            except ValueError:
                continue
    return 1.0


def rate_limit_scope(method: str, path: str, headers: Any) -> str:
    """What a 429 limits, of the paces Parley shares between workers:

    * ``"global"``: the bot's global limit (``X-RateLimit-Global`` or scope
      ``global``): every route waits;
    * ``"channel:<id>"``: posting, editing or deleting messages in that channel
      (the per-channel message limit), or any route of that channel with scope
      ``shared`` (a limit on the channel itself, for everyone);
    * ``""``: anything else, a route with its own bucket (the typing indicator,
      opening a thread, an interaction's follow-ups), which discord.py's
      per-route bucket already holds; it must not hold the channel's answers.
    """
    scope = _scope(headers)
    if str(headers.get("X-RateLimit-Global", "")).lower() == "true" or scope == "global":
        return "global"
    m = _MESSAGE_ROUTE.search(path)
    if m and method.upper() in _MESSAGE_METHODS:
        return f"channel:{m.group(1)}"
    if scope == "shared":
        m = _CHANNEL_IN_PATH.search(path)
        if m:
            return f"channel:{m.group(1)}"
    return ""


class ParleyHTTPClient(HTTPClient):
    def __init__(
        self,
        loop: asyncio.AbstractEventLoop | Any,
        *,
        api_base: str = "",
        gateway_url: str = "",
        on_rate_limited: RateLimitHook | None = None,
        max_ratelimit_timeout: float | None = None,
        request_timeout: float | None = None,
        connector: aiohttp.BaseConnector | None = None,
    ) -> None:
        # discord.py logs request URLs (a 429 at WARNING): an interaction's token
        # is in the path of its response and follow-ups
        url_tokens.install("discord.http")
        # (every 429 is seen: its wait is off the turn's clock, agent_core.deadline)
        trace = aiohttp.TraceConfig()
        trace.on_request_end.append(self._trace_end)
        super().__init__(
            loop,
            connector,
            http_trace=trace,
            max_ratelimit_timeout=max_ratelimit_timeout,
        )
        self.request_timeout = request_timeout
        self.api_base = api_base.rstrip("/")
        self.gateway_url = yarl.URL(gateway_url) if gateway_url else None
        self._on_rate_limited = on_rate_limited
        self._callbacks: aiohttp.ClientSession | None = None  # interaction responses

    async def _trace_end(
        self,
        session: aiohttp.ClientSession,
        ctx: SimpleNamespace,
        params: aiohttp.TraceRequestEndParams,
    ) -> None:
        if params.response.status != 429:
            return
        retry_after = _retry_after(params.response.headers)
        longest = self.max_ratelimit_timeout
        best_effort = params.url.path.endswith("/typing")
        if not best_effort and (longest is None or retry_after <= longest):
            hold(retry_after)  # discord.py sleeps it out next: off the turn's clock
        if self._on_rate_limited is None:
            return
        try:
            await self._on_rate_limited(
                rate_limit_scope(params.method, params.url.path, params.response.headers),
                retry_after,
            )
        except Exception:  # never break the request because the hook failed
            log.warning("rate-limit hook failed", exc_info=True)

    def rewrite(self, url: str) -> str:
        base = Route.BASE
        if self.api_base and self.api_base != base and url.startswith(base):
            return self.api_base + url[len(base) :]
        return url

    async def request(self, route: Route, **kwargs: Any) -> Any:
        route.url = self.rewrite(route.url)
        if self.request_timeout is not None:
            # discord.py alone would wait aiohttp's 5 minutes (DISCORD_HTTP_TIMEOUT)
            kwargs.setdefault("timeout", aiohttp.ClientTimeout(total=self.request_timeout))
        return await super().request(route, **kwargs)

    async def interaction_callback(
        self,
        interaction_id: str,
        token: str,
        body: dict[str, Any],
        *,
        timeout: float | None = None,
    ) -> None:
        """Respond to an interaction, whatever global 429 discord.py is sleeping out.

        Raises discord.HTTPException (DiscordServerError for a 5xx) when Discord
        refuses, aiohttp's errors or TimeoutError when it cannot be reached.  Not
        retried: a response later than 3 s is refused anyway."""
        if self._callbacks is None or self._callbacks.closed:
            self._callbacks = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0), cookie_jar=aiohttp.DummyCookieJar()
            )
        url = self.rewrite(f"{Route.BASE}/interactions/{interaction_id}/{token}/callback")
        total = timeout if timeout is not None else self.request_timeout
        async with self._callbacks.post(
            url,
            data=discord.utils._to_json(body),
            headers={"User-Agent": self.user_agent, "Content-Type": "application/json"},
            proxy=self.proxy,
            proxy_auth=self.proxy_auth,
            timeout=aiohttp.ClientTimeout(total=total),
        ) as response:
            if response.status < 300:
                return
            data = await json_or_text(response)
        if response.status >= 500:
            raise discord.DiscordServerError(response, data)
        raise discord.HTTPException(response, data)

    async def close(self) -> None:
        if self._callbacks is not None:
            await self._callbacks.close()
            self._callbacks = None
        await super().close()

    async def ws_connect(self, url: str, *, compress: int = 0) -> Any:
        if self.gateway_url is not None:
            target = yarl.URL(url)
            url = str(self.gateway_url.with_query(target.query))
        return await super().ws_connect(url, compress=compress)


def is_unauthorized(exc: BaseException) -> bool:
    return isinstance(exc, discord.LoginFailure) or (
        isinstance(exc, discord.HTTPException) and exc.status == 401
    )
