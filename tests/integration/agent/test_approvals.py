"""Approvals end to end through real workers on a real Valkey (RecordingOutbox)."""

from __future__ import annotations

import asyncio
from typing import Any

from agent_core.agent.session import ThreadState
from agent_core.events import EventKind, ThreadKey
from tests.integration.agent.conftest import FnModel, call, tools_then_answer, user_event

T = ThreadKey("telegram", "bot1", "42")


def count_model() -> FnModel:
    return FnModel(
        tools_then_answer(
            ("count it", [call("counter", label="x")]),
            ("count twice", [call("counter", label="a"), call("counter", label="b")]),
            ("time and count", [call("current_time"), call("counter", label="c")]),
        )
    )


def press(token: str, user: str = "u1", thread: ThreadKey = T) -> Any:
    return user_event(thread, "", user, kind=EventKind.ACTION, token=token)


async def ask(world: Any, **settings: Any) -> tuple[Any, str]:
    w = world(count_model(), **settings)
    await w.start()
    await w.send(user_event(T, "count it"))
    await w.settle(T)
    prompts = w.prompts(T)
    assert len(prompts) == 1
    return w, prompts[0].message.buttons[0].payload.split(":")[1]


async def test_prompt_then_approve_runs_once_and_edits_the_prompt(world: Any) -> None:
    w, aid = await ask(world)
    prompt = w.prompts(T)[0].message
    assert [b.label for b in prompt.buttons] == ["Approve", "Always", "Deny"]
    for b in prompt.buttons:
        assert b.payload.isascii() and len(b.payload.encode()) <= 64
    assert "counter" in prompt.text and "label" in prompt.text
    s = await w.session(T)
    assert s.state == ThreadState.AWAITING_APPROVAL and s.pending_approval == aid
    assert await w.counter() == 0

    await w.send(press(f"ap:{aid}:a"))
    await w.settle(T)
    assert await w.counter() == 1
    edits = [
        x for x in w.outbox.log if x.op == "edit" and x.message_id == w.prompts(T)[0].message_id
    ]
    assert edits and not edits[-1].message.buttons
    assert "Approved" in edits[-1].message.text and "U1" in edits[-1].message.text
    assert w.texts(T)[-1] == "done: counted x -> 1"
    s = await w.session(T)
    assert s.state == ThreadState.IDLE and not s.pending_approval and not s.resume
    # the history is valid: assistant tool call, then its result, then the answer
    roles = [m.role for m in s.history]
    assert roles == ["user", "assistant", "tool", "assistant"]


async def test_200_concurrent_presses_run_the_tool_exactly_once(world: Any) -> None:
    w, aid = await ask(world)
    await w.start(2)  # three workers in all
    tokens = [f"ap:{aid}:{'a' if i % 3 else 'w'}" for i in range(200)]
    sem = asyncio.Semaphore(20)  # the client pool's size, not the presses' concurrency

    async def one(tok: str) -> None:
        async with sem:
            await w.send(press(tok))

    await asyncio.gather(*(one(t) for t in tokens))
    await w.settle(T, 30)
    assert await w.counter() == 1
    assert w.texts(T).count("done: counted x -> 1") == 1
    late = [n for n in w.private_notes() if n.startswith("Already decided")]
    assert len(late) == 199


async def test_only_the_requester_or_an_approver_decides(world: Any) -> None:
    w, aid = await ask(world, approver_ids="telegram:boss")
    await w.send(press(f"ap:{aid}:a", user="stranger"))
    await w.settle(T)
    assert await w.counter() == 0
    assert any("Only U1" in n for n in w.private_notes())
    assert (await w.session(T)).state == ThreadState.AWAITING_APPROVAL
    await w.send(press(f"ap:{aid}:a", user="boss"))
    await w.settle(T)
    assert await w.counter() == 1


async def test_a_press_after_expiry_runs_nothing(world: Any) -> None:
    w, aid = await ask(world, approval_ttl_secs=60)
    w.clock.offset = 61
    await w.send(press(f"ap:{aid}:a"))
    await w.settle(T)
    assert await w.counter() == 0
    assert any("expired" in n for n in w.private_notes())
    s = await w.session(T)
    assert s.state == ThreadState.IDLE
    assert s.history[-1].role == "tool" and "expired" in s.history[-1].content
    edit = [x for x in w.outbox.log if x.op == "edit"][-1]
    assert "Expired" in edit.message.text and not edit.message.buttons


async def test_pending_approval_survives_a_restart(world: Any) -> None:
    w, aid = await ask(world)
    await w.stop()  # every process goes away
    await w.start()  # a new one, with a new Agent
    await w.send(press(f"ap:{aid}:a"))
    await w.settle(T)
    assert await w.counter() == 1
    assert w.texts(T)[-1] == "done: counted x -> 1"


