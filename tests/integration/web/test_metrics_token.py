"""/metrics behind METRICS_TOKEN (bearer, or basic auth with the token as the
password), and METRICS_ENABLED=false; unset, it answers as it always did."""

from __future__ import annotations

import base64
import logging
from typing import Any

import httpx
import pytest

from bots import metrics as metrics_mod
from tests.integration.web.webtools import client_for as _client

TOKEN = "metrics-SECRET-token-0123456789"


def _basic(user: str, password: str) -> dict[str, str]:
    raw = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"authorization": f"Basic {raw}"}


def _said(r: httpx.Response) -> str:
    return f"{r.status_code} {r.headers} {r.text}"


async def test_without_a_token_metrics_answer_anyone_as_before(runtime: Any) -> None:
    async with runtime("all", serve_web=True) as rt, _client(rt) as client:
        for headers in ({}, {"authorization": "Bearer whatever"}, _basic("u", "p")):
            r = await client.get("/metrics", headers=headers)
            assert r.status_code == 200 and "parley_" in r.text, (headers, r.status_code)
            assert "www-authenticate" not in r.headers


async def test_with_a_token_only_a_request_carrying_it_reads_metrics(
    runtime: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """401 with WWW-Authenticate: Bearer and a one-line body for no credential, a
    wrong bearer, a wrong basic password (and the token in the wrong place: the user
    name, no scheme); 200 for the bearer token and for basic auth with it as the
    password, whatever the user name.  The token shows up in no answer and no log
    line, at any level."""
    answers: list[str] = []
    with caplog.at_level(logging.DEBUG):
        async with runtime("all", serve_web=True, metrics_token=TOKEN) as rt, _client(rt) as c:
            refused = [
                {},
                {"authorization": "Bearer wrong-token-0123456789"},
                {"authorization": f"Bearer {TOKEN[:-1]}"},
                {"authorization": "Bearer"},
                {"authorization": f"bearer {TOKEN}x"},
                _basic("metrics", "wrong"),
                _basic(TOKEN, ""),  # the token as the user name is not the password
                {"authorization": "Basic not!base64"},
                {"authorization": "Basic " + base64.b64encode(TOKEN.encode()).decode()},
                {"authorization": TOKEN},  # no scheme
                {"authorization": f"Token {TOKEN}"},
            ]
            for headers in refused:
                r = await c.get("/metrics", headers=headers)
                answers.append(_said(r))
                assert r.status_code == 401, (headers, r.status_code)
                assert r.headers["www-authenticate"].startswith("Bearer"), r.headers
                assert r.text.count("\n") == 1 and "METRICS_TOKEN" in r.text, r.text
                assert "parley_" not in r.text
                assert r.headers["x-content-type-options"] == "nosniff"  # still secured
            accepted = [
                {"authorization": f"Bearer {TOKEN}"},
                {"authorization": f"bearer  {TOKEN}"},  # the scheme in any case
                _basic("metrics", TOKEN),
                _basic("", TOKEN),
            ]
            for headers in accepted:
                r = await c.get("/metrics", headers=headers)
                answers.append(_said(r))
                assert r.status_code == 200 and "parley_" in r.text, (headers, r.status_code)
            # another site's page is still refused first, token or not
            r = await c.get(
                "/metrics",
                headers={"sec-fetch-site": "cross-site", "authorization": f"Bearer {TOKEN}"},
            )
            assert r.status_code == 403
            # /healthz and /readyz stay open
            assert (await c.get("/healthz")).status_code == 200
            assert (await c.get("/readyz")).status_code == 200
    assert not [a for a in answers if TOKEN in a]
    assert TOKEN not in caplog.text
    assert TOKEN[:12] not in caplog.text
    refusals = [r for r in caplog.records if r.name == "bots.metrics"]
    # throttled: one line for the eleven refusals (a scanned port must not flood the log)
    assert len(refusals) == 1, [r.getMessage() for r in refusals]
    assert refusals[0].levelno == logging.INFO
    assert "no Authorization header" in refusals[0].getMessage()


async def test_refusals_are_logged_at_most_once_a_minute_with_a_count(
    runtime: Any, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [1000.0]
    monkeypatch.setattr(metrics_mod, "_now", lambda: now[0])
    with caplog.at_level(logging.INFO, logger="bots.metrics"):
        async with runtime("all", serve_web=True, metrics_token=TOKEN) as rt, _client(rt) as c:
            await c.get("/metrics")
            for _ in range(3):
                await c.get("/metrics", headers={"authorization": "Bearer nope"})
            now[0] += 61
            await c.get("/metrics", headers=_basic("metrics", "nope"))
    lines = [r.getMessage() for r in caplog.records if r.name == "bots.metrics"]
    assert len(lines) == 2, lines
    assert "refused 1 request(s)" in lines[0] and "no Authorization header" in lines[0]
    assert "refused 4 request(s)" in lines[1] and "wrong basic-auth password" in lines[1]
    assert not any("nope" in line for line in lines)


async def test_a_short_token_is_warned_about_at_start_without_showing_it(
    runtime: Any, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        async with runtime("all", serve_web=True, metrics_token="short-tok") as rt, _client(rt):
            pass
    lines = [r.getMessage() for r in caplog.records if "METRICS_TOKEN" in r.getMessage()]
    assert lines and "9 characters long" in lines[0] and "at least 16" in lines[0], lines
    assert "short-tok" not in caplog.text


async def test_metrics_enabled_false_turns_the_route_off(runtime: Any) -> None:
    async with runtime("all", serve_web=True, metrics_enabled=False) as rt, _client(rt) as c:
        r = await c.get("/metrics")
        assert r.status_code == 404 and "parley_" not in r.text
        assert r.headers["x-content-type-options"] == "nosniff"
        assert (await c.get("/healthz")).status_code == 200
    # the token does not bring it back
    async with (
        runtime("all", serve_web=True, metrics_enabled=False, metrics_token=TOKEN) as rt,
        _client(rt) as c,
    ):
        r = await c.get("/metrics", headers={"authorization": f"Bearer {TOKEN}"})
        assert r.status_code == 404
