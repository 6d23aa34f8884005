"""Budgets across processes, the hourly window, the rate window, pairing (people in
DMs, and group chats: GROUP_POLICY)."""

from __future__ import annotations

import asyncio
import sys
from asyncio.subprocess import PIPE
from pathlib import Path
from typing import Any
from unittest.mock import MagicMock

import pytest

from agent_core.agent.access import AccessControl, approve_pairing, list_pairings
from agent_core.agent.budget import BudgetGuard
from agent_core.events import EventKind, InboundEvent, ThreadKey
from agent_core.llm.base import ModelInfo
from agent_core.settings import CoreSettings
from agent_core.store.embedded import EmbeddedValkey
from tests.integration.agent.approval_helpers import approval_id, press
from tests.integration.agent.conftest import FnModel, call, tools_then_answer, user_event

ROOT = Path(__file__).resolve().parents[3]

SPENDER = """
import asyncio, random, sys
from agent_core.agent.budget import BudgetGuard, BudgetRefused
from agent_core.settings import CoreSettings
from agent_core.store.client import make_clients

async def main():
    clients = make_clients(sys.argv[1])
    guard = BudgetGuard(clients.redis, CoreSettings(daily_budget_usd=1.0))
    calls = 0
    await clients.redis.incr("test:ready")
    while not await clients.redis.get("test:go"):
        await asyncio.sleep(0.005)
    while True:
        try:
            rid = await guard.reserve("telegram:u" + sys.argv[2], 0.01)
        except BudgetRefused:
            break
        await asyncio.sleep(0.002 + random.random() / 100)  # the LLM call
        await guard.record("telegram:u" + sys.argv[2], rid, 0.01)
        calls += 1
    print(calls)
    await clients.close()

asyncio.run(main())
"""


async def test_four_processes_never_overspend_by_more_than_one_call(
    valkey: EmbeddedValkey, redis: Any
) -> None:
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable, "-c", SPENDER, valkey.url, str(i), cwd=ROOT, stdout=PIPE
        )
        for i in range(4)
    ]
    while int(await redis.get("test:ready") or 0) < 4:
        await asyncio.sleep(0.02)
    await redis.set("test:go", 1)
    outs = await asyncio.wait_for(asyncio.gather(*(p.communicate() for p in procs)), 60)
    counts = [int(o[0].strip()) for o in outs]
    guard = BudgetGuard(redis, CoreSettings(daily_budget_usd=1.0))
    spent = (await guard.spend("x")).day_usd
    assert 1.0 <= spent <= 1.0 + 0.01 + 1e-9, (spent, counts)
    assert sum(counts) in (100, 101)
    assert all(c > 0 for c in counts)  # they really raced


T = ThreadKey("telegram", "bot", "7")


def priced() -> FnModel:
    return FnModel(
        tools_then_answer(),
        ModelInfo("p", input_cost_per_token=0.0, output_cost_per_token=0.001),
    )


async def test_over_budget_the_user_is_told_and_nothing_reaches_the_llm(world: Any) -> None:
    w = world(priced(), user_daily_budget_usd=0.009)  # each answer costs 5 * 0.001
    await w.start()
    for text in ("one", "two", "three"):
        await w.send(user_event(T, text))
        await w.settle(T)
    assert len(w.model.requests) == 2
    assert "daily AI budget" in w.texts(T)[-1]


async def test_hourly_action_limit(world: Any) -> None:
    w = world(priced(), hourly_action_limit=2)
    await w.start()
    for text in ("one", "two", "three"):
        await w.send(user_event(T, text))
        await w.settle(T)
    assert len(w.model.requests) == 2
    assert "per hour" in w.texts(T)[-1]


async def test_budget_warning_at_80_percent_goes_to_admins_once(world: Any) -> None:
    w = world(priced(), daily_budget_usd=0.02, admin_ids="telegram:admin")
    await w.start()
    admin_thread = ThreadKey("telegram", "bot", "admin-dm")
    await w.send(user_event(admin_thread, "/ping", "admin"))
    await w.settle(admin_thread)
    for text in ("one", "two", "three", "four"):
        await w.send(user_event(T, text))
        await w.settle(T)
    warnings = [t for t in w.texts(admin_thread) if "80 %" in t]
    assert len(warnings) == 1