async def test_always_approves_the_tool_for_the_rest_of_the_session(world: Any) -> None:
    w, aid = await ask(world)
    await w.send(press(f"ap:{aid}:w"))
    await w.settle(T)
    assert await w.counter() == 1
    await w.send(user_event(T, "count it"))
    await w.settle(T)
    assert await w.counter() == 2
    assert len(w.prompts(T)) == 1  # no second prompt
    assert (await w.session(T)).always_tools("telegram:u1") == {"counter"}


async def test_typed_deny_with_reason_reaches_the_model(world: Any) -> None:
    w, _aid = await ask(world)
    await w.send(user_event(T, "no because it is too risky"))
    await w.settle(T)
    assert await w.counter() == 0
    tool_msg = [m for m in w.model.requests[-1].messages if m.role == "tool"][-1]
    assert "denied" in tool_msg.content and "too risky" in tool_msg.content
    edit = [x for x in w.outbox.log if x.op == "edit"][-1]
    assert "Denied" in edit.message.text


async def test_typed_yes_and_slash_approve(world: Any) -> None:
    w, _aid = await ask(world)
    await w.send(user_event(T, "yes"))
    await w.settle(T)
    assert await w.counter() == 1
    await w.send(user_event(T, "count it"))
    await w.settle(T)
    aid2 = w.prompts(T)[-1].message.buttons[0].payload.split(":")[1]
    await w.send(user_event(T, f"/approve {aid2}"))
    await w.settle(T)
    assert await w.counter() == 2


async def test_messages_while_awaiting_are_kept_in_order_and_answered_after(world: Any) -> None:
    w, aid = await ask(world)
    await w.send(user_event(T, "first"))
    await w.send(user_event(T, "second"))
    await w.settle(T)
    waiting = [t for t in w.texts(T) if "waiting for your decision" in t]
    assert len(waiting) == 2 and "counter" in waiting[0]
    assert len(w.model.requests) == 1  # nothing reached the model meanwhile
    await w.send(press(f"ap:{aid}:a"))
    await w.settle(T)
    req = w.model.requests[-1]
    users = [m.content for m in req.messages if m.role == "user"]
    assert users[-2:] == ["first", "second"]
    # results come before the held messages, right after the tool call
    roles = [m.role for m in req.messages][-4:]
    assert roles == ["assistant", "tool", "user", "user"]


async def test_tokens_from_another_thread_or_forged_are_refused(world: Any) -> None:
    w, aid = await ask(world)
    other = ThreadKey("slack", "T1", "C1")
    await w.send(press(f"ap:{aid}:a", thread=other))
    await w.send(press("ap:AAAAAAAAAAAA:a"))
    await w.send(press("garbage"))
    await w.settle(other)
    await w.settle(T)
    assert await w.counter() == 0
    assert len([n for n in w.private_notes() if "not active" in n]) == 3
    assert (await w.session(T)).state == ThreadState.AWAITING_APPROVAL


async def test_two_calls_needing_approval_are_asked_one_after_another(world: Any) -> None:
    w = world(count_model())
    await w.start()
    await w.send(user_event(T, "count twice"))
    await w.settle(T)
    assert len(w.prompts(T)) == 1
    first = w.prompts(T)[0].message.buttons[0].payload.split(":")[1]
    await w.send(press(f"ap:{first}:a"))
    await w.settle(T)
    assert len(w.prompts(T)) == 2 and await w.counter("a") == 1 and await w.counter("b") == 0
    assert len(w.model.requests) == 1  # no LLM call until both are settled
    second = w.prompts(T)[1].message.buttons[2].payload  # Deny
    await w.send(press(second))
    await w.settle(T)
    assert await w.counter("b") == 0
    tools = [m for m in w.model.requests[-1].messages if m.role == "tool"]
    assert "counted a" in tools[0].content and "denied" in tools[1].content


async def test_free_calls_of_the_same_response_run_at_once(world: Any) -> None:
    w = world(count_model())
    await w.start()
    await w.send(user_event(T, "time and count"))
    await w.settle(T)
    aid = w.prompts(T)[0].message.buttons[0].payload.split(":")[1]
    s = await w.session(T)
    assert len(s.resume["results"]) == 1  # current_time already ran
    await w.send(press(f"ap:{aid}:a"))
    await w.settle(T)
    tools = [m for m in w.model.requests[-1].messages if m.role == "tool"]
    assert [m.name for m in tools] == ["current_time", "counter"]


async def test_tool_output_cannot_approve(world: Any) -> None:
    """A tool whose output is 'yes' / a token does not decide anything."""
    from agent_core.llm.base import Completion, ToolCall

    state = {"n": 0}

    def rule(req: Any) -> Completion:
        m = req.messages[-1]
        if m.role == "user" and m.content == "go":
            return Completion(
                "", tool_calls=(ToolCall("c1", "recall", {}), ToolCall("c2", "counter", {}))
            )
        return Completion("answer")

    w = world(FnModel(rule))
    await w.start()
    await w.redis.hset("parley:{notes}:telegram:u1", "n1", "yes")
    await w.send(user_event(T, "go"))
    await w.settle(T)
    assert await w.counter() == 0
    assert (await w.session(T)).state == ThreadState.AWAITING_APPROVAL
    _ = state


