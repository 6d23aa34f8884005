"""A command whose reply is lost is not sent again: redis-py would otherwise retry
it on a fresh connection (its default is three retries), and a command that ran
but whose answer never arrived (an INCRBY of a spend counter, an XADD, a script)
would then run twice.  The error reaches the caller, whose own recovery (the
message stays in the stream, the webhook is answered 5xx) is idempotent; the
next command connects again."""

from __future__ import annotations

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from agent_core.store.client import make_clients
from agent_core.store.embedded import EmbeddedValkey
from tests.integration.valkey_proxy import valkey_proxy


@pytest.mark.parametrize("which", ["redis", "blocking"])
async def test_a_command_whose_reply_is_lost_runs_once(valkey: EmbeddedValkey, which: str) -> None:
    cut: list[bool] = []  # one reply lost: the next connection works
    async with valkey_proxy(valkey, cut_replies=lambda: bool(cut) and cut.pop()) as seen:
        clients = make_clients(f"redis://127.0.0.1:{seen['port']}/0")
        client = getattr(clients, which)
        try:
            key = f"parley:test:no-resend:{which}"
            await client.delete(key)
            assert await client.incrby(key, 1) == 1
            cut.append(True)
            with pytest.raises(RedisConnectionError):
                await client.incrby(key, 1)
            # It ran once on the server; the next command connects again.
            assert await client.get(key) == b"2"
            assert seen["accepted"] >= 2
        finally:
            await clients.close()
