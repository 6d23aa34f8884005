"""Files a user posts in Slack: photos reach a vision model, fetched with the bot token
from Slack's file host only (channels/slack/files.py against the fake files.slack.com)."""

from __future__ import annotations

import asyncio
import base64
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest

from agent_core.errors import SendFailed
from agent_core.events import Attachment, InboundEvent
from agent_core.store.embedded import EmbeddedValkey
from bots.settings import Settings
from channels.slack.channel import SlackChannel
from channels.slack.files import SlackFiles, file_origins
from channels.slack.outbox import SlackOutbox
from channels.slack.settings import DEFAULT_API_BASE_URL, SlackSettings
from tests.fakes.llm_servers import FakeLLMServer
from tests.fakes.slack import BOT_TOKEN, FakeSlack
from tests.fakes.slack_files import connect_stub
from tests.integration.slack.conftest import runtime_settings, serving

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)
assert PNG.startswith(b"\x89PNG\r\n\x1a\n")

Published = Callable[[], Awaitable[list[InboundEvent]]]


def _outbox(slack: SlackChannel) -> SlackOutbox:
    ob = slack.outbox()
    assert isinstance(ob, SlackOutbox)
    return ob


async def _posted(
    fake: FakeSlack, app: httpx.AsyncClient, published: Published, *files: dict[str, Any]
) -> InboundEvent:
    """A DM with ``files`` through the real /slack/events route: the event the agent gets."""
    body = fake.message("D1", "look", subtype="file_share", files=list(files))
    assert (await fake.deliver(app, body)).status_code == 200
    return (await published())[-1]


def _missing_scope_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and "files:read" in r.getMessage()
    ]


# -- the outbox against the fake file host ------------------------------------------
async def test_a_posted_png_is_downloaded_with_the_bot_token(
    fake_slack: FakeSlack, slack: SlackChannel, app: httpx.AsyncClient, published: Published
) -> None:
    ev = await _posted(fake_slack, app, published, fake_slack.add_file(PNG, "image/png", "a.png"))
    [att] = ev.attachments
    assert (att.kind, att.name, att.size) == ("image", "a.png", len(PNG))
    assert await _outbox(slack).fetch_attachment(att, 5_000_000) == PNG
    [get] = fake_slack.file_gets
    assert get.authorized and get.status == 200
    # like files.slack.com, the fake hands it to nobody else: a login page instead
    async with slack.session.get(att.ref, allow_redirects=False) as resp:
        assert resp.status == 302 and "/login" in resp.headers["Location"]


async def test_the_bot_token_goes_to_slack_file_hosts_only(
    fake_slack: FakeSlack, slack: SlackChannel
) -> None:
    """The address is stored in Redis: one pointing anywhere but Slack's file host
    (or the configured SLACK_API_BASE_URL's origin) is refused before any request."""
    other = FakeSlack()  # another host that would serve the file to anyone asking
    await other.start()
    try:
        elsewhere = other.add_file(PNG, "image/png", "a.png")["url_private"]
        here = fake_slack.add_file(PNG, "image/png", "b.png")["url_private"]
        refs = [
            elsewhere,
            here.replace("127.0.0.1", "localhost"),  # same server, other origin
            "https://files.slack.com.evil.example/files-pri/T-F/a.png",
            "https://files.slack.com@evil.example/files-pri/T-F/a.png",
            "http://files.slack.com/files-pri/T-F/a.png",  # not https
        ]
        for ref in refs:
            with pytest.raises(SendFailed, match="file host"):
                await _outbox(slack).fetch_attachment(Attachment("image", ref=ref), 10**6)
        # no url_private in the event: the file id is no address
        with pytest.raises(SendFailed, match="no download address"):
            await _outbox(slack).fetch_attachment(Attachment("image", ref="F0123"), 10**6)
        assert other.file_gets == [] and fake_slack.file_gets == []
        # with Slack's own API address (production), the fake's host is not trusted either
        prod = SlackFiles(slack.session, BOT_TOKEN, file_origins(DEFAULT_API_BASE_URL))
        with pytest.raises(SendFailed, match="file host"):
            await prod.fetch(Attachment("image", ref=here), 10**6)
        assert fake_slack.file_gets == []
    finally:
        await other.stop()


def test_allowed_origins() -> None:
    slack_hosts = {"https://files.slack.com", "https://files-origin.slack.com"}
    assert file_origins(DEFAULT_API_BASE_URL) == slack_hosts
    assert file_origins("https://slack.com/api") == slack_hosts
    assert file_origins("http://127.0.0.1:8081/api/") == {*slack_hosts, "http://127.0.0.1:8081"}


