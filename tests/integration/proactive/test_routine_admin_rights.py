"""Full routines and the admins: a job posting into a group never becomes an admin's
remembered DM, and a job whose creator lost their rights is paused, not run."""

from __future__ import annotations

from typing import Any

import pytest

from agent_core.events import ThreadKey
from agent_core.llm.base import Completion
from agent_core.proactive.routines import Routine, RoutineStore, validate
from agent_core.proactive.targets import is_direct
from agent_core.store import keys
from tests.integration.agent.conftest import FnModel, user_event

ADMIN_DM = ThreadKey("telegram", "bot1", "900")
GROUP = ThreadKey("telegram", "bot1", "-100777")


async def add_full(store: RoutineStore, name: str, notify: str, created_by: str) -> Routine:
    r = validate(
        Routine(
            name=name,
            trigger="manual",
            action="full",
            prompt=f"post the {name}",
            notify=notify,
            created_by=created_by,
        )
    )
    assert await store.add(r)
    return r


@pytest.mark.parametrize(
    ("thread", "direct"),
    [
        (ThreadKey("telegram", "bot1", "900"), True),
        (ThreadKey("telegram", "bot1", "-100777"), False),
        (ThreadKey("telegram", "bot1", "-100777", "5"), False),
        (ThreadKey("telegram", "bot1", "@mychannel"), False),  # public channel by name
        (ThreadKey("slack", "T01", "D0DM"), True),
        (ThreadKey("slack", "T01", "C0OPS"), False),
        (ThreadKey("slack", "T01", "G0PRIV"), False),
        (ThreadKey("discord", "dm", "123"), True),
        (ThreadKey("discord", "4242", "123"), False),
        (ThreadKey("web", "local", "sess1"), True),
        (ThreadKey("console", "local", "op"), True),
    ],
)
def test_a_target_is_direct_as_its_channel_says(thread: ThreadKey, direct: bool) -> None:
    assert is_direct(thread) is direct


async def test_full_routine_into_a_group_does_not_become_the_admins_dm(pworld: Any) -> None:
    """The job was written as the admin with is_direct=True: the worker remembered the
    group as the admin's DM, and every later private admin notice (budget warnings,
    'Routine X is paused', the heartbeat) went to the group."""
    w = pworld(FnModel(lambda req: Completion("done")), admin_ids="telegram:900")
    await w.start()
    p = w.proactive()
    await w.send(user_event(ADMIN_DM, "hello", "900"))  # where admin notices go
    await w.settle(ADMIN_DM)
    assert (await w.redis.get(keys.admin_thread("telegram:900"))).decode() == str(ADMIN_DM)

    await add_full(p.store, "digest", "telegram:-100777", "telegram:900")
    await p.store.queue_run("digest")
    assert await p.scheduler.tick() == ["digest"]
    await p.scheduler.wait_idle()
    await w.settle(GROUP)
    assert "done" in w.texts(GROUP)

    assert (await w.redis.get(keys.admin_thread("telegram:900"))).decode() == str(ADMIN_DM)
    await w.workers[0][0].agent.notify_admins("⚠️ private admin notice")
    assert "⚠️ private admin notice" not in w.texts(GROUP)
    assert "⚠️ private admin notice" in w.texts(ADMIN_DM)
    # the job was a group message: its text carries its author, as a group's do
    user_msgs = [str(m.content) for m in (await w.session(GROUP)).history if m.role == "user"]
    assert user_msgs and user_msgs[0].startswith("routine digest: [routine digest]"), user_msgs


async def test_full_routine_into_a_dm_does_not_move_the_admins_dm(pworld: Any) -> None:
    """Nor does a job in another one-to-one chat: only a person's own message does."""
    w = pworld(FnModel(lambda req: Completion("done")), admin_ids="telegram:900")
    await w.start()
    p = w.proactive()
    assert await w.redis.get(keys.admin_thread("telegram:900")) is None
    await add_full(p.store, "digest", "telegram:900", "telegram:900")
    await p.store.queue_run("digest")
    assert await p.scheduler.tick() == ["digest"]
    await p.scheduler.wait_idle()
    await w.settle(ADMIN_DM)
    assert "done" in w.texts(ADMIN_DM)
    assert await w.redis.get(keys.admin_thread("telegram:900")) is None


async def test_full_routine_of_a_former_admin_is_paused_not_run(pworld: Any) -> None:
    """telegram:42 created the routine while an admin; ADMIN_IDS changed since. The job
    kept running as them (refused on every fire with ALLOWED_USERS / an allow list,
    the refusal posted into the target chat); now it is paused, the admins told why."""
    w = pworld(
        FnModel(lambda req: Completion("report")),
        admin_ids="telegram:900",
        dm_policy="allowlist",
    )
    await w.start()
    p = w.proactive()
    await w.send(user_event(ADMIN_DM, "hello", "900"))  # the admin's DM is known
    await w.settle(ADMIN_DM)
    r = await add_full(p.store, "report", "telegram:500", "telegram:42")
    assert p.runner.run_as(r, "telegram") == "900"  # never as the former admin
    await p.store.queue_run("report")
    assert await p.scheduler.tick() == ["report"]
    await p.scheduler.wait_idle()
    target = ThreadKey("telegram", "bot1", "500")
    await w.settle(target)

    assert w.texts(target) == []  # nothing ran, nothing refused into that chat
    outcomes = [x.outcome for x in await p.store.runs("report")]
    assert outcomes == [
        "error: paused: its creator telegram:42 is no longer an admin or approver"
    ], outcomes
    stored = await p.store.get("report")
    assert stored is not None and not stored.enabled
    notices = [t for t in w.texts(ADMIN_DM) if "Routine report is paused" in t]
    assert len(notices) == 1 and "no longer an admin or approver" in notices[0], notices
    assert w.model.requests[1:] == []  # only the admin's hello called the model


async def test_full_routine_of_an_approver_or_the_console_still_runs(pworld: Any) -> None:
    w = pworld(
        FnModel(lambda req: Completion("report")),
        admin_ids="telegram:900",
        approver_ids="telegram:42",
    )
    await w.start()
    p = w.proactive()
    r = await add_full(p.store, "report", "telegram:500", "telegram:42")
    assert not p.runner.creator_lost_rights(r)
    assert p.runner.run_as(r, "telegram") == "42"
    for creator in ("console:operator", "cli", ""):
        r.created_by = creator
        assert not p.runner.creator_lost_rights(r), creator
