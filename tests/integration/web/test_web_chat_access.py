"""Who may use the web chat: host names (DNS rebinding), the login cookie, login throttling."""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest
from itsdangerous import TimestampSigner, URLSafeSerializer, URLSafeTimedSerializer
from pydantic import SecretStr

from agent_core.store import keys
from agent_core.store.pacing import Pacer
from channels.base import ChannelDeps
from channels.web import channel as web_channel
from channels.web.channel import WebChannel, WebSettings
from channels.web.guard import HostPolicy, host_of
from channels.web.session import COOKIE, COOKIE_MAX_AGE, LEGACY_SALT, LOGIN_MAX_FAILURES, SALT
from tests.integration.inbox import ever_published
from tests.integration.web.webtools import client_for as _client


# ------------------------------------------------------------------ host names
async def test_a_page_on_another_host_name_cannot_drive_the_chat(runtime: Any, redis: Any) -> None:
    """DNS rebinding: attacker.example resolves to 127.0.0.1 after its page loaded, so
    the page's script is same-origin with the chat (Host: attacker.example:PORT).  On
    a loopback address the chat answers only to localhost names: 403, nothing done,
    no cookie handed out."""
    async with runtime("all", serve_web=True) as rt, _client(rt) as client:
        foreign = {
            "host": f"attacker.example:{rt.port}",
            "origin": f"http://attacker.example:{rt.port}",
        }
        page = await client.get("/", headers=foreign)
        me = await client.get("/api/me", headers=foreign)
        r = await client.post("/api/messages", json={"text": "hello from evil"}, headers=foreign)
        js = await client.get("/static/app.js", headers=foreign)
        assert [x.status_code for x in (page, me, r, js)] == [403, 403, 403, 403]
        assert "set-cookie" not in page.headers and "set-cookie" not in me.headers
        assert "attacker.example" in page.text and "PUBLIC_URL" in page.text
        assert r.json()["error"] and page.headers["x-content-type-options"] == "nosniff"
        # a cookie obtained on the right name does not help either
        await client.get("/")
        r = await client.post("/api/messages", json={"text": "hello from evil"}, headers=foreign)
        assert r.status_code == 403
        for name in ("localhost", "127.0.0.1", "[::1]", "LOCALHOST."):
            ok = await client.get("/api/me", headers={"host": f"{name}:{rt.port}"})
            assert ok.status_code == 200, name
        # with a token set a loopback chat still answers only to localhost, and the
        # refusal says so (not "set PUBLIC_URL (or WEB_CHAT_TOKEN)": it is set)
        rt.channels["web"].settings.web_chat_token = SecretStr("a-long-enough-token")
        page = await client.get("/", headers=foreign)
        assert page.status_code == 403
        assert "set PUBLIC_URL to a URL with that name" in page.text
        assert "WEB_CHAT_TOKEN does not open other names on a loopback address" in page.text
    assert await ever_published(redis) == 0


async def test_unknown_routes_answer_only_to_the_chats_host_names(
    runtime: Any,
) -> None:
    """A rebound page must not probe routes; /healthz and /readyz stay open to any Host
    (platform health checks); all carry the headers."""
    async with runtime("all", serve_web=True) as rt, _client(rt) as client:
        foreign = {"host": f"attacker.example:{rt.port}"}
        r = await client.get("/no-such-route", headers=foreign)
        assert r.status_code == 403, r.status_code
        assert "attacker.example" in r.text
        assert r.headers["content-security-policy"].startswith("default-src 'none'")
        r = await client.post("/healthz", headers=foreign)
        assert r.status_code == 403
        for path, status in (("/healthz", 200), ("/readyz", 200)):
            r = await client.get(path, headers=foreign)
            assert r.status_code == status and r.headers["x-frame-options"] == "DENY", path
        ok = await client.get("/metrics")
        assert ok.status_code == 200 and "parley_" in ok.text
        assert ok.headers["x-content-type-options"] == "nosniff"
        for method, path, status in (("GET", "/no-such-route", 404), ("POST", "/healthz", 405)):
            r = await client.request(method, path)
            assert r.status_code == status and "content-security-policy" in r.headers


