"""The offline demo model says what it is in a conversation's first answer, also when
that answer comes after a tool it called (the README's "what time is it?")."""

from __future__ import annotations

from agent_core.llm.base import ChatMessage, CompletionRequest, ToolSpec
from agent_core.llm.demo import LABEL, DemoProvider

TOOLS = tuple(
    ToolSpec(name, "", {"type": "object", "properties": {}})
    for name in ("current_time", "demo_approval")
)


async def ask(*messages: ChatMessage) -> tuple[str, list[str]]:
    got = await DemoProvider().complete(CompletionRequest(messages, TOOLS))
    return got.text, [c.name for c in got.tool_calls]


async def test_the_first_answer_is_labelled_after_a_tool_call() -> None:
    user = ChatMessage("user", "what time is it?")
    text, calls = await ask(user)
    assert (text, calls) == ("", ["current_time"])  # nothing shown yet
    called = ChatMessage("assistant", "", tool_calls=())
    result = ChatMessage("tool", "2026-11-24 03:50 UTC", tool_call_id="x", name="current_time")
    text, _ = await ask(user, called, result)
    assert text.startswith(LABEL) and "2026-11-24 03:50 UTC" in text
    # later answers are not labelled
    text, _ = await ask(
        user, called, result, ChatMessage("assistant", text), ChatMessage("user", "markdown")
    )
    assert not text.startswith(LABEL) and "**bold**" in text


async def test_a_first_message_without_a_tool_is_labelled_once() -> None:
    text, _ = await ask(ChatMessage("user", "markdown"))
    assert text.startswith(LABEL)
    history = (ChatMessage("user", "markdown"), ChatMessage("assistant", text))
    text, _ = await ask(*history, ChatMessage("user", "hello"))
    assert not text.startswith(LABEL)
