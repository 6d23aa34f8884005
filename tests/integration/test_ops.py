"""`parley doctor` and `parley release` against fake Telegram and LLM servers."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from agent_core.errors import ConfigError
from agent_core.llm.settings import LLMSettings
from agent_core.settings import CoreSettings
from agent_core.store.client import make_clients
from agent_core.store.embedded import EmbeddedValkey
from bots.ops import doctor, release
from bots.settings import Settings
from channels import telegram as telegram_pkg
from channels.telegram.settings import TelegramSettings
from channels.web.channel import WebSettings
from tests.fakes.llm_servers import FakeLLMServer
from tests.fakes.telegram import TOKEN, WEBHOOK_SECRET, FakeTelegram
from tests.integration.conftest import free_port

PUBLIC = "https://parley.example"


def settings_for(valkey: EmbeddedValkey, fake: FakeTelegram, llm_url: str) -> Settings:
    return Settings(
        core=CoreSettings(redis_url=valkey.url, public_url=PUBLIC),  # type: ignore[arg-type]
        llm=LLMSettings(llm_backend="openai_compatible", llm_base_url=llm_url, llm_model="fake"),
        web=WebSettings(web_chat_enabled=False),
        platforms={
            "telegram": TelegramSettings(
                telegram_bot_token=TOKEN,  # type: ignore[arg-type]
                telegram_api_base_url=fake.base_url,
                telegram_webhook_secret=WEBHOOK_SECRET,  # type: ignore[arg-type]
            )
        },
        modules={"telegram": telegram_pkg},
    )


async def test_release_registers_the_webhook_and_doctor_agrees(
    valkey: EmbeddedValkey, redis: Any
) -> None:
    fake = FakeTelegram()
    await fake.start()
    try:
        async with FakeLLMServer() as llm:
            s = settings_for(valkey, fake, llm.openai_url)
            before = {c.name: c for c in await doctor(s)}
            assert before["redis"].ok and "version" in before["redis"].detail
            assert before["telegram"].ok
            assert not before["telegram webhook"].ok  # not registered yet
            assert "set-webhook" in before["telegram webhook"].fix
            assert before["llm"].ok

            done = await release(s)
            assert any("webhook set" in line for line in done)
            assert fake.webhook["url"] == PUBLIC + "/telegram/webhook"
            assert fake.webhook["secret_token"] == WEBHOOK_SECRET

            after = await doctor(s)
            assert all(c.ok for c in after), [c for c in after if not c.ok]
            text = " ".join(f"{c.detail} {c.fix}" for c in after)
            assert TOKEN not in text and WEBHOOK_SECRET not in text
    finally:
        await fake.stop()


async def test_doctor_names_an_unreachable_llm(valkey: EmbeddedValkey, redis: Any) -> None:
    fake = FakeTelegram()
    await fake.start()
    try:
        s = settings_for(valkey, fake, f"http://127.0.0.1:{free_port()}/v1")
        checks = {c.name: c for c in await doctor(s)}
        assert not checks["llm"].ok
        assert "openai_compatible" in checks["llm"].detail
    finally:
        await fake.stop()


async def test_doctor_warns_when_the_model_is_not_listed_and_names_the_backends_variables(
    valkey: EmbeddedValkey, redis: Any
) -> None:
    """The server lists its models: one that is not among them is a warning naming
    it (not a plain OK); a failure names the backend's own variables (OPENAI_* for
    openai, not LLM_*)."""
    fake = FakeTelegram()
    await fake.start()
    try:
        async with FakeLLMServer() as llm:
            s = settings_for(valkey, fake, llm.openai_url)  # LLM_MODEL=fake; lists fake-model
            check = {c.name: c for c in await doctor(s)}["llm"]
            assert check.ok and check.warning, check
            assert "'fake' is not one of them" in check.detail and "LLM_MODEL" in check.fix
            s.llm = LLMSettings(
                llm_backend="openai_compatible", llm_base_url=llm.openai_url, llm_model="fake-model"
            )
            check = {c.name: c for c in await doctor(s)}["llm"]
            assert check.ok and not check.warning, check
        s.llm = LLMSettings(
            llm_backend="openai",
            openai_api_key="sk-test",  # type: ignore[arg-type]
            openai_base_url=f"http://127.0.0.1:{free_port()}/v1",
        )
        check = {c.name: c for c in await doctor(s)}["llm"]
        assert not check.ok and check.fix == "check the OPENAI_* settings", check
    finally:
        await fake.stop()


async def test_doctor_reports_a_revoked_token(valkey: EmbeddedValkey, redis: Any) -> None:
    fake = FakeTelegram()
    await fake.start()
    fake.revoked = True
    try:
        async with FakeLLMServer() as llm:
            checks = {c.name: c for c in await doctor(settings_for(valkey, fake, llm.openai_url))}
            assert not checks["telegram"].ok
            assert TOKEN not in checks["telegram"].detail
    finally:
        await fake.stop()


async def test_doctor_reports_flood_control_on_getme_as_a_wait_not_the_token(
    valkey: EmbeddedValkey, redis: Any
) -> None:
    fake = FakeTelegram()
    await fake.start()
    fake.fail_next("getMe", 429, retry_after=30)
    try:
        async with FakeLLMServer() as llm:
            checks = {c.name: c for c in await doctor(settings_for(valkey, fake, llm.openai_url))}
            check = checks["telegram"]
            assert not check.ok
            assert "rate limited by Telegram" in check.detail and "retry in 30 s" in check.detail
            assert "getMe failed" not in check.detail and "retry in 30 s" in check.fix
            assert "settings" not in check.fix and "network" not in check.fix
    finally:
        await fake.stop()


async def test_release_fails_when_event_loop_uvloop_cannot_be_had(
    valkey: EmbeddedValkey, redis: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeTelegram()
    await fake.start()
    try:
        s = settings_for(valkey, fake, f"http://127.0.0.1:{free_port()}/v1")
        s.core.event_loop = "uvloop"
        monkeypatch.setitem(sys.modules, "uvloop", None)  # `import uvloop` raises ImportError
        with pytest.raises(ConfigError) as err:
            await release(s)
        assert "uvloop is not installed" in str(err.value)
        assert fake.webhook["url"] == ""  # stopped before registering the webhook
    finally:
        await fake.stop()


@pytest.fixture
async def private_valkey(tmp_path: Path) -> AsyncIterator[EmbeddedValkey]:
    """A server of this test's own, to fill up or restrict."""
    server = EmbeddedValkey(tmp_path / "data")
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