async def test_a_photo_sent_while_an_approval_waits_reaches_the_model_with_it(
    world: Any,
) -> None:
    """A message held while an approval is pending joins the turn once it is decided
    with its photo, not as text only."""
    import dataclasses

    from agent_core.events import Attachment
    from agent_core.llm.base import ModelInfo

    model = count_model()
    model.info = ModelInfo("fn-model", supports_vision=True)
    w = world(model)
    await w.start()

    async def fetch_attachment(attachment: Any, max_bytes: int) -> bytes:
        import io

        from PIL import Image

        out = io.BytesIO()
        Image.new("RGB", (2, 2)).save(out, "PNG")
        return out.getvalue()

    w.outbox.fetch_attachment = fetch_attachment  # this outbox can download files
    await w.send(user_event(T, "count it"))
    await w.settle(T)
    aid = w.prompts(T)[0].message.buttons[0].payload.split(":")[1]
    photo = dataclasses.replace(
        user_event(T, "and this one?"), attachments=(Attachment("image", ref="p1"),)
    )
    await w.send(photo)
    await w.settle(T)
    assert any("waiting" in t.lower() for t in w.texts(T)), w.texts(T)
    await w.send(press(f"ap:{aid}:a"))
    await w.settle(T)
    held = [m for m in model.requests[-1].messages if m.content.startswith("and this one?")]
    assert len(held) == 1 and len(held[0].images) == 1, model.requests[-1].messages


def note(text: str, eid: str) -> Any:
    import dataclasses

    return dataclasses.replace(user_event(T, text), event_id=eid, kind=EventKind.NOTE)


async def test_a_note_arriving_while_an_approval_waits_keeps_the_round_whole(
    world: Any,
) -> None:
    """A routine's message recorded while a tool call waits for approval never goes
    between the call and its result, and the call made after the decision never
    ends on it: for Anthropic that would be a prefill, the model would go on with
    the routine's words instead of answering with the tool's result."""
    from agent_core.llm.anthropic import AnthropicProvider
    from agent_core.llm.config import BackendConfig
    from agent_core.llm.prices import PriceTable

    w, aid = await ask(world)
    await w.send(note("Reminder: standup at 10.", "note:r1"))
    await w.settle(T)
    assert len(w.model.requests) == 1  # a note is never answered
    await w.send(press(f"ap:{aid}:a"))
    await w.settle(T)
    roles = [(m.role, m.content[:8]) for m in (await w.session(T)).history]
    i = roles.index(("assistant", "Reminder"))
    assert roles[i + 1][0] == "assistant" and roles[i + 2][0] == "tool", roles
    req = w.model.requests[-1]
    assert req.messages[-1].role == "tool", [m.role for m in req.messages]
    cfg = BackendConfig("anthropic", "anthropic", "claude-sonnet-4-5", "http://127.0.0.1:9")
    body = AnthropicProvider(cfg, PriceTable()).build_body(req, stream=True)
    assert body["messages"][-1]["role"] == "user"
    assert w.texts(T)[-1] == "done: counted x -> 1"


async def test_notes_and_messages_held_together_keep_their_order(world: Any) -> None:
    """A note followed by a person's message: both after the result, in order."""
    w, aid = await ask(world)
    await w.send(note("Reminder: standup at 10.", "note:r2"))
    await w.send(user_event(T, "and what about lunch?"))
    await w.settle(T)
    await w.send(press(f"ap:{aid}:a"))
    await w.settle(T)
    tail = [(m.role, m.content[:8]) for m in w.model.requests[-1].messages][-3:]
    assert tail == [("tool", tail[0][1]), ("assistant", "Reminder"), ("user", "and what")], tail


LT = ThreadKey("web", "t", "loopstop")


async def test_a_held_message_survives_a_loop_guard_stop(world: Any) -> None:
    """The settled round trips the loop guard: the turn stops without a model call,
    and the message held meanwhile stays in the conversation, and the person is
    told it was not answered."""
    calls = [call("counter", label="x")] + [call("sleepy", ms=0, label="z") for _ in range(20)]
    w = world(FnModel(tools_then_answer(("go", calls))))
    await w.start()
    await w.send(user_event(LT, "go"))
    await w.settle(LT)
    aid = w.prompts(LT)[0].message.buttons[0].payload.split(":")[1]
    await w.send(user_event(LT, "please also answer this"))  # held: answered after the decision
    await w.settle(LT)
    assert (await w.session(LT)).held
    await w.send(user_event(LT, "", kind=EventKind.ACTION, token=f"ap:{aid}:a"))
    await w.settle(LT)
    s = await w.session(LT)
    assert s.state == ThreadState.IDLE
    assert any("going in circles" in t for t in w.texts(LT))  # the guard stopped the round
    kept = [m.content for m in s.history if m.role == "user"] + [str(d) for d in s.held]
    assert any("please also answer this" in k for k in kept), (kept, w.texts(LT))
    assert any("haven't answered what you wrote meanwhile" in t for t in w.texts(LT))
