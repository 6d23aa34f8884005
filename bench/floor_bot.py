"""The floor: a bare python-telegram-bot echo bot, fed through a webhook endpoint.

No business logic: ``update.message.reply_text(update.message.text)``.  Updates
arrive on ``POST /webhook`` (same server stack as Parley: starlette + uvicorn),
are checked for the secret header, parsed with ``Update.de_json`` and put on the
Application's ``update_queue``; the Application processes them with
``concurrent_updates`` and a Bot whose connection pool is ``--pool`` (python-
telegram-bot's default is 1; Parley's TELEGRAM_CONNECTION_POOL_SIZE is 64).

With ``--llm-url`` (the ``inflight`` scenario's floor) the handler first asks an
OpenAI-compatible chat completions endpoint (aiohttp) and
reads the whole answer before it replies; nothing else is added.

    python -m bench.floor_bot --port 8090 --base-url http://127.0.0.1:8081/bot --pool 64
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hmac
import signal
from collections.abc import Callable, Coroutine
from typing import Any

import aiohttp
import orjson
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route
from telegram import Update
from telegram.ext import Application, ContextTypes, MessageHandler, filters
from telegram.request import HTTPXRequest

Handler = Callable[[Update, ContextTypes.DEFAULT_TYPE], Coroutine[Any, Any, None]]


async def echo(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
    assert update.message is not None and update.message.text is not None
    await update.message.reply_text(update.message.text)


def llm_echo(url: str, conc: int) -> tuple[aiohttp.ClientSession, Handler]:
    """A handler that waits for the LLM at ``url`` before it echoes.

    aiohttp, not httpx: with httpx (0.28) this bot managed 32 turns/s at 250 turns
    in flight, a full core, against 40 at 100; a floor should be the cheap way."""
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=conc),
        timeout=aiohttp.ClientTimeout(total=120.0),
    )

    async def handler(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        assert update.message is not None and update.message.text is not None
        body = {
            "model": "fake",
            "stream": True,
            "messages": [{"role": "user", "content": update.message.text}],
        }
        headers = {"content-type": "application/json"}
        async with session.post(url, data=orjson.dumps(body), headers=headers) as r:
            r.raise_for_status()
            await r.read()
        await update.message.reply_text(update.message.text)

    return session, handler


async def run(
    port: int, base_url: str, token: str, secret: str, pool: int, conc: int, llm_url: str = ""
) -> None:
    application = (
        Application.builder()
        .token(token)
        .base_url(base_url)
        .request(HTTPXRequest(connection_pool_size=pool, pool_timeout=5.0))
        .concurrent_updates(conc)
        .updater(None)
        .build()
    )
    client: aiohttp.ClientSession | None = None
    handler: Handler = echo
    if llm_url:
        client, handler = llm_echo(llm_url, conc)
    application.add_handler(MessageHandler(filters.TEXT, handler))
    expected = secret.encode()

    async def webhook(request: Request) -> Response:
        given = request.headers.get("x-telegram-bot-api-secret-token", "").encode()
        if not hmac.compare_digest(given, expected):
            return PlainTextResponse("forbidden", status_code=403)
        data = orjson.loads(await request.body())
        await application.update_queue.put(Update.de_json(data, application.bot))
        return PlainTextResponse("ok")

    async def healthz(request: Request) -> Response:
        return PlainTextResponse("ok")

    app = Starlette(
        routes=[
            Route("/webhook", webhook, methods=["POST"]),
            Route("/healthz", healthz, methods=["GET"]),
        ]
    )
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_config=None, access_log=False, lifespan="off"
    )
    server = uvicorn.Server(config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        async with application:
            await application.start()
            task = asyncio.create_task(server.serve())
            await stop.wait()
            server.should_exit = True
            await task
            await application.stop()
    finally:
        if client is not None:
            await client.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--token", default="123456:TEST-fake-token_abcdefghijklmnop")
    ap.add_argument("--secret", default="s3cret_-TOKEN")
    ap.add_argument("--pool", type=int, default=64)
    ap.add_argument("--concurrent-updates", type=int, default=256)
    ap.add_argument("--llm-url", default="", help="ask this chat completions URL first")
    a = ap.parse_args()
    args = (a.port, a.base_url, a.token, a.secret, a.pool, a.concurrent_updates, a.llm_url)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run(*args))


if __name__ == "__main__":
    main()