async def test_metrics_answer_a_scraper_by_any_host_name_but_no_other_sites_page(
    runtime: Any,
) -> None:
    """Prometheus scrapes by a service name (parley:8000 in docker-compose,
    parley.default.svc in Kubernetes) and sends neither Sec-Fetch-Site nor Origin:
    200. A browser's read from another site's page, or from a page whose name was
    rebound to the chat (same-origin with that name), is refused; the headers stay."""
    async with runtime("all", serve_web=True) as rt, _client(rt) as client:
        for name in ("parley:8000", "parley.default.svc", f"attacker.example:{rt.port}"):
            r = await client.get("/metrics", headers={"host": name})
            assert r.status_code == 200 and "parley_" in r.text, (name, r.status_code)
            assert r.headers["x-frame-options"] == "DENY"
        here = f"127.0.0.1:{rt.port}"
        for headers in (
            {"host": here, "sec-fetch-site": "cross-site", "origin": "http://evil.example"},
            {"host": here, "sec-fetch-site": "same-site"},
            {"host": here, "origin": "http://evil.example"},
            # a DNS-rebound page: same-origin as far as the browser knows
            {"host": f"attacker.example:{rt.port}", "sec-fetch-site": "same-origin"},
            {
                "host": "parley:8000",
                "sec-fetch-site": "same-origin",
                "origin": "http://parley:8000",
            },
        ):
            r = await client.get("/metrics", headers=headers)
            assert r.status_code == 403 and "parley_" not in r.text, (headers, r.status_code)
            assert r.headers["content-security-policy"].startswith("default-src 'none'")
        for headers in (
            {"host": here, "sec-fetch-site": "same-origin"},  # the chat's own page
            {"host": "parley:8000", "sec-fetch-site": "none"},  # typed in the address bar
        ):
            r = await client.get("/metrics", headers=headers)
            assert r.status_code == 200 and "parley_" in r.text, headers


def test_host_names_the_chat_answers_to() -> None:
    def allows(policy: HostPolicy, header: str, token: bool = False) -> bool:
        return policy.allows(host_of(header), token_set=token)

    laptop = HostPolicy.build("", "", on_heroku=False)
    assert laptop.loopback
    assert allows(laptop, "localhost:8000") and allows(laptop, "[::1]:8000")
    assert not allows(laptop, "evil.example:8000")
    assert not allows(laptop, "evil.example", token=True)
    assert not allows(laptop, "192.168.1.5:8000")  # only loopback names on a loopback bind
    assert not allows(laptop, "localhost:notaport") and not allows(laptop, "")
    # behind a local reverse proxy: PUBLIC_URL's name too
    proxied = HostPolicy.build("127.0.0.1", "https://chat.example.com/", on_heroku=False)
    assert allows(proxied, "chat.example.com") and not allows(proxied, "other.example.com")
    # listening beyond this machine
    docker = HostPolicy.build("0.0.0.0", "", on_heroku=False)
    assert not docker.loopback
    assert allows(docker, "localhost:8000") and allows(docker, "192.168.1.5:8000")
    assert allows(docker, "[2001:db8::1]:8000")  # an address cannot be rebound
    assert not allows(docker, "rebound.example:8000")
    assert allows(docker, "rebound.example:8000", token=True)  # the token protects it
    named = HostPolicy.build("parley.lan", "", on_heroku=False)
    assert allows(named, "parley.lan:8000") and not allows(named, "evil.lan:8000")
    heroku = HostPolicy.build("", "https://my-parley.herokuapp.com", on_heroku=True)
    assert not heroku.loopback
    assert allows(heroku, "my-parley.herokuapp.com")
    assert not allows(heroku, "someone-else.herokuapp.com")


def test_the_refusal_names_what_opens_another_name() -> None:
    """Loopback: only PUBLIC_URL's name opens one (a token does not); beyond this
    machine: PUBLIC_URL or WEB_CHAT_TOKEN; no Host header: nothing to set."""
    laptop = HostPolicy.build("", "", on_heroku=False)
    for token in (False, True):
        text = laptop.remedy("chat.lan", token_set=token)
        assert "PUBLIC_URL" in text and "WEB_CHAT_TOKEN does not open" in text
    docker = HostPolicy.build("0.0.0.0", "", on_heroku=False)
    text = docker.remedy("chat.lan", token_set=False)
    assert "PUBLIC_URL" in text and "or set WEB_CHAT_TOKEN" in text
    assert "Host header" in laptop.remedy(None, token_set=True)


async def _web_channel(redis: Any, **settings: Any) -> WebChannel:
    ch = WebChannel(
        WebSettings(web_chat_enabled=True, **settings),
        ChannelDeps(redis=redis, pacer=Pacer(redis)),
    )
    await ch.initialize()
    return ch


