"""bench/stages.py marks the 'pace' stage where the senders book a pacing slot
(Pacer.book): without the marks breakdown() keeps no turn (it keeps only turns
with every stage)."""

from __future__ import annotations

from typing import Any

from agent_core.store.pacing import Pacer, pace_key
from bench import stages


async def test_sender_booking_is_marked_as_pace_stage(redis: Any, tmp_path: Any) -> None:
    saved = {n: getattr(Pacer, n) for n in ("reserve", "book")}
    from agent_core.agent.turn import Turn
    from agent_core.ingest import Ingest
    from agent_core.store.delivery import Delivery

    saved_other = [
        (Turn, "run", Turn.run),
        (Turn, "_stream", Turn._stream),
        (Ingest, "submit", Ingest.submit),
        (Delivery, "read", Delivery.read),
        (Delivery, "handoff_and_begin", Delivery.handoff_and_begin),
    ]
    try:
        stages.install(str(tmp_path / "marks"))
        stages._MARKS.clear()
        stages._CHAT.set("42")
        # what TelegramOutbox._reserve / SlackOutbox / DiscordOutbox call now
        await Pacer(redis).book([(pace_key("t", "chat", "42"), 0.0)], max_wait=60.0)
        names = [m[0] for m in stages._MARKS]
        assert "pace_in" in names and "pace_out" in names, names
    finally:
        for n, f in saved.items():
            setattr(Pacer, n, f)
        for cls, n, f in saved_other:
            setattr(cls, n, f)
