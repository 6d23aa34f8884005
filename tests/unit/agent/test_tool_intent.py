"""The loop's nudge: which answers count as a tool call announced but not made."""

from __future__ import annotations

import pytest

from agent_core.agent.loop import says_tool_intent
from agent_core.llm.base import ToolSpec

TOOLS = (ToolSpec("current_time", "the time", {"type": "object", "properties": {}}),)


@pytest.mark.parametrize(
    "text",
    [
        "I'll use the current_time tool now.",
        "I'll use the current_time tool to check that for you.",
        "Let me check that.",
        "Let me look that up.",
        "Sure, let me check the time.",
        "I\u2019ll quickly run the search for you...",
        "One moment. I'm going to fetch the page.",
        # a pleasantry after the announcement, a dash for a lead, "get" with an object
        "Let me check that for you. One moment!",
        "Sure \u2014 I'll check.",
        "I'll get the weather for Paris.",
    ],
)
def test_an_announced_call_is_nudged(text: str) -> None:
    assert says_tool_intent(text, TOOLS)


@pytest.mark.parametrize(
    "text",
    [
        # complete answers: a command, a tool's name, "using the", "let me know"
        "You can rename it using the mv command: `mv old.txt new.txt`.",
        "Use `current_time` whenever you need the clock; it returns UTC.",
        "Let me check: it is 12:05 UTC.",
        "It is noon in Paris. Let me know if you need another city.",
        "I checked the logs using the search tool and found nothing unusual.",
        "I'll use a regex for that: `re.sub(r'\\s+', ' ', s)`.",
        "I'll get back to you on that.",
        "It is sunny. One moment of sun is rare here!",
        # an announcement at the end of a long answer that has said its piece
        "Here is the plan. " + "Each step is explained below in detail. " * 8 + "I'll check it.",
    ],
)
def test_a_plain_answer_is_not_nudged(text: str) -> None:
    assert not says_tool_intent(text, TOOLS)


def test_without_tools_nothing_is_nudged() -> None:
    assert not says_tool_intent("Let me check that.", ())
