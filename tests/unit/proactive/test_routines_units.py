"""Routines without Redis: cron next fire, validation, parsing, targets."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from agent_core.events import ThreadKey
from agent_core.proactive.routines import Routine, RoutineError, parse_add, validate
from agent_core.proactive.runner import is_ok
from agent_core.proactive.targets import TargetError, parse_target


def ts(s: str, tz: str = "UTC") -> float:
    return datetime.fromisoformat(s).replace(tzinfo=ZoneInfo(tz)).timestamp()


def cron(expr: str, tz: str = "UTC") -> Routine:
    return validate(Routine("r1", "cron", "p", cron=expr, tz=tz, notify="web:s1"))


def test_next_fire_is_strictly_after_and_follows_the_expression() -> None:
    r = cron("0 9 * * 1-5")  # weekdays at 09:00
    fri = ts("2026-01-02 10:00")  # a Friday, after 09:00
    assert r.next_fire(fri) == ts("2026-01-05 09:00")  # Monday
    assert r.next_fire(ts("2026-01-05 09:00")) == ts("2026-01-06 09:00")  # strictly after


def test_next_fire_in_a_timezone_across_dst() -> None:
    r = cron("30 8 * * *", tz="Europe/Paris")
    # the day before the spring DST change and the day after: 08:30 local both times
    assert r.next_fire(ts("2026-03-28 09:00", "Europe/Paris")) == ts(
        "2026-03-29 08:30", "Europe/Paris"
    )
    nxt = r.next_fire(ts("2026-03-29 09:00", "Europe/Paris"))
    assert datetime.fromtimestamp(nxt, ZoneInfo("Europe/Paris")).strftime("%H:%M") == "08:30"
    assert datetime.fromtimestamp(nxt, ZoneInfo("UTC")).strftime("%H:%M") == "06:30"


@pytest.mark.parametrize(
    ("routine", "reason"),
    [
        (Routine("r", "cron", "p", cron="61 * * * *", notify="web:s"), "bad cron expression"),
        (Routine("r", "cron", "p", cron="* * *", notify="web:s"), "bad cron expression"),
        (Routine("r", "cron", "p", cron="0 * * * *", tz="Mars/Base", notify="web:s"), "timezone"),
        (Routine("r", "event", "p", pattern="(unclosed", notify="web:s"), "bad regular expression"),
        (Routine("r", "event", "p", pattern="", notify="web:s"), "needs a pattern"),
        (Routine("r", "manual", "p", notify=""), "notify target is required"),
        (Routine("r", "manual", "p", notify="fax:123"), "expected <channel>:<id>"),
        (Routine("Bad Name!", "manual", "p", notify="web:s"), "name"),
        (Routine("r", "manual", " ", notify="web:s"), "prompt is empty"),
        (Routine("r", "manual", "p", notify="web:s", max_concurrent=0), "at least 1"),
        (Routine("r", "manual", "p", notify="web:s", max_concurrent=1001), "at most 1,000"),
        # beyond 64 bits: was an OverflowError when the routine was stored
        (Routine("r", "manual", "p", notify="web:s", max_concurrent=10**20), "at most 1,000"),
    ],
)
def test_bad_routines_are_refused_with_the_reason(routine: Routine, reason: str) -> None:
    with pytest.raises(RoutineError, match=reason):
        validate(routine)


def test_parse_add_reads_flags_and_prompt() -> None:
    r = parse_add(
        "Standup --cron “0 9 * * 1-5” --tz Europe/Paris --full --notify telegram:42 "
        "Remind me of the standup",
        created_by="telegram:1",
    )
    validate(r)
    assert (r.name, r.trigger, r.cron, r.tz, r.action) == (
        "standup",
        "cron",
        "0 9 * * 1-5",
        "Europe/Paris",
        "full",
    )
    assert r.notify == "telegram:42" and r.prompt == "Remind me of the standup"
    e = parse_add(
        "alarm --event 'down|outage' --channel slack --cooldown 60 --max 2 --dedup 30 "
        "--notify slack:T1/C9 look",
        created_by="cli",
    )
    validate(e)
    assert (e.trigger, e.pattern, e.channel, e.cooldown_secs, e.max_concurrent, e.dedup_secs) == (
        "event",
        "down|outage",
        "slack",
        60.0,
        2,
        30.0,
    )
    with pytest.raises(RoutineError, match="say when it runs"):
        parse_add("x --notify web:s p", created_by="cli")
    with pytest.raises(RoutineError, match="numbers"):
        parse_add("x --manual --max lots --notify web:s p", created_by="cli")


def test_targets() -> None:
    t = {"telegram": "777"}
    assert parse_target("telegram:123456", t) == ThreadKey("telegram", "777", "123456", "")
    assert parse_target("telegram:-100/9", t) == ThreadKey("telegram", "777", "-100", "9")
    assert parse_target("slack:T1/C9", t) == ThreadKey("slack", "T1", "C9", "")
    assert parse_target("slack:T1/C9/17.5", t) == ThreadKey("slack", "T1", "C9", "17.5")
    assert parse_target("slack:C9", t, learned="T5") == ThreadKey("slack", "T5", "C9", "")
    assert parse_target("discord:42", t) == ThreadKey("discord", "dm", "42", "")
    assert parse_target("discord:G1/42", t) == ThreadKey("discord", "G1", "42", "")
    assert parse_target("web:abc") == ThreadKey("web", "local", "abc", "")
    assert parse_target("{slack:T1:C9:}") == ThreadKey("slack", "T1", "C9", "")
    with pytest.raises(TargetError, match="bot id is unknown"):
        parse_target("telegram:1")
    with pytest.raises(TargetError, match="team is unknown"):
        parse_target("slack:C9")
    with pytest.raises(TargetError):
        parse_target("telegram:")


def test_ok_tokens() -> None:
    assert is_ok("ROUTINE_OK", "ROUTINE_OK")
    assert is_ok("**ROUTINE_OK**.", "ROUTINE_OK")
    assert is_ok("", "ROUTINE_OK")
    assert not is_ok("The build is red: ROUTINE_OK is not the case", "ROUTINE_OK")
    assert not is_ok("Disk almost full", "HEARTBEAT_OK")


def test_ok_token_followed_by_words_is_a_message() -> None:
    """Only whitespace and punctuation may surround the token; a line of text after
    it ("any other answer is sent") used to be swallowed."""
    assert is_ok("HEARTBEAT_OK\n", "HEARTBEAT_OK")
    assert is_ok("`HEARTBEAT_OK`\n\n---", "HEARTBEAT_OK")
    assert not is_ok("HEARTBEAT_OK\nExcept: the certificate expires tomorrow.", "HEARTBEAT_OK")
    assert not is_ok("ROUTINE_OK\n\nBut the deploy failed.", "ROUTINE_OK")


def test_an_answer_of_symbols_alone_is_a_message() -> None:
    assert not is_ok("🔥🚨", "HEARTBEAT_OK")
    assert not is_ok("⚠️!!!", "HEARTBEAT_OK")
    assert is_ok("✅ HEARTBEAT_OK", "HEARTBEAT_OK")  # the token with an emoji is still OK


def test_retarget_names_the_new_conversation_in_the_form_it_was_written() -> None:
    from agent_core.proactive.targets import retarget

    old = ThreadKey("telegram", "bot1", "-42")
    new = ThreadKey("telegram", "bot1", "-1001234567890")
    assert retarget("telegram:-42", old, new) == "telegram:-1001234567890"
    assert retarget(" telegram:-42 ", old, new) == "telegram:-1001234567890"
    assert retarget("{telegram:bot1:-42:}", old, new) == new.tag
    assert retarget("telegram:-43", old, new) is None
    assert retarget("telegram:-42/7", old, new) is None  # a topic is another thread
    assert retarget("{telegram:bot2:-42:}", old, new) is None  # another bot's chat
    assert retarget("web:s1", old, new) is None
    assert retarget("not a target", old, new) is None
    # other platforms: the conversation part, tenant kept
    sold, snew = ThreadKey("slack", "T1", "C1"), ThreadKey("slack", "T1", "C2")
    assert retarget("slack:T1/C1", sold, snew) == "slack:T1/C2"
    assert retarget("slack:C1", sold, snew) == "slack:C2"


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (
            "daily --cron '0 9 * * *' --timezone Europe/Paris --notify telegram:1 Remind me",
            "--timezone",
        ),
        ("alarm --event down --chanel slack --notify telegram:1 look", "--chanel"),
        ("x --manual --notfy telegram:1 hello", "--notfy"),
    ],
)
def test_a_mistyped_flag_is_refused_not_put_in_the_prompt(args: str, flag: str) -> None:
    """--timezone was taken as the prompt's start (tz stayed UTC, the prompt became
    '--timezone Europe/Paris Remind me'); --chanel left the channel at '*'."""
    with pytest.raises(RoutineError, match=f"unknown option {flag}") as exc:
        parse_add(args, created_by="cli")
    assert "--tz" in str(exc.value) and "--channel" in str(exc.value)


def test_a_prompt_may_start_with_dashes_after_a_lone_double_dash() -> None:
    r = parse_add("x --manual --notify web:s -- --verbose output, please --tz", created_by="cli")
    assert r.prompt == "--verbose output, please --tz" and r.tz == "UTC"
    # once the prompt has begun, a word with dashes in it is just a word
    r = parse_add("y --manual --notify web:s check the --dry-run flag", created_by="cli")
    assert r.prompt == "check the --dry-run flag"
