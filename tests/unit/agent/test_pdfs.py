"""PDFs read to the model (agent_core/agent/pdfs.py, through documents.read_texts)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from pypdf.errors import DependencyError

import agent_core
from agent_core.agent import doc_process, documents, pdfs
from agent_core.agent.documents import MAX_TEXT_TOKENS, Room, is_text, read_texts
from agent_core.agent.download_budget import DownloadBudget
from agent_core.agent.pdfs import is_pdf
from agent_core.errors import SendFailed
from agent_core.events import Attachment
from tests.fakes.pdf import bomb_pdf, encrypted, make_pdf, surrogate_pdf

LIMIT = 10_000_000  # MAX_ATTACHMENT_BYTES's default
ROOT = os.path.dirname(os.path.dirname(os.path.realpath(agent_core.__file__)))  # this checkout
NO_TEXT = "no text in it, perhaps a scan (pictures of pages are not read)"


class Files:
    """Downloads from a dict, remembering the cap each was asked with."""

    def __init__(self, files: dict[str, bytes]) -> None:
        self.files = files
        self.asked: dict[str, int] = {}

    async def fetch_attachment(self, attachment: Attachment, max_bytes: int) -> bytes:
        self.asked[attachment.ref] = max_bytes
        data = self.files[attachment.ref]
        if len(data) > max_bytes:
            raise SendFailed(f"file is larger than {max_bytes} bytes")
        return data


def pdf(name: str, ref: str, size: int = 0, mime: str = "application/pdf") -> Attachment:
    return Attachment("document", name, mime, size, ref)


def txt(name: str, ref: str) -> Attachment:
    return Attachment("document", name, "text/plain", 0, ref)


async def read(
    files: dict[str, bytes] | Files, atts: list[Attachment], room: Room | None = None, **kw: Any
) -> tuple[list[str], list[str]]:
    return await read_texts(
        files if isinstance(files, Files) else Files(files),
        atts,
        "t",
        room or Room(MAX_TEXT_TOKENS),
        DownloadBudget(0),
        pdf_limit=kw.get("pdf_limit", LIMIT),
    )


@pytest.mark.parametrize(
    ("name", "mime", "expected"),
    [
        ("report.pdf", "application/pdf", True),
        ("report", "application/pdf; charset=binary", True),
        ("report.PDF", "", True),  # Discord may give no type: the extension decides
        ("report.pdf", "application/octet-stream", True),
        ("notes.txt", "application/pdf", True),  # the type wins
        ("report.pdf", "text/plain", False),  # read as text, unless its bytes say PDF
        ("sheet.xlsx", "application/vnd.ms-excel", False),
        ("blob.bin", "", False),
    ],
)
def test_what_counts_as_a_pdf(name: str, mime: str, expected: bool) -> None:
    a = Attachment("document", name, mime, 10, "r")
    assert is_pdf(a) is expected
    if expected:
        assert not is_text(a)  # never both


async def test_a_multi_page_pdf_is_read_with_page_markers() -> None:
    data = make_pdf(["Quarterly revenue grew", "Costs (fixed) fell", None])
    files = Files({"r": data})
    blocks, missing = await read(files, [pdf("report.pdf", "r")])
    assert missing == []
    assert blocks == [
        "--- report.pdf (PDF, 3 pages) ---\n"
        "--- page 1 ---\nQuarterly revenue grew\n"
        "--- page 2 ---\nCosts (fixed) fell\n"
        "--- page 3 ---\n[no text on this page]\n"
        "--- end of report.pdf ---"
    ]
    # downloaded up to MAX_ATTACHMENT_BYTES, not the text files' 200 kB
    assert files.asked == {"r": LIMIT}


async def test_pdf_bytes_decide_over_the_label() -> None:
    """A PDF labelled as text is read as a PDF, not shown as PDF syntax; text labelled
    as a PDF is not a PDF."""
    data = make_pdf(["Hello from the PDF"])
    blocks, missing = await read(
        {"a": data, "b": b"just some notes\n"},
        [txt("scan.txt", "a"), pdf("notes.pdf", "b")],
    )
    assert blocks == [
        "--- scan.txt (PDF, 1 page) ---\n--- page 1 ---\nHello from the PDF\n--- end of scan.txt ---"
    ]
    assert missing == ["notes.pdf: not readable as a PDF"]


async def test_a_pdf_and_a_text_file_share_the_turn_s_allowance() -> None:
    """The PDF stops being read once the room is used up, and is cut where the room
    ends, the model told in which page; a text file after it finds no room."""
    pages = [" ".join(f"p{n}w{i}" for i in range(40)) for n in range(1, 51)]
    data = make_pdf(pages)  # 50 pages of ~52 tokens each
    room = Room(200)
    blocks, missing = await read(
        {"n": b"x" * 200, "p": data, "late": b"after"},
        [txt("notes.txt", "n"), pdf("long.pdf", "p"), txt("late.txt", "late")],
        room,
    )
    assert blocks[0] == f"--- notes.txt ---\n{'x' * 200}\n--- end of notes.txt ---"  # 50 tokens
    body = blocks[1]
    assert body.startswith("--- long.pdf (PDF, 50 pages) ---\n--- page 1 ---\np1w0 p1w1")
    assert "--- page 3 ---" in body and "--- page 4 ---" not in body
    assert body.endswith(
        "\n[... cut here, in page 3 of 50: no room for the rest]\n--- end of long.pdf ---"
    )
    assert missing == ["late.txt: not read, earlier files already fill the space"]
    assert room.tokens == 0

    # reading itself stopped at the room: 50 pages were not all extracted
    got = pdfs.read(data, 150, time.monotonic() + 30)
    assert isinstance(got, pdfs.PdfText)
    assert (got.read, got.pages, got.stopped) == (3, 50, "allowance")


async def test_a_lone_surrogate_in_a_pdf_s_text_is_replaced() -> None:
    """A font's ToUnicode map giving a lone surrogate (pypdf: "surrogatepass") would put
    text no JSON encoder takes into the message, and the session's save would fail:
    it is read as U+FFFD, in this process and through the reading process."""
    data = surrogate_pdf()
    got = pdfs.read(data, 1000, time.monotonic() + 30)
    assert isinstance(got, pdfs.PdfText)
    assert got.text == "--- page 1 ---\n\ufffdB\ufffdB"
    blocks, missing = await read({"s": data}, [pdf("odd.pdf", "s")])
    assert missing == []
    assert blocks == [
        "--- odd.pdf (PDF, 1 page) ---\n--- page 1 ---\n\ufffdB\ufffdB\n--- end of odd.pdf ---"
    ]
    blocks[0].encode("utf-8")


async def test_a_pdf_with_no_text_says_it_may_be_a_scan() -> None:
    blocks, missing = await read({"s": make_pdf([None, None])}, [pdf("scan.pdf", "s")])
    assert blocks == [] and missing == [f"scan.pdf: {NO_TEXT}"]


async def test_a_password_protected_pdf_is_named_so() -> None:
    data = make_pdf(["Secret plans"])
    blocks, missing = await read(
        {"locked": encrypted(data, "hunter2"), "open": encrypted(data, "")},
        [pdf("locked.pdf", "locked"), pdf("open.pdf", "open")],
    )
    # a PDF locked with the empty password (printing, copying restricted) is read
    assert blocks == [
        "--- open.pdf (PDF, 1 page) ---\n--- page 1 ---\nSecret plans\n--- end of open.pdf ---"
    ]
    assert missing == ["locked.pdf: password-protected"]


async def test_an_aes_pdf_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """AES is what Word and most tools use today ("restrict editing" exports open
    with the empty password); ``cryptography`` is a dependency for it."""
    data = make_pdf(["Quarterly figures"])
    blocks, missing = await read(
        {"a": encrypted(data, "", "AES-256"), "b": encrypted(data, "pw", "AES-128")},
        [pdf("open.pdf", "a"), pdf("locked.pdf", "b")],
    )
    assert blocks == [
        "--- open.pdf (PDF, 1 page) ---\n--- page 1 ---\nQuarterly figures\n--- end of open.pdf ---"
    ]
    assert missing == ["locked.pdf: password-protected"]


async def test_an_aes_pdf_without_cryptography_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    class AesReader:
        def __init__(self, stream: object) -> None:
            raise DependencyError("cryptography>=3.1 is required for AES algorithm")

    monkeypatch.setattr(pdfs, "PdfReader", AesReader)  # what reading it finds, in-process
    assert pdfs.read(make_pdf(["x"]), 1000, time.monotonic() + 30) == pdfs.AES
    assert pdfs.AES == "encrypted with AES, which this bot cannot decrypt"


@pytest.mark.parametrize(
    "data",
    [b"\x89PNG\r\n\x1a\n not a pdf", b"%PDF-1.7 ...", make_pdf(["cut short"])[:60], b""],
)
async def test_garbage_labelled_as_a_pdf_is_not_readable(data: bytes) -> None:
    blocks, missing = await read({"g": data}, [pdf("spec.pdf", "g")])
    assert blocks == [] and missing == ["spec.pdf: not readable as a PDF"]


async def test_a_pdf_larger_than_the_cap_is_not_downloaded() -> None:
    files = Files({"big": make_pdf(["big"]), "small": make_pdf(["small"])})
    blocks, missing = await read_texts(
        files,
        [pdf("big.pdf", "big", size=LIMIT + 1), pdf("small.pdf", "small")],
        "t",
        Room(MAX_TEXT_TOKENS),
        DownloadBudget(0),
        pdf_limit=LIMIT,
    )
    assert missing == [f"big.pdf: larger than {LIMIT} bytes, not read"]
    assert list(files.asked) == ["small"] and len(blocks) == 1
    # no size given, and more than the cap: the download stops and says so
    blocks, missing = await read({"x": make_pdf(["x" * 500])}, [pdf("x.pdf", "x")], pdf_limit=100)
    assert blocks == [] and missing == ["x.pdf: file is larger than 100 bytes"]


async def test_the_page_cap_bounds_the_reading(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pdfs, "MAX_PAGES", 2)
    blocks, missing = await read({"p": make_pdf(["one", "two", "three"])}, [pdf("deck.pdf", "p")])
    assert missing == []
    assert blocks == [
        "--- deck.pdf (PDF, 3 pages) ---\n--- page 1 ---\none\n--- page 2 ---\ntwo\n"
        "[... only pages 1-2 of 3 were read: at most 2 pages of a PDF are read]\n"
        "--- end of deck.pdf ---"
    ]
    # a scan longer than the cap: no text in the pages read
    blocks, missing = await read({"s": make_pdf([None] * 3)}, [pdf("scan.pdf", "s")])
    assert missing == [
        "scan.pdf: no text in its first 2 of 3 pages, perhaps a scan (pictures of pages are not read)"
    ]


async def test_the_deadline_is_checked_between_pages(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reading stops at its deadline (here: at once), the first page always read."""
    monkeypatch.setattr(pdfs, "READ_SECS", 0.0)
    monkeypatch.setattr(doc_process, "KILL_AFTER_SECS", 20.0)  # a slow box starts it late
    blocks, missing = await read({"p": make_pdf(["one", "two", "three"])}, [pdf("slow.pdf", "p")])
    assert missing == []
    assert blocks == [
        "--- slow.pdf (PDF, 3 pages) ---\n--- page 1 ---\none\n"
        "[... only page 1 of 3 was read: reading it took too long]\n"
        "--- end of slow.pdf ---"
    ]
    # a job that starts after the message gave up reads nothing
    late = pdfs.read(make_pdf(["one"]), 1000, time.monotonic() - 1)
    assert late == pdfs.TOO_LATE


