"""In a group, what changes the conversation for everyone (/new, /clear, /undo, /redo,
/model NAME, /agent NAME, /agent reload) is for approvers and admins when any is
configured, like `/always off everyone`; read-only forms stay open to all."""

from __future__ import annotations

from typing import Any

import pytest

from agent_core.llm import errors as llm_errors
from agent_core.llm.base import Completion
from tests.integration.agent.conftest import FnModel
from tests.integration.agent.test_always_command import G, T, always_for, count_model, say


@pytest.mark.parametrize("command", ["/clear", "/new", "/undo"])
async def test_a_member_cannot_wipe_the_groups_conversation(world: Any, command: str) -> None:
    """Any member's /clear or /new wiped the group's history and every member's Always
    (which `/always off everyone` keeps for approvers), and /undo rewound someone
    else's turn."""
    w = world(count_model(), approver_ids="telegram:boss", group_reply="all")
    await w.start()
    await always_for(w, G, "alice")
    before = (await w.session(G)).history
    reply = await say(w, G, command, "bob")
    assert reply.startswith("Only an approver or an admin can"), reply
    s = await w.session(G)
    assert s.always_tools("telegram:alice") == {"counter"} and s.history == before
    # an approver may; so may an admin
    assert not (await say(w, G, command, "boss")).startswith("Only an approver")


async def test_a_member_cannot_switch_the_groups_model_or_agent(world: Any, tmp_path: Any) -> None:
    """Any member's /model NAME or /agent NAME switched it for the whole group."""
    (tmp_path / "reader.md").write_text("---\ntools: current_time\n---\nYou only read.")
    w = world(
        count_model(), admin_ids="telegram:root", group_reply="all", profiles_dir=str(tmp_path)
    )
    await w.start()
    for command in ("/model fn-model", "/model default", "/agent reader", "/agent reload"):
        reply = await say(w, G, command, "bob")
        assert reply.startswith("Only an approver or an admin can"), (command, reply)
    s = await w.session(G)
    assert (s.model, s.profile) == ("", "")
    # the read-only forms stay open
    assert "Current model" in await say(w, G, "/model", "bob")
    assert "**Agents**" in await say(w, G, "/agent", "bob")
    # an admin switches it
    assert "Now talking as `reader`" in await say(w, G, "/agent reader", "root")
    assert "Switched this conversation" in await say(w, G, "/model fn-model", "root")


async def test_with_no_approver_or_admin_configured_anyone_may(world: Any) -> None:
    w = world(count_model(), group_reply="all")
    await w.start()
    assert "Cleared the conversation" in await say(w, G, "/clear", "bob")


async def test_direct_chats_are_unchanged(world: Any) -> None:
    w = world(count_model(), approver_ids="telegram:boss")
    await w.start()
    assert "Cleared the conversation" in await say(w, T, "/clear", "u1")


async def test_a_member_who_may_not_start_over_is_told_who_may(world: Any) -> None:
    """A provider refusing the group's history told every member "Send /new", which
    /new then refused them: the group was stuck until someone asked an admin."""

    def refuse(req: Any) -> Completion:
        raise llm_errors.BadRequest("refused")

    w = world(FnModel(refuse), approver_ids="telegram:boss", group_reply="all")
    await w.start()
    assert "Ask an approver or an admin to send /new" in await say(w, G, "hello", "bob")
    boss = await say(w, G, "hello again", "boss")
    assert "Send /new to start" in boss and "Ask an approver" not in boss
    assert "Send /new to start" in await say(w, T, "hello", "u1")  # a direct chat
