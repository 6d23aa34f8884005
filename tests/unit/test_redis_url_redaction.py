"""A Redis password given as ``?password=`` (which redis-py logs in with) is
redacted wherever the URL is shown, like one in ``user:pass@``."""

from __future__ import annotations

import pytest


async def test_a_redis_password_given_as_a_url_query_argument_is_never_printed() -> None:
    """redis-py takes the password from ``?password=`` as well as from ``:pw@``, and
    Parley connects with it; but redact_url / url_secrets only know the userinfo
    form, so the start-up summary (``redis:`` line), `parley doctor`, `parley
    release` and this start-up error print the password in clear, and the log
    redaction filter does not know it.  docs/security.md: "the URL is shown with the
    password redacted"."""
    from redis.asyncio.connection import parse_url

    from agent_core.errors import ConfigError
    from agent_core.store.client import check_reachable, make_clients, url_secrets

    url = "redis://127.0.0.1:1/0?password=hunter2-secret-pw"
    assert parse_url(url)["password"] == "hunter2-secret-pw"  # redis-py uses it
    clients = make_clients(url)
    try:
        with pytest.raises(ConfigError) as exc:
            await check_reachable(clients)
    finally:
        await clients.close()
    line = exc.value.problems[0]
    assert "hunter2-secret-pw" not in line, line
    assert "hunter2-secret-pw" in url_secrets(url)  # so logs redact it too


def test_redact_url_hides_every_form_of_password() -> None:
    from agent_core.store.client import redact_url, url_secrets

    url = "rediss://u:pw%40x@h:6380/0?ssl_cert_reqs=none&password=q-pw&db=1"
    assert redact_url(url) == "rediss://u:***@h:6380/0?ssl_cert_reqs=none&password=***&db=1"
    assert set(url_secrets(url)) == {"pw%40x", "pw@x", "q-pw"}
    assert redact_url("redis://h:6379/0") == "redis://h:6379/0"


async def test_a_server_that_never_answers_is_one_line_not_a_hang(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A listener that accepts the connection and never answers: the start-up PING
    (no read timeout by design) gives up after PING_TIMEOUT with one REDIS_URL line,
    password redacted, instead of hanging `parley release` / `run` / `doctor`."""
    import asyncio

    from agent_core.errors import ConfigError
    from agent_core.store import client as client_mod

    accepted: list[asyncio.StreamWriter] = []

    async def silent(_r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        accepted.append(w)  # keep it open, never write

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    monkeypatch.setattr(client_mod, "PING_TIMEOUT", 0.5)
    clients = client_mod.make_clients(f"redis://:silent-pw@127.0.0.1:{port}/0")
    try:
        with pytest.raises(ConfigError) as exc:
            await asyncio.wait_for(client_mod.check_reachable(clients), 10)
    finally:
        await clients.close()
        for w in accepted:
            w.close()
        server.close()
    line = exc.value.problems[0]
    assert line.startswith("REDIS_URL: cannot reach"), line
    assert "no answer in 0.5 s" in line, line
    assert "silent-pw" not in line, line
