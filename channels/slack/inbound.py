"""Inbound: Slack payloads -> Ingest, shared by the Events API route and Socket Mode.

Nothing is acknowledged to Slack before :meth:`Ingest.submit` returned: the
HTTP route answers 2xx (the Socket Mode loop sends the envelope ack) only
after the event is durably in the inbox stream, or was a duplicate / refused.
If Redis is unreachable the route answers 503 (Socket Mode does not ack) and
Slack delivers again; a slash command, which Slack never delivers again, is
answered with a short ephemeral explanation instead, and so is a button press
(Slack never sends one again either): it is acknowledged and its presser is told,
through the payload's ``response_url``, to press again in a minute.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs

import orjson
from redis.exceptions import RedisError
from slack_sdk.signature import SignatureVerifier
from slack_sdk.webhook.async_client import AsyncWebhookClient
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import BaseRoute, Route

from agent_core.errors import StoreUnavailable
from agent_core.events import InboundEvent
from agent_core.ingest import Ingest, Submitted
from channels import url_tokens
from channels.http_body import BodyTooLarge, read_capped_body

from .mrkdwn import escape
from .parse import (
    MalformedPayload,
    Payload,
    followup_candidate,
    is_dm,
    parse_action,
    parse_command,
    parse_event,
)
from .state import SlackState

log = logging.getLogger(__name__)

EVENTS_PATH = "/slack/events"
STORE_DOWN_TEXT = (
    "Parley cannot take commands right now (its storage is not answering). "
    "Please try again in a minute."
)
PRESS_NOT_TAKEN_TEXT = (
    "Parley could not take that button press (its storage is not answering). "
    "Please press it again in a minute."
)
DEFAULT_MAX_BODY_BYTES = 1024 * 1024  # Slack's payloads are a few KB


def _object(value: Any) -> Payload:
    if not isinstance(value, dict):
        raise MalformedPayload("the body is not a JSON object")
    return value


class SlackInbound:
    """Turns the three Slack payload shapes into submitted InboundEvents."""

    def __init__(
        self,
        ingest: Ingest,
        state: SlackState,
        *,
        bot_user_id: Callable[[], str],
        team_id: Callable[[], str] = lambda: "",
        group_reply: str = "mention",
        slash_command: str = "/parley",
    ) -> None:
        self.ingest = ingest
        self.state = state
        self._bot_user_id = bot_user_id
        # the workspace Parley is installed in (auth.test): every conversation is
        # keyed by it, whatever team a Slack Connect payload names ('' : unknown,
        # each payload's installation team is used, see parse.py)
        self._team_id = team_id
        self.group_reply = group_reply
        self.slash_command = slash_command
        self._notices: set[asyncio.Task[None]] = set()  # "press again" posts under way
        # those posts go to a response_url, which slack_sdk logs at DEBUG
        for name in url_tokens.SLACK_WEBHOOK_LOGGERS:
            url_tokens.install(name)

    async def on_event(self, body: Payload) -> Submitted | None:
        """An ``event_callback`` body. Raises StoreUnavailable (answer 5xx / do not ack)."""
        bot = self._bot_user_id()
        in_thread = False
        team = self._team_id()
        cand = followup_candidate(body, bot, team=team)
        if cand is not None:
            try:
                in_thread = await self.state.in_thread(*cand)
            except RedisError as exc:
                raise StoreUnavailable(f"cannot reach Redis: {type(exc).__name__}") from exc
        event = parse_event(
            body,
            bot_user_id=bot,
            group_reply=self.group_reply,
            in_bot_thread=in_thread,
            team=team,
        )
        if event is None:
            return None
        return await self._submit(event)

    async def on_action(self, payload: Payload) -> Submitted | None:
        """A ``block_actions`` payload.  With Redis unreachable the press is not
        taken; Slack never sends it again, so its presser is told through the
        payload's ``response_url`` (StoreUnavailable is raised only without one)."""
        event = parse_action(payload, team=self._team_id())
        if event is None:
            return None
        try:
            return await self.ingest.submit(event)
        except StoreUnavailable as exc:
            url = payload.get("response_url")
            if not isinstance(url, str) or not url:
                raise
            log.error("Slack button press not taken (%s); its presser is told", exc)
            task = asyncio.create_task(self._tell(url, PRESS_NOT_TAKEN_TEXT))
            self._notices.add(task)
            task.add_done_callback(self._notices.discard)
            return None

    async def _tell(self, response_url: str, text: str) -> None:
        """A private note to the person behind an interaction, sent after the ack
        (Slack wants that within 3 s; the note may take longer)."""
        try:
            resp = await AsyncWebhookClient(response_url, timeout=10).send_dict(
                {"response_type": "ephemeral", "replace_original": False, "text": text}
            )
        except Exception as exc:  # a lost note is only logged
            log.warning("Slack response_url note not sent: %s", type(exc).__name__)
            return
        if resp.status_code >= 300:
            log.warning("Slack response_url note refused: HTTP %s", resp.status_code)

    async def on_command(self, form: Payload) -> dict[str, Any]:
        """A slash command; returns the ephemeral acknowledgement shown to its user."""
        event = parse_command(form, command=self.slash_command, team=self._team_id())
        if event is None:
            return {"response_type": "ephemeral", "text": "Unknown command."}
        try:
            result = await self.ingest.submit(event)
        except StoreUnavailable as exc:
            # Slack never delivers a slash command again (only Events API callbacks):
            # the person is told, rather than shown Slack's bare "failed" error.
            log.error("Slack command not taken (%s); its sender is told", exc)
            return {"response_type": "ephemeral", "text": STORE_DOWN_TEXT}
        if result == Submitted.REFUSED:
            return {"response_type": "ephemeral", "text": "Parley cannot take this request now."}
        shown = event.text if len(event.text) <= 200 else event.text[:199] + "…"
        return {
            "response_type": "ephemeral",
            # the text was decoded for the agent: escaped again, it shows as typed
            "text": f"{self.slash_command} {escape(shown)}\n_On it…_",
        }

    async def _submit(self, event: InboundEvent) -> Submitted:
        result = await self.ingest.submit(event)
        if result != Submitted.ACCEPTED or event.reply_ref is None:
            return result
        thread = event.thread
        join = None
        if thread.thread and not is_dm(thread.conversation):
            join = (thread.tenant, thread.conversation, thread.thread)
        try:
            # followed while it waits; forgotten if its turn ends unanswered (refused),
            # kept once Parley answers there (SlackOutbox.send / turn_finished)
            await self.state.remember(
                join=join,
                last=(thread, f"{event.reply_ref.conversation} {event.reply_ref.message_id}"),
                pending=event.event_id,
            )
        except RedisError as exc:  # the event is safely queued; only follow-ups/indicator suffer
            log.warning("[%s] could not record Slack thread state: %s", thread, type(exc).__name__)
        return result


