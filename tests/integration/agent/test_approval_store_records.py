"""The approval store's Redis records stay bounded: the prompt owners of
approvals long gone are dropped however often new prompts come, and a write after
an approval's record expired does not bring it back without a TTL."""

from __future__ import annotations

from typing import Any

from agent_core.agent.approvals import KEEP_AFTER_EXPIRY_SECS, WRITTEN_OVER, ApprovalStore
from agent_core.events import MessageRef, ThreadKey
from agent_core.store import keys

T = ThreadKey("telegram", "bot1", "42", "")
DAY = 86_400.0


def _ref(n: int) -> MessageRef:
    return MessageRef(channel="telegram", conversation="42", message_id=str(n))


async def test_prompt_owners_of_gone_approvals_are_dropped(redis: Any) -> None:
    now = [1_700_000_000.0]
    store = ApprovalStore(redis, ttl_secs=1800, clock=lambda: now[0])
    ids = []
    for day in range(30):  # a prompt a day: the hash's TTL never runs out
        now[0] += DAY
        a = store.new(T, "shell", f"call{day}", {}, "u1", "U")
        await store.create(T, a)
        await store.set_prompt_ref(T, a.id, _ref(day), part=f"ev{day}:0")
        ids.append(a.id)
    await store.forget_prompts(T, ["ev29:0"])
    owners = await redis.hgetall(keys.approval_prompts(T))
    # what is left: the parts written within the approval TTL + the day kept after
    assert sorted(owners) == [b"ev28:0", b"ev29:0"]
    assert await store.prompt_owner(T, "ev28:0") == ids[28]
    assert await store.prompt_owner(T, "ev29:0") == WRITTEN_OVER
    assert await store.prompt_owner(T, "ev0:0") == ""
    assert 0 < await redis.ttl(keys.approval_prompts(T)) <= 1800 + KEEP_AFTER_EXPIRY_SECS


async def test_owners_written_by_an_earlier_version_are_read_and_dropped_in_time(
    redis: Any,
) -> None:
    now = [1_700_000_000.0]
    store = ApprovalStore(redis, ttl_secs=1800, clock=lambda: now[0])
    await redis.hset(keys.approval_prompts(T), mapping={"old:0": "abc", "old:1": WRITTEN_OVER})
    assert await store.prompt_owner(T, "old:0") == "abc"
    await store.forget_prompts(T, ["e1:0"])
    assert await store.prompt_owner(T, "old:0") == "abc"  # kept a full TTL from now
    now[0] += 2 * DAY
    await store.forget_prompts(T, ["e2:0"])
    assert sorted(await redis.hkeys(keys.approval_prompts(T))) == [b"e2:0"]


async def test_writes_after_the_record_expired_do_not_recreate_it(redis: Any) -> None:
    store = ApprovalStore(redis, ttl_secs=1800)
    a = store.new(T, "shell", "call1", {}, "u1", "U")
    await store.create(T, a)
    await store.mark_started(T, a.id)
    await store.store_result(T, a.id, "ok")
    assert await store.call_record(T, a.id, "") == (True, "ok")

    await redis.delete(keys.approval(T, a.id))  # its TTL ran out
    await store.mark_started(T, a.id, "call2")
    await store.store_result(T, a.id, "late", "call2")
    await store.set_prompt_ref(T, a.id, _ref(1))
    await store.set_prompt_ref(T, a.id, _ref(2), part="ev:0")
    assert await redis.exists(keys.approval(T, a.id)) == 0
    assert await store.prompt_owner(T, "ev:0") == a.id  # the part's owner is still known


async def test_prompt_ref_is_recorded_on_a_live_approval(redis: Any) -> None:
    store = ApprovalStore(redis, ttl_secs=1800)
    a = store.new(T, "shell", "call1", {}, "u1", "U")
    await store.create(T, a)
    await store.set_prompt_ref(T, a.id, _ref(7), part="ev:0")
    loaded = await store.load(T, a.id)
    assert loaded is not None
    assert loaded.prompt_ref == _ref(7)
    assert loaded.prompt_part == "ev:0"
    assert await redis.ttl(keys.approval(T, a.id)) > 0