async def test_a_hostile_pdf_is_stopped_at_the_deadline_and_the_next_one_is_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A 6 KB PDF whose one page takes pypdf ~20 s and hundreds of MB: its reading
    process is killed at the message's deadline, the model is told, its bytes are given
    back, and the next PDF gets a reading process of its own."""
    monkeypatch.setattr(documents, "FETCH_DEADLINE_SECS", 2.0)
    bomb = bomb_pdf(200_000)
    budget = DownloadBudget(LIMIT)
    blocks, missing = await read_texts(
        Files({"b": bomb}),
        [pdf("bomb.pdf", "b", size=len(bomb))],
        "t",
        Room(MAX_TEXT_TOKENS),
        budget,
        pdf_limit=LIMIT,
    )
    assert blocks == [] and missing == [f"bomb.pdf: {pdfs.TOO_LATE}"]
    async with asyncio.timeout(10):  # the cancelled task reaps the killed process
        while budget.held:
            await asyncio.sleep(0.01)
    blocks, missing = await read({"p": make_pdf(["after"])}, [pdf("fine.pdf", "p")])
    assert missing == [] and "after" in blocks[0]


async def test_a_pdf_that_needs_too_much_memory_is_refused_in_its_own_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The reading process caps its own memory: over it, the PDF is named too large,
    and the worker (this process) is untouched."""
    monkeypatch.setattr(pdfs, "CHILD_MEMORY_BYTES", 160 * 1024 * 1024)
    blocks, missing = await read({"b": bomb_pdf(2_000_000)}, [pdf("huge.pdf", "b")])
    assert blocks == [] and missing == [f"huge.pdf: {pdfs.TOO_BIG}"]