async def test_start_up_warns_about_a_short_token_and_an_unreachable_name(
    redis: Any, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="channels.web.channel"):
        await _web_channel(redis, web_chat_token=SecretStr("0150"))
        await _web_channel(redis, host="0.0.0.0")
        await _web_channel(redis, web_chat_token=SecretStr("x" * 24))
    lines = [r.getMessage() for r in caplog.records]
    assert any("WEB_CHAT_TOKEN is 4 characters long" in m and "16" in m for m in lines), lines
    assert any("set PUBLIC_URL" in m for m in lines), lines
    assert "0150" not in " ".join(lines)
    assert sum("WEB_CHAT_TOKEN is" in m for m in lines) == 1


# ------------------------------------------------------------------ the login cookie
async def test_a_login_made_while_no_token_was_set_does_not_survive_setting_one(
    runtime: Any,
) -> None:
    """Whoever reached the chat before WEB_CHAT_TOKEN was set is not logged in once it
    is: a login without a token proves nothing and is not written into the cookie."""
    async with runtime("all", serve_web=True) as rt, _client(rt) as client:
        await client.get("/")
        assert (await client.post("/api/login", json={"token": "whatever"})).status_code == 200
        rt.channels["web"].settings.web_chat_token = SecretStr("now-protected")
        assert (await client.get("/api/me")).json()["needs_token"] is True
        assert (await client.post("/api/messages", json={"text": "hi"})).status_code == 401


async def test_changing_the_token_logs_out_the_old_one(runtime: Any) -> None:
    """The cookie proves *which* token was given (a digest of it): rotating a leaked
    WEB_CHAT_TOKEN logs out everyone who logged in with the old one."""
    async with runtime("all", serve_web=True) as rt:
        settings = rt.channels["web"].settings
        settings.web_chat_token = SecretStr("leaked")
        async with _client(rt) as client:
            await client.get("/")
            assert (await client.post("/api/login", json={"token": "leaked"})).status_code == 200
            assert "leaked" not in client.cookies[COOKIE]
            assert (await client.get("/api/me")).json()["needs_token"] is False
            settings.web_chat_token = SecretStr("rotated")
            assert (await client.get("/api/me")).json()["needs_token"] is True
            assert (await client.post("/api/messages", json={"text": "hi"})).status_code == 401
            assert (await client.post("/api/login", json={"token": "rotated"})).status_code == 200
            assert (await client.post("/api/messages", json={"text": "hi"})).status_code == 202


