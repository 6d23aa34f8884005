"""Logging setup (only bots/ configures logging): text or JSON, secrets redacted."""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Iterable

import orjson


class RedactFilter(logging.Filter):
    """Replace any configured secret value that reaches a log record."""

    def __init__(self, secrets: Iterable[str]) -> None:
        super().__init__()
        self.secrets = sorted({s for s in secrets if s}, key=len, reverse=True)

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.secrets:
            return True
        msg = record.getMessage()
        red = msg
        for s in self.secrets:
            if s in red:
                red = red.replace(s, "***")
        if record.exc_info and record.exc_info[1] is not None:
            text = logging.Formatter().formatException(record.exc_info)
            for s in self.secrets:
                text = text.replace(s, "***")
            record.exc_text = text
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
