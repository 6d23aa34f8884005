"""Stateful pieces on the real Valkey: claims, undo, compaction, tools."""

from __future__ import annotations

import asyncio
import random
from typing import Any

from aiohttp import web

from agent_core.agent.approvals import ApprovalStore, ClaimOutcome
from agent_core.agent.context import Compactor, estimate
from agent_core.agent.session import Session
from agent_core.agent.undo import UndoStore
from agent_core.events import ThreadKey
from agent_core.llm import errors as llm_errors
from agent_core.llm.base import ChatMessage, Completion, ModelInfo
from agent_core.settings import CoreSettings
from agent_core.tools.base import ToolContext, ToolError
from agent_core.tools.http_request import HttpArgs, HttpRequest
from agent_core.tools.notes import ForgetArgs, Recall, RecallArgs, Remember, RememberArgs
from tests.integration.agent.conftest import FnModel, call, last, tools_then_answer, user_event

T = ThreadKey("slack", "T1", "C1", "1700.1")


async def test_200_concurrent_claims_have_one_winner(redis: Any) -> None:
    store = ApprovalStore(redis, 60)
    a = store.new(T, "counter", "c1", {}, "slack:U1", "U1")
    await store.create(T, a)
    results = await asyncio.gather(
        *(
            store.claim(
                T, a.id, random.choice(["approve", "deny", "always"]), "slack:U1", "U1", f"ev{i}"
            )
            for i in range(200)
        )
    )
    assert [r.outcome for r in results].count(ClaimOutcome.WON) == 1
    # the winner's rerun still holds it; a replay does not
    winner = next(i for i, r in enumerate(results) if r.outcome is ClaimOutcome.WON)
    assert (
        await store.claim(T, a.id, "deny", "slack:U1", "U1", f"ev{winner}")
    ).outcome is ClaimOutcome.WON
    assert (await store.claim(T, a.id, "deny", "x", "x", "other")).outcome is ClaimOutcome.ALREADY


async def test_undo_redo_invariants(redis: Any) -> None:
    store = UndoStore(redis, 5, 3600)
    s = Session(str(T))
    model: list[list[str]] = []  # the expected undo stack (newest last)
    redo: list[list[str]] = []
    rng = random.Random(7)
    for step in range(120):
        op = rng.choice(["turn", "turn", "undo", "redo"])
        cur = [m.content for m in s.history]
        if op == "turn":
            await store.checkpoint(T, f"t{step}", s)
            model = ([*model, cur])[-5:]
            redo = []
            s.history.append(ChatMessage("user", f"m{step}"))
        elif op == "undo":
            ok = await store.undo(T, f"u{step}", s)
            assert ok == bool(model)
            if model:
                redo = ([*redo, cur])[-5:]
                assert [m.content for m in s.history] == model.pop()
        else:
            ok = await store.redo(T, f"r{step}", s)
            assert ok == bool(redo)
            if redo:
                model = ([*model, cur])[-5:]
                assert [m.content for m in s.history] == redo.pop()
        assert await store.depth(T) == (len(model), len(redo))
    # a rerun of the same undo event does not step twice
    await store.checkpoint(T, "x1", s)
    s.history.append(ChatMessage("user", "after"))
    await store.undo(T, "same", s)
    again = list(s.history)
    await store.undo(T, "same", s)
    assert s.history == again


def _history(turns: int, words: int = 100) -> list[ChatMessage]:
    out: list[ChatMessage] = []
    for i in range(turns):
        out.append(ChatMessage("user", f"turn {i} " + "word " * words))
        out.append(ChatMessage("assistant", "answer " * words))
    return out


async def _compactor(model: Any, archived: list[ChatMessage]) -> Compactor:
    async def archive(session: Session, msgs: list[ChatMessage]) -> None:
        archived.extend(msgs)

    return Compactor(lambda: model, archive)


async def test_compaction_strategies() -> None:
    summaries: list[Any] = []

    def rule(req: Any) -> Completion:
        summaries.append(req)
        return Completion("SUMMARY: ids 42, decided X")

    model = FnModel(rule)
    archived: list[ChatMessage] = []
    comp = await _compactor(model, archived)
    # 82 %: move, keep 10 turns, no model call
    h = _history(30)
    window = int(estimate(h) / 0.82)
    s = Session(str(T), history=h)
    res = await comp.compact(s, h, window)
    assert res is not None and res.strategy == "moved"
    assert sum(1 for m in h if m.role == "user") == 10 and not summaries and archived
    # 90 %: summarise with temperature 0.3, <= 1024 tokens, keep 5
    h = _history(30)
    s = Session(str(T), history=h)
    res = await comp.compact(s, h, int(estimate(h) / 0.90))
    assert res is not None and res.strategy == "summarised"
    assert sum(1 for m in h if m.role == "user") == 5
    assert s.summary.startswith("SUMMARY") and summaries[-1].temperature == 0.3
    assert summaries[-1].max_tokens == 1024
    # 97 %: truncate to 3, no model call
    n = len(summaries)
    h = _history(30)
    s = Session(str(T), history=h)
    res = await comp.compact(s, h, int(estimate(h) / 0.97))
    assert res is not None and res.strategy == "truncated" and len(summaries) == n
    assert sum(1 for m in h if m.role == "user") == 3