class EventsEndpoint:
    """POST /slack/events: events, interactivity and slash commands, signed by Slack."""

    def __init__(
        self,
        inbound: SlackInbound,
        signing_secret: str,
        *,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    ) -> None:
        self.inbound = inbound
        self.verifier = SignatureVerifier(signing_secret)
        self.max_body_bytes = max_body_bytes

    def routes(self) -> list[BaseRoute]:
        return [Route(EVENTS_PATH, self.handle, methods=["POST"], name="slack_events")]

    async def handle(self, request: Request) -> Response:
        try:
            body = await read_capped_body(request, self.max_body_bytes)
        except BodyTooLarge:
            log.warning("Slack request over %d bytes rejected unread", self.max_body_bytes)
            return PlainTextResponse("body too large", status_code=413)
        ts = request.headers.get("x-slack-request-timestamp")
        sig = request.headers.get("x-slack-signature")
        try:
            valid = self.verifier.is_valid(body, ts, sig)
        except (ValueError, TypeError):  # e.g. a non-numeric timestamp
            valid = False
        if not valid:
            log.warning("Slack request with a bad or stale signature rejected")
            return PlainTextResponse("invalid signature", status_code=401)
        retry = request.headers.get("x-slack-retry-num")
        if retry:
            log.info("Slack retry #%s (%s)", retry, request.headers.get("x-slack-retry-reason", ""))
        try:
            return await self._dispatch(request.headers.get("content-type", ""), body)
        except StoreUnavailable as exc:
            log.error("Slack event not accepted, Slack will retry: %s", exc)
            return PlainTextResponse("store unavailable", status_code=503)
        except (ValueError, KeyError, orjson.JSONDecodeError):
            log.warning("malformed Slack request", exc_info=True)
            return PlainTextResponse("bad request", status_code=400)

    async def _dispatch(self, content_type: str, body: bytes) -> Response:
        if content_type.startswith("application/x-www-form-urlencoded"):
            form = {k: v[0] for k, v in parse_qs(body.decode(), keep_blank_values=True).items()}
            if "payload" in form:
                payload = _object(orjson.loads(form["payload"]))
                if payload.get("type") == "block_actions":
                    await self.inbound.on_action(payload)
                return Response(status_code=200)
            if form.get("ssl_check"):
                return Response(status_code=200)
            if "command" in form:
                return JSONResponse(await self.inbound.on_command(form))
            raise ValueError("unknown form payload")
        data = _object(orjson.loads(body))
        kind = data.get("type")
        if kind == "url_verification":
            return JSONResponse({"challenge": str(data.get("challenge", ""))})
        if kind == "event_callback":
            await self.inbound.on_event(data)
        return Response(status_code=200)
