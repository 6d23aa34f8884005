"""``remember`` / ``recall`` / ``forget``: short notes per user, in Redis.

Notes belong to the person (channel-qualified id), not to the thread, so they
follow a user across conversations of one platform.  At most 100 notes of at
most 1,000 characters each; they expire with idle sessions.
"""

from __future__ import annotations

import secrets

from pydantic import BaseModel, ConfigDict, Field

from agent_core.store import keys
from agent_core.tools.base import Approval, Tool, ToolContext, ToolError

MAX_NOTES = 100


def _s(v: bytes | str) -> str:
    return v.decode() if isinstance(v, bytes) else v


class RememberArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")  # an unknown key is refused, not ignored

    note: str = Field(description="what to remember", min_length=1, max_length=1000)


class RecallArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")  # an unknown key is refused, not ignored

    query: str = Field(default="", description="only notes containing this text ('' = all)")


class ForgetArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")  # an unknown key is refused, not ignored

    note_id: str = Field(description="the id of the note to forget, or 'all'")


class Remember(Tool[RememberArgs]):
    name = "remember"
    description = "Save a short note about the user for later conversations."
    args_model = RememberArgs
    approval = Approval.NEVER

    async def run(self, args: RememberArgs, ctx: ToolContext) -> str:
        key = keys.user_notes(ctx.user)
        if await ctx.redis.hlen(key) >= MAX_NOTES:
            raise ToolError(f"the user already has {MAX_NOTES} notes; forget some first")
        nid = secrets.token_hex(3)
        async with ctx.redis.pipeline(transaction=False) as pipe:
            pipe.hset(key, nid, args.note)
            pipe.expire(key, ctx.settings.session_idle_ttl_secs)
            await pipe.execute()
        return f"remembered (note {nid})"


class Recall(Tool[RecallArgs]):
    name = "recall"
    description = "List the notes saved about the user (optionally only those matching a query)."
    args_model = RecallArgs
    approval = Approval.NEVER

    async def run(self, args: RecallArgs, ctx: ToolContext) -> str:
        raw = await ctx.redis.hgetall(keys.user_notes(ctx.user))
        notes = sorted((_s(k), _s(v)) for k, v in raw.items())
        q = args.query.lower()
        hits = [f"{k}: {v}" for k, v in notes if q in v.lower()]
        return "\n".join(hits) if hits else "no notes"


class Forget(Tool[ForgetArgs]):
    name = "forget"
    description = "Delete one saved note about the user by id, or all of them with 'all'."
    args_model = ForgetArgs
    approval = Approval.NEVER

    async def run(self, args: ForgetArgs, ctx: ToolContext) -> str:
        key = keys.user_notes(ctx.user)
        if args.note_id.strip().lower() == "all":
            n = await ctx.redis.hlen(key)
            await ctx.redis.delete(key)
            return f"forgot {n} note(s)"
        if await ctx.redis.hdel(key, args.note_id.strip()):
            return f"forgot note {args.note_id.strip()}"
        raise ToolError(f"no note with id {args.note_id!r}")
