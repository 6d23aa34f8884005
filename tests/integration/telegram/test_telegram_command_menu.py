"""The bot's "/" command menu lists Parley's commands (setMyCommands at start)."""

from __future__ import annotations

import logging
from typing import Any

import pytest

import channels.telegram as telegram_pkg
from agent_core.agent.commands import builtin_commands
from agent_core.store.embedded import EmbeddedValkey
from bots.runtime import Runtime
from channels.telegram.channel import menu_commands
from channels.telegram.settings import TelegramSettings
from tests.fakes.telegram import TOKEN, WEBHOOK_SECRET, FakeTelegram
from tests.integration.approvals_e2e.approvals_harness import settings_for, wait_until

DEFAULT = ("default", "")


def settings(valkey: EmbeddedValkey, fake: FakeTelegram, **platform: Any) -> Any:
    tg = TelegramSettings(
        telegram_bot_token=TOKEN,  # type: ignore[arg-type]
        telegram_api_base_url=fake.base_url,
        telegram_webhook_secret=WEBHOOK_SECRET,  # type: ignore[arg-type]
        telegram_mode="webhook",
        **platform,
    )
    return settings_for(valkey, "telegram", tg, telegram_pkg)


async def started(valkey: EmbeddedValkey, fake: FakeTelegram, role: str, **kw: Any) -> None:
    """A process of ``role`` starts, gets as far as its menu, and stops."""
    async with Runtime(settings(valkey, fake, **kw), role) as rt:
        if rt._menu_task is not None:
            await rt._menu_task


async def test_the_web_process_sets_the_menu_once(
    valkey: EmbeddedValkey, fake: FakeTelegram
) -> None:
    await started(valkey, fake, "web")
    menu = fake.commands[DEFAULT]
    names = [c["command"] for c in menu]
    assert names == builtin_commands().names()
    assert {"new", "undo", "status", "approve", "routine"} <= set(names)
    new = next(c for c in menu if c["command"] == "new")
    assert new["description"] == "Start a new conversation (the old one is archived)"
    assert len(fake.calls_of("setMyCommands")) == 1
    # a restart (or a second web process) reads the menu and leaves it alone
    await started(valkey, fake, "web")
    assert len(fake.calls_of("getMyCommands")) == 2
    assert len(fake.calls_of("setMyCommands")) == 1


async def test_a_worker_leaves_the_menu_alone(valkey: EmbeddedValkey, fake: FakeTelegram) -> None:
    await started(valkey, fake, "worker")
    assert fake.calls_of("getMyCommands") == [] and DEFAULT not in fake.commands


async def test_the_menu_can_be_left_to_botfather(
    valkey: EmbeddedValkey, fake: FakeTelegram
) -> None:
    fake.commands[DEFAULT] = [{"command": "start", "description": "BotFather's own"}]
    await started(valkey, fake, "web", telegram_command_menu=False)
    assert fake.calls_of("getMyCommands") == [] and fake.calls_of("setMyCommands") == []
    assert fake.commands[DEFAULT][0]["command"] == "start"


async def test_a_refused_menu_is_a_log_line_not_a_failed_start(
    valkey: EmbeddedValkey, fake: FakeTelegram, caplog: pytest.LogCaptureFixture
) -> None:
    fake.fail_next("setMyCommands", 400, "Bad Request: BOT_COMMAND_INVALID")
    with caplog.at_level(logging.WARNING):
        async with Runtime(settings(valkey, fake), "web") as rt:
            assert rt._menu_task is not None
            await wait_until(lambda: rt._menu_task.done(), what="the menu attempt")
            assert rt.channels["telegram"] is not None  # the process runs on
    assert "could not set the command menu: bot_command_invalid" in caplog.text.lower()
    assert TOKEN not in caplog.text


def test_only_what_telegram_accepts_is_offered() -> None:
    cmds = [
        ("new", "start over", ""),
        ("Upper", "x", ""),  # upper case: Telegram refuses the whole list
        ("with-dash", "x", ""),
        ("x" * 33, "x", ""),
        ("blank", "   ", ""),
        ("long", "y" * 300, "[text]"),
        *((f"c{i}", "z", "") for i in range(120)),
    ]
    menu = menu_commands(cmds)
    assert menu[:3] == [("new", "Start over"), ("blank", "Blank"), ("long", "Y" + "y" * 255)]
    assert len(menu) == 100
