"""Slash commands, pure parts: the registered shapes, the compare, an invocation's event."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from agent_core.agent.commands import builtin_commands
from agent_core.events import EventKind, ThreadKey
from channels.discord.commands import (
    BOT_COMMAND_TEXT,
    ELSEWHERE_TEXT,
    app_commands,
    echo,
    inline_code,
    private,
    refusal,
    same_commands,
)
from channels.discord.parse import RawInteraction, parse_command
from tests.fakes.discord_commands import check_commands, stored_commands

ALICE = {"id": "501", "username": "alice", "global_name": "Alice"}


def stored(body: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What Discord answers to GET after a PUT of ``body``."""
    ids = itertools.count(900)
    return stored_commands("42", body, [], lambda: str(next(ids)))


def test_parleys_commands_in_discords_shape() -> None:
    body = app_commands(builtin_commands().menu())
    by_name = {c["name"]: c for c in body}
    assert set(by_name) == set(builtin_commands().names())
    assert by_name["new"] == {
        "name": "new",
        "description": "Start a new conversation (the old one is archived)",
        "type": 1,
    }
    assert by_name["model"]["options"] == [{"type": 3, "name": "text", "description": "[name]"}]
    assert by_name["deny"]["options"][0]["description"] == "[id] [reason]"
    assert check_commands(body) is None  # Discord takes it as it is


def test_only_what_discord_accepts_is_offered() -> None:
    menu = [
        ("new", "start over", ""),
        ("Upper", "x", ""),  # Discord refuses upper-case names
        ("two words", "x", ""),
        ("x" * 33, "x", ""),
        ("new", "a second /new", ""),
        ("blank", "   ", "  "),
        ("long", "y" * 300, "[" + "u" * 200 + "]"),
        ("émoji-ok_2", "fine", ""),
        *((f"c{i}", "z", "") for i in range(120)),
    ]
    body = app_commands(menu)
    assert [c["name"] for c in body[:4]] == ["new", "blank", "long", "émoji-ok_2"]
    assert body[0]["description"] == "Start over"
    assert body[1] == {"name": "blank", "description": "Blank", "type": 1}
    assert len(body[2]["description"]) == 100 and body[2]["description"].endswith("…")
    assert len(body[2]["options"][0]["description"]) == 100
    assert len(body) == 100
    assert check_commands(body) is None
    assert check_commands([*body[:99], {"name": "Bad", "description": "x", "type": 1}]) == {
        "code": 50035,
        "errors": {
            "99": {
                "name": {
                    "_errors": [
                        {
                            "code": "APPLICATION_COMMAND_INVALID_NAME",
                            "message": "Command name is invalid",
                        }
                    ]
                }
            }
        },
        "message": "Invalid Form Body",
    }


def test_what_discord_answers_compares_equal_to_what_was_sent() -> None:
    body = app_commands(builtin_commands().menu())
    answer = stored(body)
    assert "id" in answer[0] and "version" in answer[0]  # Discord adds its own fields
    assert same_commands(answer, body)
    assert same_commands(list(reversed(answer)), body)  # order is not a difference
    changed = [dict(c) for c in body]
    changed[0]["description"] = "something else"
    assert not same_commands(answer, changed)
    assert not same_commands(answer, body[1:])  # one fewer
    no_option = [{k: v for k, v in c.items() if k != "options"} for c in body]
    assert not same_commands(answer, no_option)  # /model lost its text option
    assert not same_commands([], body)


def interaction(
    name: str = "status",
    text: str | None = None,
    *,
    guild: str = "700",
    channel: dict[str, Any] | None = None,
    user: dict[str, Any] = ALICE,
    **extra: Any,
) -> RawInteraction:
    data: dict[str, Any] = {"id": "800", "name": name, "type": 1}
    if text is not None:
        data["options"] = [{"name": "text", "type": 3, "value": text}]
    channel = channel or ({"id": "300", "type": 0} if guild else {"id": "300", "type": 1})
    raw: dict[str, Any] = {
        "id": "1234",
        "application_id": "42",
        "type": 2,
        "token": "secret-token",
        "data": data,
        "channel_id": channel["id"],
        "channel": channel,
        **extra,
    }
    if guild:
        raw["guild_id"] = guild
        raw["member"] = {"user": user, "nick": "Al"}
    else:
        raw["user"] = user
    return raw  # type: ignore[return-value]


def test_a_command_in_a_server_channel_is_an_addressed_message_there() -> None:
    ev = parse_command(interaction("model", "gpt-test"))
    assert ev is not None
    assert ev.text == "/model gpt-test"
    assert ev.kind == EventKind.COMMAND and ev.mentions_bot and not ev.is_direct
    assert ev.thread == ThreadKey("discord", "700", "300", "")
    assert (ev.event_id, ev.user_id, ev.user_name) == ("1234", "501", "Al")  # the server nickname
    assert ev.reply_ref is not None and ev.reply_ref.message_id == ""  # a new message


def test_a_command_in_a_dm_and_in_a_thread() -> None:
    dm = parse_command(interaction(guild=""))
    assert dm is not None and dm.is_direct and dm.text == "/status"
    assert dm.thread == ThreadKey("discord", "dm", "300", "")
    thread = {"id": "310", "type": 11, "parent_id": "300"}
    ev = parse_command(interaction(channel=thread), thread_parent="300")
    assert ev is not None and ev.thread == ThreadKey("discord", "700", "300", "310")


def test_what_is_not_taken_is_answered_privately() -> None:
    known = frozenset({"status"})
    assert refusal(interaction(), known) is None
    assert refusal(interaction(), None) is None  # names not known yet: the worker decides
    assert refusal(interaction(user={**ALICE, "bot": True}), known) == BOT_COMMAND_TEXT
    assert refusal(interaction(context=2), known) == ELSEWHERE_TEXT
    unknown = refusal(interaction("legacy"), known)
    assert unknown is not None and "/legacy" in unknown and "/help" in unknown
    assert private("no")["data"]["flags"] == 64


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("/status", "`/status`"),
        ("/model a`b", "`` /model a`b ``"),
        ("/deny x ``` y", "`` /deny x `\u200b`\u200b` y ``"),
    ],
)
def test_the_echo_is_the_invocation_in_inline_code(text: str, shown: str) -> None:
    assert inline_code(text) == shown
    body = echo(text)
    assert body["type"] == 4 and body["data"]["content"] == shown
    assert body["data"]["allowed_mentions"]["parse"] == [] and "flags" not in body["data"]


def test_the_echo_fits_a_message() -> None:
    assert len(inline_code("/deny 1 " + "x" * 5000)) == 2000
    assert len(inline_code("/deny 1 `" + "x" * 5000)) == 2000