async def test_a_conversation_s_pdfs_wait_for_each_other_within_their_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One reading process at a time per conversation: a PDF of the next message behind
    a slow one is not read in time, and says so, rather than a second process being
    started for the same chat."""
    monkeypatch.setattr(documents, "FETCH_DEADLINE_SECS", 2.0)

    async def next_message() -> tuple[list[str], list[str]]:
        await asyncio.sleep(0.1)
        return await read({"p": make_pdf(["queued"])}, [pdf("queued.pdf", "p")])

    (_, slow), (blocks, missing) = await asyncio.gather(
        read({"b": bomb_pdf(200_000)}, [pdf("slow.pdf", "b")]), next_message()
    )
    assert slow == [f"slow.pdf: {pdfs.TOO_LATE}"]
    assert blocks == []
    assert missing == [f"queued.pdf: {pdfs.TOO_LATE}"]


async def test_a_text_file_that_begins_like_a_pdf_is_read_as_text() -> None:
    note = b"%PDF- is the magic number at the start of every PDF.\nMore notes."
    blocks, missing = await read(
        {"n": note}, [Attachment("document", "notes.md", "text/markdown", 0, "n")]
    )
    assert missing == []
    assert blocks == [f"--- notes.md ---\n{note.decode()}\n--- end of notes.md ---"]


async def test_one_conversation_s_slow_documents_leave_a_slot_to_others(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two reading processes at a time per worker, one per conversation: a chat posting
    two PDFs that each take its whole deadline does not hold both."""
    monkeypatch.setattr(documents, "FETCH_DEADLINE_SECS", 4.0)

    async def chat(where: str, files: dict[str, bytes], atts: list[Attachment]) -> list[str]:
        _, missing = await read_texts(
            files if isinstance(files, Files) else Files(files),
            atts,
            where,
            Room(MAX_TEXT_TOKENS),
            DownloadBudget(0),
            pdf_limit=LIMIT,
        )
        return missing

    async def later() -> list[str]:
        await asyncio.sleep(0.3)
        return await chat("b", {"p": make_pdf(["other chat"])}, [pdf("other.pdf", "p")])

    bomb = bomb_pdf(200_000)
    hostile, other = await asyncio.wait_for(
        asyncio.gather(
            chat("a", {"1": bomb, "2": bomb}, [pdf("one.pdf", "1"), pdf("two.pdf", "2")]),
            later(),
        ),
        timeout=60,
    )
    assert hostile == [f"one.pdf: {pdfs.TOO_LATE}", f"two.pdf: {pdfs.TOO_LATE}"]
    assert other == []


