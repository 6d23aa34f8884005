from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_core.events import (
    Action,
    Attachment,
    Button,
    EventKind,
    InboundEvent,
    MessageRef,
    OutboundMessage,
    ThreadKey,
)


def test_same_raw_ids_on_two_platforms_are_two_threads() -> None:
    a = ThreadKey("telegram", "1", "42", "")
    b = ThreadKey("discord", "1", "42", "")
    assert a != b
    assert str(a) != str(b)
    assert a.tag != b.tag


def test_thread_key_string_form_is_a_single_hash_tag() -> None:
    t = ThreadKey("slack", "T1", "C9", "1700000000.000100")
    assert t.tag == "{slack:T1:C9:1700000000.000100}"
    assert ThreadKey.parse(t.tag) == t


@given(st.text(), st.text(), st.text(), st.text())
def test_thread_key_round_trips_and_never_breaks_the_hash_tag(
    ch: str, tenant: str, conv: str, thread: str
) -> None:
    t = ThreadKey(ch or "x", tenant, conv, thread)
    s = str(t)
    assert "{" not in s and "}" not in s
    assert s.count(":") == 3
    assert ThreadKey.parse(s) == t


def test_inbound_event_json_round_trip() -> None:
    ev = InboundEvent(
        event_id="u1",
        kind=EventKind.ACTION,
        channel="telegram",
        thread=ThreadKey("telegram", "bot", "42", "7"),
        user_id="99",
        user_name="ann",
        text="hi",
        is_direct=False,
        mentions_bot=True,
        attachments=(Attachment("image", "a.png", "image/png", 10, "file1"),),
        action=Action("tok", "approve"),
        reply_ref=MessageRef("telegram", "42", "5", "7", "cbq"),
        received_at=12.5,
    )
    assert InboundEvent.from_json(ev.to_json()) == ev


def test_moved_event_json_round_trip() -> None:
    ev = InboundEvent(
        event_id="bot:migrate:-42",
        kind=EventKind.MOVED,
        channel="telegram",
        thread=ThreadKey("telegram", "bot", "-1001234567890"),
        user_id="99",
        is_direct=False,
        moved_from=ThreadKey("telegram", "bot", "-42"),
        received_at=1.0,
    )
    back = InboundEvent.from_json(ev.to_json())
    assert back == ev and back.moved_from == ThreadKey("telegram", "bot", "-42")


def test_button_payload_must_fit_every_platform() -> None:
    Button("Approve", "a" * 64)
    with pytest.raises(ValueError):
        Button("Approve", "a" * 65)
    with pytest.raises(ValueError):
        Button("Approve", "é")


def test_outbound_message_round_trip() -> None:
    m = OutboundMessage(
        "**hi**",
        buttons=(Button("Deny", "d:1"),),
        edit_of=MessageRef("web", "c", "m"),
        final=False,
        notice=True,
        private_to="u",
    )
    assert OutboundMessage.from_dict(m.to_dict()) == m
