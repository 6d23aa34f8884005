"""A long answer with no space or line break near the 4,096-unit cut (a run of emoji
or flags, a paragraph of CJK or of accented letters) was cut inside one visible
character: every flag after the cut showed as another flag (🇺🇸 → 🇸🇺), a family
emoji fell apart, an accent started the next message alone.  Through the real
python-telegram-bot and the fake Bot API."""

from __future__ import annotations

import unicodedata

from agent_core.events import OutboundMessage, ThreadKey
from channels.telegram import TelegramChannel
from tests.fakes.telegram import FakeTelegram

DM = ThreadKey("telegram", "123456", "42")
US = "\U0001f1fa\U0001f1f8"


async def test_flags_are_not_split_into_other_flags(
    fake: FakeTelegram, channel: TelegramChannel
) -> None:
    await channel.outbox().send(DM, OutboundMessage("x" + US * 1100))  # no word boundary
    texts = fake.sent_texts(42)
    assert len(texts) == 2
    for t in texts:
        indicators = sum(1 for c in t if 0x1F1E6 <= ord(c) <= 0x1F1FF)
        assert t.count(US) * 2 == indicators, repr(t[:4])
    assert "".join(texts) == "x" + US * 1100


async def test_emoji_sequences_and_accents_stay_whole(
    fake: FakeTelegram, channel: TelegramChannel
) -> None:
    family = "\U0001f468\u200d\U0001f469\u200d\U0001f467"
    await channel.outbox().send(DM, OutboundMessage("x" + family * 600))
    await channel.outbox().send(DM, OutboundMessage("x" + "e\u0301" * 5000))
    texts = fake.sent_texts(42)
    assert len(texts) == 5  # 4,801 and 10,001 UTF-16 units
    for t in texts:
        assert not t.startswith("\u200d") and not t.endswith("\u200d"), repr(t[:3] + t[-3:])
        assert not unicodedata.combining(t[0]), repr(t[:3])