async def test_a_messages_documents_share_its_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """One message with two PDFs that would each take the whole deadline and a small
    one: each gets a share of the time left, so the small one is still read."""
    monkeypatch.setattr(documents, "FETCH_DEADLINE_SECS", 7.5)
    bomb = bomb_pdf(200_000)
    blocks, missing = await asyncio.wait_for(
        read(
            {"1": bomb, "2": bomb, "3": make_pdf(["the small one"])},
            [pdf("one.pdf", "1"), pdf("two.pdf", "2"), pdf("small.pdf", "3")],
        ),
        timeout=60,
    )
    assert missing == [f"one.pdf: {pdfs.TOO_LATE}", f"two.pdf: {pdfs.TOO_LATE}"]
    assert len(blocks) == 1 and "the small one" in blocks[0]


def _fake_child(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: str) -> None:
    """The reading process replaced by ``code`` (its stdin read first)."""
    script = tmp_path / "child.py"
    script.write_text("import sys\nsys.stdin.buffer.read()\n" + code)
    exe = tmp_path / "python"
    exe.write_text(f'#!/bin/sh\nexec {sys.executable} {script} "$@"\n')
    exe.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(exe))


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ('print("hello garbage")', doc_process.FAILED),
        ('sys.stderr.write("E" * 20_000_000); sys.exit(1)', doc_process.FAILED),
        ("import os; os.kill(os.getpid(), 11)", doc_process.FAILED),  # a crash
        ('print(\'{"text": 5, "pages": "x"}\')', doc_process.FAILED),
        ("sys.exit(75)", pdfs.TOO_BIG),  # doc_child's MemoryError
        # a process it started keeps its stdout open: its group is killed
        ('import subprocess; subprocess.Popen(["sleep", "60"]); print("{}")', doc_process.FAILED),
    ],
)
async def test_a_reading_process_that_fails_is_named_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: str, expected: str
) -> None:
    _fake_child(tmp_path, monkeypatch, code)
    got = await asyncio.wait_for(
        pdfs.read_in_child(make_pdf(["x"]), 1000, time.monotonic() + 20), timeout=60
    )
    assert got == expected