async def test_rate_window_one_notice_per_window(world: Any) -> None:
    w = world(FnModel(tools_then_answer()), user_rate_limit="2/minute")
    await w.start()
    for i in range(5):
        await w.send(user_event(T, f"m{i}"))
    await w.settle(T)
    assert len(w.model.requests) <= 2
    notices = [t for t in w.texts(T) if "faster than I can take" in t]
    assert len(notices) == 1
    answered = {t for t in w.texts(T) if t.startswith("echo")}
    assert answered <= {"echo: m0", "echo: m1"}


async def test_pairing_flow(world: Any) -> None:
    w = world(FnModel(tools_then_answer()), dm_policy="pairing")
    await w.start()
    await w.send(user_event(T, "hello", "newbie"))
    await w.settle(T)
    assert w.model.requests == []
    text = w.texts(T)[-1]
    assert "parley pairing approve" in text
    code = text.split("parley pairing approve ")[1][:8]
    assert len(code) == 8 and code.isalnum()
    # the same user asking again gets no second code message in this window
    await w.send(user_event(T, "hello?", "newbie"))
    await w.settle(T)
    assert len([t for t in w.texts(T) if "pairing approve" in t]) == 1
    pending = await list_pairings(w.redis, ("telegram",))
    assert [p["code"] for p in pending] == [code]
    assert await approve_pairing(w.redis, code) is not None
    assert await approve_pairing(w.redis, code) is None  # one-time
    await w.send(user_event(T, "hi again", "newbie"))
    await w.settle(T)
    assert w.texts(T)[-1] == "echo: hi again"


async def test_pairing_has_at_most_three_pending_per_channel(world: Any) -> None:
    w = world(FnModel(tools_then_answer()), dm_policy="pairing")
    await w.start()
    for i in range(5):
        t = ThreadKey("telegram", "bot", f"dm{i}")
        await w.send(user_event(t, "hi", f"user{i}"))
        await w.settle(t)
    assert len(await list_pairings(w.redis, ("telegram",))) == 3
    t4 = ThreadKey("telegram", "bot", "dm4")
    assert "too many" in w.texts(t4)[-1]


async def test_local_channels_are_exempt_and_allowlist_refuses(world: Any) -> None:
    w = world(FnModel(tools_then_answer()), dm_policy="allowlist", allowed_users="telegram:ok")
    await w.start()
    web = ThreadKey("web", "local", "me")
    await w.send(user_event(web, "local"))
    await w.settle(web)
    assert w.texts(web)[-1] == "echo: local"
    await w.send(user_event(T, "let me in", "stranger"))
    await w.send(user_event(T, "please", "stranger"))
    await w.settle(T)
    assert len([t for t in w.texts(T) if "allow list" in t]) == 1
    await w.send(user_event(T, "hi", "ok"))
    await w.settle(T)
    assert w.texts(T)[-1] == "echo: hi"


async def test_access_refusals_are_marked_as_such_and_other_notices_are_not(
    world: Any,
) -> None:
    """A channel tells an access refusal (OutboundMessage.refusal: Slack then stops
    following the thread) from the turn's other notices (a budget refusal: the
    person may go on there)."""
    w = world(
        priced(),
        dm_policy="allowlist",
        allowed_users="telegram:u1",
        user_daily_budget_usd=0.004,  # an answer costs 0.005: the second is refused
    )
    await w.start()
    await w.send(user_event(T, "let me in", "stranger"))
    await w.settle(T)
    for text in ("one", "two"):
        await w.send(user_event(T, text))
        await w.settle(T)
    notices = [(s.message.text, s.message.refusal) for s in w.outbox.sends(str(T))]
    notices = [(text, refusal) for text, refusal in notices if "allow list" in text or
               "budget" in text]  # fmt: skip
    assert [r for _, r in notices] == [True, False], notices


class TwoPrices(FnModel):
    """Answers as ``cheap-model`` (a smart route or a failover would); prices by name."""

    def model_info(self, model: str | None = None) -> ModelInfo:
        per_token = 0.000001 if model == "cheap-model" else 0.001
        return ModelInfo(model or "primary", output_cost_per_token=per_token)


