"""The heartbeat's attention message: sent only when it reaches someone, and never
swallowed because it starts with HEARTBEAT_OK."""

from __future__ import annotations

from typing import Any

from agent_core.events import ThreadKey
from agent_core.llm.base import Completion
from agent_core.proactive.heartbeat import NO_ADMIN_DM
from agent_core.store import keys
from tests.integration.agent.conftest import FnModel, user_event

ADMIN_DM = ThreadKey("telegram", "bot1", "900")


async def test_heartbeat_to_admins_that_reaches_no_one_is_a_failure(pworld: Any) -> None:
    """HEARTBEAT_NOTIFY unset and no admin DM known: nobody got the message, yet it was
    recorded "sent to admins" and no failure was counted."""
    w = pworld(FnModel(lambda req: Completion("The backup failed.")), admin_ids="telegram:900")
    await w.start()
    p = w.proactive(heartbeat_enabled=True)
    assert p.heartbeat is not None
    await w.redis.set(keys.HEARTBEAT_CHECKLIST, "- did the backup run?")
    outcome = await p.heartbeat.tick()
    assert [s for s in w.outbox.log if s.op == "send"] == []
    assert outcome == f"error: {NO_ADMIN_DM}"
    st = await p.heartbeat.status()
    assert st["failures"] == "1" and st["outcome"] == outcome

    # once the admin has written to the bot, it reaches them and the count resets
    await w.send(user_event(ADMIN_DM, "hello", "900"))
    await w.settle(ADMIN_DM)
    assert await p.heartbeat.tick() == "sent to admins (HEARTBEAT_NOTIFY is not set)"
    assert "The backup failed." in w.texts(ADMIN_DM)
    assert (await p.heartbeat.status())["failures"] == "0"


async def test_text_after_a_heartbeat_ok_line_is_sent(pworld: Any) -> None:
    """Docs: "any other answer is sent". "HEARTBEAT_OK" on its own line, then a real
    message, was taken as nothing to report."""
    answer = "HEARTBEAT_OK\nExcept: the certificate expires tomorrow."
    w = pworld(FnModel(lambda req: Completion(answer)))
    await w.start()
    p = w.proactive(heartbeat_enabled=True, heartbeat_notify="telegram:500")
    assert p.heartbeat is not None
    await w.redis.set(keys.HEARTBEAT_CHECKLIST, "- certificates")
    assert await p.heartbeat.tick(1000.0) == "sent"
    assert w.texts(ThreadKey("telegram", "bot1", "500")) == [answer]
