"""`parley release` and `parley doctor` on what would take a deployment down or
leave it deaf: rejected platform tokens, a stale Telegram webhook, Telegram's flood
control, failing webhook deliveries, the gateway's Redis connections, a
half-configured Slack, an http:// PUBLIC_URL and a shutdown grace past Heroku's kill."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from agent_core.errors import ConfigError
from agent_core.llm.settings import LLMSettings
from agent_core.settings import CoreSettings
from agent_core.store.embedded import EmbeddedValkey
from bots.ops import doctor, release
from bots.runtime import Runtime
from bots.settings import Settings
from channels import discord as discord_pkg
from channels import slack as slack_pkg
from channels import telegram as telegram_pkg
from channels.discord.settings import DiscordSettings
from channels.slack.settings import SlackSettings
from channels.telegram.settings import TelegramSettings
from channels.web.channel import WebSettings
from tests.fakes.discord import FakeDiscord
from tests.fakes.llm_servers import FakeLLMServer
from tests.fakes.slack import FakeSlack
from tests.fakes.telegram import TOKEN, WEBHOOK_SECRET, FakeTelegram
from tests.integration.conftest import free_port

PUBLIC = "https://parley.example"


@asynccontextmanager
async def telegram_and_llm() -> AsyncIterator[tuple[FakeTelegram, FakeLLMServer]]:
    """The fake Bot API and a fake LLM, started for one test."""
    fake = FakeTelegram()
    await fake.start()
    try:
        async with FakeLLMServer() as llm:
            yield fake, llm
    finally:
        await fake.stop()


def _llm(url: str) -> LLMSettings:
    return LLMSettings(llm_backend="openai_compatible", llm_base_url=url, llm_model="fake")


def _with(
    valkey: EmbeddedValkey, llm_url: str, name: str, platform: Any, module: Any, **core: Any
) -> Settings:
    return Settings(
        core=CoreSettings(redis_url=valkey.url, **core),
        llm=_llm(llm_url),
        web=WebSettings(web_chat_enabled=False),
        platforms={name: platform},
        modules={name: module},
    )


def _telegram(valkey: EmbeddedValkey, fake: FakeTelegram, llm_url: str, public: str) -> Settings:
    tg = TelegramSettings(
        telegram_bot_token=TOKEN,  # type: ignore[arg-type]
        telegram_api_base_url=fake.base_url,
        telegram_webhook_secret=WEBHOOK_SECRET,  # type: ignore[arg-type]
    )
    return _with(valkey, llm_url, "telegram", tg, telegram_pkg, public_url=public)


# -- a rejected Slack / Discord token fails the deploy -----------------------------


async def test_release_refuses_a_discord_token_every_process_would_refuse(
    valkey: EmbeddedValkey, redis: Any
) -> None:
    """Every process (web included, which serves the Telegram and Slack webhooks)
    starts every channel and refuses to start on a revoked Discord token: the
    release fails the deploy first, with Discord's one line."""
    fake = await FakeDiscord().start()
    try:
        async with FakeLLMServer() as llm:
            dc = DiscordSettings(
                discord_bot_token="revoked.token.value",  # type: ignore[arg-type]
                discord_api_base_url=fake.api_base,
            )
            s = _with(valkey, llm.openai_url, "discord", dc, discord_pkg)
            with pytest.raises(ConfigError) as web_refused:
                async with Runtime(s, "web"):
                    pass
            with pytest.raises(ConfigError) as refused:
                await release(s)
    finally:
        await fake.stop()
    assert refused.value.problems == web_refused.value.problems
    assert refused.value.problems[0].startswith("DISCORD_BOT_TOKEN:")
    assert "\n" not in refused.value.problems[0]


async def test_release_refuses_a_rejected_slack_token_and_accepts_a_good_one(
    valkey: EmbeddedValkey, redis: Any
) -> None:
    fake = FakeSlack()
    await fake.start()
    try:
        async with FakeLLMServer() as llm:

            def slack(token: str) -> Settings:
                sl = SlackSettings(
                    slack_bot_token=token,  # type: ignore[arg-type]
                    slack_signing_secret="s" * 32,  # type: ignore[arg-type]
                    slack_api_base_url=fake.api_url,
                )
                return _with(valkey, llm.openai_url, "slack", sl, slack_pkg)

            with pytest.raises(ConfigError) as refused:
                await release(slack("xoxb-revoked"))
            done = await release(slack(fake.bot_token))
    finally:
        await fake.stop()
    assert refused.value.problems[0].startswith("SLACK_BOT_TOKEN:"), refused.value.problems
    assert "slack: token accepted" in done