@pytest.mark.parametrize("login_page_as", ["redirect", "html"])
async def test_a_bot_without_files_read_is_refused_with_the_reason_and_one_warning(
    fake_slack: FakeSlack,
    slack: SlackChannel,
    caplog: pytest.LogCaptureFixture,
    login_page_as: str,
) -> None:
    fake_slack.files_read = False
    fake_slack.login_page_as = login_page_as
    refs = [fake_slack.add_file(PNG, "image/png", f"{i}.png")["url_private"] for i in range(3)]
    with caplog.at_level(logging.INFO):
        for ref in refs:
            with pytest.raises(SendFailed, match="files:read"):
                await _outbox(slack).fetch_attachment(Attachment("image", ref=ref), 10**6)
    assert [g.status for g in fake_slack.file_gets] == [
        302 if login_page_as == "redirect" else 200
    ] * 3
    assert all(g.authorized for g in fake_slack.file_gets)
    assert len(_missing_scope_warnings(caplog)) == 1, caplog.text  # once, not per file
    assert BOT_TOKEN not in caplog.text


async def test_a_grid_redirect_to_slacks_other_file_host_is_followed_with_the_token(
    fake_slack: FakeSlack, slack: SlackChannel, caplog: pytest.LogCaptureFixture
) -> None:
    """Enterprise Grid answers files.slack.com with a 302 to files-origin.slack.com
    even with files:read.  An HTTP client drops the token on such a redirect and gets
    the sign-in page; Parley follows it by hand, with the token, to Slack's hosts only
    (the fake's own origin stands for them here)."""
    ref = fake_slack.add_file(PNG, "image/png", "a.png")["url_private_download"]
    grid = ref.replace("/files-pri/", "/files-origin/").replace("/download/", "/")
    fake_slack.files_moved_to = grid
    with caplog.at_level(logging.INFO):
        got = await _outbox(slack).fetch_attachment(Attachment("image", ref=ref), 10**6)
    assert got == PNG
    assert [(g.path.split("/")[1], g.status, g.authorized) for g in fake_slack.file_gets] == [
        ("files-pri", 302, True),
        ("files-origin", 200, True),
    ]
    assert _missing_scope_warnings(caplog) == []
    assert BOT_TOKEN not in caplog.text


async def test_a_redirect_elsewhere_is_not_followed_nor_called_a_missing_scope(
    fake_slack: FakeSlack, slack: SlackChannel, caplog: pytest.LogCaptureFixture
) -> None:
    """A redirect off Slack's file hosts: the token does not follow, and the operator
    is not told to add a scope they have."""
    fake_slack.files_moved_to = "https://cdn.example.net/files-pri/T1-F1/a.png"
    ref = fake_slack.add_file(PNG, "image/png", "a.png")["url_private_download"]
    moved = "redirected the download to https://cdn.example.net; not followed"
    with caplog.at_level(logging.INFO), pytest.raises(SendFailed, match=moved):
        await _outbox(slack).fetch_attachment(Attachment("image", ref=ref), 10**6)
    assert [g.status for g in fake_slack.file_gets] == [302]
    assert _missing_scope_warnings(caplog) == []


async def test_redirects_in_a_loop_stop(fake_slack: FakeSlack, slack: SlackChannel) -> None:
    ref = fake_slack.add_file(PNG, "image/png", "a.png")["url_private_download"]
    fake_slack.files_moved_to = ref  # back to itself
    with pytest.raises(SendFailed, match="more than 3 times"):
        await _outbox(slack).fetch_attachment(Attachment("image", ref=ref), 10**6)
    assert [g.status for g in fake_slack.file_gets] == [302] * 4


async def test_an_oversize_file_is_not_downloaded(
    fake_slack: FakeSlack, slack: SlackChannel
) -> None:
    ref = fake_slack.add_file(PNG, "image/png", "a.png")["url_private"]
    big = Attachment("image", "a.png", "image/png", len(PNG), ref)
    with pytest.raises(SendFailed, match="larger than"):
        await _outbox(slack).fetch_attachment(big, len(PNG) - 1)
    assert fake_slack.file_gets == []  # refused on the declared size, never asked for
    # a size Slack did not state: the body is capped all the same
    with pytest.raises(SendFailed, match="larger than"):
        await _outbox(slack).fetch_attachment(Attachment("image", ref=ref), len(PNG) - 1)


# -- end to end: a DM with a photo, a real runtime, a vision model --------------------
def _settings(valkey: EmbeddedValkey, slack: SlackSettings, llm: FakeLLMServer) -> Settings:
    return runtime_settings(valkey.url, slack, llm.openai_url, vision=True, dm_policy="open")


