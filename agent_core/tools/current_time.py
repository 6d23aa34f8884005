"""``current_time``: the date and time in a timezone (no approval)."""

from __future__ import annotations

import asyncio
from datetime import datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field

from agent_core.tools.base import Approval, Tool, ToolContext, ToolError


class TimeArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")  # an unknown key is refused, not ignored

    timezone: str = Field(default="UTC", description="IANA timezone, e.g. Europe/Berlin")


class CurrentTime(Tool[TimeArgs]):
    name = "current_time"
    description = "The current date and time in a timezone (IANA name, default UTC)."
    args_model = TimeArgs
    approval = Approval.NEVER

    async def run(self, args: TimeArgs, ctx: ToolContext) -> str:
        try:
            # ZoneInfo reads tzdata from disk the first time: keep that off the loop
            tz = await asyncio.to_thread(ZoneInfo, args.timezone or "UTC")
        except (ZoneInfoNotFoundError, ValueError, OSError):
            # OSError: a directory of the tz database ("America": IsADirectoryError)
            raise ToolError(f"unknown timezone {args.timezone!r}") from None
        now = datetime.now(tz)
        return now.strftime("%Y-%m-%d %H:%M:%S %Z (%A)")