def _plain_settings(url: str) -> Settings:
    return Settings(
        core=CoreSettings(redis_url=url),  # type: ignore[arg-type]
        llm=LLMSettings(llm_backend="demo"),
        web=WebSettings(web_chat_enabled=False),
    )


async def _limited_user_url(server: EmbeddedValkey, *rules: str) -> str:
    """A URL for an ACL user allowed everything except ``rules`` take away."""
    admin = make_clients(server.url)
    try:
        await admin.redis.execute_command(
            "ACL", "SETUSER", "limited", "on", ">limited-pw", "~*", "&*", "+@all", *rules
        )
    finally:
        await admin.close()
    return server.url.replace("unix://", "unix://limited:limited-pw@", 1)


async def test_a_full_redis_fails_release_and_doctor_with_one_line(
    private_valkey: EmbeddedValkey,
) -> None:
    """Full with noeviction (Heroku Redis' default policy): PING and INFO work, writes
    do not.  Release and doctor say so instead of passing and every dyno crashing."""
    admin = make_clients(private_valkey.url)
    await admin.redis.config_set("maxmemory-policy", "noeviction")
    await admin.redis.config_set("maxmemory", "1")
    try:
        s = _plain_settings(private_valkey.url)
        check = {c.name: c for c in await doctor(s)}["redis"]
        assert not check.ok, check
        assert check.detail.startswith("REDIS_URL:") and "OOM" in check.detail, check
        with pytest.raises(ConfigError) as err:
            await release(s)
        assert "refuses writes (OOM" in str(err.value) and "noeviction" in str(err.value)
    finally:
        await admin.redis.config_set("maxmemory", "0")
        await admin.close()


