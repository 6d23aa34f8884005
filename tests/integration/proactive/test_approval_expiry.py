"""An approval prompt nobody answers loses its buttons when its time runs out (the
scheduler's timer), and the wait it held ends: real workers on a real Valkey."""

from __future__ import annotations

import dataclasses
from typing import Any

import orjson

from agent_core.agent.session import ThreadState
from agent_core.events import EventKind, MessageRef, ThreadKey
from agent_core.llm.base import ChatMessage, Completion, CompletionRequest
from agent_core.proactive.approval_expiry import expiry_event
from agent_core.store import keys
from agent_core.store.delivery import start_field
from tests.integration.agent.conftest import FnModel, call, tools_then_answer, user_event

T = ThreadKey("telegram", "bot1", "42")
G = ThreadKey("telegram", "bot1", "-100")  # a group


def count_model() -> FnModel:
    """'count it' (a group message is prefixed with its sender's name) -> the counter;
    after tool results -> 'done: ...'; otherwise an echo."""
    inner = tools_then_answer(("count it", [call("counter", label="x")]))

    def rule(req: CompletionRequest) -> Completion:
        m = req.messages[-1]
        if m.role == "user" and m.content.endswith("count it"):
            return inner(dataclasses.replace(req, messages=[ChatMessage("user", "count it")]))
        return inner(req)

    return FnModel(rule)


async def ask(pworld: Any, thread: ThreadKey = T, **settings: Any) -> tuple[Any, Any, str]:
    w = pworld(count_model(), approval_ttl_secs=60, **settings)
    await w.start()
    p = w.proactive(clock=w.clock)  # the agent's clock: the prompt's expiry is on it
    await w.send(_addressed(user_event(thread, "count it", is_direct=thread == T)))
    await w.settle(thread)
    prompts = w.prompts(thread)
    assert len(prompts) == 1
    return w, p, prompts[0].message.buttons[0].payload.split(":")[1]


def _addressed(ev: Any) -> Any:
    return dataclasses.replace(ev, mentions_bot=True)


def edits(w: Any, thread: ThreadKey) -> list[Any]:
    return [x for x in w.outbox.log if x.op == "edit" and x.thread == str(thread)]


async def due(w: Any) -> int:
    return int(await w.redis.zcard(keys.APPROVALS_DUE))


async def test_an_unanswered_prompt_closes_when_its_time_runs_out(pworld: Any) -> None:
    w, p, aid = await ask(pworld)
    assert await due(w) == 1
    await p.scheduler.tick()
    await w.settle(T)
    assert not edits(w, T)  # not yet: it has a minute
    calls = len(w.model.requests)

    w.clock.offset = 62
    await p.scheduler.tick()
    await w.settle(T)
    closed = edits(w, T)
    assert len(closed) == 1 and closed[0].message_id == w.prompts(T)[0].message_id
    assert "Expired" in closed[0].message.text and not closed[0].message.buttons
    s = await w.session(T)
    assert s.state == ThreadState.IDLE and not s.pending_approval and not s.resume
    assert s.history[-1].role == "tool" and "expired" in s.history[-1].content
    assert len(w.model.requests) == calls  # nobody wrote: nothing to answer
    assert await w.counter() == 0
    assert await due(w) == 0
    # a later press hears that it expired, and nothing runs
    await w.send(user_event(T, "", kind=EventKind.ACTION, token=f"ap:{aid}:a"))
    await w.settle(T)
    assert await w.counter() == 0
    assert any("expired" in n for n in w.private_notes())


async def test_what_the_requester_wrote_meanwhile_is_answered_at_expiry(pworld: Any) -> None:
    w, p, _aid = await ask(pworld)
    await w.send(user_event(T, "and the weather?"))
    await w.settle(T)
    assert "echo: and the weather?" not in w.texts(T)  # held behind the prompt
    w.clock.offset = 62
    await p.scheduler.tick()
    await w.settle(T)
    assert w.texts(T)[-1] == "echo: and the weather?"
    s = await w.session(T)
    assert s.state == ThreadState.IDLE and not s.held
    assert await w.counter() == 0


async def test_someone_elses_message_held_in_a_group_gets_its_own_turn(pworld: Any) -> None:
    w, p, _aid = await ask(pworld, G)
    await w.send(_addressed(user_event(G, "hi from two", "u2", is_direct=False)))
    await w.settle(G)
    w.clock.offset = 62
    await p.scheduler.tick()
    await w.settle(G)
    assert w.texts(G)[-1] == "echo: U2: hi from two"  # a group message names its sender
    # the model was asked once for u2's message, never to answer the expiry itself
    last = w.model.requests[-1].messages[-1]
    assert last.role == "user" and last.content.endswith("hi from two")
    assert not (await w.session(G)).held


