"""The web chat's session cookie, its login, and which conversations a browser has.

The cookie (``parley_web``) is signed with a timestamp: ``uid`` (this browser),
``sid`` (its current conversation) and, once ``WEB_CHAT_TOKEN`` was given,
``tk``: a digest of that token (HMAC-SHA256 under the cookie secret, so it
reveals nothing about the token).  A request is logged in only while ``tk``
matches the *current* token: setting a token logs out every browser (no cookie
has a ``tk`` while none is set), and changing it logs out every old login.

The server refuses a cookie signed more than :data:`COOKIE_MAX_AGE` ago, even
if a browser kept it.  Opening the page, a message or a button press signs it
again (at most once a day), so a browser that comes back within that time, or a
tab left open and in use, keeps its conversation and login.

Wrong tokens are counted per client address in Redis: after
:data:`LOGIN_MAX_FAILURES` attempts in :data:`LOGIN_WINDOW_SECS` the login
answers 429 with ``Retry-After`` until the window ends.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import time
from collections.abc import Sequence
from typing import Any

from itsdangerous import BadSignature, SignatureExpired, URLSafeSerializer, URLSafeTimedSerializer
from pydantic import SecretStr
from redis.asyncio import Redis
from starlette.requests import Request
from starlette.responses import Response

from agent_core.store import keys
from channels.web.guard import is_https

COOKIE = "parley_web"
COOKIE_MAX_AGE = 30 * 86_400  # seconds since the cookie was last signed
REFRESH_AFTER = 86_400  # the page signs the cookie again once it is older than this
LOGIN_MAX_FAILURES = 10
LOGIN_WINDOW_SECS = 600
MIN_TOKEN_CHARS = 16  # shorter WEB_CHAT_TOKENs get a start-up warning
RECENT_CONVERSATIONS = 20  # earlier conversations of a browser another tab may still show
SESSION_ID = re.compile(r"^[A-Za-z0-9_-]{8,40}$")
SALT = "parley-web-2"  # timestamped cookies
LEGACY_SALT = "parley-web"  # cookies from before the timestamp: read for their ids only


class Sessions:
    """Signs and reads the cookie; proves a login against the current token.

    ``secret`` signs; ``retired`` keys (earlier ones, see ``WebChannel.sync_key``)
    only verify: a cookie signed with one of them keeps its conversation and login.
    """

    def __init__(self, secret: str, retired: Sequence[str] = ()) -> None:
        self.secret = secret
        self.retired = tuple(k for k in dict.fromkeys(retired) if k != secret)
        self._key = secret.encode()
        # itsdangerous signs with the last key and verifies with any of them
        keys_ = [*self.retired, secret]
        self._verify_keys = [k.encode() for k in keys_]
        self._signer = URLSafeTimedSerializer(keys_, salt=SALT)
        self._current = URLSafeTimedSerializer(secret, salt=SALT)
        self._legacy = URLSafeSerializer(keys_, salt=LEGACY_SALT)

    def read(self, request: Request) -> tuple[dict[str, Any], bool]:
        """(cookie data, whether it should be signed again); ``{}`` when none is valid."""
        raw = request.cookies.get(COOKIE)
        if not raw:
            return {}, True
        resign = False
        try:
            try:
                data, signed = self._current.loads(
                    raw, max_age=COOKIE_MAX_AGE, return_timestamp=True
                )
            except SignatureExpired:
                raise
            except BadSignature:
                if not self.retired:
                    raise
                # signed with a retired key: accepted, and signed again with the current one
                data, signed = self._signer.loads(
                    raw, max_age=COOKIE_MAX_AGE, return_timestamp=True
                )
                resign = True
        except SignatureExpired:
            return {}, True
        except BadSignature:
            try:
                data = self._legacy.loads(raw)
            except BadSignature:
                return {}, True
            if not isinstance(data, dict):
                return {}, True
            # an old cookie keeps its conversation, never its login
            return {k: data[k] for k in ("sid", "uid") if isinstance(data.get(k), str)}, True
        if not isinstance(data, dict):
            return {}, True
        return data, resign or time.time() - signed.timestamp() > REFRESH_AFTER

    def write(self, request: Request, response: Response, data: dict[str, Any]) -> None:
        response.set_cookie(
            COOKIE,
            self._signer.dumps(data),
            httponly=True,
            samesite="lax",  # a link from another site keeps the session; its forms cannot post
            max_age=COOKIE_MAX_AGE,
            secure=is_https(request),
        )

    def token_digest(self, token: str, key: bytes | None = None) -> str:
        mac = hmac.new(key or self._key, b"web-chat-token\x00" + token.encode(), hashlib.sha256)
        return base64.urlsafe_b64encode(mac.digest()[:18]).decode()

    def refresh_login(self, data: dict[str, Any], token: SecretStr | None) -> bool:
        """A login proven under a retired key is proven again under the current one
        (``data["tk"]`` replaced): it outlives the retired key.  Whether it was."""
        given = data.get("tk")
        if token is None or not isinstance(given, str) or not self.retired:
            return False
        value = token.get_secret_value()
        if hmac.compare_digest(given, self.token_digest(value)):
            return False  # already the current key's
        if not self.logged_in(data, token):
            return False
        data["tk"] = self.token_digest(value)
        return True

    def logged_in(self, data: dict[str, Any], token: SecretStr | None) -> bool:
        if token is None:
            return True
        given = data.get("tk")
        if not isinstance(given, str):
            return False
        # a login proven under a retired key still counts (one key switch logs no one out)
        return any(
            hmac.compare_digest(given, self.token_digest(token.get_secret_value(), key))
            for key in self._verify_keys
        )


class LoginThrottle:
    """At most :data:`LOGIN_MAX_FAILURES` login attempts per client address and window."""

    def __init__(self, redis: Redis) -> None:
        self.redis = redis

    @staticmethod
    def key(client: str) -> str:
        return f"{keys.PREFIX}web:login-attempts:{client}"

    async def attempt(self, client: str) -> int:
        """Count an attempt; 0 when it may go on, else the seconds until the next one may."""
        key = self.key(client)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.set(key, 0, ex=LOGIN_WINDOW_SECS, nx=True)
            pipe.incr(key)
            pipe.ttl(key)
            _, count, ttl = await pipe.execute()
        if int(count) > LOGIN_MAX_FAILURES:
            return max(int(ttl), 1)
        return 0

    async def succeeded(self, client: str) -> None:
        await self.redis.delete(self.key(client))


class Conversations:
    """The recent conversations of each browser (``uid``): a tab may still show one."""

    def __init__(self, redis: Redis) -> None:
        self.redis = redis

    @staticmethod
    def key(uid: str) -> str:
        return f"{keys.PREFIX}web:conversations:{uid}"

    async def remember(self, uid: str, *sids: str) -> None:
        key = self.key(uid)
        now = time.time()
        async with self.redis.pipeline(transaction=True) as pipe:
            # later ones newer: the oldest are the first to go
            pipe.zadd(key, {sid: now + i / 1000 for i, sid in enumerate(sids)})
            pipe.zremrangebyrank(key, 0, -RECENT_CONVERSATIONS - 1)
            pipe.expire(key, COOKIE_MAX_AGE)
            await pipe.execute()

    async def has(self, uid: str, sid: str) -> bool:
        return await self.redis.zscore(self.key(uid), sid) is not None
