"""``demo_approval``: harmless, but asks first — so a new user sees an approval.

It appends a note to a Redis list of the thread.  The offline demo model calls
it when asked to "demo an approval".
"""

from __future__ import annotations

import time

from pydantic import BaseModel, ConfigDict, Field

from agent_core.store import keys
from agent_core.tools.base import Approval, Tool, ToolContext


class DemoArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")  # an unknown key is refused, not ignored

    action: str = Field(default="write a harmless note", description="what the demo does")
    note: str = Field(default="", description="the note to write", max_length=500)


class DemoApproval(Tool[DemoArgs]):
    name = "demo_approval"
    description = (
        "A harmless demo action that writes a note. It always asks the user for approval "
        "first: use it when the user wants to see how approvals work."
    )
    args_model = DemoArgs
    approval = Approval.ALWAYS

    async def run(self, args: DemoArgs, ctx: ToolContext) -> str:
        key = keys.demo_notes(ctx.thread)
        async with ctx.redis.pipeline(transaction=False) as pipe:
            pipe.rpush(key, f"{int(time.time())} {args.note or args.action}")
            pipe.ltrim(key, -50, -1)
            pipe.expire(key, ctx.settings.session_idle_ttl_secs)
            pipe.llen(key)
            *_, n = await pipe.execute()
        return f"wrote demo note #{n}: {args.note or args.action}"
