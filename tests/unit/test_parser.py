from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from agent_core.agent.parser import ApprovalReply, Command, Text, parse


def test_commands() -> None:
    assert parse("/help") == Command("help")
    assert parse("/model gpt-4o") == Command("model", "gpt-4o")
    assert parse("/new@parley_bot") == Command("new")
    assert parse("  /Status  ") == Command("status")
    assert parse("/deny abc because it is risky") == Command("deny", "abc because it is risky")


def test_text_that_is_not_a_command() -> None:
    assert parse("hello /help") == Text("hello /help")
    assert parse("/ not a command") == Text("/ not a command")
    assert parse("yes") == Text("yes")  # only while awaiting approval


def test_approval_words_only_while_awaiting() -> None:
    assert parse("yes", awaiting_approval=True) == ApprovalReply("approve")
    assert parse("OK", awaiting_approval=True) == ApprovalReply("approve")
    assert parse("always", awaiting_approval=True) == ApprovalReply("always")
    assert parse("n", awaiting_approval=True) == ApprovalReply("deny")
    assert parse("no because it deletes files", awaiting_approval=True) == ApprovalReply(
        "deny", "it deletes files"
    )
    assert parse("yes please explain more", awaiting_approval=True) == Text(
        "yes please explain more"
    )


@given(st.text(max_size=300), st.booleans())
def test_parser_never_raises(text: str, awaiting: bool) -> None:
    result = parse(text, awaiting_approval=awaiting)
    assert isinstance(result, Command | Text | ApprovalReply)