async def test_an_answer_is_billed_at_the_price_of_the_model_that_gave_it(world: Any) -> None:
    """A turn answered by another model than the primary (cheap route, failover) is
    charged at that model's price, not the primary's (which used up budgets early)."""
    from agent_core.llm.base import Completion, TokenUsage

    model = TwoPrices(lambda req: Completion("ok", usage=TokenUsage(10, 5), model="cheap-model"))
    w = world(model, user_daily_budget_usd=0.009)  # at the primary's price: 2 answers
    await w.start()
    for text in ("one", "two", "three", "four"):
        await w.send(user_event(T, text))
        await w.settle(T)
    assert len(model.requests) == 4, w.texts(T)
    assert not any("daily AI budget" in t for t in w.texts(T))


def _summary_or_answer(req: Any) -> Any:
    """Answers cost 5 output tokens; a compaction summary costs 100."""
    from agent_core.agent.context import SUMMARY_SYSTEM
    from agent_core.llm.base import Completion, TokenUsage

    if req.messages[0].content == SUMMARY_SYSTEM:
        return Completion("SUMMARY of the old turns", usage=TokenUsage(0, 100))
    return Completion("ok", usage=TokenUsage(0, 5))


async def _long_session(w: Any, words: int = 60) -> None:
    from agent_core.agent.session import Session
    from agent_core.llm.base import ChatMessage
    from agent_core.store import keys

    history: list[ChatMessage] = []
    for i in range(12):
        history += [ChatMessage("user", f"q{i} " + "word " * words), ChatMessage("assistant", "a")]
    s = Session(str(T), history=history)
    await w.redis.hset(keys.session(T), mapping={"v": 1, "d": s.to_json()})


async def test_a_compaction_summary_is_booked_in_the_daily_budgets(world: Any) -> None:
    """/compact's summary call is a model call like any other: it is checked against
    and recorded in the person's and the day's budgets."""
    info = ModelInfo("p", input_cost_per_token=0.0, output_cost_per_token=0.001)
    w = world(FnModel(_summary_or_answer, info), daily_budget_usd=5.0, user_daily_budget_usd=5.0)
    await w.start()
    await _long_session(w)
    await w.send(user_event(T, "/compact"))
    await w.settle(T)
    assert "Compacted (summarised)" in w.texts(T)[-1], w.texts(T)
    spend = await BudgetGuard(w.redis, w.settings).spend("telegram:u1")
    assert abs(spend.day_usd - 0.1) < 1e-9 and abs(spend.user_usd - 0.1) < 1e-9, spend


async def test_a_summary_over_the_budget_is_refused_and_drops_nothing(world: Any) -> None:
    """Automatic compaction whose summary the budget refuses: the person is told, no
    model call is made, and the history is not truncated in its place."""
    from agent_core.store import keys

    info = ModelInfo(
        "p", input_cost_per_token=0.0, output_cost_per_token=0.001, context_window=16_000
    )
    w = world(FnModel(_summary_or_answer, info), user_daily_budget_usd=0.5)
    await w.start()
    # with the question, the system prompt and the tools' specs: about 90 % of the window
    await _long_session(w, words=820)
    day = BudgetGuard(w.redis, w.settings).day()
    await w.redis.set(keys.budget_user(day, "telegram:u1"), 500_000)  # all of it spent
    before = len((await w.session(T)).history)
    await w.send(user_event(T, "one more question " + "word " * 300))
    await w.settle(T)
    assert not w.model.requests, w.texts(T)
    assert "daily AI budget" in w.texts(T)[-1], w.texts(T)
    assert len((await w.session(T)).history) >= before


# --- groups: GROUP_POLICY ------------------------------------------------------
# DM_POLICY=pairing / allowlist kept strangers out of DMs only: the same stranger who
# added the bot to a group of their own was answered there, with every tool, and
# as the requester could approve their own tool calls.
GROUP = ThreadKey("telegram", "bot", "-777")
OTHER_GROUP = ThreadKey("telegram", "bot", "-888")
STRANGERS_DM = ThreadKey("telegram", "bot", "666")


