"""/always: see and withdraw the tools approved for good, keeping the conversation."""

from __future__ import annotations

from typing import Any

from agent_core.events import EventKind, ThreadKey
from tests.integration.agent.conftest import FnModel, user_event
from tests.integration.agent.test_approval_binding import model

T = ThreadKey("telegram", "bot1", "42")
G = ThreadKey("telegram", "bot1", "-7")


def count_model() -> FnModel:
    return model({"count it": [("counter", {"label": "x"})]})  # a group's text too


async def always_for(w: Any, thread: ThreadKey, user: str = "u1") -> None:
    """``user`` asks for the counter and presses Always."""
    direct = thread == T
    await w.send(user_event(thread, "count it", user, is_direct=direct))
    await w.settle(thread)
    aid = w.prompts(thread)[-1].message.buttons[0].payload.split(":")[1]
    press = user_event(
        thread, "", user, kind=EventKind.ACTION, token=f"ap:{aid}:w", is_direct=direct
    )
    await w.send(press)
    await w.settle(thread)


async def say(w: Any, thread: ThreadKey, text: str, user: str = "u1") -> str:
    await w.send(user_event(thread, text, user, is_direct=thread == T))
    await w.settle(thread)
    return str(w.texts(thread)[-1])


async def test_always_off_makes_the_tool_ask_again_and_keeps_the_history(world: Any) -> None:
    w = world(count_model())
    await w.start()
    assert "approved nothing" in await say(w, T, "/always")
    await always_for(w, T)
    assert await w.counter() == 1
    assert "`counter`" in await say(w, T, "/always")
    history = len((await w.session(T)).history)

    assert "asks again" in await say(w, T, "/always off counter")
    s = await w.session(T)
    assert s.always_tools("telegram:u1") == set()
    assert len(s.history) == history  # the conversation is kept
    await w.send(user_event(T, "count it"))
    await w.settle(T)
    assert len(w.prompts(T)) == 2  # asked again
    assert await w.counter() == 1


async def test_always_off_alone_withdraws_all_of_yours(world: Any) -> None:
    w = world(count_model())
    await w.start()
    assert "approved nothing" in await say(w, T, "/always off")
    await always_for(w, T)
    assert "Withdrawn: `counter`" in await say(w, T, "/always off")
    assert (await w.session(T)).always_approved == set()


async def test_unknown_tool_and_bad_usage_are_explained(world: Any) -> None:
    w = world(count_model())
    await w.start()
    await always_for(w, T)
    said = await say(w, T, "/always off run_shell")
    assert "no Always for `run_shell`" in said and "`counter`" in said
    assert "Usage" in await say(w, T, "/always on counter")
    assert (await w.session(T)).always_tools("telegram:u1") == {"counter"}


async def test_in_a_group_only_an_approver_withdraws_everyones(world: Any) -> None:
    w = world(count_model(), approver_ids="telegram:boss", group_reply="all")
    await w.start()
    await always_for(w, G, "alice")
    # Bob's /always off touches only his own (none), never Alice's
    assert "approved nothing" in await say(w, G, "/always off", "bob")
    assert "Only an approver" in await say(w, G, "/always off everyone", "bob")
    assert (await w.session(G)).always_tools("telegram:alice") == {"counter"}
    assert "Withdrew every Always" in await say(w, G, "/always off everyone", "boss")
    assert (await w.session(G)).always_approved == set()


async def test_help_shows_always_off_everyone(world: Any) -> None:
    """/help showed `/always [off [tool]]`, while docs/agent.md (and /always itself)
    know `/always off everyone`."""
    w = world(count_model())
    await w.start()
    assert "`/always [off [tool|everyone]]`" in await say(w, T, "/help")
