"""A turn whose head has no arrival number (a message forwarded from a conversation
that moved, or a held one queued again) keeps the arrival order of what comes after
it: with the thread's next number known, a later arrival waits for the earlier one.

Before, the order check was off for such a turn: arrival 10 was taken in while 9 was
still on its way; 9 was then inserted before 10 in the mailbox, the turn's end
trimmed the first two entries (the head and 9), and 9 was never answered while 10
was answered twice."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Any

from agent_core.events import ThreadKey
from agent_core.store import keys
from tests.integration.agent.conftest import FnModel, call, tools_then_answer, user_event

T = ThreadKey("web", "local", "order-after-forward")


async def _until(pred: Any, what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not await pred():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.01)


async def test_a_late_arrival_after_a_forwarded_head_is_answered_once_in_order(
    world: Any,
) -> None:
    w = world(FnModel(tools_then_answer(("slow", [call("sleepy", ms=300, label="z")]))))
    await w.start()
    d = w.workers[0][0].agent.delivery
    await w.redis.set(keys.next_seq(T), 9)  # arrivals 1-8 were answered before
    forwarded = dataclasses.replace(user_event(T, "slow", eid="fwd1"), seq=0)
    await d.handoff_and_begin([(b"", forwarded)], "test", ack=False)
    await d.release(T, "test")  # a worker's sweep takes it from here

    async def running() -> bool:
        return bool(w.model.requests)

    await _until(running, "the forwarded message's turn never started")
    ten = dataclasses.replace(user_event(T, "ten", eid="e10"), seq=10)
    await d.handoff_and_begin([(b"", ten)], "test", ack=False)  # its reader was quicker

    async def checked() -> bool:  # the turn looked for arrivals before its 2nd call
        return len(w.model.requests) >= 2

    await _until(checked, "the turn never called the model again")
    nine = dataclasses.replace(user_event(T, "nine", eid="e9"), seq=9)
    await d.handoff_and_begin([(b"", nine)], "test", ack=False)  # the slower reader
    await w.settle(T, timeout=30)

    said = [[m.content for m in r.messages if m.role == "user"] for r in w.model.requests]
    firsts = [next((i for i, u in enumerate(said) if text in u), None) for text in ("nine", "ten")]
    assert firsts[0] is not None, f"arrival 9 never reached the model: {said}"
    assert firsts[1] is not None and firsts[0] <= firsts[1], said
    assert not any("ten" in u for u in said[:2]), "10 was taken in before 9 arrived"
    assert await w.redis.llen(keys.mailbox(T)) == 0
    # 9 and 10 answered in one turn (the model echoes the last: "ten") or, when 9's
    # turn counts as a rerun of the test's own begin, one each: never 10 twice
    texts = w.texts(T)
    assert texts.count("echo: ten") == 1 and len(texts) == len(set(texts)), texts