def _stranger(direct: bool) -> InboundEvent:
    return InboundEvent(
        event_id="e1",
        kind=EventKind.MESSAGE,
        channel="telegram",
        thread=ThreadKey("telegram", "bot", "42" if direct else "-100777", ""),
        user_id="42",
        user_name="Stranger",
        text="hello",
        is_direct=direct,
        mentions_bot=not direct,
    )


@pytest.mark.parametrize("policy", ["pairing", "allowlist"])
async def test_stranger_refused_in_dm_is_refused_in_their_own_group(policy: str) -> None:
    redis: Any = MagicMock()

    async def not_member(*_a: Any) -> int:
        return 0

    redis.sismember = MagicMock(side_effect=not_member)
    s = CoreSettings(dm_policy=policy, approver_ids="telegram:1", admin_ids="telegram:1")
    assert s.group_policy == "pairing"  # the default
    access = AccessControl(redis, s)
    assert not await access.admits(_stranger(direct=True))
    assert not await access.admits(_stranger(direct=False))  # was: let in


async def test_stranger_cannot_run_a_tool_from_their_own_group(world: Any) -> None:
    w = world(
        FnModel(tools_then_answer(("MALLORY: count it", [call("counter", label="g")]))),
        dm_policy="pairing",
        group_policy="pairing",  # the default (the test world sets open)
        approver_ids="telegram:boss",
        admin_ids="telegram:boss",
    )
    await w.start()
    await w.send(user_event(STRANGERS_DM, "count it", user="mallory"))
    await w.settle(STRANGERS_DM)
    assert any("pairing approve" in t for t in w.texts(STRANGERS_DM))
    await w.send(user_event(GROUP, "count it", user="mallory", is_direct=False))
    await w.settle(GROUP)
    if w.prompts(GROUP):  # asked: mallory, as the requester, would approve it
        await w.send(press(GROUP, f"ap:{approval_id(w, GROUP)}:a", user="mallory"))
        await w.settle(GROUP)
    assert await w.counter("g") == 0, w.texts(GROUP)
    assert w.prompts(GROUP) == []
    assert w.model.requests == []  # nothing reached the LLM either


async def _group_says(w: Any, thread: ThreadKey, text: str, user: str) -> None:
    """``user`` writes ``text`` in the group ``thread``; the turn is settled."""
    await w.send(user_event(thread, text, user, is_direct=False))
    await w.settle(thread)


def _codes(texts: list[str]) -> list[str]:
    return [t.split("parley pairing approve ")[1][:8] for t in texts if "pairing approve" in t]


async def test_a_group_chat_is_let_in_by_approving_its_code(world: Any) -> None:
    w = world(FnModel(tools_then_answer()), dm_policy="pairing", group_policy="pairing")
    await w.start()
    await w.send(user_event(GROUP, "hello", "mallory", is_direct=False))
    await w.send(user_event(GROUP, "hello?", "bob", is_direct=False))
    await w.settle(GROUP)
    assert w.model.requests == []
    codes = _codes(w.texts(GROUP))
    assert len(codes) == 1, w.texts(GROUP)  # one notice per chat per hour, not per person
    pending = await list_pairings(w.redis, ("telegram",))
    assert [(p["code"], p["kind"], p["chat"]) for p in pending] == [
        (codes[0], "chat", "telegram:bot:-777")
    ]
    rec = await approve_pairing(w.redis, codes[0])
    assert rec is not None and rec["kind"] == "chat"
    assert await approve_pairing(w.redis, codes[0]) is None  # one-time
    assert await list_pairings(w.redis, ("telegram",)) == []
    await _group_says(w, GROUP, "hi again", "bob")
    assert w.texts(GROUP)[-1].startswith("echo"), w.texts(GROUP)
    # the chat was approved, not bob: in another group, and in his DM, he is a stranger
    await _group_says(w, OTHER_GROUP, "hi", "bob")
    assert len(_codes(w.texts(OTHER_GROUP))) == 1
    assert not any(t.startswith("echo") for t in w.texts(OTHER_GROUP))


