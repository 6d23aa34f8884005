"""Long polling (``getUpdates``) for the gateway process.

The offset sent to Telegram - which is what confirms updates - only moves past
an update after :meth:`Ingest.submit` returned for it.  If Ingest fails, the
same update is fetched again after a pause.  A 409 Conflict (a webhook is set,
or another process polls with this token) is explained in one log line and
retried quietly, never a crash loop; the first 409 of a run is retried after a
couple of seconds rather than 30: right after this process took the gateway lease it
is most likely the previous holder's last getUpdates (a holder resuming from a
pause), which stops within the lease's margin.

Under a lease the poller checks it is still the holder (``holds(stop)``, no Redis)
before each getUpdates and each update it publishes: a process resuming from a
pause longer than its lease sends nothing more (a getUpdates of its own would
terminate the new holder's with a 409).

A batch is fetched as raw JSON and each update read on its own: one the Telegram
library cannot read (a field in a form it does not know) is logged and skipped - the
offset moves past it - instead of failing the whole batch (``Bot.get_updates`` reads
them all at once) and so the poller, again after every restart, with the same batch.

The offset is set from each batch alone - past the highest update id published (or
found not for Parley, or unreadable), never past one left unpublished - and an id
is never skipped for being below the offset: after a week without updates Telegram
numbers on from a random id, possibly a lower one, and keeps returning it until an
offset of the new numbering confirms it (skipping it left the offset where it was:
silence, and getUpdates in a tight loop).  A genuine repeat is dropped by Ingest's
de-duplication of ``<bot_id>:<update_id>``; a new id equal to one of the old
numbering is not mistaken for it as long as DEDUP_TTL_SECS (default 24 h) is shorter
than the week of silence that precedes a renumbering.  A batch that moves nothing
(Telegram answering updates again that the offset should have confirmed), or an
empty answer that did not wait, is followed by a pause (``stall_secs``), never by
an immediate getUpdates.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from telegram import Bot, Update
from telegram.error import Conflict, InvalidToken, RetryAfter, TelegramError

from agent_core.errors import ConfigError, StoreUnavailable
from agent_core.ingest import Ingest
from agent_core.store.lease import holds
from channels.telegram.parse import ParseContext, parse_update

log = logging.getLogger(__name__)

ALLOWED_UPDATES = ("message", "edited_message", "callback_query")
CONFLICT_HINT = (
    "Telegram polling refused (409 Conflict): a webhook is set for this bot or another "
    "process is polling with the same token. Fix: run `parley telegram delete-webhook`, "
    "stop the other poller, or use TELEGRAM_MODE=webhook. Retrying quietly."
)


async def _sleep(stop: asyncio.Event, secs: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), timeout=secs)


class Poller:
    def __init__(
        self,
        bot: Bot,
        context: Callable[[], ParseContext],
        *,
        timeout: int = 30,
        retry_secs: float = 5.0,
        conflict_retry_secs: float = 30.0,
        first_conflict_retry_secs: float = 2.0,
        max_skips: int = 5,
        stall_secs: float = 1.0,
    ) -> None:
        self._bot = bot
        self._context = context
        self._timeout = timeout
        self._retry = retry_secs
        self._conflict_retry = conflict_retry_secs
        self._first_conflict_retry = min(first_conflict_retry_secs, conflict_retry_secs)
        self._max_skips = max_skips
        self._stall = stall_secs  # the wait after a batch that moved nothing
        self.offset: int | None = None

    async def _get_updates(self) -> list[tuple[int | None, Update | None]]:
        """One getUpdates; each update read on its own ((update_id, None) when the
        library cannot read it)."""
        data: dict[str, Any] = {
            "timeout": self._timeout,
            "offset": self.offset,
            "allowed_updates": list(ALLOWED_UPDATES),
        }
        # What Bot.get_updates sends (the same request object, the getUpdates one), but
        # the result is left as JSON: Bot.get_updates reads the whole batch at once and
        # one unreadable update would fail all of them, every time.  Its read timeout
        # was the one given plus the long poll: kept.
        result = await self._bot._post(
            "getUpdates", data, read_timeout=self._timeout + 10 + self._timeout
        )
        out: list[tuple[int | None, Update | None]] = []
        for raw in result if isinstance(result, list) else ():
            uid = raw.get("update_id") if isinstance(raw, dict) else None
            uid = uid if type(uid) is int else None
            try:
                update = Update.de_json(raw, self._bot)
            except Exception as exc:
                log.warning(
                    "telegram update %s could not be read (%s reading %s); skipped",
                    uid,
                    type(exc).__name__,
                    ", ".join(str(k) for k in raw if k != "update_id")[:200]
                    if isinstance(raw, dict)
                    else type(raw).__name__,
                    exc_info=True,
                )
                out.append((uid, None))
                continue
            out.append((update.update_id, update))
        return out

    async def _fetch(self, stop: asyncio.Event) -> list[tuple[int | None, Update | None]] | None:
        poll = asyncio.ensure_future(self._get_updates())
        stopper = asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait({poll, stopper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopper.cancel()
        if not poll.done():
            poll.cancel()  # nothing is confirmed by a getUpdates that never returned
            with contextlib.suppress(BaseException):
                await poll
            return None
        return poll.result()

    async def _publish(self, ingest: Ingest, update: Update, stop: asyncio.Event) -> bool:
        """Publish one update; True when the offset may move past it."""
        try:
            event = parse_update(update, self._context())
        except Exception:
            log.exception("telegram update %s could not be parsed; skipped", update.update_id)
            return True
        if event is None:
            return True
        failures = 0
        while not stop.is_set():
            try:
                await ingest.submit(event)
                return True
            except StoreUnavailable as exc:
                log.warning(
                    "[%s] telegram update %s not stored (%s); retrying in %.0fs",
                    event.thread,
                    update.update_id,
                    exc,
                    self._retry,
                )
            except Exception:
                failures += 1
                log.exception(
                    "[%s] ingest failed for telegram update %s", event.thread, update.update_id
                )
                if failures >= self._max_skips:
                    log.error(
                        "[%s] telegram update %s skipped after %d failures",
                        event.thread,
                        update.update_id,
                        failures,
                    )
                    return True
            await _sleep(stop, self._retry)
        return False

    async def run(self, ingest: Ingest, stop: asyncio.Event) -> None:
        conflicted = False
        conflicts = 0  # in this run: the first is retried soon (see the module's doc)
        valid = holds(stop)
        loop = asyncio.get_running_loop()
        stalled = False  # the last batch moved nothing (warned once)
        log.info("telegram polling started")
        while not stop.is_set() and valid():
            asked = loop.time()
            try:
                updates = await self._fetch(stop)
            except Conflict:
                conflicts += 1
                if not conflicted:
                    log.error(CONFLICT_HINT)
                    conflicted = True
                first = conflicts == 1
                await _sleep(stop, self._first_conflict_retry if first else self._conflict_retry)
                continue
            except InvalidToken:
                # a failure, not an end: the gateway task fails, and the process exits 1
                # (as with Discord's refused token) instead of running on with Telegram
                # silent
                raise ConfigError(
                    [
                        "TELEGRAM_BOT_TOKEN: rejected by Telegram while polling (revoked?); "
                        "get a new one from @BotFather (/token)"
                    ]
                ) from None
            except RetryAfter as exc:
                await _sleep(
                    stop,
                    float(
                        exc.retry_after
                        if isinstance(exc.retry_after, int)
                        else exc.retry_after.total_seconds()
                    ),
                )
                continue
            except TelegramError as exc:
                log.warning("telegram getUpdates failed (%s); retrying in %.0fs", exc, self._retry)
                await _sleep(stop, self._retry)
                continue
            if updates is None:
                break
            if conflicted:
                log.info("telegram polling resumed")
                conflicted = False
            before = self.offset
            self._take(await self._handle(ingest, updates, stop))
            if stop.is_set():
                break
            if updates and self.offset == before:
                # Telegram handed back updates this offset should have confirmed (or
                # only id-less ones): nothing moved, so never ask again at once.
                (log.debug if stalled else log.warning)(
                    "telegram getUpdates(offset=%s) answered updates %s again; "
                    "asking again in %g s",
                    self.offset,
                    [u for u, _ in updates][:5],
                    self._stall,
                )
                stalled = True
                await _sleep(stop, self._stall)
            elif not updates and loop.time() - asked < self._stall:
                # an empty answer that did not wait (TELEGRAM_POLL_TIMEOUT=0, or a Bot
                # API server that does not long-poll): no tight loop either
                await _sleep(stop, self._stall - (loop.time() - asked))
            else:
                stalled = False
        if valid():  # a getUpdates after the lease is gone would disturb the new holder
            await self._confirm()
        log.info("telegram polling stopped")

    async def _handle(
        self, ingest: Ingest, updates: list[tuple[int | None, Update | None]], stop: asyncio.Event
    ) -> tuple[list[int], int | None]:
        """Publish a batch in order: (the ids done with, the first id left unpublished
        because the poller is stopping, or None).

        An id below the offset is published like any other (no comparison with the
        offset): after a week without updates Telegram numbers on from a random id,
        which may be lower, and returns it to getUpdates(offset=<the old offset>)
        until an offset of the new numbering confirms it.  A genuine repeat is
        dropped by Ingest's de-duplication (``<bot_id>:<update_id>``)."""
        done: list[int] = []
        for update_id, update in updates:
            if update_id is None:
                continue  # unreadable and without an id: the next one confirms it
            if update is not None and not await self._publish(ingest, update, stop):
                return done, update_id  # stopping: not confirmed
            done.append(update_id)  # published, not for us, or unreadable (logged)
        return done, None

    def _take(self, outcome: tuple[list[int], int | None]) -> None:
        """The next offset, from this batch alone: past the highest id done with, but
        never past one left unpublished (getUpdates(offset=N) confirms every update
        with an id below N)."""
        done, left = outcome
        if left is not None:
            # everything before it in the batch is confirmed, it is not (Telegram
            # returns updates in order: nothing unseen lies below it)
            self.offset = left
            return
        if not done:
            return
        highest = max(done) + 1
        if self.offset is not None and highest < self.offset:
            log.info(
                "telegram update ids restarted below the offset (%d < %d; Telegram "
                "numbers on from a random id after a week without updates)",
                highest - 1,
                self.offset,
            )
        self.offset = highest

    async def _confirm(self) -> None:
        """Tell Telegram which updates are done (the next getUpdates would)."""
        if self.offset is None:
            return
        try:
            # raw, like the polling: the update after the offset is not read (an
            # unreadable one would fail the shutdown)
            await self._bot._post("getUpdates", {"offset": self.offset, "timeout": 0, "limit": 1})
        except TelegramError as exc:
            log.info("telegram: could not confirm offset on shutdown (%s); dedup covers it", exc)