@pytest.mark.parametrize("rule", ["-xgroup", "-@scripting", "-set"])
async def test_an_acl_user_without_a_needed_command_fails_release_with_one_line(
    private_valkey: EmbeddedValkey, rule: str
) -> None:
    url = await _limited_user_url(private_valkey, rule)
    with pytest.raises(ConfigError) as err:
        await release(_plain_settings(url))
    line = err.value.problems[0]
    assert line.startswith("redis: REDIS_URL:") and "refuses writes (NOPERM" in line, line
    assert "limited-pw" not in line


async def test_a_worker_on_a_full_redis_stops_with_one_line_not_a_traceback(
    private_valkey: EmbeddedValkey,
) -> None:
    """`parley run worker` on a Redis that refuses writes: a ConfigError (exit 2,
    one line), as for any other bad setting, not an OutOfMemoryError traceback."""
    from bots.runtime import Runtime

    admin = make_clients(private_valkey.url)
    await admin.redis.config_set("maxmemory-policy", "noeviction")
    await admin.redis.config_set("maxmemory", "1")
    try:
        with pytest.raises(ConfigError) as err:
            async with Runtime(_plain_settings(private_valkey.url), "worker"):
                pass
        assert err.value.problems[0].startswith("REDIS_URL:"), err.value.problems
        assert "refuses writes (OOM" in err.value.problems[0]
    finally:
        await admin.redis.config_set("maxmemory", "0")
        await admin.close()


@pytest.mark.parametrize(
    ("core", "llm", "said"),
    [
        ({"context_window": 8000}, {"llm_backend": "openai", "openai_api_key": "sk-x"}, "8,000"),
        ({}, {"llm_backend": "ollama", "ollama_model": "llama3.2"}, "OLLAMA_CONTEXT_LENGTH"),
    ],
)
async def test_release_and_doctor_refuse_a_window_every_worker_refuses(
    valkey: EmbeddedValkey, redis: Any, core: dict[str, Any], llm: dict[str, Any], said: str
) -> None:
    """A model window under 16K stops every worker at start (Agent.check_window);
    release passed it ("llm: configuration valid") and doctor's llm row said OK."""
    s = Settings(
        core=CoreSettings(redis_url=valkey.url, **core),  # type: ignore[arg-type]
        llm=LLMSettings(**llm),
        web=WebSettings(web_chat_enabled=False),
    )
    with pytest.raises(ConfigError) as err:
        await release(s)
    assert "Parley needs at least 16,000" in str(err.value) and said in str(err.value)
    check = {c.name: c for c in await doctor(s)}["llm"]
    assert not check.ok and check.detail == err.value.problems[0], check


async def test_the_demo_model_on_a_deployment_is_a_warning(
    valkey: EmbeddedValkey, redis: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No LLM key: the offline demo model.  On a laptop that is the point; on a dyno,
    or with a platform configured, people get canned replies: doctor and release
    said 'OK' / 'configuration valid' and nothing else."""
    monkeypatch.delenv("DYNO", raising=False)
    s = _plain_settings(valkey.url)
    check = {c.name: c for c in await doctor(s)}["llm"]
    assert check.ok and not check.warning, check
    assert not any("demo" in line for line in await release(s))

    monkeypatch.setenv("DYNO", "run.1")
    check = {c.name: c for c in await doctor(s)}["llm"]
    assert check.ok and check.warning, check
    assert "offline demo model answers" in check.detail and "Heroku" in check.detail, check
    assert "OPENAI_API_KEY" in check.fix, check
    [line] = [x for x in await release(s) if x.startswith("llm: warning:")]
    assert "canned demo replies" in line

    monkeypatch.delenv("DYNO")
    fake = FakeTelegram()
    await fake.start()
    try:
        s = settings_for(valkey, fake, "http://127.0.0.1:9/v1")
        s.llm = LLMSettings(llm_backend="demo")
        check = {c.name: c for c in await doctor(s)}["llm"]
        assert check.warning and "telegram is configured" in check.detail, check
    finally:
        await fake.stop()