async def test_an_admin_writing_in_a_group_approves_it(world: Any) -> None:
    w = world(
        FnModel(tools_then_answer()),
        group_policy="pairing",
        admin_ids="telegram:boss",
        approver_ids="telegram:lead",
        allowed_users="telegram:ok",
    )
    await w.start()
    # someone on ALLOWED_USERS is answered anywhere, but does not approve the chat
    await _group_says(w, GROUP, "hi", "ok")
    assert w.texts(GROUP)[-1].startswith("echo")
    await _group_says(w, GROUP, "me too", "mallory")
    assert "pairing approve" in w.texts(GROUP)[-1]
    await _group_says(w, GROUP, "hello team", "boss")
    await _group_says(w, GROUP, "me too", "mallory")
    assert w.texts(GROUP)[-1].startswith("echo"), w.texts(GROUP)
    # an approver does the same
    await w.send(user_event(OTHER_GROUP, "hello", "lead", is_direct=False))
    await w.send(user_event(OTHER_GROUP, "me too", "mallory", is_direct=False))
    await w.settle(OTHER_GROUP)
    assert w.texts(OTHER_GROUP)[-1].startswith("echo"), w.texts(OTHER_GROUP)


async def test_group_allowlist_answers_trusted_people_only(world: Any) -> None:
    w = world(
        FnModel(tools_then_answer()),
        group_policy="allowlist",
        admin_ids="telegram:boss",
        allowed_users="telegram:ok",
    )
    await w.start()
    await w.send(user_event(GROUP, "hello team", "boss", is_direct=False))
    await w.send(user_event(GROUP, "hi", "mallory", is_direct=False))
    await w.send(user_event(GROUP, "hi?", "mallory", is_direct=False))
    await w.settle(GROUP)
    texts = w.texts(GROUP)
    assert len([t for t in texts if "allow list" in t]) == 1, texts
    assert not any("pairing approve" in t for t in texts)  # no chat codes here
    assert len([t for t in texts if t.startswith("echo")]) == 1  # the admin's
    await _group_says(w, GROUP, "hi", "ok")
    assert w.texts(GROUP)[-1].startswith("echo")


async def test_group_open_answers_anyone_as_before(world: Any) -> None:
    w = world(FnModel(tools_then_answer()), dm_policy="pairing", group_policy="open")
    await w.start()
    await _group_says(w, GROUP, "hi", "mallory")
    assert w.texts(GROUP)[-1].startswith("echo")


async def test_a_strangers_press_in_a_chat_not_approved_decides_nothing(world: Any) -> None:
    """A prompt in a chat not approved (someone on ALLOWED_USERS asked); a stranger
    presses Approve there: refused, and the prompt still waits for its requester."""
    w = world(
        FnModel(tools_then_answer(("OK: count it", [call("counter", label="p")]))),
        group_policy="pairing",
        allowed_users="telegram:ok",
    )
    await w.start()
    await _group_says(w, GROUP, "count it", "ok")
    aid = approval_id(w, GROUP)
    await w.send(press(GROUP, f"ap:{aid}:a", user="stranger"))
    await w.settle(GROUP)
    assert await w.counter("p") == 0
    await w.send(press(GROUP, f"ap:{aid}:a", user="ok"))
    await w.settle(GROUP)
    assert await w.counter("p") == 1


async def test_a_routine_posting_into_a_group_not_approved_still_runs(world: Any) -> None:
    """A full routine's job written as ``routine`` (created with `parley routines add`,
    no admin on that channel) into a group nobody approved: the operator's own, so
    GROUP_POLICY leaves it as before."""
    w = world(FnModel(tools_then_answer()), group_policy="pairing")
    await w.start()
    job = InboundEvent(
        event_id="routine:news:f1:1.0",
        kind=EventKind.MESSAGE,
        channel="telegram",
        thread=GROUP,
        user_id="routine",
        user_name="routine news",
        text="[routine news] Say hello.",
        is_direct=False,
        mentions_bot=True,
    )
    await w.send(job)
    await w.settle(GROUP)
    assert w.texts(GROUP) and w.texts(GROUP)[-1].startswith("echo"), w.texts(GROUP)
    assert not await w.redis.sismember("parley:{access}:chats", "telegram:bot:-777")