async def test_the_reading_process_gets_a_deadline_and_no_secrets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It is told when it is killed (a wall-clock time: READ_SECS and a second from
    its start, before the message's deadline), and sees no keys or tokens."""
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", "secret")
    _fake_child(
        tmp_path,
        monkeypatch,
        "import json, os\n"
        "args = json.loads(sys.argv[-1])\n"
        'env = sorted(k for k in os.environ if k not in ("PWD", "SHLVL", "_"))\n'
        'print(json.dumps({"error": json.dumps([args["deadline"], env])}))\n',
    )
    before = time.time()
    got = await pdfs.read_in_child(make_pdf(["x"]), 1000, time.monotonic() + 25)
    deadline, env = json.loads(got)
    assert before + pdfs.READ_SECS < deadline <= time.time() + pdfs.READ_SECS + 1
    assert set(env) <= {*doc_process.CHILD_ENV, "PYTHONPATH"}
    assert doc_process.child_env()["PYTHONPATH"].split(os.pathsep)[0] == ROOT


def test_a_relocated_python_still_starts_the_reading_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Heroku's Python finds libpython and its standard library through these two; the
    reading process keeps them (and nothing secret)."""
    monkeypatch.setenv("LD_LIBRARY_PATH", "/app/.heroku/python/lib")
    monkeypatch.setenv("PYTHONHOME", "/app/.heroku/python")
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-secret")
    env = doc_process.child_env()
    assert env["LD_LIBRARY_PATH"] == "/app/.heroku/python/lib"
    assert env["PYTHONHOME"] == "/app/.heroku/python"
    assert "SLACK_BOT_TOKEN" not in env


def _ignores_sigterm(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("SigIgn:"):
                    return bool(int(line.split()[1], 16) & (1 << (signal.SIGTERM - 1)))
    except OSError:
        pass
    return False


async def test_a_restart_sigterm_does_not_fail_a_reading_in_progress(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Heroku SIGTERMs every process in the dyno at a restart while the worker
    finishes the turn in hand; the reading process (a session of its own) died with
    -15 and the turn said "could not be read (the reader failed)".  It ignores SIGTERM
    first thing (the worker SIGKILLs it at its deadline or on cancel)."""
    real = asyncio.create_subprocess_exec
    signalled: list[int] = []

    async def sigterm_it(pid: int) -> None:
        # once its main() has begun (under 0.1 s here; no signal can be ignored
        # before the interpreter runs), at most 0.3 s: in the middle of the reading
        # (about half a second)
        for _ in range(30):
            if _ignores_sigterm(pid):
                break
            await asyncio.sleep(0.01)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
            signalled.append(pid)

    tasks: list[asyncio.Task[None]] = []

    async def spawn(*args: Any, **kw: Any) -> asyncio.subprocess.Process:
        proc = await real(*args, **kw)
        tasks.append(asyncio.create_task(sigterm_it(proc.pid)))
        return proc

    monkeypatch.setattr(asyncio, "create_subprocess_exec", spawn)
    got = await asyncio.wait_for(
        pdfs.read_in_child(make_pdf(["hello reader " * 50] * 300), 10**5, time.monotonic() + 30), 60
    )
    await asyncio.gather(*tasks)
    assert signalled, "the reading process was never signalled"
    assert isinstance(got, pdfs.PdfText), got
    assert "hello reader" in got.text
