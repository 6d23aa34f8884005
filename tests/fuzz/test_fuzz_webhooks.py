"""Property-based fuzzing of the inbound HTTP surface.

``/telegram/webhook``, ``/slack/events`` (JSON events, form-encoded interactivity
payloads and slash commands) and the web chat API get arbitrary bodies, headers
and sizes.  Properties: never a 5xx; nothing published for an unauthenticated
(wrong secret / bad signature / no session) or invalid request; bodies over the
size cap answered 413 without being read to the end.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
import urllib.parse
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fakes.slack import SIGNING_SECRET
from tests.fakes.telegram import WEBHOOK_SECRET, FakeTelegram
from tests.fuzz.conftest import TELEGRAM_MAX_BODY, CountingIngest
from tests.fuzz.strategies import JSON, TEXT, examples

SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"

_tg = FakeTelegram()


def _dumps(value: Any) -> bytes:
    return json.dumps(value).encode()


# --- Telegram -------------------------------------------------------------------
@st.composite
def telegram_updates(draw: st.DrawFn) -> dict[str, Any]:
    """Mostly well-formed Updates with hostile contents, sometimes mangled."""
    chat_id = draw(st.integers(min_value=-(10**13), max_value=10**13).filter(bool))
    text = draw(TEXT)
    entities = draw(
        st.lists(
            st.fixed_dictionaries(
                {
                    "type": st.sampled_from(
                        ["mention", "bot_command", "bold", "text_link", "bogus", "url"]
                    ),
                    "offset": st.integers(-5, 400),
                    "length": st.integers(-5, 400),
                },
                optional={"url": TEXT, "user": JSON},
            ),
            max_size=4,
        )
    )
    kind = draw(st.sampled_from(["message", "edited", "callback", "topic", "raw"]))
    if kind == "callback":
        upd = _tg.press(
            chat_id, draw(st.integers(1, 10**6)), draw(TEXT), user_id=draw(st.integers())
        )
    else:
        upd = _tg.message_update(
            chat_id,
            text,
            user_id=draw(st.integers(min_value=1, max_value=2**40)),
            entities=entities or None,
            thread_id=draw(st.integers(1, 10**6)) if kind == "topic" else None,
            edited=kind == "edited",
        )
    if kind == "raw" or draw(st.booleans()):
        # mangle: overwrite or delete some fields with arbitrary JSON
        for key in draw(
            st.lists(st.sampled_from(["update_id", "message", "callback_query", "x"]), max_size=2)
        ):
            if draw(st.booleans()):
                upd[key] = draw(JSON)
            else:
                upd.pop(key, None)
    return upd


@given(
    update=telegram_updates(),
    secret=st.sampled_from([WEBHOOK_SECRET, "", "wrong", WEBHOOK_SECRET + "x", None]),
)
@examples(ci=200, long=4000)
async def test_telegram_webhook_fuzz(
    app: httpx.AsyncClient, ingest: CountingIngest, update: dict[str, Any], secret: str | None
) -> None:
    before = len(ingest.published)
    headers = {"Content-Type": "application/json"}
    if secret is not None:
        headers[SECRET_HEADER] = secret
    r = await app.post("/telegram/webhook", content=json.dumps(update).encode(), headers=headers)
    assert r.status_code < 500, r.text
    if secret != WEBHOOK_SECRET:
        assert r.status_code == 403
        assert len(ingest.published) == before
    elif r.status_code != 200:
        assert len(ingest.published) == before


@given(
    body=st.binary(max_size=2000) | JSON.map(_dumps),
    ctype=st.sampled_from(
        ["application/json", "text/plain", "", "application/x-www-form-urlencoded"]
    ),
)
@examples(ci=100, long=2000)
async def test_telegram_webhook_raw_bytes(
    app: httpx.AsyncClient, ingest: CountingIngest, body: bytes, ctype: str
) -> None:
    before = len(ingest.published)
    r = await app.post(
        "/telegram/webhook",
        content=body,
        headers={"Content-Type": ctype, SECRET_HEADER: WEBHOOK_SECRET},
    )
    assert r.status_code < 500
    if r.status_code != 200:
        assert len(ingest.published) == before


class _Body:
    """A request body streamed in chunks that counts how much of it was read."""

    def __init__(self, total: int, chunk: int = 64 * 1024) -> None:
        self.total, self.chunk, self.read = total, chunk, 0

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while self.read < self.total:
            n = min(self.chunk, self.total - self.read)
            self.read += n
            yield b"{" + b" " * (n - 1)


@pytest.mark.parametrize("declare", [True, False], ids=["content-length", "chunked"])
async def test_telegram_huge_body_is_413_and_not_read(
    app: httpx.AsyncClient, ingest: CountingIngest, declare: bool
) -> None:
    body = _Body(50 * 1024 * 1024)
    headers = {"Content-Type": "application/json", SECRET_HEADER: WEBHOOK_SECRET}
    if declare:
        headers["Content-Length"] = str(body.total)
    r = await app.post("/telegram/webhook", content=body, headers=headers)
    assert r.status_code == 413
    assert body.read <= TELEGRAM_MAX_BODY + 2 * body.chunk
    assert ingest.published == []


# --- Slack ------------------------------------------------------------------------
def _sign(body: bytes, ts: int | None = None, secret: str = SIGNING_SECRET) -> dict[str, str]:
    t = str(int(time.time()) if ts is None else ts)
    base = f"v0:{t}:".encode() + body
    sig = "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()
    return {"X-Slack-Request-Timestamp": t, "X-Slack-Signature": sig}


@st.composite
def slack_event_bodies(draw: st.DrawFn) -> dict[str, Any]:
    event: dict[str, Any] = {
        "type": draw(st.sampled_from(["message", "app_mention", "reaction_added", "x"])),
        "channel": draw(st.sampled_from(["D1", "C1", "G1", ""]) | TEXT),
        "user": draw(st.sampled_from(["U1", "UBOT", ""]) | TEXT),
        "text": draw(TEXT),
        "ts": draw(st.sampled_from(["1700000000.000100", "", "x"]) | TEXT),
    }
    for k in draw(
        st.lists(
            st.sampled_from(["thread_ts", "subtype", "bot_id", "files", "blocks", "channel_type"]),
            max_size=3,
        )
    ):
        event[k] = draw(JSON)
    body = {
        "type": draw(
            st.sampled_from(["event_callback", "url_verification", "app_rate_limited", "x"])
        ),
        "team_id": draw(st.sampled_from(["T0FAKE", ""]) | TEXT),
        "event_id": draw(TEXT),
        "event": event,
        "challenge": draw(TEXT),
    }
    if draw(st.booleans()):
        body[draw(st.sampled_from(["event", "type", "team_id"]))] = draw(JSON)
    return body


@st.composite
def slack_actions(draw: st.DrawFn) -> dict[str, Any]:
    return {
        "type": draw(st.sampled_from(["block_actions", "view_submission", "x"])),
        "team": {"id": draw(st.sampled_from(["T0FAKE"]) | TEXT)},
        "user": draw(st.fixed_dictionaries({"id": TEXT, "name": TEXT}) | JSON),
        "channel": draw(st.fixed_dictionaries({"id": st.sampled_from(["C1", "D1"]) | TEXT}) | JSON),
        "container": draw(JSON),
        "message": draw(st.fixed_dictionaries({"ts": TEXT, "thread_ts": TEXT}) | JSON),
        "actions": draw(
            st.lists(
                st.fixed_dictionaries(
                    {"action_id": st.sampled_from(["parley:approve"]) | TEXT, "value": TEXT}
                )
                | JSON,
                max_size=3,
            )
            | JSON
        ),
    }


COMMAND_FIELDS = ["command", "text", "team_id", "channel_id", "user_id", "ssl_check", "trigger_id"]
SLACK_BODIES = st.one_of(
    slack_event_bodies().map(lambda b: (_dumps(b), "application/json")),
    slack_actions().map(
        lambda a: (
            urllib.parse.urlencode({"payload": json.dumps(a)}).encode(),
            "application/x-www-form-urlencoded",
        )
    ),
    st.dictionaries(st.sampled_from(COMMAND_FIELDS), TEXT).map(
        lambda c: (urllib.parse.urlencode(c).encode(), "application/x-www-form-urlencoded")
    ),
    st.tuples(st.binary(max_size=500), st.sampled_from(["application/json", "text/plain", ""])),
)


@given(body_ctype=SLACK_BODIES, signed=st.sampled_from(["good", "bad", "stale", "none", "garbage"]))
@examples(ci=200, long=4000)
async def test_slack_events_fuzz(
    app: httpx.AsyncClient,
    ingest: CountingIngest,
    body_ctype: tuple[bytes, str],
    signed: str,
) -> None:
    body, ctype = body_ctype
    headers = {"Content-Type": ctype}
    if signed == "good":
        headers |= _sign(body)
    elif signed == "bad":
        headers |= _sign(body, secret="not-the-secret")
    elif signed == "stale":
        headers |= _sign(body, ts=int(time.time()) - 3600)
    elif signed == "garbage":
        headers |= {"X-Slack-Request-Timestamp": "nope", "X-Slack-Signature": "v0=zz"}
    before = len(ingest.published)
    r = await app.post("/slack/events", content=body, headers=headers)
    assert r.status_code < 500, r.text
    if signed != "good":
        assert r.status_code == 401
        assert len(ingest.published) == before
    elif r.status_code >= 400:
        assert len(ingest.published) == before


@pytest.mark.parametrize(
    ("body", "ctype"),
    [
        (
            _dumps({"type": "event_callback", "team_id": "T0FAKE", "event": True}),
            "application/json",
        ),
        (
            urllib.parse.urlencode(
                {
                    "payload": json.dumps(
                        {
                            "type": "block_actions",
                            "channel": [None],
                            "actions": [{"action_id": "parley:a", "value": "0"}],
                        }
                    )
                }
            ).encode(),
            "application/x-www-form-urlencoded",
        ),
    ],
    ids=["event-true", "action-channel-list"],
)
async def test_slack_signed_wrong_field_types_is_4xx(
    app: httpx.AsyncClient, ingest: CountingIngest, body: bytes, ctype: str
) -> None:
    r = await app.post(
        "/slack/events", content=body, headers={"Content-Type": ctype, **_sign(body)}
    )
    assert r.status_code < 500, r.text
    assert ingest.published == []


@pytest.mark.parametrize(
    ("body", "ctype"),
    [
        (b"0", "application/json"),
        (b"[]", "application/json"),
        (b"null", "application/json"),
        (b'"x"', "application/json"),
        (b"payload=0", "application/x-www-form-urlencoded"),
        (b"payload=%5B%5D", "application/x-www-form-urlencoded"),
    ],
)
async def test_slack_signed_non_object_json_is_4xx(
    app: httpx.AsyncClient, ingest: CountingIngest, body: bytes, ctype: str
) -> None:
    r = await app.post(
        "/slack/events", content=body, headers={"Content-Type": ctype, **_sign(body)}
    )
    assert r.status_code < 500, r.text
    assert ingest.published == []


@pytest.mark.parametrize("declare", [True, False], ids=["content-length", "chunked"])
async def test_slack_huge_body_is_413_and_not_read(
    app: httpx.AsyncClient, ingest: CountingIngest, declare: bool
) -> None:
    body = _Body(50 * 1024 * 1024)
    headers = {"Content-Type": "application/json", **_sign(b"{}")}
    if declare:
        headers["Content-Length"] = str(body.total)
    r = await app.post("/slack/events", content=body, headers=headers)
    assert r.status_code == 413
    assert body.read <= 4 * 1024 * 1024
    assert ingest.published == []


# --- web chat ---------------------------------------------------------------------
@given(
    path=st.sampled_from(["/api/messages", "/api/actions", "/api/login"]),
    body=JSON.map(_dumps)
    | st.binary(max_size=300)
    | st.builds(
        lambda t, i, tok: _dumps({"text": t, "id": i, "token": tok}),
        TEXT,
        TEXT | st.none(),
        TEXT | st.none(),
    ),
    ctype=st.sampled_from(
        ["application/json", "application/json; charset=utf-8", "text/plain", ""]
    ),
    session=st.sampled_from(["valid", "none", "forged"]),
)
@examples(ci=150, long=3000)
async def test_web_chat_fuzz(
    app: httpx.AsyncClient,
    ingest: CountingIngest,
    path: str,
    body: bytes,
    ctype: str,
    session: str,
) -> None:
    app.cookies.clear()
    headers = {"Content-Type": ctype}
    if session == "valid":
        await app.get("/api/me")
    elif session == "forged":
        app.cookies.set("parley_web", "eyJzaWQiOiJ4In0.forged")
    before = len(ingest.published)
    r = await app.post(path, content=body, headers=headers)
    assert r.status_code < 500, r.text
    if r.status_code != 202:
        assert len(ingest.published) == before
    if session != "valid":
        assert len(ingest.published) == before


@pytest.mark.parametrize("declare", [True, False], ids=["content-length", "chunked"])
async def test_web_chat_huge_body_is_413_and_not_read(
    app: httpx.AsyncClient, ingest: CountingIngest, declare: bool
) -> None:
    await app.get("/api/me")
    body = _Body(50 * 1024 * 1024)
    headers = {"Content-Type": "application/json"}
    if declare:
        headers["Content-Length"] = str(body.total)
    r = await app.post("/api/messages", content=body, headers=headers)
    assert r.status_code == 413
    assert body.read <= 1024 * 1024
    assert ingest.published == []


@pytest.mark.parametrize("path", ["/slack/events", "/api/login"])
async def test_a_content_length_of_non_ascii_digits_is_4xx(
    app: httpx.AsyncClient, ingest: CountingIngest, path: str
) -> None:
    """'²' is a digit to str.isdigit() and not to int(): a 500 before the signature
    check (uvicorn refuses such a header itself; another ASGI server might not)."""
    headers = {"Content-Type": "application/json", "Content-Length": b"\xb2"}
    r = await app.post(path, content=b"{}", headers=headers)
    assert 400 <= r.status_code < 500, r.status_code
    assert ingest.published == []


# --- positive controls: the fuzzed endpoints do publish well-formed requests ---------
async def test_controls_valid_requests_are_published(
    app: httpx.AsyncClient, ingest: CountingIngest
) -> None:
    update = _tg.message_update(42, "hello", user_id=42)
    r = await app.post(
        "/telegram/webhook",
        content=_dumps(update),
        headers={"Content-Type": "application/json", SECRET_HEADER: WEBHOOK_SECRET},
    )
    assert r.status_code == 200
    body = _dumps(
        {
            "type": "event_callback",
            "team_id": "T0FAKE",
            "event_id": "Ev1",
            "event": {
                "type": "message",
                "channel": "D1",
                "channel_type": "im",
                "user": "U1",
                "text": "hi",
                "ts": "1700000000.000100",
            },
        }
    )
    r = await app.post(
        "/slack/events", content=body, headers={"Content-Type": "application/json", **_sign(body)}
    )
    assert r.status_code == 200
    await app.get("/api/me")
    r = await app.post("/api/messages", json={"text": "hi"})
    assert r.status_code == 202
    assert [e.channel for e in ingest.published] == ["telegram", "slack", "web"]