async def test_release_goes_on_with_a_warning_when_discord_cannot_be_reached(
    valkey: EmbeddedValkey, redis: Any
) -> None:
    """Unreachable is not rejected: the processes start and retry."""
    async with FakeLLMServer() as llm:
        dc = DiscordSettings(
            discord_bot_token="some.token.value",  # type: ignore[arg-type]
            discord_api_base_url=f"http://127.0.0.1:{free_port()}/api/v10",
        )
        done = await release(_with(valkey, llm.openai_url, "discord", dc, discord_pkg))
    said = [line for line in done if line.startswith("discord: warning:")]
    assert said and "could not reach" in said[0], done


# -- Telegram in the release phase --------------------------------------------------


async def test_release_in_polling_mode_deletes_a_stale_webhook_and_says_so(
    valkey: EmbeddedValkey, redis: Any
) -> None:
    """PUBLIC_URL unset to poll from the gateway: a webhook left at Telegram would
    have every getUpdates refused (409 Conflict), so the release removes it."""
    async with telegram_and_llm() as (fake, llm):
        await release(_telegram(valkey, fake, llm.openai_url, PUBLIC))
        assert fake.webhook["url"]  # registered by the first release
        done = await release(_telegram(valkey, fake, llm.openai_url, ""))
        assert fake.webhook["url"] == ""
        again = await release(_telegram(valkey, fake, llm.openai_url, ""))
    said = [line for line in done if line.startswith("telegram: polling mode")]
    assert len(said) == 1 and "deleted the webhook" in said[0] and PUBLIC in said[0], done
    assert any(
        line.startswith("telegram: polling mode") and "no webhook set" in line for line in again
    )


async def test_release_goes_on_with_a_warning_on_telegram_flood_control(
    valkey: EmbeddedValkey, redis: Any
) -> None:
    """A 429 (or an outage) at Telegram does not refuse the deploy: the dynos would
    start fine and the webhook set by an earlier release stays."""
    async with telegram_and_llm() as (fake, llm):
        s = _telegram(valkey, fake, llm.openai_url, PUBLIC)
        await release(s)
        fake.fail_next("getMe", 429, retry_after=30)
        on_getme = await release(s)
        fake.fail_next("setWebhook", 429, retry_after=30)
        on_set = await release(s)
        fake.fail_next("setWebhook", 400, "Bad Request: bad webhook: IP address is reserved")
        with pytest.raises(ConfigError) as refused:
            await release(s)
        url = fake.webhook["url"]
    for done in (on_getme, on_set):
        said = [line for line in done if line.startswith("telegram")]
        assert len(said) == 1 and said[0].startswith("telegram: warning:"), said
        assert "429" in said[0] and "30 s" in said[0], said
    assert refused.value.problems[0].startswith("setWebhook failed:")
    assert url == PUBLIC + "/telegram/webhook"


async def test_release_still_fails_on_a_rejected_telegram_token(
    valkey: EmbeddedValkey, redis: Any
) -> None:
    fake = FakeTelegram()
    await fake.start()
    fake.revoked = True
    try:
        async with FakeLLMServer() as llm:
            for public in (PUBLIC, ""):  # webhook mode, and polling mode
                with pytest.raises(ConfigError) as refused:
                    await release(_telegram(valkey, fake, llm.openai_url, public))
                assert "TELEGRAM_BOT_TOKEN: rejected" in refused.value.problems[0]
    finally:
        await fake.stop()


# -- doctor on the Telegram webhook --------------------------------------------------


async def test_doctor_reports_a_recent_webhook_delivery_error_and_many_pending_updates(
    valkey: EmbeddedValkey, redis: Any
) -> None:
    """Registered at the right URL but Telegram says deliveries fail (a wrong secret:
    403; web scaled to 0: 503): a problem with Telegram's message. An old error is
    history; many pending updates alone are a warning."""
    async with telegram_and_llm() as (fake, llm):
        s = _telegram(valkey, fake, llm.openai_url, PUBLIC)
        await release(s)
        fake.webhook_report = {
            "last_error_date": int(time.time()) - 120,
            "last_error_message": "Wrong response from the webhook: 403 Forbidden",
            "pending_update_count": 57,
        }
        recent = {c.name: c for c in await doctor(s)}["telegram webhook"]
        fake.webhook_report = {
            "last_error_date": int(time.time()) - 3 * 86400,
            "last_error_message": "Wrong response from the webhook: 503 Service Unavailable",
            "pending_update_count": 500,
        }
        backlog = {c.name: c for c in await doctor(s)}["telegram webhook"]
        fake.webhook_report = {"last_error_date": int(time.time()) - 3 * 86400}
        old = {c.name: c for c in await doctor(s)}["telegram webhook"]
    assert not recent.ok, recent
    assert "403 Forbidden" in recent.detail and "57" in recent.detail, recent
    assert "TELEGRAM_WEBHOOK_SECRET" in recent.fix
    assert backlog.ok and backlog.warning and "500" in backlog.detail, backlog
    assert old.ok and not old.warning, old


