"""`/routine add`: only the options are read as words; the prompt is kept as typed."""

import pytest

from agent_core.proactive.routines import parse_add


@pytest.mark.parametrize("apos", ["'", "\u2019"])
def test_a_prompt_with_an_apostrophe_is_accepted(apos: str) -> None:
    """ "Remind me of today's standup" was refused ("No closing quotation"): the whole
    text went through shlex, so the apostrophe (or a phone's ’) opened a quote."""
    r = parse_add(
        f"standup --cron '0 9 * * 1-5' --notify telegram:123 Remind me of today{apos}s standup",
        created_by="telegram:1",
    )
    assert (r.cron, r.prompt) == ("0 9 * * 1-5", f"Remind me of today{apos}s standup")


def test_two_apostrophes_are_kept() -> None:
    """ "Check Bob's and Alice's open tasks" was stored as "Check Bobs and Alices open
    tasks" (the two apostrophes paired up as a quote and vanished)."""
    r = parse_add(
        "tasks --manual --notify telegram:123 Check Bob's and Alice's open tasks",
        created_by="telegram:1",
    )
    assert r.prompt == "Check Bob's and Alice's open tasks"


def test_backslashes_and_line_breaks_are_kept() -> None:
    """`--event 5\\d\\d` was stored as `5dd`, `C:\\logs` lost its backslash and the
    prompt's line breaks became spaces."""
    r = parse_add(
        "check --event 5\\d\\d --notify telegram:123 Check:\n- the logs in C:\\logs\n- the queue",
        created_by="telegram:1",
    )
    assert (r.pattern, r.prompt) == ("5\\d\\d", "Check:\n- the logs in C:\\logs\n- the queue")


def test_an_option_name_inside_the_prompt_is_a_word_of_it() -> None:
    """docs/proactive.md: "Once the prompt has begun, its words are words." Yet
    "Summarise the news, --full details please" made the routine a full one (tools,
    approvals) and dropped the word from the prompt."""
    r = parse_add(
        "digest --manual --notify telegram:1 Summarise the news, --full details please",
        created_by="telegram:1",
    )
    assert (r.action, r.prompt) == ("light", "Summarise the news, --full details please")


def test_quoted_values_dashes_and_a_lone_double_dash() -> None:
    r = parse_add(
        "rep —manual —full --notify “telegram:1” -- --verbose output, please",
        created_by="telegram:1",
    )
    assert (r.trigger, r.action, r.notify, r.prompt) == (
        "manual",
        "full",
        "telegram:1",
        "--verbose output, please",
    )
    assert (
        parse_add('q --manual --notify t "Summarise it"', created_by="c").prompt == "Summarise it"
    )


def test_the_shell_passes_its_words() -> None:
    """`parley routines add` gives the argument list as the shell split it."""
    r = parse_add(
        ["x", "--manual", "--notify", "web:s", "Check:\ntoday's", "--full", "list"],
        created_by="cli",
    )
    assert (r.action, r.prompt) == ("light", "Check:\ntoday's --full list")