async def _dm_with_photo(
    valkey: EmbeddedValkey,
    fake: FakeSlack,
    slack: SlackSettings,
    llm: FakeLLMServer,
    *,
    connect: bool = False,
) -> dict[str, Any]:
    """Post 'what is this?' with a PNG in a DM; the user turn the model was sent
    (``connect``: the photo as a Slack Connect event carries it, its id only)."""
    photo = fake.add_file(PNG, "image/png", "cat.png")
    if connect:
        photo = connect_stub(photo)
    async with serving(_settings(valkey, slack, llm)) as client:
        body = fake.message("D1", "what is this?", subtype="file_share", files=[photo])
        assert (await fake.deliver(client, body)).status_code == 200
        deadline = time.monotonic() + 10
        while not any(m.user == fake.bot_user for m in fake.thread("D1")):
            assert time.monotonic() < deadline, "no answer in Slack"
            await asyncio.sleep(0.05)
    assert len(llm.requests) == 1
    turn: dict[str, Any] = llm.requests[0].body["messages"][-1]
    assert turn["role"] == "user"
    return turn


async def test_a_png_posted_in_slack_reaches_the_vision_model(
    valkey: EmbeddedValkey, redis: Any, fake_slack: FakeSlack, slack_settings: SlackSettings
) -> None:
    async with FakeLLMServer() as llm:
        turn = await _dm_with_photo(valkey, fake_slack, slack_settings, llm)
    parts = turn["content"]
    assert isinstance(parts, list), parts
    assert "what is this?" in parts[0]["text"] and "cat.png" in parts[0]["text"]
    urls = [p["image_url"]["url"] for p in parts if p.get("type") == "image_url"]
    assert urls == ["data:image/png;base64," + base64.b64encode(PNG).decode()]
    assert [g.authorized for g in fake_slack.file_gets] == [True]


async def test_without_files_read_the_model_is_told_and_the_turn_still_answers(
    valkey: EmbeddedValkey,
    redis: Any,
    fake_slack: FakeSlack,
    slack_settings: SlackSettings,
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake_slack.files_read = False
    with caplog.at_level(logging.INFO):
        async with FakeLLMServer() as llm:
            turn = await _dm_with_photo(valkey, fake_slack, slack_settings, llm)
    text = turn["content"]
    assert isinstance(text, str), text  # no image part
    assert "cat.png: could not be downloaded" in text
    [answer] = [m for m in fake_slack.thread("D1") if m.user == fake_slack.bot_user]
    assert "could not be downloaded" in answer.text  # the fake model echoes its prompt
    assert len(_missing_scope_warnings(caplog)) == 1, caplog.text
    assert BOT_TOKEN not in caplog.text


async def test_an_html_file_is_a_file_not_the_sign_in_page(
    fake_slack: FakeSlack, slack: SlackChannel, caplog: pytest.LogCaptureFixture
) -> None:
    page = b"<!doctype html><h1>Release notes</h1>"
    f = fake_slack.add_file(page, "text/html", "notes.html")
    att = Attachment("document", "notes.html", "text/html", len(page), f["url_private_download"])
    with caplog.at_level(logging.INFO):
        assert await _outbox(slack).fetch_attachment(att, 10**6) == page
    assert _missing_scope_warnings(caplog) == []


# -- Slack Connect: a file arrives as its id only (file_access: check_file_info) -----
async def test_a_slack_connect_file_is_looked_up_with_files_info(
    fake_slack: FakeSlack, slack: SlackChannel, app: httpx.AsyncClient, published: Published
) -> None:
    shared = connect_stub(fake_slack.add_file(PNG, "image/png", "cat.png"))
    ev = await _posted(fake_slack, app, published, shared)
    [stub] = ev.attachments
    assert (stub.name, stub.ref) == ("", shared["id"])  # all Slack said in the event
    [att] = await _outbox(slack).complete_attachments(ev.attachments)
    assert (att.kind, att.name, att.mime, att.size) == ("image", "cat.png", "image/png", len(PNG))
    assert await _outbox(slack).fetch_attachment(att, 10**6) == PNG
    assert [c.args.get("file") for c in fake_slack.calls_to("files.info")] == [shared["id"]]
    # a file Slack described in full is not looked up; a failed look-up keeps the stub
    plain = Attachment("image", "a.png", "image/png", 3, "https://files.slack.com/a.png")
    fake_slack.files_read = False
    assert await _outbox(slack).complete_attachments((plain, stub)) == (plain, stub)
    assert len(fake_slack.calls_to("files.info", ok=None)) == 2


async def test_a_slack_connect_photo_reaches_the_vision_model_with_its_name(
    valkey: EmbeddedValkey, redis: Any, fake_slack: FakeSlack, slack_settings: SlackSettings
) -> None:
    async with FakeLLMServer() as llm:
        turn = await _dm_with_photo(valkey, fake_slack, slack_settings, llm, connect=True)
    parts = turn["content"]
    assert isinstance(parts, list), parts
    assert f"[attached: image cat.png (image/png, {len(PNG)} bytes)]" in parts[0]["text"]
    urls = [p["image_url"]["url"] for p in parts if p.get("type") == "image_url"]
    assert urls == ["data:image/png;base64," + base64.b64encode(PNG).decode()]
