"""A person's name for a group conversation (agent_core/agent/people.py)."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from agent_core.agent import people
from agent_core.agent.people import named
from agent_core.events import Attachment, EventKind, InboundEvent, ThreadKey

GROUP = ThreadKey("slack", "T1", "C1", "")


def event(**kw: object) -> InboundEvent:
    base = InboundEvent(
        event_id="m:C1:1", kind=EventKind.MESSAGE, channel="slack", thread=GROUP,
        user_id="U1", text="hi", is_direct=False,
    )  # fmt: skip
    return dataclasses.replace(base, **kw)  # type: ignore[arg-type]


class Names:
    def __init__(self, answer: str = "alice", delay: float = 0.0, fail: bool = False) -> None:
        self.answer, self.delay, self.fail = answer, delay, fail
        self.asked: list[str] = []

    async def user_display_name(self, user_id: str) -> str:
        self.asked.append(user_id)
        await asyncio.sleep(self.delay)
        if self.fail:
            raise RuntimeError("boom")
        return self.answer


async def test_a_group_message_without_a_name_gets_one() -> None:
    assert (await named(Names(), event())).user_name == "alice"


async def test_no_lookup_when_not_needed() -> None:
    names = Names()
    assert (await named(names, event(is_direct=True))).user_name == ""
    assert (await named(names, event(user_name="Bob"))).user_name == "Bob"
    assert (await named(object(), event())).user_name == ""  # a channel without lookups
    assert names.asked == []


async def test_a_slow_or_failing_lookup_never_holds_the_turn(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(people, "NAME_TIMEOUT_SECS", 0.1)
    assert (await named(Names(delay=5), event())).user_name == ""
    assert (await named(Names(fail=True), event())).user_name == ""
    assert (await named(Names(answer=""), event())).user_name == ""


class Files:
    """An outbox whose platform sends some files as ids only (Slack Connect)."""

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay
        self.asked: list[tuple[Attachment, ...]] = []

    async def complete_attachments(
        self, attachments: tuple[Attachment, ...]
    ) -> tuple[Attachment, ...]:
        self.asked.append(attachments)
        await asyncio.sleep(self.delay)
        return tuple(
            Attachment("image", "cat.png", "image/png", 3, "https://x/cat.png")
            if a.ref == "F1"
            else a
            for a in attachments
        )


async def test_files_sent_as_ids_are_completed_within_the_same_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stub = Attachment("document", ref="F1")
    files = Files()
    done = await named(files, event(is_direct=True, attachments=(stub,)))
    assert done.attachments == (
        Attachment("image", "cat.png", "image/png", 3, "https://x/cat.png"),
    )
    assert await named(files, event(is_direct=True)) is not None
    assert len(files.asked) == 1  # no attachments: not asked
    monkeypatch.setattr(people, "NAME_TIMEOUT_SECS", 0.1)
    slow = await named(Files(delay=5), event(is_direct=True, attachments=(stub,)))
    assert slow.attachments == (stub,)  # too slow: the turn goes on with what it has
