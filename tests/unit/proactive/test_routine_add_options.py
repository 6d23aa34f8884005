"""/routine add: options that contradict each other are refused, and a cron
expression typed wrong is refused saying what is wrong with it."""

from __future__ import annotations

import shlex

import pytest

from agent_core.proactive.routines import RoutineError, parse_add, validate


def add(args: str | list[str]) -> object:
    return validate(parse_add(args, created_by="telegram:1"))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        # a second trigger silently replaced the first (the 9:00 schedule was dropped)
        (
            "standup --cron '0 9 * * 1-5' --event deploy --notify telegram:1 Summarise",
            "choose one of --cron, --event, --manual",
        ),
        ("standup --manual --event x --notify telegram:1 Summarise", "choose one of --cron"),
        ("standup --manual --manual --notify telegram:1 Summarise", "--manual is given twice"),
        ("standup --manual --full --light --notify telegram:1 Hi", "choose one of --full, --light"),
        ("standup --manual --notify telegram:1 --notify telegram:2 Hi", "--notify is given twice"),
        # options of another trigger were ignored: the person believed them set
        (
            "standup --manual --tz Europe/Berlin --notify telegram:1 Summarise",
            "--tz applies only to --cron",
        ),
        ("standup --event down --tz UTC --notify telegram:1 Hi", "--tz applies only to --cron"),
        (
            "standup --cron '0 9 * * *' --channel slack --notify telegram:1 Hi",
            "--channel applies only to --event",
        ),
        ("standup --manual --cooldown 60 --notify telegram:1 Hi", "--cooldown applies only"),
        ("standup --cron @daily --dedup 60 --notify telegram:1 Hi", "--dedup applies only"),
    ],
)
def test_conflicting_options_are_refused(args: str, message: str) -> None:
    with pytest.raises(RoutineError, match=message):
        add(args)
    with pytest.raises(RoutineError, match=message):  # the same from a shell
        add(shlex.split(args))


def test_options_of_the_routines_own_trigger_are_taken() -> None:
    r = validate(
        parse_add(
            "a --cron @daily --tz Europe/Paris --max 2 --full --notify telegram:1 Hi",
            created_by="telegram:1",
        )
    )
    assert (r.trigger, r.tz, r.max_concurrent, r.action) == ("cron", "Europe/Paris", 2, "full")
    r = validate(
        parse_add(
            "b --event down --channel slack --cooldown 60 --dedup 5 --max 3 --notify telegram:1 Hi",
            created_by="telegram:1",
        )
    )
    assert (r.channel, r.cooldown_secs, r.dedup_secs, r.max_concurrent) == ("slack", 60, 5, 3)


@pytest.mark.parametrize(
    "args",
    [
        "standup --cron 0 9 * * 1-5 --notify telegram:1 Summarise X",
        "standup --notify telegram:1 --cron 0 9 * * 1-5 Summarise X",
        ["standup", "--cron", "0", "9", "*", "*", "1-5", "--notify", "telegram:1", "Hi"],
    ],
)
def test_unquoted_cron_is_refused_saying_to_quote_it(args: str | list[str]) -> None:
    """Typed as in a crontab, the refusal said to put the options before the prompt
    (they were), never that the expression needs quotes."""
    with pytest.raises(RoutineError) as exc:
        add(args)
    assert "quote it, --cron '0 9 * * 1-5'" in str(exc.value), str(exc.value)


def test_a_prompt_starting_with_a_number_is_not_taken_for_a_cron_field() -> None:
    r = validate(
        parse_add(
            "a --cron '0 9 * * *' --notify telegram:1 9 things to check", created_by="telegram:1"
        )
    )
    assert (r.cron, r.prompt) == ("0 9 * * *", "9 things to check")


@pytest.mark.parametrize(
    ("cron", "reason"),
    [
        ("0 24 * * *", "the hour field '24' is out of range (0-23)"),
        ("60 9 * * *", "the minute field '60' is out of range (0-59)"),
        ("*/0 * * * *", "the minute field '*/0' has a step of 0"),
        ("0 9 32 * *", "the day field '32' is out of range (1-31)"),
        ("0 9 * * 8", "the weekday field '8' is out of range"),
    ],
)
def test_an_out_of_range_field_is_named(cron: str, reason: str) -> None:
    """Five fields were given: the refusal repeated "five fields: minute hour day month
    weekday", never which value was wrong."""
    with pytest.raises(RoutineError) as exc:
        add(f"r --cron '{cron}' --notify telegram:1 hi")
    assert reason in str(exc.value) and "five fields" not in str(exc.value), str(exc.value)


@pytest.mark.parametrize("cron", ["0 9 * *", "0 9 * * 1-5 2"])
def test_a_wrong_number_of_fields_still_gets_the_five_fields_hint(cron: str) -> None:
    with pytest.raises(RoutineError, match="five fields"):
        add(f"r --cron '{cron}' --notify telegram:1 hi")
