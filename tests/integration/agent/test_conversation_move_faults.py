"""A conversation move under faults and merges: what must never happen twice or be lost.

Each case is a defect a review of an earlier version found: a tool approved in
the old place between a crash and the rerun running a second time, an answer
part re-sent after its event was forwarded, messages held for an old approval
dropped (or reordered) by a merge, ``/undo`` after a merge wiping the moved
conversation (or a move with nothing to merge wiping the new thread's undo), a
call that ran recorded as "not run" by a merge.
"""

from __future__ import annotations

from typing import Any

from agent_core.agent.session import ThreadState
from agent_core.events import EventKind, InboundEvent, MessageRef
from agent_core.store import keys
from tests.integration.agent.conftest import FnModel, call, tools_then_answer, user_event
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
    written = await mover._move_in(
        OLD, NEW, await mover.moves.read(OLD), await delivery.begin(NEW, "dead-mover")
    )
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


async def merged_after_held(w: Any, *held: InboundEvent) -> None:
    """An approval pending in the old group with ``held`` kept for it, a message in
    the supergroup that reached Parley before the notice, then the notice."""
    await w.start()
    await w.send(user_event(OLD, "count it"))  # approval pending in the old place
    await w.settle(OLD)
    for ev in held:  # held: "I'll answer right after"
        await w.send(ev)
    await w.settle(OLD)
    assert len((await w.session(OLD)).held) == len(held)
    await w.send(user_event(NEW, "new words"))  # reached Parley before the notice
    await w.settle(NEW)
    await w.send(moved())
    await w.settle(NEW)


async def test_messages_held_for_an_old_approval_are_answered_after_a_merge(
    world: Any,
) -> None:
    w = world(count_model())
    await merged_after_held(w, user_event(OLD, "and also this"))
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


def two_calls_model() -> FnModel:
    return FnModel(
        tools_then_answer(
            ("count both", [call("counter", label="x"), call("counter", label="y")]),
            ("count it", [call("counter", label="x")]),
        )
    )


async def test_a_merge_keeps_the_result_of_a_call_that_already_ran(world: Any) -> None:
    """Old round: two calls needing approval; the first was approved and ran, the
    second waits.  A merge ends the round - but the call that ran must keep its
    real result, not "not run" (the model would run it again)."""
    w = world(two_calls_model())
    await w.start()
    await w.send(user_event(OLD, "count both"))
    await w.settle(OLD)
    aid1 = w.prompts(OLD)[0].message.buttons[0].payload.split(":")[1]
    await w.send(user_event(OLD, "", kind=EventKind.ACTION, token=f"ap:{aid1}:a"))
    await w.settle(OLD)
    assert await w.counter("x") == 1  # the first call ran
    assert (await w.session(OLD)).state == ThreadState.AWAITING_APPROVAL  # the second waits
    await w.send(user_event(NEW, "new words"))  # reached Parley before the notice
    await w.settle(NEW)
    await w.send(moved())
    await w.settle(NEW)
    s = await w.session(NEW)
    results = [m.content for m in s.history if m.role == "tool"]
    assert len(results) == 2
    assert "counted x -> 1" in results[0], results  # it ran: the history must say so
    assert "not run" in results[1] and await w.counter("y") == 0


async def test_a_merge_keeps_held_messages_in_the_order_they_were_written(world: Any) -> None:
    """Both threads wait for an approval, each with a message held.  The old group's
    held message was written before the upgrade, the new group's after: after the
    new approval is decided the model must see them in that order (old history
    comes first, so must old held messages)."""
    w = world(count_model())
    await w.start()
    await w.send(user_event(OLD, "count it"))
    await w.settle(OLD)
    await w.send(user_event(OLD, "old held"))
    await w.settle(OLD)
    await w.send(user_event(NEW, "count it"))
    await w.settle(NEW)
    await w.send(user_event(NEW, "new held"))
    await w.settle(NEW)
    new_aid = w.prompts(NEW)[0].message.buttons[0].payload.split(":")[1]
    await w.send(moved())
    await w.settle(NEW)
    assert (await w.session(NEW)).state == ThreadState.AWAITING_APPROVAL
    await w.send(user_event(NEW, "", kind=EventKind.ACTION, token=f"ap:{new_aid}:a"))
    await w.settle(NEW)
    seen = [m.content for m in w.model.requests[-1].messages if m.role == "user"]
    assert seen[-2:] == ["old held", "new held"], seen


async def test_a_move_from_a_thread_with_no_conversation_keeps_the_new_undo(world: Any) -> None:
    """Nothing to merge (the old group has no conversation): the new thread's undo
    checkpoints are still valid and must not be wiped."""
    w = world(count_model())
    await w.start()
    await w.send(user_event(NEW, "new words"))
    await w.settle(NEW)
    assert await w.redis.exists(keys.session(OLD)) == 0
    depth = await w.redis.llen(keys.undo(NEW))
    assert depth >= 1
    await w.send(moved())
    await w.settle(NEW)
    assert await w.redis.llen(keys.undo(NEW)) == depth
    await w.send(user_event(NEW, "/undo"))
    await w.settle(NEW)
    assert not w.texts(NEW)[-1].startswith("Nothing to undo")


