"""Logging setup (only bots/ configures logging): text or JSON, secrets redacted."""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Iterable

import orjson

from channels.url_tokens import redact_url_tokens


class RedactFilter(logging.Filter):
    """Replace any configured secret value, and tokens in URL paths, that reach a
    log record."""

    def __init__(self, secrets: Iterable[str]) -> None:
        super().__init__()
        self.secrets = sorted({s for s in secrets if s}, key=len, reverse=True)
        # a secret as repr() shows it (a backslash, a quote or a control character
        # escaped): in a message's %r, a traceback's locals, an unformattable record
        self.forms = sorted(
            {f for s in self.secrets for f in (s, repr(s)[1:-1])}, key=len, reverse=True
        )

    def clean(self, text: str) -> str:
        text = redact_url_tokens(text)
        for s in self.forms:
            if s in text:
                text = text.replace(s, "***")
        return text

    def _arg(self, arg: object) -> str:
        try:
            return self.clean(str(arg))
        except Exception:
            return f"<{type(arg).__name__}>"

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            msg = record.getMessage()
        except Exception as exc:
            # a caller's format and arguments do not match ("%d" with a str, too few):
            # a filter's exception would reach the caller (Handler.filter is not
            # guarded), and the handler's own report prints the arguments unredacted,
            # so log what was given, redacted, saying so: each argument redacted as
            # text before the repr (which would escape a secret's backslash or quote
            # so that it no longer matched)
            args = record.args
            given: object
            if isinstance(args, dict):
                given = {self._arg(k): self._arg(v) for k, v in args.items()}
            elif isinstance(args, tuple):
                given = tuple(self._arg(a) for a in args)
            else:
                given = self._arg(args)
            text = f"{self._arg(record.msg)!r} with arguments {given!r}"
            record.msg = f"[unformattable log message: {type(exc).__name__}: {exc}] {text}"
            record.args = None
            msg = record.msg
        red = self.clean(msg)
        if record.exc_info and record.exc_info[1] is not None:
            text = logging.Formatter().formatException(record.exc_info)
            record.exc_text = self.clean(text)
            record.exc_info = None
        if red != msg:
            record.msg, record.args = red, None
        return True


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        d = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_text or record.exc_info:
            d["exc"] = record.exc_text or self.formatException(record.exc_info)  # type: ignore[arg-type]
        return orjson.dumps(d).decode()


def setup_logging(level: str = "INFO", fmt: str = "text", secrets: Iterable[str] = ()) -> None:
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
    handler.addFilter(RedactFilter(secrets))
    root.addHandler(handler)
    root.setLevel(level.upper())
    for noisy in ("httpx", "httpcore", "uvicorn.access", "discord.gateway", "telegram.ext"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