async def test_doctor_on_an_http_public_url_says_it_must_be_https(
    valkey: EmbeddedValkey, redis: Any
) -> None:
    """set-webhook refuses http:// too: doctor names the setting, not that command."""
    async with telegram_and_llm() as (fake, llm):
        s = _telegram(valkey, fake, llm.openai_url, "http://parley.example")
        row = {c.name: c for c in await doctor(s)}["telegram webhook"]
    assert not row.ok
    assert "PUBLIC_URL must be https://" in row.detail, row
    assert "set-webhook" not in row.fix, row


async def test_doctor_in_polling_mode_with_no_webhook_is_ok(
    valkey: EmbeddedValkey, redis: Any
) -> None:
    """'(none: polling mode)' from webhook-info is not taken for a URL."""
    async with telegram_and_llm() as (fake, llm):
        s = _telegram(valkey, fake, llm.openai_url, "")
        row = {c.name: c for c in await doctor(s)}["telegram webhook"]
    assert row.ok and row.detail == "polling mode, no webhook set", row


# -- Redis connections with a gateway process ---------------------------------------


async def test_the_connection_check_counts_the_gateway_process_a_platform_needs(
    valkey: EmbeddedValkey, redis: Any
) -> None:
    """Telegram polling needs a gateway dyno: with 9 connections per process (app.json)
    and a server accepting 30, web + worker + gateway + one more is 36: a problem in
    doctor, a warning line in the release (which goes on)."""
    before = (await redis.config_get("maxclients"))["maxclients"]
    await redis.config_set("maxclients", 30)
    async with telegram_and_llm() as (fake, llm):
        tg = TelegramSettings(
            telegram_bot_token=TOKEN,  # type: ignore[arg-type]
            telegram_api_base_url=fake.base_url,
        )
        s = _with(
            valkey,
            llm.openai_url,
            "telegram",
            tg,
            telegram_pkg,
            redis_max_connections=6,
            redis_max_blocking_connections=2,
        )
        assert s.gateway_platforms() == ["telegram"]
        conn = {c.name: c for c in await doctor(s)}["redis connections"]
        done = await release(s)
        s.platforms, s.modules = {}, {}  # no gateway needed: 27 fit
        fits = {c.name: c for c in await doctor(s)}["redis connections"]
        await redis.config_set("maxclients", before)
    assert not conn.ok and "gateway" in conn.detail and "36" in conn.detail, conn
    assert any(line.startswith("redis connections: warning:") for line in done), done
    assert fits.ok, fits


# -- a half-configured Slack --------------------------------------------------------


async def test_a_slack_bot_token_without_its_secret_is_a_problem_in_doctor_and_a_release_line(
    valkey: EmbeddedValkey, redis: Any
) -> None:
    async with FakeLLMServer() as llm:
        sl = SlackSettings(slack_bot_token="xoxb-1-2-abc")  # type: ignore[arg-type]
        s = _with(valkey, llm.openai_url, "slack", sl, slack_pkg)
        row = {c.name: c for c in await doctor(s)}["slack"]
        done = await release(s)
    assert not row.ok and "SLACK_SIGNING_SECRET" in row.detail, row
    assert "SLACK_APP_TOKEN" in row.fix, row
    said = [line for line in done if line.startswith("slack")]
    assert len(said) == 1 and said[0].startswith("slack: warning: off:"), done


async def test_the_heroku_buttons_generated_webhook_secret_alone_is_no_half_configured_telegram(
    valkey: EmbeddedValkey, redis: Any
) -> None:
    """app.json generates TELEGRAM_WEBHOOK_SECRET for every app: without
    TELEGRAM_BOT_TOKEN (a Slack-only or Discord-only deploy) Telegram is simply off,
    not a problem in doctor nor a warning at every release."""
    async with FakeLLMServer() as llm:
        tg = TelegramSettings(telegram_webhook_secret="a" * 64)  # type: ignore[arg-type]
        s = _with(valkey, llm.openai_url, "telegram", tg, telegram_pkg)
        row = {c.name: c for c in await doctor(s)}["telegram"]
        done = await release(s)
    assert s.incomplete_platforms() == []
    assert row.ok and row.detail == "off (TELEGRAM_BOT_TOKEN not set)", row
    assert not [line for line in done if line.startswith("telegram")], done


