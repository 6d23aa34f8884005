"""The attachment bytes one process holds at once (agent_core/agent/download_budget.py),
on its own and as photos and text files use it."""

from __future__ import annotations

import asyncio
import io
import threading
from collections.abc import Callable

import pytest
from PIL import Image

from agent_core.agent import documents, images
from agent_core.agent.documents import MAX_TEXT_TOKENS, Room, read_texts
from agent_core.agent.download_budget import DownloadBudget
from agent_core.agent.images import fetch_images
from agent_core.errors import SendFailed
from agent_core.events import Attachment

BUSY = "not downloaded in time (the bot is busy with other files)"


def encode(fmt: str) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (4, 3), "red").save(out, fmt)
    return out.getvalue()


PNG, JPEG = encode("PNG"), encode("JPEG")


async def turns(n: int = 20) -> None:
    """Let every task that can run take a few steps."""
    for _ in range(n):
        await asyncio.sleep(0)


async def until(cond: Callable[[], bool]) -> None:
    """Run the loop until ``cond()`` holds (the timeout only guards against a hang)."""
    async with asyncio.timeout(10):
        while not cond():
            await asyncio.sleep(0.001)


# -- the semaphore -----------------------------------------------------------------


class Taker:
    """Tasks that take a share and keep it until the test lets them go."""

    def __init__(self, budget: DownloadBudget) -> None:
        self.budget = budget
        self.order: list[str] = []
        self.done: dict[str, asyncio.Future[None]] = {}
        self.tasks: dict[str, asyncio.Task[None]] = {}

    def start(self, name: str, nbytes: int) -> None:
        self.done[name] = asyncio.get_running_loop().create_future()
        self.tasks[name] = asyncio.create_task(self._take(name, nbytes))

    async def _take(self, name: str, nbytes: int) -> None:
        async with self.budget.hold(nbytes):
            self.order.append(name)
            await self.done[name]

    def finish(self, name: str) -> None:
        self.done[name].set_result(None)


async def test_waiting_holds_are_served_in_order_a_small_one_does_not_overtake() -> None:
    budget = DownloadBudget(10)
    t = Taker(budget)
    t.start("a", 6)
    await turns()
    t.start("big", 8)
    await turns()
    t.start("small", 3)  # would fit beside "a", but "big" came first
    await turns()
    assert t.order == ["a"] and budget.held == 6 and budget.queued == 2
    t.finish("a")
    await turns()
    assert t.order == ["a", "big"] and budget.held == 8  # 8 + 3 > 10: "small" waits
    t.finish("big")
    await turns()
    assert t.order == ["a", "big", "small"] and budget.held == 3
    t.finish("small")
    await asyncio.gather(*t.tasks.values())
    assert budget.held == 0 and budget.queued == 0


async def test_a_hold_larger_than_the_budget_is_cut_to_it_and_goes_alone() -> None:
    budget = DownloadBudget(10)
    assert budget.hold(50).nbytes == 10
    t = Taker(budget)
    t.start("huge", 50)
    await turns()
    assert t.order == ["huge"] and budget.held == 10
    t.start("tiny", 1)
    await turns()
    assert t.order == ["huge"]  # the whole budget is held
    t.finish("huge")
    await turns()
    assert t.order == ["huge", "tiny"] and budget.held == 1
    t.finish("tiny")
    await asyncio.gather(*t.tasks.values())
    assert budget.held == 0


async def test_a_cancelled_waiter_leaves_the_queue_and_lets_the_next_go() -> None:
    budget = DownloadBudget(10)
    t = Taker(budget)
    t.start("a", 6)
    await turns()
    t.start("big", 8)
    t.start("small", 3)
    await turns()
    t.tasks["big"].cancel()
    await turns()
    assert t.order == ["a", "small"] and budget.held == 9 and budget.queued == 0
    assert t.tasks["big"].cancelled()
    t.finish("a")
    t.finish("small")
    await asyncio.gather(t.tasks["a"], t.tasks["small"])
    assert budget.held == 0


async def test_a_share_granted_to_a_task_cancelled_before_it_ran_is_given_back() -> None:
    budget = DownloadBudget(10)
    t = Taker(budget)
    async with budget.hold(10):
        t.start("b", 5)
        await turns()
        assert budget.queued == 1
    # given back without a pause: "b" is granted and has not run yet
    assert budget.held == 5 and budget.queued == 0
    t.tasks["b"].cancel()
    await turns()
    assert t.tasks["b"].cancelled() and t.order == [] and budget.held == 0


async def test_a_share_is_given_back_when_its_holder_fails() -> None:
    budget = DownloadBudget(10)

    async def failing() -> None:
        async with budget.hold(10):
            raise SendFailed("HTTP 500")

    with pytest.raises(SendFailed):
        await failing()
    assert budget.held == 0
    async with budget.hold(10):  # would wait for ever had it not been given back
        assert budget.held == 10