async def test_a_routine_note_held_in_the_old_group_stays_before_the_new_part(
    world: Any,
) -> None:
    import dataclasses

    w = world(count_model())
    note = dataclasses.replace(
        user_event(OLD, "Reminder: standup at 10."), event_id="note:r9", kind=EventKind.NOTE
    )
    await merged_after_held(w, note, user_event(OLD, "and also this"))
    s = await w.session(NEW)
    said = [(m.role, m.content) for m in s.history if m.role != "tool"]
    at = said.index(("assistant", "Reminder: standup at 10."))
    assert said.index(("user", "new words")) == at + 1, said
    assert said[-2:] == [("user", "and also this"), ("assistant", "echo: and also this")]
    full = [(m.role, m.content) for m in s.history]
    i = full.index(("assistant", "Reminder: standup at 10."))
    assert full[i - 1][0] == "tool" and "not run" in full[i - 1][1]  # after the old round
    assert not s.held


async def test_a_move_whose_executions_died_twice_still_finishes(world: Any) -> None:
    """A person's message that kills two workers is given up with a notice; a
    conversation's move is not (the old group's history would stay behind, and the
    notice would ask people to resend a message they never sent): it reruns until
    it finishes."""
    w = world(count_model(), sweep_interval_secs=60.0)
    await w.start()
    await w.send(user_event(OLD, "one"))
    await w.settle(OLD)
    delivery = w.workers[0][0].agent.delivery
    ev = moved()
    # an execution began the move and died, then its rerun too
    await delivery.handoff_and_begin([(b"", ev)], "dead-rerun", ack=False)
    await delivery.record_sent(NEW, f"{ev.event_id}#r:0", MessageRef("telegram", str(NEW), ""))
    await w.redis.delete(keys.lock(NEW))  # the dead worker's lock expired
    await w.workers[0][0].sweep_once()
    await w.settle(NEW)
    assert await w.redis.get(keys.moved(OLD)) == str(NEW).encode()
    assert not any("gave up" in t for t in w.texts(NEW) + w.texts(OLD))
    s = await w.session(NEW)
    assert [m.content for m in s.history if m.role == "user"] == ["one"]
    assert await w.redis.hlen(keys.sent(NEW)) == 0


OOM = "OOM command not allowed when used memory > 'maxmemory'."


def fail_reads(monkeypatch: Any, errors: list[Exception]) -> list[Exception]:
    """The mover's read of the old place raises these, one per attempt, then works."""
    from agent_core.store.moves import Moves

    real_read = Moves.read
    raised: list[Exception] = []

    async def read(self: Moves, old: Any) -> Any:
        if errors:
            raised.append(errors.pop(0))
            raise raised[-1]
        return await real_read(self, old)

    monkeypatch.setattr(Moves, "read", read)
    return raised


async def start_with_a_prompt(w: Any) -> None:
    await w.start()
    for worker, _stop, _task in w.workers:
        worker.agent.mover.retry_delay_secs = 0.01
    await w.send(user_event(OLD, "count it"))
    await w.settle(OLD)


async def test_a_move_redis_refused_is_tried_again(world: Any, monkeypatch: Any) -> None:
    """Redis refused the move's script once (out of memory): the move is tried again
    and the conversation still follows, instead of staying behind for good."""
    from redis.exceptions import ResponseError

    w = world(count_model())
    await start_with_a_prompt(w)
    raised = fail_reads(monkeypatch, [ResponseError(OOM)])
    await w.send(moved())
    await w.settle(NEW)
    assert len(raised) == 1
    s = await w.session(NEW)
    assert s.state == ThreadState.AWAITING_APPROVAL
    assert any(m.content == "count it" for m in s.history if m.role == "user")
    assert await w.redis.exists(keys.session(OLD)) == 0


async def test_a_move_that_keeps_failing_is_given_up(world: Any, monkeypatch: Any) -> None:
    """Refused every time: given up after MOVE_ATTEMPTS like any failed turn, not
    retried for ever.  Any other error (a bug, a script that failed half-way) is
    not repeated at all: a repeat could apply a half-done move twice."""
    from redis.exceptions import ResponseError

    from agent_core.agent.move import MOVE_ATTEMPTS

    w = world(count_model())
    await start_with_a_prompt(w)
    raised = fail_reads(monkeypatch, [ResponseError(OOM) for _ in range(MOVE_ATTEMPTS + 2)])
    await w.send(moved())
    await w.settle(NEW)
    assert len(raised) == MOVE_ATTEMPTS
    assert await w.redis.exists(keys.session(NEW)) == 0

    raised = fail_reads(monkeypatch, [ValueError("a bug"), ValueError("again")])
    await w.send(moved("bot1:migrate:-42:again"))
    await w.settle(NEW)
    assert len(raised) == 1