async def test_a_decided_approval_leaves_nothing_for_the_timer(pworld: Any) -> None:
    w, p, aid = await ask(pworld)
    await w.send(user_event(T, "", kind=EventKind.ACTION, token=f"ap:{aid}:a"))
    await w.settle(T)
    assert await w.counter() == 1
    assert await due(w) == 0
    before = len(edits(w, T))
    w.clock.offset = 62
    await p.scheduler.tick()
    await w.settle(T)
    assert len(edits(w, T)) == before
    # an expiry queued anyway (a leader that died between queueing and removing
    # the entry, then a decision) changes nothing
    await w.send(expiry_event(T, aid))
    await w.settle(T)
    assert len(edits(w, T)) == before
    s = await w.session(T)
    assert s.state == ThreadState.IDLE and s.history[-1].content == "done: counted x -> 1"


async def test_a_second_queueing_of_the_same_expiry_is_dropped(pworld: Any) -> None:
    w, p, aid = await ask(pworld)
    w.clock.offset = 62
    await w.send(expiry_event(T, aid))  # the first leader queued it, then died
    await p.scheduler.tick()  # its successor queues it again: a duplicate
    await w.settle(T)
    assert len(edits(w, T)) == 1
    assert await due(w) == 0


async def test_without_the_scheduler_the_prompt_closes_on_the_next_message(pworld: Any) -> None:
    w, _p, _aid = await ask(pworld, scheduler_enabled=False)
    assert await due(w) == 0  # nothing entered for a timer nobody runs
    w.clock.offset = 62
    await w.send(user_event(T, "still there?"))
    await w.settle(T)
    assert "Expired" in edits(w, T)[-1].message.text
    assert w.texts(T)[-1] == "echo: still there?"


# --- after the review of the feature ------------------------------------------------
async def test_what_the_timer_answers_is_answered_for_its_writer(pworld: Any) -> None:
    """The requester's held message asks for a new approval: that prompt and the
    notices name them and fit the group (where only replies reach Parley), not the
    timer's event, which is no one's."""
    w, p, _aid = await ask(pworld, G)
    w.outbox.group_text_reaches = False  # Telegram / Discord with GROUP_REPLY=mention
    await w.send(_addressed(user_event(G, "count it", "u1", is_direct=False)))  # held
    await w.settle(G)
    await w.send(_addressed(user_event(G, "hi from two", "u2", is_direct=False)))  # held
    await w.settle(G)
    w.clock.offset = 62
    await p.scheduler.tick()
    await w.settle(G)
    prompts = w.prompts(G)
    assert len(prompts) == 2
    second = prompts[1].message.text
    assert "for U1" in second and "reply to this message" in second, second
    notices = [x.message.text for x in w.outbox.log if x.thread == str(G)]
    assert not any("Parley's decision" in n for n in notices), notices


def _ref(mid: str) -> bytes:
    return orjson.dumps(MessageRef("telegram", T.conversation, mid).to_dict())


async def test_an_expiry_whose_turn_killed_two_workers_is_given_up_and_ends_the_wait(
    pworld: Any,
) -> None:
    """Like a person's message: an expiry turn (which answers the held messages,
    attachments and all) that died twice is given up, not rerun for ever; giving it
    up still ends the wait."""
    w, _p, aid = await ask(pworld)
    await w.send(user_event(T, "and the weather?"))  # held
    await w.settle(T)
    w.clock.offset = 62
    ev = expiry_event(T, aid)
    await w.redis.hset(  # as two dead executions leave it
        keys.sent(T),
        mapping={
            start_field(ev.event_id): _ref("started:dead-worker"),
            f"{ev.event_id}#r:c": _ref(""),
            f"{ev.event_id}#r:0": _ref(""),
        },
    )
    await w.send(ev)
    await w.settle(T)
    assert any("interrupted again" in t for t in w.texts(T)), w.texts(T)
    s = await w.session(T)
    assert s.state == ThreadState.IDLE and not s.held and not s.pending_approval
    assert s.history[-1].role == "tool" and "expired" in s.history[-1].content


