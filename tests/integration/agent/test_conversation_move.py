"""A conversation moved to a new thread (EventKind.MOVED): real workers, real Valkey.

What a user of a Telegram group that became a supergroup would notice: the
history, the pending approval, the settings and routines follow the group; a
turn still running in the old place finishes first; presses on old prompts
still decide; nothing is moved (or merged) twice.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from agent_core.agent.session import Session, ThreadState
from agent_core.events import EventKind, InboundEvent, ThreadKey
from agent_core.proactive.routines import Routine, RoutineStore
from agent_core.store import keys
from agent_core.store.moves import Moves
from tests.integration.agent.conftest import FnModel, call, tools_then_answer, user_event

OLD = ThreadKey("telegram", "bot1", "-42")
NEW = ThreadKey("telegram", "bot1", "-1001234567890")


def moved(eid: str = "bot1:migrate:-42") -> InboundEvent:
    return InboundEvent(
        event_id=eid,
        kind=EventKind.MOVED,
        channel="telegram",
        thread=NEW,
        user_id="u1",
        is_direct=False,
        moved_from=OLD,
    )


def count_model(delay: float = 0.0) -> FnModel:
    return FnModel(tools_then_answer(("count it", [call("counter", label="x")])), delay=delay)


def history(s: Any) -> list[tuple[str, str]]:
    return [(m.role, m.content) for m in s.history if m.role in ("user", "assistant")]


async def test_everything_follows_and_an_old_prompt_still_decides(world: Any) -> None:
    w = world(count_model())
    await w.start()
    await w.send(user_event(OLD, "/model fn-model"))
    await w.send(user_event(OLD, "count it"))
    await w.settle(OLD)
    prompt = w.prompts(OLD)[0].message
    aid = prompt.buttons[0].payload.split(":")[1]
    before = await w.session(OLD)
    assert before.state == ThreadState.AWAITING_APPROVAL and before.model == "fn-model"

    await w.send(moved())
    await w.settle(NEW)
    s = await w.session(NEW)
    assert s.thread == str(NEW)
    assert ("user", "count it") in history(s)
    assert s.state == ThreadState.AWAITING_APPROVAL and s.pending_approval == aid
    assert s.model == "fn-model"
    assert await w.redis.exists(keys.session(OLD)) == 0
    assert await w.redis.exists(keys.approval(OLD, aid)) == 0
    assert await w.redis.exists(keys.approval(NEW, aid)) == 1
    assert await w.redis.llen(keys.undo(NEW)) >= 1  # /undo keeps working there
    assert (await w.redis.get(keys.moved(OLD))) == str(NEW).encode()
    assert (await w.redis.get(keys.redirect(OLD))) == NEW.conversation.encode()
    assert 0 < await w.redis.ttl(keys.redirect(OLD)) <= keys.MOVED_TTL_SECS
    assert not [x for x in w.outbox.log if x.op == "send" and x.thread == str(NEW)]  # silent

    # the button on the prompt in the old chat: the press is forwarded and decides
    await w.send(user_event(OLD, "", kind=EventKind.ACTION, token=f"ap:{aid}:a"))
    await w.settle(OLD)
    await w.settle(NEW)
    assert await w.counter() == 1
    assert w.texts(str(NEW))[-1] == "done: counted x -> 1"
    s = await w.session(NEW)
    assert s.state == ThreadState.IDLE and not s.pending_approval
    # a message that still reaches the old thread continues the same conversation
    await w.send(user_event(OLD, "still there?"))
    await w.settle(OLD)
    await w.settle(NEW)
    assert w.texts(str(NEW))[-1] == "echo: still there?"
    assert [u for r, u in history(await w.session(NEW)) if r == "user"][-2:] == [
        "count it",
        "still there?",
    ]
    assert await w.redis.exists(keys.session(OLD)) == 0


async def test_a_turn_running_in_the_old_thread_finishes_first(world: Any) -> None:
    model = count_model(delay=0.6)
    w = world(model)
    await w.start()
    await w.send(user_event(OLD, "first"))
    for _ in range(100):
        if await w.redis.exists(keys.lock(OLD)):
            break
        await asyncio.sleep(0.01)
    await w.send(moved())
    await w.send(user_event(NEW, "second"))  # written in the new place right away
    await w.settle(OLD)
    await w.settle(NEW)
    s = await w.session(NEW)
    assert history(s) == [
        ("user", "first"),
        ("assistant", "echo: first"),
        ("user", "second"),
        ("assistant", "echo: second"),
    ]
    # the second answer was made with the first exchange in view
    assert [m.content for m in model.requests[-1].messages if m.role == "user"][-2:] == [
        "first",
        "second",
    ]


async def test_redelivered_notice_moves_nothing_twice(world: Any) -> None:
    w = world(count_model())
    await w.start()
    await w.send(user_event(OLD, "one"))
    await w.settle(OLD)
    await w.redis.rpush(keys.archive(OLD), b'{"r":"user","c":"archived"}')
    await w.send(moved())
    await w.settle(NEW)
    await w.send(user_event(NEW, "two"))
    await w.settle(NEW)
    s = await w.session(NEW)
    # the same notice again (the twin from the other chat, or a redelivery), also
    # after the 24 h de-duplication window
    await w.send(moved())
    await w.redis.delete(keys.dedup("telegram", "bot1:migrate:-42"))
    await w.send(moved())
    await w.settle(NEW)
    again = await w.session(NEW)
    assert (
        history(again)
        == history(s)
        == [
            ("user", "one"),
            ("assistant", "echo: one"),
            ("user", "two"),
            ("assistant", "echo: two"),
        ]
    )
    assert again.version == s.version
    assert await w.redis.llen(keys.archive(NEW)) == 1


async def test_a_crash_between_the_two_steps_is_finished_by_the_rerun(world: Any) -> None:
    w = world(count_model())
    await w.start()
    await w.send(user_event(OLD, "one"))
    await w.settle(OLD)
    await w.redis.rpush(keys.archive(OLD), b"a1", b"a2")
    # the first execution wrote the new thread, then died before the old side
    moves = Moves(w.redis, session_ttl_ms=60_000)
    src = await moves.read(OLD)
    assert src.session_data is not None
    session = Session.load(str(OLD), src.session_version, src.session_data)
    args: dict[str, Any] = {
        "session_json": dataclasses.replace(session, thread=str(NEW)).to_json(),
        "expected_version": 0,
        "following": src.following,
        "merging": False,
        "approvals": {},
    }
    assert await moves.move_in(NEW, OLD, **args) == 1
    assert await moves.move_in(NEW, OLD, **args) == 0  # once per source
    await w.send(moved())
    await w.settle(NEW)
    assert await w.redis.lrange(keys.archive(NEW), 0, -1) == [b"a1", b"a2"]
    assert await w.redis.exists(keys.session(OLD)) == 0
    s = await w.session(NEW)
    assert history(s) == [("user", "one"), ("assistant", "echo: one")]
    assert s.thread == str(NEW)


async def test_merge_when_the_new_thread_already_talked(world: Any) -> None:
    w = world(count_model())
    await w.start()
    await w.send(user_event(OLD, "old words"))
    await w.send(user_event(OLD, "count it"))  # leaves an approval pending in the old place
    await w.settle(OLD)
    aid = w.prompts(OLD)[0].message.buttons[0].payload.split(":")[1]
    await w.redis.rpush(keys.archive(OLD), b"old-archived")
    await w.send(user_event(NEW, "new words"))  # reached Parley before the notice
    await w.settle(NEW)
    await w.redis.rpush(keys.archive(NEW), b"new-archived")
    old_s, new_s = await w.session(OLD), await w.session(NEW)
    await w.send(moved())
    await w.settle(NEW)
    s = await w.session(NEW)
    users = [c for r, c in history(s) if r == "user"]
    assert users == ["old words", "count it", "new words"]
    # the old request could not be resumed after newer history: it ends "not run"
    assert s.state == ThreadState.IDLE and not s.pending_approval
    tool_results = [m.content for m in s.history if m.role == "tool"]
    assert tool_results and "not run" in tool_results[0]
    assert s.turns == old_s.turns + new_s.turns
    assert s.cost_usd == old_s.cost_usd + new_s.cost_usd
    assert await w.redis.lrange(keys.archive(NEW), 0, -1) == [b"old-archived", b"new-archived"]
    # its button now says so, and nothing runs
    await w.send(user_event(OLD, "", kind=EventKind.ACTION, token=f"ap:{aid}:a"))
    await w.settle(OLD)
    await w.settle(NEW)
    assert await w.counter() == 0
    assert any("not active" in t for t in w.private_notes())
    # and the merged conversation goes on with all of it
    await w.send(user_event(NEW, "and now?"))
    await w.settle(NEW)
    seen = [m.content for m in w.model.requests[-1].messages if m.role == "user"]
    assert seen[-3:] == ["count it", "new words", "and now?"] and "old words" in seen


async def test_routines_notifying_the_old_chat_follow_it(world: Any) -> None:
    w = world(count_model())
    store = RoutineStore(w.redis)
    await store.add(Routine("daily", "cron", "hi", notify="telegram:-42", cron="0 9 * * *"))
    await store.add(Routine("full", "manual", "hi", notify="{telegram:bot1:-42:}"))
    await store.add(Routine("other", "manual", "hi", notify="telegram:-43"))
    await w.start()
    await w.send(moved())
    await w.settle(NEW)
    got = {r.name: r.notify for r in await store.all()}
    assert got == {
        "daily": "telegram:-1001234567890",
        "full": NEW.tag,
        "other": "telegram:-43",
    }


async def test_a_move_is_never_folded_into_a_running_turn(world: Any) -> None:
    # a turn with a tool round: what arrives meanwhile is looked at before the next call
    w = world(FnModel(tools_then_answer(("slow", [call("sleepy", ms=800, label="z")]))))
    await w.start()
    await w.send(user_event(OLD, "old words"))
    await w.settle(OLD)
    await w.send(user_event(NEW, "slow"))
    for _ in range(100):
        if await w.redis.exists(keys.lock(NEW)):
            break
        await asyncio.sleep(0.01)
    await w.send(moved())  # arrives while that turn runs: waits for its own
    await w.settle(NEW)
    s = await w.session(NEW)
    assert [c for r, c in history(s) if r == "user"] == ["old words", "slow"]
    assert await w.redis.exists(keys.session(OLD)) == 0