async def test_a_passphrase_with_spaces_and_accents_logs_in(
    runtime: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """WEB_CHAT_TOKEN is typed into the page and sent in the JSON body: spaces and
    accents are fine, and an accent written decomposed in the variable matches the
    composed one a browser sends."""
    from agent_core.settings import load
    from channels.web.channel import WebSettings

    monkeypatch.setenv("WEB_CHAT_TOKEN", "mot de passe\u0301 tre\u0300s long\n")
    token = load(WebSettings, _env_file=None).web_chat_token
    async with runtime("all", serve_web=True) as rt:
        rt.channels["web"].settings.web_chat_token = token
        async with _client(rt) as client:
            await client.get("/")
            r = await client.post("/api/login", json={"token": "mot de passe"})
            assert r.status_code == 403
            r = await client.post("/api/login", json={"token": "mot de passé très long"})
            assert r.status_code == 200
            assert (await client.post("/api/messages", json={"text": "hi"})).status_code == 202


async def test_the_server_refuses_a_cookie_older_than_its_lifetime(runtime: Any) -> None:
    async with runtime("all", serve_web=True) as rt, _client(rt) as client:
        secret = rt.channels["web"]._secret.decode()

        class LongAgo(TimestampSigner):
            def get_timestamp(self) -> int:
                return int(time.time()) - COOKIE_MAX_AGE - 60

        old = URLSafeTimedSerializer(secret, salt=SALT, signer=LongAgo)
        client.cookies.set(COOKIE, old.dumps({"sid": "oldsession1234", "uid": "olduser12345"}))
        r = await client.post("/api/messages", json={"text": "hi"})
        assert r.status_code == 400  # no session: load the page first
        client.cookies.clear()
        client.cookies.set(COOKIE, old.dumps({"sid": "oldsession1234", "uid": "olduser12345"}))
        assert "oldsession1234" not in (await client.get("/api/me")).json()["thread"]


async def test_a_request_without_a_session_says_so_and_sends_sign_the_cookie_again(
    runtime: Any,
) -> None:
    """No cookie (cleared, or expired while a tab stayed open): a message and a press
    both answer 400 "no session" (a press answered 401 "token required" with no token
    configured, so the page never knew to start again).  A message or a press with a
    cookie older than a day signs it again, like the page and /api/me, so a tab left
    open and in use is not cut off after 30 days."""
    async with runtime("all", serve_web=True) as rt, _client(rt) as client:
        r = await client.post("/api/actions", json={"token": "ap:x:a", "thread": "web:local:x:"})
        assert r.status_code == 400, r.text
        assert r.json()["no_session"] is True and "no session" in r.json()["error"]
        r = await client.post("/api/messages", json={"text": "hi"})
        assert r.status_code == 400 and r.json()["no_session"] is True, r.text

        secret = rt.channels["web"]._secret.decode()

        class TwoDaysAgo(TimestampSigner):
            def get_timestamp(self) -> int:
                return int(time.time()) - 2 * 86_400

        old = URLSafeTimedSerializer(secret, salt=SALT, signer=TwoDaysAgo)
        data = {"sid": "oldsession1234", "uid": "olduser12345"}
        client.cookies.set(COOKIE, old.dumps(data))
        r = await client.post("/api/messages", json={"text": "hi"})
        assert r.status_code == 202, r.text
        assert COOKIE in r.headers.get("set-cookie", ""), r.headers
        again = await client.post("/api/messages", json={"text": "hi again"})
        assert again.status_code == 202 and "set-cookie" not in again.headers  # fresh now
        client.cookies.clear()
        client.cookies.set(COOKIE, old.dumps(data))
        r = await client.post(
            "/api/actions", json={"token": "ap:x:a", "thread": "web:local:oldsession1234:"}
        )
        assert r.status_code == 202, r.text
        assert COOKIE in r.headers.get("set-cookie", ""), r.headers
        assert (await client.get("/api/me")).json()["thread"] == "web:local:oldsession1234:"


async def test_a_cookie_from_before_timestamps_keeps_its_conversation_not_its_login(
    runtime: Any,
) -> None:
    async with runtime("all", serve_web=True) as rt, _client(rt) as client:
        ch = rt.channels["web"]
        legacy = URLSafeSerializer(ch._secret.decode(), salt=LEGACY_SALT)
        client.cookies.set(
            COOKIE, legacy.dumps({"sid": "legacysid12345", "uid": "legacyuid1234", "auth": True})
        )
        ch.settings.web_chat_token = SecretStr("needed-now")
        r = await client.get("/api/me")
        assert r.json() == {"needs_token": True, "thread": "web:local:legacysid12345:"}
        assert "set-cookie" in r.headers  # signed again in the new form
        again = await client.get("/api/me")
        assert again.json() == r.json() and "set-cookie" not in again.headers


# ------------------------------------------------------------------ guessing the token
async def test_login_guesses_are_throttled(runtime: Any, redis: Any) -> None:
    """Wrong tokens are counted per client address (a fresh session per guess does not
    help): after LOGIN_MAX_FAILURES the login answers 429 with Retry-After, even for
    the right token, until the window ends."""
    async with runtime("all", serve_web=True) as rt:
        rt.channels["web"].settings.web_chat_token = SecretStr("0150")
        async with _client(rt) as client:
            codes = []
            for guess in range(200):
                client.cookies.clear()
                r = await client.post("/api/login", json={"token": f"{guess:04d}"})
                codes.append(r.status_code)
                if r.status_code in (200, 429):
                    break
            assert codes == [403] * LOGIN_MAX_FAILURES + [429], codes
            assert 0 < int(r.headers["retry-after"]) <= 600
            assert "try again" in r.json()["error"]
            r = await client.post("/api/login", json={"token": "0150"})
            assert r.status_code == 429
            # the window ends: the right token works and clears the count
            await redis.delete(f"{keys.PREFIX}web:login-attempts:127.0.0.1")
            assert (await client.post("/api/login", json={"token": "0150"})).status_code == 200
            assert not await redis.exists(f"{keys.PREFIX}web:login-attempts:127.0.0.1")


async def _fail_logins(client: Any, n: int, forwarded_for: str) -> list[int]:
    codes = []
    for guess in range(n):
        client.cookies.clear()
        r = await client.post(
            "/api/login", json={"token": f"{guess:04d}"}, headers={"x-forwarded-for": forwarded_for}
        )
        codes.append(r.status_code)
    return codes


async def test_behind_a_proxy_on_this_machine_each_client_has_its_own_count(
    runtime: Any, redis: Any
) -> None:
    """A reverse proxy on the same machine (connections from 127.0.0.1, an address in
    uvicorn's FORWARDED_ALLOW_IPS) names the client in X-Forwarded-For: one client
    guessing does not lock the others out."""
    async with runtime("all", serve_web=True) as rt:
        rt.channels["web"].settings.web_chat_token = SecretStr("0150")
        async with _client(rt) as client:
            codes = await _fail_logins(client, LOGIN_MAX_FAILURES + 1, "203.0.113.5")
            assert codes == [403] * LOGIN_MAX_FAILURES + [429], codes
            assert await _fail_logins(client, 1, "203.0.113.6") == [403]
            assert await redis.exists(f"{keys.PREFIX}web:login-attempts:203.0.113.5")
            assert not await redis.exists(f"{keys.PREFIX}web:login-attempts:127.0.0.1")


async def test_x_forwarded_for_from_an_untrusted_address_is_ignored(
    runtime: Any, redis: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With FORWARDED_ALLOW_IPS naming another proxy, a client cannot pick a fresh
    address per guess by sending the header itself."""
    monkeypatch.setenv("FORWARDED_ALLOW_IPS", "10.9.9.9")
    async with runtime("all", serve_web=True) as rt:
        rt.channels["web"].settings.web_chat_token = SecretStr("0150")
        async with _client(rt) as client:
            codes = []
            for i in range(LOGIN_MAX_FAILURES + 1):
                codes += await _fail_logins(client, 1, f"203.0.113.{i}")
            assert codes == [403] * LOGIN_MAX_FAILURES + [429], codes
            assert await redis.exists(f"{keys.PREFIX}web:login-attempts:127.0.0.1")


# ------------------------------------------------------------ the cookie key
async def test_web_processes_share_the_cookie_key_again_after_redis_lost_it(
    runtime: Any, redis: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The shared cookie key vanishes from Redis (a wipe, a failover without
    persistence, eviction).  Web A, started before, still has the old key; web B,
    started after, makes a new one.  Both used to sign with their own key for good,
    so every request the router sent to the other one was "no session" / "token
    required".  Now A checks the key (here on every request: KEY_CHECK_SECS 0),
    switches to Redis's, and keeps the old one for verifying, as B learns it too:
    a cookie signed by either works on both, logged in, in the same conversation."""
    monkeypatch.setattr(web_channel, "KEY_CHECK_SECS", 0.0, raising=False)
    async with runtime("web", serve_web=True) as a, _client(a) as ca:
        a.channels["web"].settings.web_chat_token = SecretStr("a-long-enough-token-1234")
        await ca.get("/")
        assert (await ca.post("/api/login", json={"token": "a-long-enough-token-1234"})).is_success
        thread = (await ca.get("/api/me")).json()["thread"]
        old_cookie = next(c.value for c in ca.cookies.jar if c.name == COOKIE)
        await redis.delete(keys.PREFIX + "web:cookie-secret")  # the shared key is gone
        async with runtime("web", serve_web=True) as b, _client(b) as cb:
            b.channels["web"].settings.web_chat_token = SecretStr("a-long-enough-token-1234")
            with caplog.at_level(logging.WARNING, logger="channels.web.channel"):
                me = await ca.get("/api/me")  # A notices, and switches to B's key
            assert any("cookie key in Redis changed" in r.getMessage() for r in caplog.records)
            assert me.json() == {"needs_token": False, "thread": thread}
            assert a.channels["web"]._secret == b.channels["web"]._secret
            cb.cookies.clear()
            cb.cookies.set(COOKIE, old_cookie)  # the browser's cookie, signed by A's old key
            r = await cb.post("/api/messages", json={"text": "hi", "id": "abcdefgh02"})
            assert r.status_code == 202, (r.status_code, r.text)
            assert r.json()["thread"] == thread
            # signed again with the shared key: accepted by both, still logged in
            resigned = r.cookies[COOKIE]
            assert resigned != old_cookie
            ca.cookies.clear()
            ca.cookies.set(COOKIE, resigned)
            r = await ca.post("/api/messages", json={"text": "again", "id": "abcdefgh03"})
            assert r.status_code == 202, (r.status_code, r.text)
            assert r.json()["thread"] == thread


async def test_a_process_checks_the_cookie_key_when_a_cookie_fails_to_verify(
    runtime: Any, redis: Any
) -> None:
    """A cookie another process signed after a key switch this one has not seen yet
    (its periodic check is not due): the failed check makes it look at once."""
    async with runtime("web", serve_web=True) as a, _client(a) as ca:
        await ca.get("/")
        thread = (await ca.get("/api/me")).json()["thread"]
        await redis.set(keys.PREFIX + "web:cookie-secret", "a-key-another-process-switched-to")
        other = URLSafeTimedSerializer("a-key-another-process-switched-to", salt=SALT)
        sid = thread.split(":")[2]
        ca.cookies.set(COOKIE, other.dumps({"sid": sid, "uid": sid}))
        r = await ca.post("/api/messages", json={"text": "hi", "id": "abcdefgh04"})
        assert r.status_code == 202, (r.status_code, r.text)
        assert r.json()["thread"] == thread


async def test_a_set_web_chat_secret_is_the_key_whatever_redis_holds(
    runtime: Any, redis: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WEB_CHAT_SECRET", "a-configured-cookie-secret-0123456789")
    monkeypatch.setattr(web_channel, "KEY_CHECK_SECS", 0.0, raising=False)
    async with runtime("web", serve_web=True) as a, _client(a) as ca:
        await ca.get("/")
        await redis.set(keys.PREFIX + "web:cookie-secret", "something-else")
        assert (await ca.post("/api/messages", json={"text": "hi"})).status_code == 202
        assert a.channels["web"]._secret == b"a-configured-cookie-secret-0123456789"


async def test_a_login_signed_again_after_a_switch_outlives_the_retired_key(
    runtime: Any, redis: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A login proven under a key that was then retired is proven again under the
    current one with the next request: when the retired key is gone (30 days after
    the switch), the browser is still logged in."""
    token = "a-long-enough-token-1234"
    monkeypatch.setattr(web_channel, "KEY_CHECK_SECS", 0.0, raising=False)
    async with runtime("web", serve_web=True) as a, _client(a) as ca:
        a.channels["web"].settings.web_chat_token = SecretStr(token)
        await ca.get("/")
        assert (await ca.post("/api/login", json={"token": token})).is_success
        await redis.set(keys.PREFIX + "web:cookie-secret", "a-new-key-after-a-wipe-0123456")
        r = await ca.post("/api/messages", json={"text": "hi", "id": "abcdefgh01"})
        assert r.status_code == 202, r.text
        await redis.delete(web_channel.RETIRED_KEY)  # its 30 days are over
        await redis.set(keys.PREFIX + "web:cookie-secret", "a-new-key-after-a-wipe-0123456")
        assert (await ca.get("/api/me")).json()["needs_token"] is False


async def test_a_retired_key_is_dropped_after_its_30_days_whatever_switches_come_later(
    runtime: Any, redis: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each retired key keeps its own 30 days from when it was retired: a later
    switch renews none (a flapping failover would otherwise keep every old key
    verifying forged cookies for good), and at most the last few are kept."""
    monkeypatch.setattr(web_channel, "KEY_CHECK_SECS", 0.0, raising=False)
    async with runtime("web", serve_web=True) as a, _client(a) as ca:
        await ca.get("/")
        long_ago = int((time.time() - COOKIE_MAX_AGE - 60) * 1000)
        await redis.zadd(web_channel.RETIRED_KEY, {"a-key-retired-31-days-ago": long_ago})
        await redis.set(keys.PREFIX + "web:cookie-secret", "a-newer-key-0123456789abcdef")
        await ca.get("/api/me")  # this process checks the key: a switch
        kept = [k.decode() for k in await redis.zrange(web_channel.RETIRED_KEY, 0, -1)]
        assert "a-key-retired-31-days-ago" not in kept and len(kept) == 1, kept
        assert "a-key-retired-31-days-ago" not in a.channels["web"].sessions.retired
        for n in range(web_channel.RETIRED_MAX + 3):  # many switches: the last few kept
            await redis.set(keys.PREFIX + "web:cookie-secret", f"switch-{n}-0123456789abcdef")
            await ca.get("/api/me")
        assert await redis.zcard(web_channel.RETIRED_KEY) == web_channel.RETIRED_MAX