async def test_zero_means_no_budget() -> None:
    budget = DownloadBudget(0)
    t = Taker(budget)
    for i in range(5):
        t.start(str(i), 10**12)
    await turns()
    assert t.order == ["0", "1", "2", "3", "4"] and budget.queued == 0
    for i in range(5):
        t.finish(str(i))
    await asyncio.gather(*t.tasks.values())
    assert budget.held == 0


# -- photos and text files -------------------------------------------------------------


class Gated:
    """A fetcher whose downloads end when the test says (:meth:`finish`), counting the
    bytes held from the start of each download until the photo has been prepared
    (told by the ``counted`` fixture) or the download cancelled."""

    def __init__(self, files: dict[str, bytes]) -> None:
        self.files = files
        self.started: list[str] = []
        self.gates: dict[str, asyncio.Future[None]] = {}
        self.lock = threading.Lock()  # prepare() runs on the decoding thread
        self.holding = 0
        self.peak = 0

    def gate(self, ref: str) -> asyncio.Future[None]:
        return self.gates.setdefault(ref, asyncio.get_running_loop().create_future())

    def finish(self, ref: str) -> None:
        self.gate(ref).set_result(None)

    def let_go(self, nbytes: int) -> None:
        with self.lock:
            self.holding -= nbytes

    async def fetch_attachment(self, attachment: Attachment, max_bytes: int) -> bytes:
        self.started.append(attachment.ref)
        data = self.files.get(attachment.ref)
        with self.lock:
            self.holding += len(data or b"")
            self.peak = max(self.peak, self.holding)
        try:
            await self.gate(attachment.ref)
        except BaseException:
            self.let_go(len(data or b""))
            raise
        if data is None:
            raise SendFailed("the file host answered HTTP 404")
        return data


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> Callable[[Gated], None]:
    """Makes images.prepare tell a Gated fetcher when it is done with the bytes."""

    def attach(fetcher: Gated) -> None:
        real = images.prepare

        def prepare(data: bytes) -> tuple[str, bytes] | str:
            try:
                return real(data)
            finally:
                fetcher.let_go(len(data))

        monkeypatch.setattr(images, "prepare", prepare)

    return attach


def photo(ref: str, size: int) -> Attachment:
    return Attachment("image", f"{ref}.png", "image/png", size, ref)


async def test_photos_of_concurrent_messages_hold_no_more_than_the_budget(
    counted: Callable[[Gated], None],
) -> None:
    """Twelve photos in four messages at once, room for three: never more held (from
    the download's start until the photo is prepared), and every photo is shown."""
    size = len(PNG)
    refs = [f"p{i}" for i in range(12)]
    fetcher = Gated(dict.fromkeys(refs, PNG))
    counted(fetcher)
    budget = DownloadBudget(3 * size)
    messages = [
        asyncio.create_task(
            fetch_images(fetcher, [photo(r, size) for r in refs[i : i + 3]], 10_000, i, budget)
        )
        for i in range(0, 12, 3)
    ]
    for done in range(12):  # one download ends at a time, the oldest first
        await until(lambda: len(fetcher.started) >= min(12, done + 3))  # noqa: B023
        await turns()
        assert len(fetcher.started) == min(12, done + 3)  # never a fourth at once
        assert budget.held <= 3 * size
        fetcher.finish(fetcher.started[done])
    results = await asyncio.gather(*messages)
    assert fetcher.started == refs  # in the order they asked
    assert fetcher.peak == 3 * size
    assert all(len(shown) == 3 and missing == [] for shown, missing in results)
    assert budget.held == 0 and budget.queued == 0


async def test_without_a_budget_every_photo_downloads_at_once(
    counted: Callable[[Gated], None],
) -> None:
    size = len(PNG)
    refs = [f"p{i}" for i in range(6)]
    fetcher = Gated(dict.fromkeys(refs, PNG))
    counted(fetcher)
    budget = DownloadBudget(0)
    task = asyncio.create_task(
        fetch_images(fetcher, [photo(r, size) for r in refs], 10_000, "t", budget)
    )
    await until(lambda: len(fetcher.started) == 6)
    assert budget.held == 6 * size
    for r in refs:
        fetcher.finish(r)
    shown, missing = await task
    assert len(shown) == 6 and missing == [] and fetcher.peak == 6 * size and budget.held == 0


