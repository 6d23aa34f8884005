"""`/routine add`: only the options are read as words; the prompt is kept as typed."""

import pytest

from agent_core.proactive.routines import RoutineError, parse_add


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


def test_an_option_name_inside_the_prompt_is_refused_never_taken() -> None:
    """ "Summarise the news, --full details please" made the routine a full one (tools,
    approvals) and dropped the word from the prompt; and an option put at the end
    ("… --tz Europe/Paris") was swallowed into the prompt, leaving the routine in UTC.
    Now such a text is refused with how to say it; after a lone -- it is the prompt's."""
    for tail in ("Summarise the news, --full details please", "Summarise it —tz Europe/Paris"):
        with pytest.raises(RoutineError, match="put options before the prompt"):
            parse_add(f"digest --manual --notify telegram:1 {tail}", created_by="telegram:1")
    r = parse_add(
        "digest --manual --notify telegram:1 -- Summarise the news, --full details please",
        created_by="telegram:1",
    )
    assert (r.action, r.prompt) == ("light", "Summarise the news, --full details please")


@pytest.mark.parametrize(
    "prompt", ["'Tis the season", "’90s hits of the day", "'s Ochtends nieuws"]
)
def test_a_prompt_may_start_with_an_apostrophe(prompt: str) -> None:
    """It was read as an unclosed quoted value ("no closing quote")."""
    assert parse_add(f"x --manual --notify t:1 {prompt}", created_by="t:1").prompt == prompt


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
    """`parley routines add` gives the argument list as the shell split it (click
    drops a lone --): a word with a space in it (a quoted prompt) begins the prompt,
    even one starting with --; an option name as a word of its own after the
    prompt's start is refused, as from a chat."""
    r = parse_add(["x", "--manual", "--notify", "web:s", "Check:\ntoday's list"], created_by="cli")
    assert (r.action, r.prompt) == ("light", "Check:\ntoday's list")
    r = parse_add(["x", "--manual", "--notify", "web:s", "--verbose output"], created_by="cli")
    assert r.prompt == "--verbose output"
    with pytest.raises(RoutineError, match="put options before the prompt"):
        parse_add(["x", "--manual", "--notify", "web:s", "Check", "--full", "list"], created_by="c")
