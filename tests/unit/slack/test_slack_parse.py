"""Slack payloads -> InboundEvent (pure)."""

from __future__ import annotations

from typing import Any

from agent_core.events import Action, EventKind, MessageRef, ThreadKey
from channels.slack.parse import (
    followup_candidate,
    parse_action,
    parse_command,
    parse_event,
    plain_text,
)


def body(event: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "event_callback",
        "team_id": "T1",
        "event_id": "Ev1",
        "event": event,
        "authorizations": [{"user_id": "UBOT", "is_bot": True}],
    }


def msg(**kw: Any) -> dict[str, Any]:
    ev = {
        "type": "message",
        "user": "U1",
        "text": "hi",
        "ts": "100.1",
        "channel": "C1",
        "channel_type": "channel",
    }
    ev.update(kw)
    return body(ev)


def test_dm() -> None:
    ev = parse_event(msg(channel="D1", channel_type="im", text="hello <@UBOT>"))
    assert ev is not None
    assert ev.thread == ThreadKey("slack", "T1", "D1", "")
    assert ev.is_direct and ev.text == "hello" and ev.event_id == "m:D1:100.1"
    assert ev.reply_ref == MessageRef("slack", "D1", "100.1")


def test_mention_thread_is_its_ts_or_thread_ts() -> None:
    ev = parse_event(msg(type="app_mention", text="<@UBOT> go"))
    assert ev is not None and ev.thread.thread == "100.1" and ev.mentions_bot and not ev.is_direct
    ev = parse_event(msg(type="app_mention", text="<@UBOT> go", thread_ts="99.0"))
    assert ev is not None and ev.thread.thread == "99.0"


def test_channel_messages_need_mention_thread_or_group_reply_all() -> None:
    assert parse_event(msg()) is None
    assert parse_event(msg(thread_ts="99.0")) is None
    ev = parse_event(msg(thread_ts="99.0"), in_bot_thread=True)
    assert ev is not None and ev.thread.thread == "99.0" and not ev.mentions_bot
    ev = parse_event(msg(), group_reply="all")
    assert ev is not None and ev.thread.thread == "100.1"
    # the message copy of a mention is left to the app_mention event
    assert parse_event(msg(text="<@UBOT> hi", thread_ts="99.0"), in_bot_thread=True) is None


def test_loops_and_noise_are_ignored() -> None:
    dm = {"channel": "D1", "channel_type": "im"}
    assert parse_event(msg(user="UBOT", **dm)) is None
    assert parse_event(msg(bot_id="B1", **dm)) is None
    assert parse_event(msg(subtype="bot_message", **dm)) is None
    assert parse_event(msg(subtype="message_changed", **dm)) is None
    assert parse_event(msg(subtype="message_deleted", **dm)) is None
    assert parse_event({"type": "event_callback", "event": {"type": "reaction_added"}}) is None
    assert parse_event({"type": "url_verification"}) is None


def test_followup_candidate() -> None:
    assert followup_candidate(msg(thread_ts="99.0")) == ("T1", "C1", "99.0")
    assert followup_candidate(msg()) is None
    assert followup_candidate(msg(thread_ts="99.0", channel_type="im")) is None
    assert followup_candidate(msg(thread_ts="99.0", bot_id="B1")) is None


def test_plain_text() -> None:
    assert (
        plain_text("<@UBOT> see <https://a.io|a> &amp; <#C1|general> <!here>", "UBOT")
        == "see a (https://a.io) & #general @here"
    )


def test_labelled_mentions_keep_their_label_as_shown() -> None:
    """Slack's label is what it shows: one that starts with "@" gets no second
    one; a date's label is plain text."""
    cases = {
        "<!subteam^S1|@devs> please": "@devs please",
        "<!subteam^S1> please": "@S1 please",  # no label: the group's id
        "<!here|@here> now": "@here now",
        "<!here|here> now": "@here now",
        "<!channel> <!everyone>": "@channel @everyone",
        "<!date^1392734382^{date_short}|Feb 18, 2014> ok": "Feb 18, 2014 ok",
        "<!date^1392734382^{date_short}> ok": "2014-02-18 14:39 UTC ok",
        "<@U2|bob> and <@U3|@carol>": "@bob and @carol",
        "<#C1|general> <#C2|#ops>": "#general #ops",
    }
    for wire, shown in cases.items():
        assert plain_text(wire, "UBOT") == shown, wire


def test_action() -> None:
    payload = {
        "type": "block_actions",
        "user": {"id": "U2", "username": "bob"},
        "team": {"id": "T1"},
        "channel": {"id": "C1"},
        "container": {"message_ts": "105.0", "channel_id": "C1"},
        "message": {"ts": "105.0", "thread_ts": "100.0"},
        "actions": [{"action_id": "parley:deny", "value": "ap:1:n", "action_ts": "106.5"}],
    }
    ev = parse_action(payload)
    assert ev is not None and ev.kind == EventKind.ACTION
    assert ev.action == Action("ap:1:n") and ev.user_id == "U2"
    assert ev.user_name == ""  # "bob" is the legacy handle: the shown name is looked up
    assert ev.thread == ThreadKey("slack", "T1", "C1", "100.0")
    assert ev.event_id == "a:C1:105.0:106.5"
    # a top-level prompt (its own thread root) belongs to the channel-level conversation
    payload["message"] = {"ts": "105.0", "thread_ts": "105.0"}
    ev = parse_action(payload)
    assert ev is not None and ev.thread.thread == ""
    # presses on other apps' buttons are not ours
    payload["actions"] = [{"action_id": "other", "value": "x", "action_ts": "1"}]
    assert parse_action(payload) is None


def test_command() -> None:
    form = {
        "command": "/parley",
        "text": "hi there",
        "user_id": "U1",
        "channel_id": "C1",
        "team_id": "T1",
        "trigger_id": "tr1",
        "response_url": "https://hooks/x",
    }
    ev = parse_command(form)
    assert ev is not None and ev.text == "hi there" and ev.event_id == "c:tr1"
    assert ev.reply_ref is not None and ev.reply_ref.extra == "ru:https://hooks/x"
    assert parse_command({**form, "text": ""}) is not None
    assert parse_command({**form, "command": "/other"}) is None
    assert parse_command(form, command="/ask") is None


def test_edited_app_mention_is_ignored() -> None:
    """Slack sends ``app_mention`` again, with ``edited`` and the original's ts, when a
    message that mentions the app is edited (slackapi/bolt-js#960, slack-go/slack#1256):
    edits are ignored (a typo fixed in a mention older than DEDUP_TTL_SECS, or a
    message edited to add the mention, would start a turn)."""
    body = {
        "type": "event_callback",
        "team_id": "T1",
        "event": {
            "type": "app_mention",
            "user": "U1",
            "channel": "C1",
            "ts": "1706785424.099119",
            "text": "<@UBOT> please delete the staging bucket",
            "edited": {"user": "U1", "ts": "1706789999.000000"},
        },
    }
    assert parse_event(body, bot_user_id="UBOT", team="T1") is None
    del body["event"]["edited"]  # the original mention is answered
    assert parse_event(body, bot_user_id="UBOT", team="T1") is not None
