"""The gateway's own Redis state (parley:discord:*) stays bounded: threads quiet
for longer than the follow-up window are forgotten, and the per-channel hashes
keep only the channels the catch-up still tracks."""

from __future__ import annotations

from typing import Any

import pytest

from channels.discord import state as ds

DAY_MS = 86_400_000


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    now = [1_700_000_000_000]
    monkeypatch.setattr(ds, "_ms", lambda: now[0])
    return now


async def test_quiet_channels_leave_last_and_meta_with_active(redis: Any, clock: list[int]) -> None:
    st = ds.DiscordState(redis)
    for i in range(50):
        await st.seen(f"c{i}", f"{1000 + i}", "g1", "")
    clock[0] += DAY_MS
    await st.seen("fresh", "2000", "g1", "")
    # a one-hour window: only "fresh" is left, in all three
    assert await st.active_since(3600) == [("fresh", "2000", "g1", "")]
    assert await redis.zrange(ds.ACTIVE, 0, -1) == [b"fresh"]
    assert await redis.hkeys(ds.LAST) == [b"fresh"]
    assert await redis.hkeys(ds.META) == [b"fresh"]


async def test_entries_left_by_an_earlier_version_go_at_the_next_catch_up(
    redis: Any, clock: list[int]
) -> None:
    await redis.hset(ds.LAST, mapping={"old1": "1", "old2": "2"})
    await redis.hset(ds.META, mapping={"old1": "g|", "old2": "g|"})
    st = ds.DiscordState(redis)
    assert await st.active_since(3600) == []
    assert await redis.exists(ds.LAST, ds.META) == 0


async def test_threads_are_followed_for_the_window_after_their_last_message(
    redis: Any, clock: list[int]
) -> None:
    st = ds.DiscordState(redis)
    await st.add_thread("t1", "c1")
    await st.add_thread("t2", "c1")
    clock[0] += 6 * DAY_MS
    await st.seen("t2", "500", "g1", "c1")  # a follow-up in t2: its window starts again
    clock[0] += 2 * DAY_MS  # t1: 8 days quiet, t2: 2 days
    assert not st.thread_active("t1")
    assert st.thread_active("t2")

    # a gateway starting now follows t2 only, and t1 is gone from Redis
    fresh = ds.DiscordState(redis)
    await fresh.load()
    assert fresh.threads == {"t2": "c1"}
    assert fresh.thread_active("t2")
    assert await redis.hkeys(ds.THREADS) == [b"t2"]
    assert await redis.zrange(ds.THREAD_SEEN, 0, -1) == [b"t2"]

    # a running gateway drops the quiet ones when it records a new thread
    clock[0] += 6 * DAY_MS
    await fresh.add_thread("t3", "c2")
    assert fresh.threads == {"t3": "c2"}
    assert await redis.hkeys(ds.THREADS) == [b"t3"]
    assert await redis.zrange(ds.THREAD_SEEN, 0, -1) == [b"t3"]


async def test_threads_recorded_by_an_earlier_version_get_a_full_window(
    redis: Any, clock: list[int]
) -> None:
    await redis.hset(ds.THREADS, "t0", "c0")  # no thread-seen entry
    st = ds.DiscordState(redis)
    await st.load()
    assert st.thread_active("t0")
    clock[0] += 8 * DAY_MS
    again = ds.DiscordState(redis)
    await again.load()
    assert again.threads == {}
    assert await redis.exists(ds.THREADS, ds.THREAD_SEEN) == 0


async def test_rewind_sets_a_mark_back_and_makes_the_channel_active(
    redis: Any, clock: list[int]
) -> None:
    """For messages received but not handled at a stop: the next catch-up reads
    each channel from just before the first of them, a channel never seen too."""
    st = ds.DiscordState(redis)
    await st.seen("known", "2000", "g1", "")
    await st.seen("earlier", "500", "g1", "")
    await st.rewind(
        {
            "known": ("1499", "g1", ""),  # moved back
            "earlier": ("1999", "g1", ""),  # already before: left
            "new": ("2999", "g2", "p2"),  # a first message (a new DM, a first mention)
        }
    )
    assert sorted(await st.active_since(3600)) == [
        ("earlier", "500", "g1", ""),
        ("known", "1499", "g1", ""),
        ("new", "2999", "g2", "p2"),
    ]
