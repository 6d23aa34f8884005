"""Credentials carried in URL paths, masked before a log line is written.

A Discord interaction's token sits in the path of its response and follow-ups
(``/interactions/<id>/<token>/callback``, ``/webhooks/<app>/<token>``), and in
discord.py's rate-limit bucket keys (``<id>+<token>``).  discord.py logs those
URLs itself (at DEBUG for every request, at WARNING for a 429).
:func:`redact_url_tokens` is what the process-wide redaction filter of
``bots.logs`` applies; :class:`UrlTokenFilter` applies it on a library's logger,
so its records are clean for every handler, not only Parley's own.

A Slack ``response_url`` (``https://hooks.slack.com/actions/T…/<id>/<secret>``, and
``/commands/``, an incoming webhook's ``/services/``, a workflow's ``/workflows/``
and ``/triggers/``) lets whoever holds it post into that channel as the app: Parley
answers slash commands and ephemeral presses through it, and slack_sdk's webhook
client logs it at DEBUG ("Sending a request - url: …").  All after the team id is
masked.
"""

from __future__ import annotations

import logging
import re

URL_TOKEN = re.compile(r"(/(?:interactions|webhooks)/\d+/)[^/?#\s'\"]+")
BUCKET_TOKEN = re.compile(r"(\d{15,}\+)[A-Za-z0-9_\-.]{20,}")
SLACK_HOOK = re.compile(
    r"(hooks\.slack(?:-gov)?\.com(?::\d+)?/(?:actions|commands|services|workflows|triggers)/"
    r"[A-Za-z0-9]+/)[^?#\s'\",]+",
    re.IGNORECASE,
)
# the loggers of slack_sdk's webhook clients (response_url, incoming webhooks)
SLACK_WEBHOOK_LOGGERS = ("slack_sdk.webhook.async_client", "slack_sdk.webhook.client")


def redact_url_tokens(text: str) -> str:
    if "/interactions/" in text or "/webhooks/" in text:
        text = URL_TOKEN.sub(r"\1***", text)
    if "hooks.slack" in text.lower():
        text = SLACK_HOOK.sub(r"\1***", text)
    if "+" in text:
        text = BUCKET_TOKEN.sub(r"\1***", text)
    return text


class UrlTokenFilter(logging.Filter):
    """Masks URL tokens in a record's message (formatted once, here)."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            msg = record.getMessage()
        except Exception:
            return True  # unformattable: left to the handler's filter, which reports it
        clean = redact_url_tokens(msg)
        if clean != msg:
            record.msg, record.args = clean, None
        return True


def install(logger_name: str) -> None:
    """Add one :class:`UrlTokenFilter` to ``logger_name`` (idempotent)."""
    logger = logging.getLogger(logger_name)
    if not any(isinstance(f, UrlTokenFilter) for f in logger.filters):
        logger.addFilter(UrlTokenFilter())
