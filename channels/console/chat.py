"""`parley chat`: talk to the agent in a terminal, or script it through a pipe.

Each line read is one message.  It goes through Ingest -> stream -> worker like
every channel; the answer comes back through the thread's out stream (any
worker may write it) and is printed once the turn is done.  With piped stdin
every answer goes to stdout and the command exits at end of input.
"""

from __future__ import annotations

import asyncio
import getpass
import secrets
import socket
import sys
from typing import TextIO

import orjson
from redis.asyncio import Redis

from agent_core.events import EventKind, InboundEvent, ThreadKey
from agent_core.ingest import Ingest, Submitted
from agent_core.store import keys

TURN_TIMEOUT = 600.0


def console_thread() -> ThreadKey:
    try:
        user = getpass.getuser()
    except Exception:
        user = "user"
    return ThreadKey("console", "local", f"{user}@{socket.gethostname()}", "")


def _took_in(fields: dict[bytes, bytes], event_id: str) -> bool:
    """Whether a "done" marker ends the turn that took ``event_id`` in: its first
    message, or one folded into it while it ran (another terminal's turn on the
    same conversation, say)."""
    if fields.get(b"ev", b"").decode() == event_id:
        return True
    try:
        taken = orjson.loads(fields.get(b"in") or b"[]")
    except orjson.JSONDecodeError:
        return False
    return isinstance(taken, list) and event_id in taken


def render_plain(message: dict[str, object]) -> str:
    text = str(message.get("tx", ""))
    buttons = message.get("b") or []
    if buttons:
        labels = " | ".join(f"[{b[0]}]" for b in buttons)  # type: ignore[index,union-attr]
        text += f"\n{labels}  (reply yes / always / no)"
    return text


class ConsoleChat:
    def __init__(
        self, redis: Redis, blocking: Redis, ingest: Ingest, thread: ThreadKey | None = None
    ) -> None:
        self.redis = redis
        self.blocking = blocking
        self.ingest = ingest
        self.thread = thread or console_thread()
        self.stream = keys.outbox_stream(self.thread)

    async def _last_id(self) -> bytes:
        last = await self.redis.xrevrange(self.stream, count=1)
        return last[0][0] if last else b"0-0"

    async def send(self, text: str) -> list[str]:
        """Send one message and return the answers (final texts) of its turn."""
        after = await self._last_id()
        event = InboundEvent(
            event_id=secrets.token_hex(8),
            kind=EventKind.MESSAGE,
            channel="console",
            thread=self.thread,
            user_id=self.thread.conversation,
            user_name=self.thread.conversation.split("@")[0],
            text=text,
        )
        result = await self.ingest.submit(event)
        if result != Submitted.ACCEPTED:
            return [f"(message {result.value})"]
        order: list[str] = []
        texts: dict[str, str] = {}
        deadline = asyncio.get_running_loop().time() + TURN_TIMEOUT
        while asyncio.get_running_loop().time() < deadline:
            resp = await self.blocking.xread({self.stream: after}, block=5000, count=100)
            for _name, entries in resp or ():
                for entry_id, f in entries:
                    after = entry_id
                    kind = f.get(b"t", b"").decode()
                    mid = f.get(b"id", b"").decode()
                    if kind in ("message", "edit"):
                        m = orjson.loads(f[b"m"])
                        if mid not in texts:
                            order.append(mid)
                        texts[mid] = render_plain(m)
                    elif kind == "done" and _took_in(f, event.event_id):
                        return [texts[m] for m in order]
        return [*(texts[m] for m in order), "(no answer within the time limit)"]


async def run_console(
    chat: ConsoleChat, stdin: TextIO = sys.stdin, stdout: TextIO = sys.stdout
) -> None:
    interactive = stdin.isatty()
    if interactive:
        print("Parley chat — type a message, /help for commands, Ctrl-D to quit.", file=sys.stderr)
    while True:
        if interactive:
            try:
                line = await asyncio.to_thread(input, "you> ")
            except EOFError:
                print(file=sys.stderr)
                return
        else:
            line = await asyncio.to_thread(stdin.readline)
            if not line:
                return
            line = line.rstrip("\n")
        if not line.strip():
            continue
        answers = await chat.send(line)
        for a in answers:
            if interactive:
                print(f"parley> {a}\n", file=stdout)
            else:
                print(a, file=stdout)
        stdout.flush()
