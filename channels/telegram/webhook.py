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
from redis.asyncio import Redis
from redis.exceptions import RedisError
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from telegram import Bot, Update

from agent_core.errors import StoreUnavailable
from agent_core.events import InboundEvent
from agent_core.ingest import Ingest
from agent_core.store import keys
from channels.http_body import BodyTooLarge, read_capped_body
from channels.telegram.parse import (
    ALBUM_MEMORY_SECS,
    CHANNEL,
    ParseContext,
    may_name_unknown_bot,
    parse_update,
)

log = logging.getLogger(__name__)

PATH = "/telegram/webhook"
SECRET_HEADER = "x-telegram-bot-api-secret-token"


def _reply(status: int, text: str) -> Response:
    return PlainTextResponse(text, status_code=status)


async def _shared_album(
    redis: Redis, update: Update, ctx: ParseContext, event: InboundEvent | None
) -> InboundEvent | None:
    """Share an addressed album between web processes: Telegram may deliver its
    items to different ones, and only the captioned item carries the mention.
    The in-process memory (ParseContext.albums) still serves when Redis fails."""
    msg = update.message
    if msg is None or not msg.media_group_id or msg.chat.type == "private":
        return event
    key = keys.album(CHANNEL, ctx.bot_id, str(msg.chat.id), msg.media_group_id)
    try:
        if event is not None:
            await redis.set(key, b"1", ex=int(ALBUM_MEMORY_SECS * 6))
        elif await redis.exists(key):
            ctx.albums.remember(msg.chat.id, msg.media_group_id)
            event = parse_update(update, ctx)
    except RedisError as exc:
        log.debug("telegram album memory: Redis error (%s)", type(exc).__name__)
    return event


def make_endpoint(
    *,
    secret: str,
    ingest: Ingest,
    bot: Callable[[], Bot | None],
    context: Callable[[], ParseContext],
    max_body_bytes: int,
    redis: Redis | None = None,
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
            # Signed (it carries the secret) and shaped like an update, but this
            # library cannot read it (a field in a form it does not know): Telegram
            # would redeliver a 4xx for hours, so it is acknowledged and dropped.
            log.warning(
                "telegram update %s could not be read (%s); acknowledged and dropped",
                data["update_id"],
                ", ".join(k for k in data if k != "update_id")[:200] or "no content",
                exc_info=True,
            )
            return _reply(200, "unreadable, dropped")
        ctx = context()
        if may_name_unknown_bot(update, ctx):
            # Restarted into getMe trouble (flood control, an outage) with no @name
            # stored by an earlier start (channel.py: the first start ever): a group
            # message naming the bot by @name would be taken for one to others and dropped.
            # Not acknowledged: Telegram delivers it again later, once getMe answered
            # (private chats, replies and commands without @name are not held up).
            log.info(
                "telegram update %s (a group message that may name the bot) refused "
                "with 503 until getMe answers with the bot's @name; Telegram will retry",
                update.update_id,
            )
            return _reply(503, "bot name not known yet, retry")
        try:
            event = parse_update(update, ctx)
        except Exception:
            # A poison update must not block the bot's webhook queue forever.
            log.exception("telegram update %s could not be parsed; dropped", update.update_id)
            return _reply(200, "ok")
        if redis is not None:
            event = await _shared_album(redis, update, ctx, event)
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