# -- SHUTDOWN_GRACE_SECS against Heroku's SIGKILL -----------------------------------


async def test_a_shutdown_grace_past_herokus_kill_is_a_warning_on_a_dyno(
    valkey: EmbeddedValkey, redis: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with FakeLLMServer() as llm:

        def with_grace(secs: float) -> Settings:
            core = CoreSettings(redis_url=valkey.url, shutdown_grace_secs=secs)  # type: ignore[arg-type]
            return Settings(core=core, llm=_llm(llm.openai_url), web=WebSettings())

        off_heroku = await release(with_grace(40))
        monkeypatch.setenv("DYNO", "release.1")
        done = await release(with_grace(40))
        row = {c.name: c for c in await doctor(with_grace(25))}.get("shutdown")
        fine = await release(with_grace(20))
    said = [line for line in done if line.startswith("shutdown: warning:")]
    assert said and "SHUTDOWN_GRACE_SECS=40" in said[0] and "30 s" in said[0], done
    assert row is not None and row.ok and row.warning, row  # 25 + 5 reaches 30
    assert "SHUTDOWN_GRACE_SECS" in row.detail
    assert not any(line.startswith("shutdown") for line in off_heroku + fine)


@pytest.mark.parametrize("fault", ["service_unavailable", "ratelimited"])
async def test_release_goes_on_when_slack_is_down_or_rate_limited(
    valkey: EmbeddedValkey, redis: Any, fault: str
) -> None:
    fake = FakeSlack()
    await fake.start()
    try:
        async with FakeLLMServer() as llm:
            sl = SlackSettings(
                slack_bot_token=fake.bot_token,  # type: ignore[arg-type]
                slack_signing_secret="s" * 32,  # type: ignore[arg-type]
                slack_api_base_url=fake.api_url,
            )
            s = _with(valkey, llm.openai_url, "slack", sl, slack_pkg)
            if fault == "ratelimited":
                fake.rate_limit("auth.test", times=5, retry_after=0)
            else:
                fake.fail("auth.test", fault, times=5)
            done = await release(s)  # not a rejected token: the deploy goes on
    finally:
        await fake.stop()
    assert any(line.startswith("slack: warning:") for line in done), done


async def test_release_does_not_print_a_token_inside_the_deleted_webhook_url(
    valkey: EmbeddedValkey, redis: Any
) -> None:
    async with telegram_and_llm() as (fake, llm):
        fake.webhook = {"url": f"https://old-bot.herokuapp.com/{TOKEN}", "secret_token": ""}
        done = await release(_telegram(valkey, fake, llm.openai_url, ""))
    assert fake.webhook["url"] == ""  # deleted, as intended
    assert not any(TOKEN in line for line in done), done


# -- /metrics on a dyno --------------------------------------------------------------


async def test_public_metrics_on_a_dyno_are_a_warning_in_doctor_and_release(
    valkey: EmbeddedValkey, redis: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Heroku's Common Runtime puts the web dyno on the internet: with no
    METRICS_TOKEN anyone reads /metrics.  Doctor and release say so (a warning: the
    deploy goes on); with the token set they say nothing, and never show it."""
    token = "metrics-SECRET-token-0123456789"
    async with FakeLLMServer() as llm:

        def with_token(value: str | None) -> Settings:
            core = CoreSettings(redis_url=valkey.url, metrics_token=value)  # type: ignore[arg-type]
            return Settings(core=core, llm=_llm(llm.openai_url), web=WebSettings())

        monkeypatch.delenv("DYNO", raising=False)
        off_heroku = await release(with_token(None))
        monkeypatch.setenv("DYNO", "release.1")
        done = await release(with_token(None))
        row = {c.name: c for c in await doctor(with_token(None))}.get("metrics")
        protected = await release(with_token(token))
        protected_rows = await doctor(with_token(token))
    said = [line for line in done if line.startswith("metrics: warning:")]
    assert said and "/metrics is public" in said[0] and "METRICS_TOKEN" in said[0], done
    assert row is not None and row.ok and row.warning, row
    assert "/metrics is public" in row.detail and "METRICS_TOKEN" in row.fix, row
    assert not any(line.startswith("metrics") for line in off_heroku + protected)
    assert not any(c.name == "metrics" for c in protected_rows)
    text = " ".join(protected) + " ".join(f"{c.detail} {c.fix}" for c in protected_rows)
    assert token not in text
