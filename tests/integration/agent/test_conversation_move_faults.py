"""A conversation move under faults and merges: what must never happen twice or be lost.

Each case is a defect a review of the first version found: a tool approved in
the old place between a crash and the rerun running a second time, an answer
part re-sent after its event was forwarded, messages held for an old approval
dropped by a merge, and ``/undo`` after a merge wiping the moved conversation.
"""

from __future__ import annotations

from typing import Any

from agent_core.agent.session import ThreadState
from agent_core.events import EventKind, MessageRef
from agent_core.store import keys
from tests.integration.agent.conftest import user_event
from tests.integration.agent.test_conversation_move import NEW, OLD, count_model, moved


def press_old(aid: str) -> Any:
    return user_event(OLD, "", kind=EventKind.ACTION, token=f"ap:{aid}:a")


async def test_nothing_runs_in_the_old_place_between_a_crash_and_the_rerun(world: Any) -> None:
    w = world(count_model())
    await w.start()
    await w.send(user_event(OLD, "count it"))
    await w.settle(OLD)
    aid = w.prompts(OLD)[0].message.buttons[0].payload.split(":")[1]
    agent = w.workers[0][0].agent
    delivery, mover = agent.delivery, agent.mover
    # the first execution: a worker took the notice and both locks, marked the old
    # thread, wrote the new one, and died before deleting the old state
    await delivery.handoff_and_begin([(b"", moved())], "dead-worker", ack=False)
    assert await delivery.try_lock(OLD, "dead-mover")
    assert await mover.moves.fence(OLD, NEW, "dead-mover") == 1
    written = await mover._move_in(OLD, NEW, await mover.moves.read(OLD), await delivery.begin(NEW))
    assert written == (True, [aid])
    await w.redis.delete(keys.lock(OLD), keys.lock(NEW))  # both locks expired
    # a press on the old prompt now: forwarded, it runs after the move's rerun
    await w.send(press_old(aid))
    await w.settle(OLD)
    await w.settle(NEW)
    assert await w.counter() == 1
    assert await w.redis.exists(keys.session(OLD)) == 0
    s = await w.session(NEW)
    assert s.state == ThreadState.IDLE
    assert any("counted x -> 1" in m.content for m in s.history if m.role == "tool")
    # a second press (another callback) on the same prompt runs nothing
    await w.send(press_old(aid))
    await w.settle(OLD)
    await w.settle(NEW)
    assert await w.counter() == 1


async def test_a_forwarded_event_does_not_send_an_answer_part_twice(world: Any) -> None:
    """A worker died mid-answer in the old group after the first part reached the
    chat; the move forwards the unfinished event with its sent records."""
    w = world(count_model(), sweep_interval_secs=60.0)
    await w.start()
    await w.send(user_event(OLD, "one"))
    await w.settle(OLD)
    delivery = w.workers[0][0].agent.delivery
    ev = user_event(OLD, "two")
    await delivery.handoff_and_begin([(b"", ev)], "dead-worker", ack=False)
    await delivery.record_sent(OLD, f"{ev.event_id}:0", MessageRef("web", str(OLD), "900"))
    await w.redis.delete(keys.lock(OLD))  # the dead worker's lock expired
    await w.send(moved())
    await w.settle(NEW)
    assert await w.redis.get(keys.moved(OLD)) == str(NEW).encode()
    await w.workers[0][0].sweep_once()  # the sweeper finds the old thread's event
    await w.settle(OLD)
    await w.settle(NEW)
    assert not [s for s in w.outbox.sends() if s.message.text == "echo: two"]
    assert await w.redis.hlen(keys.sent(NEW)) == 0  # the part records end with the turn


async def test_messages_held_for_an_old_approval_are_answered_after_a_merge(
    world: Any,
) -> None:
    w = world(count_model())
    await w.start()
    await w.send(user_event(OLD, "count it"))  # approval pending in the old place
    await w.settle(OLD)
    await w.send(user_event(OLD, "and also this"))  # held: "I'll answer right after"
    await w.settle(OLD)
    assert (await w.session(OLD)).held
    await w.send(user_event(NEW, "new words"))  # reached Parley before the notice
    await w.settle(NEW)
    await w.send(moved())
    await w.settle(NEW)
    s = await w.session(NEW)
    assert s.state == ThreadState.IDLE and not s.held  # the old call ended "not run"
    assert w.texts(NEW)[-1] == "echo: and also this"
    users = [m.content for m in s.history if m.role == "user"]
    assert users == ["count it", "new words", "and also this"]
    # a redelivered notice queues nothing twice
    await w.redis.delete(keys.dedup("telegram", "bot1:migrate:-42"))
    await w.send(moved())
    await w.settle(NEW)
    assert w.texts(NEW).count("echo: and also this") == 1


async def test_undo_after_a_merge_never_wipes_the_moved_conversation(world: Any) -> None:
    """Each thread's undo checkpoints hold its own history alone: both are dropped,
    and /undo works again from the next turn on, over the merged conversation."""
    w = world(count_model())
    await w.start()
    await w.send(user_event(OLD, "old words"))
    await w.settle(OLD)
    await w.send(user_event(NEW, "new words"))
    await w.settle(NEW)
    assert await w.redis.llen(keys.undo(NEW)) >= 1
    await w.send(moved())
    await w.settle(NEW)
    await w.send(user_event(NEW, "/undo"))
    await w.settle(NEW)
    assert w.texts(NEW)[-1].startswith("Nothing to undo")

    def users(s: Any) -> list[str]:
        return [m.content for m in s.history if m.role == "user"]

    assert users(await w.session(NEW)) == ["old words", "new words"]
    await w.send(user_event(NEW, "third"))
    await w.settle(NEW)
    await w.send(user_event(NEW, "/undo"))
    await w.settle(NEW)
    assert users(await w.session(NEW)) == ["old words", "new words"]