async def test_a_photo_holds_its_bytes_until_it_is_prepared(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Room for one photo: the second is not downloaded while the first is still
    being prepared (its downloaded bytes are still in memory)."""
    entered, go = threading.Event(), threading.Event()
    real = images.prepare

    def slow(data: bytes) -> tuple[str, bytes] | str:
        entered.set()
        go.wait(10)
        return real(data)

    monkeypatch.setattr(images, "prepare", slow)
    fetcher = Gated({"a": PNG, "b": JPEG})
    budget = DownloadBudget(len(PNG))  # the JPEG is not much larger: cut to the budget
    pics = [photo("a", len(PNG)), photo("b", len(JPEG))]
    task = asyncio.create_task(fetch_images(fetcher, pics, 10_000, "t", budget))
    try:
        await until(lambda: fetcher.started == ["a"])
        fetcher.finish("a")
        await asyncio.get_running_loop().run_in_executor(None, entered.wait, 10)
        await turns()
        assert fetcher.started == ["a"] and budget.held == len(PNG) and budget.queued == 1
    finally:
        go.set()
    await until(lambda: fetcher.started == ["a", "b"])
    fetcher.finish("b")
    shown, missing = await task
    assert [i.mime for i in shown] == ["image/png", "image/jpeg"] and missing == []
    assert budget.held == 0


async def test_past_the_deadline_a_photo_that_waited_says_the_bot_was_busy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The first photo's decode outlives the message's deadline: its bytes stay held
    until the decode ends; the photos waiting behind it are named as such and leave
    the queue."""
    monkeypatch.setattr(images, "FETCH_DEADLINE_SECS", 0.3)
    go = threading.Event()
    real = images.prepare

    def stuck(data: bytes) -> tuple[str, bytes] | str:
        go.wait(10)
        return real(data)

    monkeypatch.setattr(images, "prepare", stuck)
    fetcher = Gated({"a": PNG, "b": PNG, "c": PNG})
    fetcher.finish("a")  # downloaded at once, then stuck in prepare
    budget = DownloadBudget(len(PNG))
    pics = [photo(r, len(PNG)) for r in "abc"]
    try:
        shown, missing = await fetch_images(fetcher, pics, 10_000, "t", budget)
        assert shown == ()
        assert missing == ["a.png: not downloaded in time", f"b.png: {BUSY}", f"c.png: {BUSY}"]
        await turns()
        assert fetcher.started == ["a"]
        assert budget.queued == 0 and budget.held == len(PNG)  # the decoder has "a"
    finally:
        go.set()
    await until(lambda: budget.held == 0)


async def test_a_download_cut_by_the_deadline_gives_its_bytes_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(images, "FETCH_DEADLINE_SECS", 0.3)
    fetcher = Gated({"a": PNG, "b": PNG})  # "a" never finishes
    budget = DownloadBudget(len(PNG))
    pics = [photo("a", len(PNG)), photo("b", len(PNG))]
    shown, missing = await fetch_images(fetcher, pics, 10_000, "t", budget)
    assert shown == () and missing == ["a.png: not downloaded in time", f"b.png: {BUSY}"]
    await turns()
    assert budget.held == 0 and budget.queued == 0 and fetcher.holding == 0


async def test_a_photo_that_fails_gives_its_bytes_back_to_the_next(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One at a time: the second and third photos are only reached if the one
    before gave its share back (failed download, failed decode)."""
    monkeypatch.setattr(images, "FETCH_DEADLINE_SECS", 5.0)
    real = images.prepare

    def prepare(data: bytes) -> tuple[str, bytes] | str:
        if data == JPEG:
            raise RuntimeError("a bug in the decoder")
        return real(data)

    monkeypatch.setattr(images, "prepare", prepare)
    fetcher = Gated({"bad": JPEG, "ok": PNG})  # "gone" is not there: HTTP 404
    for ref in ("gone", "bad", "ok"):
        fetcher.finish(ref)
    budget = DownloadBudget(10)  # every photo is cut to the whole budget
    pics = [photo("gone", 50), photo("bad", 50), photo("ok", 50)]
    shown, missing = await fetch_images(fetcher, pics, 10_000, "t", budget)
    assert len(shown) == 1
    assert missing == [
        "gone.png: could not be downloaded",
        "bad.png: could not be read as an image",
    ]
    await until(lambda: budget.held == 0)


def doc(ref: str, size: int = 0) -> Attachment:
    return Attachment("document", f"{ref}.txt", "text/plain", size, ref)


async def test_text_files_hold_their_bytes_and_say_when_the_bot_was_busy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(documents, "FETCH_DEADLINE_SECS", 0.3)
    fetcher = Gated({"a": b"alpha", "c": b"gamma", "d": b"delta", "e": b"epsilon"})
    fetcher.finish("a")
    fetcher.finish("gone")  # answers HTTP 404
    # no size given: each holds MAX_TEXT_FILE_BYTES, two at a time; "c" and "d" never end
    budget = DownloadBudget(2 * documents.MAX_TEXT_FILE_BYTES)
    files = [doc("a"), doc("gone"), doc("c"), doc("d"), doc("e")]
    blocks, missing = await read_texts(
        fetcher, files, "t", Room(MAX_TEXT_TOKENS), budget, pdf_limit=10_000_000
    )
    assert blocks == ["--- a.txt ---\nalpha\n--- end of a.txt ---"]
    # "a" was read and "gone" failed: both gave their share back, to "c" and "d"
    assert fetcher.started == ["a", "gone", "c", "d"]
    assert missing == [
        "gone.txt: could not be downloaded",
        "c.txt: not downloaded in time",
        "d.txt: not downloaded in time",
        f"e.txt: {BUSY}",
    ]
    await turns()
    assert budget.held == 0 and budget.queued == 0
