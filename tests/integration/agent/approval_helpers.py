"""Shared bits for the approval edge-case tests."""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel

from agent_core.events import EventKind, ThreadKey
from agent_core.tools.base import Approval, Tool, ToolContext
from tests.integration.agent.conftest import World, user_event


class SlowArgs(BaseModel):
    label: str = "x"
    ms: int = 2000


class SlowAsk(Tool[SlowArgs]):
    """Needs approval; sleeps ``ms`` then counts its completed runs in Redis."""

    name = "slowask"
    description = "a slow risky action"
    args_model = SlowArgs
    approval = Approval.ALWAYS

    async def run(self, args: SlowArgs, ctx: ToolContext) -> str:
        await ctx.redis.incr(f"test:started:{args.label}")
        await asyncio.sleep(args.ms / 1000)
        n = await ctx.redis.incr(f"test:slow:{args.label}")
        return f"slow {args.label} done -> {n}"


def add_tool(w: World, tool: Tool[Any]) -> None:
    """Make every agent this world builds also offer ``tool``."""
    orig = w.make_agent

    def make() -> Any:
        agent = orig()
        agent.tools.add(tool)
        return agent

    w.make_agent = make  # type: ignore[method-assign]


def add_slow_tool(w: World) -> None:
    add_tool(w, SlowAsk())


def press(thread: ThreadKey, token: str, user: str = "u1") -> Any:
    return user_event(thread, "", user, kind=EventKind.ACTION, token=token)


def approval_id(w: World, thread: ThreadKey, n: int = -1) -> str:
    return str(w.prompts(thread)[n].message.buttons[0].payload.split(":")[1])


async def counted(w: World, key: str) -> int:
    return int(await w.redis.get(key) or 0)
