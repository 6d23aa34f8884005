"""`/heartbeat` and `/routine` read their subcommand up to any whitespace, and an
unknown subcommand is answered with the usage, not taken for something else."""

from __future__ import annotations

from typing import Any

from agent_core.events import ThreadKey
from agent_core.llm.base import Completion
from agent_core.store import keys
from tests.integration.agent.conftest import FnModel, user_event

ADMIN = ThreadKey("telegram", "bot1", "900")


async def say(w: Any, text: str) -> str:
    await w.send(user_event(ADMIN, text, "900"))
    await w.settle(ADMIN)
    return str(w.texts(ADMIN)[-1])


async def start(pworld: Any) -> Any:
    w = pworld(FnModel(lambda req: Completion("x")), admin_ids="telegram:900")
    await w.start()
    return w


async def test_heartbeat_set_followed_by_a_line_break_sets_the_checklist(pworld: Any) -> None:
    """`/heartbeat set` then the checklist on the next lines (how one types it) saved
    nothing: the subcommand was read as "set\\n- is…", and the status was shown."""
    w = await start(pworld)
    reply = await say(w, "/heartbeat set\n- is the backup fresh?\n- disk > 90%?")
    assert reply.startswith("Heartbeat checklist set."), reply
    assert await w.redis.get(keys.HEARTBEAT_CHECKLIST) == b"- is the backup fresh?\n- disk > 90%?"


async def test_an_unknown_heartbeat_subcommand_answers_the_usage(pworld: Any) -> None:
    """`/heartbeat off` (or a typo) just showed the status, as if it had worked."""
    w = await start(pworld)
    reply = await say(w, "/heartbeat off")
    assert reply.startswith("Unknown subcommand `off`.") and "/heartbeat set" in reply, reply
    assert (await say(w, "/heartbeat")).startswith("**Heartbeat:**")


async def test_routine_subcommand_followed_by_a_line_break(pworld: Any) -> None:
    """`/routine add` then the routine on the next line was 'Unknown subcommand'."""
    w = await start(pworld)
    reply = await say(w, "/routine add\ndaily --manual --notify telegram:900 Check:\n- the queue")
    assert reply.startswith("Added routine `daily`"), reply
    shown = await say(w, "/routine show\ndaily")
    assert "- prompt: Check:\n- the queue" in shown, shown


async def test_routine_add_with_a_huge_max_says_the_bound(pworld: Any) -> None:
    """`--max 99999999999999999999` overflowed when the routine was stored, and the
    chat got the generic 'Something went wrong'."""
    w = await start(pworld)
    reply = await say(
        w, "/routine add r1 --event down --max 99999999999999999999 --notify telegram:900 hi"
    )
    assert "must be at least 1 and at most 1,000" in reply, reply
    assert "Something went wrong" not in reply
    listed = await say(w, "/routine list")
    assert "r1" not in listed, listed
