"""A small world for agent-core tests: workers on the real Valkey, a recording outbox,
a scripted model and a counting tool that needs approval."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from pydantic import BaseModel

from agent_core.agent.agent import Agent
from agent_core.agent.session import Session
from agent_core.events import Action, EventKind, InboundEvent, ThreadKey
from agent_core.ingest import Ingest
from agent_core.llm.base import (
    ChatMessage,
    Completion,
    CompletionRequest,
    ModelInfo,
    StreamItem,
    TextDelta,
    TokenUsage,
    ToolCall,
)
from agent_core.settings import CoreSettings
from agent_core.store.client import RedisClients
from agent_core.store.delivery import Delivery
from agent_core.tools import default_registry
from agent_core.tools.base import Approval, Tool, ToolContext
from agent_core.worker import Worker
from tests.fakes.outbox import RecordingOutbox

Rule = Callable[[CompletionRequest], Completion]


class FnModel:
    """A provider whose answer is computed from the request by ``rule``."""

    name = "fn:model"

    def __init__(self, rule: Rule, info: ModelInfo | None = None, delay: float = 0.0) -> None:
        self.rule = rule
        self.info = info or ModelInfo("fn-model")
        self.requests: list[CompletionRequest] = []
        self.delay = delay

    async def initialize(self) -> None: ...

    async def shutdown(self) -> None: ...

    def model_info(self, model: str | None = None) -> ModelInfo:
        return self.info

    async def list_models(self) -> list[str]:
        return ["fn-model"]

    async def complete(self, request: CompletionRequest) -> Completion:
        self.requests.append(request)
        if self.delay:
            await asyncio.sleep(self.delay)
        return self.rule(request)

    async def stream(self, request: CompletionRequest) -> AsyncIterator[StreamItem]:
        c = await self.complete(request)
        if c.text:
            yield TextDelta(c.text)
        yield c


def last(request: CompletionRequest) -> ChatMessage:
    return request.messages[-1]


def last_user(request: CompletionRequest) -> str:
    for m in reversed(request.messages):
        if m.role == "user":
            return m.content
    return ""


_ids = itertools.count(1)


def call(name: str, **args: Any) -> ToolCall:
    return ToolCall(f"call_{next(_ids)}", name, args)


def tools_then_answer(*calls_for: tuple[str, list[ToolCall]]) -> Rule:
    """If the last message is the user's text ``trigger``: call those tools; after tool
    results: answer 'done: <results joined>'; otherwise echo."""
    table = dict(calls_for)

    def rule(req: CompletionRequest) -> Completion:
        m = last(req)
        if m.role == "tool":
            results = [x.content for x in req.messages if x.role == "tool"]
            return Completion("done: " + " | ".join(results[-3:]), usage=TokenUsage(10, 5))
        if m.role == "user" and m.content in table:
            fresh = tuple(
                ToolCall(f"{c.id}_{next(_ids)}", c.name, c.arguments) for c in table[m.content]
            )
            return Completion("", tool_calls=fresh)
        return Completion("echo: " + m.content, usage=TokenUsage(10, 5))

    return rule


class CountArgs(BaseModel):
    label: str = "x"


class Counter(Tool[CountArgs]):
    """Needs approval; counts its runs in Redis (shared by every worker)."""

    name = "counter"
    description = "count"
    args_model = CountArgs
    approval = Approval.ALWAYS

    async def run(self, args: CountArgs, ctx: ToolContext) -> str:
        n = await ctx.redis.incr(f"test:counter:{args.label}")
        return f"counted {args.label} -> {n}"


class SleepArgs(BaseModel):
    ms: int = 0
    label: str = ""


class Sleepy(Tool[SleepArgs]):
    """No approval; sleeps, then returns its label (to see order and overlap)."""

    name = "sleepy"
    description = "sleep"
    args_model = SleepArgs
    active = 0
    max_active = 0

    async def run(self, args: SleepArgs, ctx: ToolContext) -> str:
        Sleepy.active += 1
        Sleepy.max_active = max(Sleepy.max_active, Sleepy.active)
        try:
            await asyncio.sleep(args.ms / 1000)
        finally:
            Sleepy.active -= 1
        return args.label


class Clock:
    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset


def user_event(
    thread: ThreadKey,
    text: str,
    user: str = "u1",
    *,
    eid: str = "",
    kind: EventKind = EventKind.MESSAGE,
    token: str = "",
    is_direct: bool = True,
    channel: str = "",
) -> InboundEvent:
    return InboundEvent(
        event_id=eid or f"e{next(_ids)}",
        kind=kind,
        channel=channel or thread.channel,
        thread=thread,
        user_id=user,
        user_name=user.upper(),
        text=text,
        is_direct=is_direct,
        action=Action(token) if token else None,
    )


class World:
    def __init__(self, clients: RedisClients, model: Any, **settings: Any) -> None:
        self.clients = clients
        self.redis = clients.redis
        self.model = model
        base: dict[str, Any] = {
            "sweep_interval_secs": 0.1,
            "reclaim_idle_secs": 0.3,
            "lock_ttl_secs": 3.0,
            "dm_policy": "open",
            "group_policy": "open",  # groups answer everyone (the tests of access say)
        }
        base.update(settings)
        self.settings = CoreSettings(**base)
        self.outbox = RecordingOutbox()
        self.outboxes: dict[str, Any] = {
            "web": self.outbox,
            "telegram": self.outbox,
            "slack": self.outbox,
        }
        self.ingest = Ingest(self.redis)
        self.clock = Clock()
        self.workers: list[tuple[Worker, asyncio.Event, asyncio.Task[None]]] = []
        self.started = 0  # workers started so far (names are never reused)

    def make_agent(self) -> Agent:
        delivery = Delivery(
            self.redis, self.clients.blocking, lock_ttl_ms=int(self.settings.lock_ttl_secs * 1000)
        )
        tools = default_registry(self.settings)
        tools.add(Counter())
        tools.add(Sleepy())
        return Agent(
            self.settings, self.model, delivery, self.outboxes, tools=tools, clock=self.clock
        )

    async def start(self, n: int = 1) -> None:
        for i in range(n):
            agent = self.make_agent()
            await agent.initialize()
            # a restarted world's workers get new names, as new processes would
            self.started += 1
            w = Worker(self.settings, agent.delivery, agent, name=f"w{self.started}-{i}")
            stop = asyncio.Event()
            self.workers.append((w, stop, asyncio.create_task(w.run(stop))))

    async def stop(self) -> None:
        for _w, stop, _t in self.workers:
            stop.set()
        await asyncio.gather(*(t for _w, _s, t in self.workers), return_exceptions=True)
        for w, _s, _t in self.workers:
            await w.agent.shutdown()
        self.workers.clear()

    @property
    def turns(self) -> int:
        return sum(w.turns_done for w, _s, _t in self.workers)

    async def send(self, ev: InboundEvent) -> None:
        # taken in now on the world's clock (a test moves it on: ``clock.offset``), as
        # Parley's ingest stamps an event with its own host's time
        ev = dataclasses.replace(ev, received_at=ev.received_at + self.clock.offset)
        await self.ingest.submit(ev)

    async def undelivered(self) -> bool:
        """Is an entry of the inbox stream not yet read by the workers' group?  (Such
        an entry is in no mailbox and not pending: only the stream's last id, ahead of
        the group's last delivered id, shows it.  A group not created yet has read
        nothing.)"""
        from agent_core.store import keys

        newest = await self.redis.xrevrange(keys.INBOX_STREAM, count=1)
        if not newest:
            return False  # nothing was ever submitted
        groups = await self.redis.xinfo_groups(keys.INBOX_STREAM)
        group = keys.INBOX_GROUP.encode()
        delivered = next((g["last-delivered-id"] for g in groups if g["name"] == group), None)
        return delivered != newest[0][0]

    async def settle(self, thread: ThreadKey, timeout: float = 10.0) -> None:
        """Wait until every submitted event has been read from the inbox stream and
        handed off, and the thread's mailbox is empty and its lock released."""
        from agent_core.store import keys

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            # Checked before the rest: an entry read after this check is still
            # pending, or already in its mailbox, when the pipeline below looks.
            if await self.undelivered():
                await asyncio.sleep(0.02)
                continue
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.llen(keys.mailbox(thread))
                pipe.exists(keys.lock(thread))
                pipe.xpending(keys.INBOX_STREAM, keys.INBOX_GROUP)
                n, locked, pend = await pipe.execute()
            if n == 0 and not locked and (not pend or int(pend["pending"]) == 0):
                await asyncio.sleep(0.05)
                return
            await asyncio.sleep(0.02)
        raise AssertionError(f"thread {thread} did not settle")

    async def session(self, thread: ThreadKey) -> Session:
        from agent_core.store import keys

        ver, data = await self.redis.hmget(keys.session(thread), "v", "d")
        return Session.load(str(thread), int(ver or 0), data)

    async def counter(self, label: str = "x") -> int:
        return int(await self.redis.get(f"test:counter:{label}") or 0)

    def prompts(self, thread: ThreadKey | None = None) -> list[Any]:
        return [
            s
            for s in self.outbox.log
            if s.op == "send" and s.message.buttons and (thread is None or s.thread == str(thread))
        ]

    def private_notes(self) -> list[str]:
        return [s.message.text for s in self.outbox.log if s.op == "action"]

    def texts(self, thread: ThreadKey) -> list[str]:
        return self.outbox.final_texts(str(thread))


@pytest.fixture
async def world(redis_clients: RedisClients) -> AsyncIterator[Callable[..., World]]:
    made: list[World] = []

    def make(model: Any, **settings: Any) -> World:
        w = World(redis_clients, model, **settings)
        made.append(w)
        return w

    yield make
    for w in made:
        await w.stop()
