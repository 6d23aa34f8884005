"""``POST /telegram/webhook``: verify, parse, publish, and only then answer 200.

python-telegram-bot's own webhook server answers Telegram before the update is
handled, so a crash there loses an acknowledged update; this endpoint answers
only after :meth:`Ingest.submit` returned (5xx otherwise, and Telegram retries).
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Callable

import orjson
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from telegram import Bot, Update

from agent_core.errors import StoreUnavailable
from agent_core.ingest import Ingest
from channels.http_body import BodyTooLarge, read_capped_body
from channels.telegram.parse import ParseContext, parse_update

log = logging.getLogger(__name__)

PATH = "/telegram/webhook"
SECRET_HEADER = "x-telegram-bot-api-secret-token"


def _reply(status: int, text: str) -> Response:
    return PlainTextResponse(text, status_code=status)


def make_endpoint(
    *,
    secret: str,
    ingest: Ingest,
    bot: Callable[[], Bot | None],
    context: Callable[[], ParseContext],
    max_body_bytes: int,
) -> Callable[[Request], object]:
    expected = secret.encode()

    async def telegram_webhook(request: Request) -> Response:
        given = request.headers.get(SECRET_HEADER, "").encode()
        if not expected or not hmac.compare_digest(given, expected):
            return _reply(403, "forbidden")
        try:
            body = await read_capped_body(request, max_body_bytes)
        except BodyTooLarge:
            return _reply(413, "body too large")
        try:
            data = orjson.loads(body)
        except orjson.JSONDecodeError:
            return _reply(400, "malformed JSON")
        if not isinstance(data, dict) or type(data.get("update_id")) is not int:
            return _reply(400, "not a Telegram Update")
        try:
            update = Update.de_json(data, bot())
        except Exception:
            return _reply(400, "not a Telegram Update")
        ctx = context()
        try:
            event = parse_update(update, ctx)
        except Exception:
            # A poison update must not block the bot's webhook queue forever.
            log.exception("telegram update %s could not be parsed; dropped", update.update_id)
            return _reply(200, "ok")
        if event is None:
            return _reply(200, "ignored")
        try:
            await ingest.submit(event)
        except StoreUnavailable as exc:
            log.warning(
                "[%s] telegram update %s not stored (%s); Telegram will retry",
                event.thread,
                update.update_id,
                exc,
            )
            return _reply(503, "store unavailable, retry")
        except Exception:
            log.exception(
                "[%s] telegram update %s failed in ingest", event.thread, update.update_id
            )
            return _reply(500, "error, retry")
        return _reply(200, "ok")

    return telegram_webhook
