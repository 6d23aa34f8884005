"""The approval prompt says how to answer in words where that works: in a group
where a plain "yes" never reaches Parley (Telegram and Discord with
GROUP_REPLY=mention: the channel's outbox says so), it asks for a reply to the
prompt, or /approve or /deny; elsewhere "typing yes works too"."""

from __future__ import annotations

from typing import Any

from telegram import Update

from agent_core.events import ThreadKey
from channels.telegram.parse import ParseContext, parse_update
from tests.integration.agent.approval_helpers import approval_id
from tests.integration.agent.conftest import FnModel, call, tools_then_answer, user_event

GROUP = ThreadKey("telegram", "bot1", "-888")
DM = ThreadKey("telegram", "bot1", "888")
CTX = ParseContext(bot_id="123456", username="parley_test_bot")
CHAT = {"id": -100500, "type": "supergroup", "title": "Team"}


def _model() -> FnModel:
    return FnModel(tools_then_answer(("ALICE: count it", [call("counter", label="x")])))


async def test_group_prompt_asks_for_a_reply_where_plain_text_does_not_reach(
    world: Any,
) -> None:
    w = world(_model())
    w.outbox.group_text_reaches = False  # as TelegramOutbox with GROUP_REPLY=mention
    await w.start()
    await w.send(user_event(GROUP, "count it", user="alice", is_direct=False))
    await w.settle(GROUP)
    prompt = w.prompts(GROUP)[-1].message.text
    assert "reply to this message with *yes* / *always* / *no*" in prompt, prompt
    assert "/approve or /deny" in prompt and "Typing" not in prompt, prompt
    # a message held meanwhile is told the same
    await w.send(user_event(GROUP, "and this?", user="alice", is_direct=False))
    await w.settle(GROUP)
    assert "reply to it with yes / always / no" in w.texts(GROUP)[-1], w.texts(GROUP)


async def test_prompt_says_typing_works_where_plain_text_reaches(world: Any) -> None:
    w = world(FnModel(tools_then_answer(("count it", [call("counter", label="x")]))))
    w.outbox.group_text_reaches = False  # only groups are concerned: a DM is addressed
    await w.start()
    await w.send(user_event(DM, "count it", user="alice"))
    await w.settle(DM)
    assert approval_id(w, DM)
    assert "Typing *yes* / *always* / *no* works too." in w.prompts(DM)[-1].message.text


def _group_text(text: str, update_id: int, reply_to_bot: bool) -> Update:
    msg: dict[str, Any] = {
        "message_id": update_id,
        "date": 1700000000,
        "chat": CHAT,
        "from": {"id": 42, "is_bot": False, "first_name": "Ada"},
        "text": text,
    }
    if reply_to_bot:
        msg["reply_to_message"] = {
            "message_id": 7,
            "date": 1700000000,
            "chat": CHAT,
            "from": {"id": 123456, "is_bot": True, "first_name": "Parley"},
            "text": "🔐 Approval needed",
        }
    return Update.de_json({"update_id": update_id, "message": msg}, None)


def test_in_a_telegram_group_only_a_reply_to_the_prompt_carries_a_typed_yes() -> None:
    """What the group prompt's hint rests on (GROUP_REPLY=mention, the default)."""
    assert parse_update(_group_text("yes", 1, reply_to_bot=False), CTX) is None
    event = parse_update(_group_text("yes", 2, reply_to_bot=True), CTX)
    assert event is not None and event.text == "yes"


async def test_the_waiting_notice_offers_no_always_for_a_tool_that_asks_every_time(
    world: Any,
) -> None:
    """docs/agent.md: a tool that asks every time has no **Always**; the notice for a
    message held meanwhile offers what its prompt does: Approve / Deny, yes / no."""
    from tests.integration.agent.approval_helpers import SlowAsk, add_tool

    class EveryTime(SlowAsk):
        name = "everytime"
        allow_always = False

    w = world(FnModel(tools_then_answer(("go", [call("everytime", label="a", ms=1)]))))
    add_tool(w, EveryTime())
    await w.start()
    await w.send(user_event(DM, "go"))
    await w.settle(DM)
    assert [b.label for b in w.prompts(DM)[-1].message.buttons] == ["Approve", "Deny"]
    await w.send(user_event(DM, "meanwhile"))
    await w.settle(DM)
    notice = w.texts(DM)[-1]
    assert "(the approval above: Approve / Deny, or type yes / no)" in notice, notice
    assert "lways" not in notice, notice