async def test_an_expiry_turn_that_times_out_still_ends_the_wait(pworld: Any) -> None:
    slow = FnModel(count_model().rule, delay=5.0)  # the held message's answer hangs
    w = pworld(slow, approval_ttl_secs=60, turn_timeout_secs=1.0)
    await w.start()
    p = w.proactive(clock=w.clock)
    slow.delay = 0.0
    await w.send(user_event(T, "count it"))
    await w.settle(T)
    assert len(w.prompts(T)) == 1
    await w.send(user_event(T, "and the weather?"))  # held
    await w.settle(T)
    slow.delay = 5.0
    w.clock.offset = 62
    await p.scheduler.tick()
    await w.settle(T, timeout=15)
    assert any("took longer" in t for t in w.texts(T)), w.texts(T)
    s = await w.session(T)
    assert s.state == ThreadState.IDLE and not s.pending_approval and not s.held


async def test_a_prompt_closed_by_a_late_message_is_not_closed_again(pworld: Any) -> None:
    """A message after the expiry, handled before the timer's event, closes the
    prompt; the timer's event then leaves it alone (on Slack a second replacement
    through a response_url could overwrite a newer private message)."""
    w, _p, aid = await ask(pworld)
    w.clock.offset = 62
    await w.send(user_event(T, "still there?"))
    await w.settle(T)
    assert len(edits(w, T)) == 1
    await w.send(expiry_event(T, aid))
    await w.settle(T)
    assert len(edits(w, T)) == 1


# --- a decision made in time, taken up after the expiry -----------------------------
async def test_a_press_made_in_time_but_taken_up_late_counts(pworld: Any) -> None:
    """Every worker is down (a deploy) when the person presses Approve, well within
    the prompt's minute; the workers come back after its expiry, and the timer queues
    the expiry behind the press.  The press is judged by when it was made (its ingest
    time): the call runs, and the late timer finds it decided."""
    w, p, aid = await ask(pworld)
    await w.stop()
    ev = user_event(T, "", kind=EventKind.ACTION, token=f"ap:{aid}:a")
    await w.send(ev)  # taken in by the web process, waiting in the stream
    w.clock.offset = 90
    await p.scheduler.tick()  # the timer: an expiry queued behind the press
    await w.start()
    await w.settle(T)
    assert await w.counter() == 1, w.private_notes()
    a = await w.workers[0][0].agent.approvals.load(T, aid)
    assert a is not None and a.decision == "approve" and a.result == "counted x -> 1"
    assert not any("expired" in n for n in w.private_notes())
    s = await w.session(T)
    assert s.state == ThreadState.IDLE and s.history[-1].content == "done: counted x -> 1"


async def test_a_message_and_a_press_made_in_time_but_taken_up_late(pworld: Any) -> None:
    """The person wrote, then pressed, both in time, taken up after the expiry: the
    message is held (it came while the prompt was live) rather than ending the wait
    as expired, and the press then decides."""
    w, _p, aid = await ask(pworld, scheduler_enabled=False)
    await w.stop()
    await w.send(user_event(T, "one moment"))
    await w.send(user_event(T, "", kind=EventKind.ACTION, token=f"ap:{aid}:a"))
    w.clock.offset = 90
    await w.start()
    await w.settle(T)
    assert await w.counter() == 1, w.private_notes()
    assert not any("Expired" in e.message.text for e in edits(w, T))


async def test_a_press_made_after_the_expiry_is_still_refused(pworld: Any) -> None:
    w, _p, aid = await ask(pworld, scheduler_enabled=False)
    w.clock.offset = 62
    await w.send(user_event(T, "", kind=EventKind.ACTION, token=f"ap:{aid}:a"))
    await w.settle(T)
    assert await w.counter() == 0
    assert any("expired" in n for n in w.private_notes()), w.private_notes()


async def test_a_message_made_in_time_but_taken_up_late_waits_quietly_for_the_timer(
    pworld: Any,
) -> None:
    """The person wrote while the prompt was live; the workers took it up after its
    time, with the timer's expiry queued behind it.  The message is kept for after
    the wait, without asking for a decision that could only be refused as expired
    now, and the expiry ends the wait and answers it."""
    w, p, _aid = await ask(pworld)
    await w.stop()
    await w.send(user_event(T, "one moment"))
    w.clock.offset = 90
    await p.scheduler.tick()  # the timer: an expiry queued behind the message
    await w.start()
    await w.settle(T)
    said = w.texts(T)
    assert not any("waiting for your decision" in t for t in said), said
    s = await w.session(T)
    assert s.state == ThreadState.IDLE and not s.held
    assert s.history[-2].content == "one moment"  # answered after the expired call