async def test_a_failing_summary_truncates_instead() -> None:
    def rule(req: Any) -> Completion:
        raise llm_errors.RequestFailed("down")

    comp = await _compactor(FnModel(rule), [])
    h = _history(30)
    s = Session(str(T), history=h)
    res = await comp.compact(s, h, int(estimate(h) / 0.90))
    assert res is not None and res.strategy == "truncated"
    assert sum(1 for m in h if m.role == "user") == 3


async def test_summary_chunks_strip_tool_results() -> None:
    seen: list[str] = []

    def rule(req: Any) -> Completion:
        seen.append(req.messages[-1].content)
        return Completion("S")

    comp = await _compactor(FnModel(rule), [])
    old = [ChatMessage("tool", "SECRET-TOOL-OUTPUT " * 50, name="http_request")] * 3 + _history(
        40, 300
    )
    await comp.summarise("", old)
    assert len(seen) > 1  # chunked
    assert not any("SECRET-TOOL-OUTPUT" in p for p in seen)


async def test_context_length_exceeded_compacts_and_retries_once(world: Any) -> None:
    state = {"n": 0}

    def rule(req: Any) -> Completion:
        if req.tools == () and req.temperature == 0.3:
            return Completion("summary")
        state["n"] += 1
        if state["n"] == 1:
            raise llm_errors.ContextLengthExceeded("too long")
        return Completion("fits now: " + last(req).content)

    w = world(FnModel(rule, ModelInfo("m", context_window=1_000_000)))
    await w.start()
    t = ThreadKey("web", "local", "ctx")
    from agent_core.agent.session import Session as S
    from agent_core.store import keys

    big = S(str(t), history=_history(20))
    await w.redis.hset(keys.session(t), mapping={"v": 1, "d": big.to_json()})
    await w.send(user_event(t, "hello"))
    await w.settle(t)
    assert w.texts(t)[-1] == "fits now: hello"
    s = await w.session(t)
    assert sum(1 for m in s.history if m.role == "user") <= 6


async def test_small_context_window_is_refused_at_start(redis_clients: Any) -> None:
    import pytest

    from agent_core.agent.agent import Agent
    from agent_core.errors import ConfigError
    from agent_core.store.delivery import Delivery

    model = FnModel(tools_then_answer(), ModelInfo("tiny", context_window=8000))
    agent = Agent(CoreSettings(), model, Delivery(redis_clients.redis, redis_clients.blocking), {})
    with pytest.raises(ConfigError):
        await agent.initialize()


async def test_notes_tools(redis: Any) -> None:
    ctx = ToolContext(redis, CoreSettings(), T, "slack:U1")
    out = await Remember().run(RememberArgs(note="likes tea"), ctx)
    nid = out.split("note ")[1].rstrip(")")
    assert "likes tea" in await Recall().run(RecallArgs(), ctx)
    other = ToolContext(redis, CoreSettings(), T, "slack:U2")
    assert await Recall().run(RecallArgs(), other) == "no notes"
    from agent_core.tools.notes import Forget

    await Forget().run(ForgetArgs(note_id=nid), ctx)
    assert await Recall().run(RecallArgs(), ctx) == "no notes"


async def test_http_request_refuses_private_targets_and_rechecks_redirects(redis: Any) -> None:
    async def hello(request: web.Request) -> web.Response:
        return web.Response(text="hello " + "x" * 50_000)

    async def bounce(request: web.Request) -> web.Response:
        raise web.HTTPFound("http://169.254.169.254/latest/meta-data/")

    app = web.Application()
    app.router.add_get("/hello", hello)
    app.router.add_get("/bounce", bounce)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    tool = HttpRequest()
    try:
        closed = ToolContext(redis, CoreSettings(), T, "u")
        for url in (
            f"http://127.0.0.1:{port}/hello",
            f"http://localhost:{port}/hello",
            "http://169.254.169.254/",
            "http://[::1]/",
            "file:///etc/passwd",
        ):
            try:
                await tool.run(HttpArgs(url=url), closed)
                raise AssertionError(f"{url} was fetched")
            except ToolError as exc:
                assert "refused" in str(exc)
        opened = ToolContext(redis, CoreSettings(http_tool_allowed_hosts="127.0.0.1"), T, "u")
        got = await tool.run(HttpArgs(url=f"http://127.0.0.1:{port}/hello"), opened)
        assert got.startswith("HTTP 200") and "hello" in got
        try:
            await tool.run(HttpArgs(url=f"http://127.0.0.1:{port}/bounce"), opened)
            raise AssertionError("redirect to metadata was followed")
        except ToolError as exc:
            assert "169.254.169.254" in str(exc)
    finally:
        await tool.shutdown()
        await runner.cleanup()
    assert HttpRequest().needs_approval(HttpArgs(url="http://x", method="POST"))
    assert not HttpRequest().needs_approval(HttpArgs(url="http://x", method="GET"))


async def test_http_output_is_capped_and_marked_as_data(world: Any, redis: Any) -> None:
    w = world(
        FnModel(tools_then_answer(("fetch", [call("http_request", url="http://10.0.0.1/")]))),
        tool_output_max_chars=300,
    )
    await w.start()
    t = ThreadKey("web", "local", "http")
    await w.send(user_event(t, "fetch"))
    await w.settle(t)
    tool_msg = [m for m in w.model.requests[-1].messages if m.role == "tool"][-1]
    assert "refused" in tool_msg.content
