"""Credentials carried in URL paths, masked before a log line is written.

A Discord interaction's token sits in the path of its response and follow-ups
(``/interactions/<id>/<token>/callback``, ``/webhooks/<app>/<token>``), and in
discord.py's rate-limit bucket keys (``<id>+<token>``).  discord.py logs those
URLs itself (at DEBUG for every request, at WARNING for a 429).
:func:`redact_url_tokens` is what the process-wide redaction filter of
``bots.logs`` applies; :class:`UrlTokenFilter` applies it on a library's logger,
so its records are clean for every handler, not only Parley's own.
"""

from __future__ import annotations

import logging
import re

URL_TOKEN = re.compile(r"(/(?:interactions|webhooks)/\d+/)[^/?#\s'\"]+")
BUCKET_TOKEN = re.compile(r"(\d{15,}\+)[A-Za-z0-9_\-.]{20,}")


def redact_url_tokens(text: str) -> str:
    if "/interactions/" in text or "/webhooks/" in text:
        text = URL_TOKEN.sub(r"\1***", text)
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
