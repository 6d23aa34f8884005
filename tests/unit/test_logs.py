from __future__ import annotations

import io
import logging

import orjson

from bots.logs import JsonFormatter, RedactFilter


def _logger(fmt: logging.Formatter, secrets: list[str]) -> tuple[logging.Logger, io.StringIO]:
    buf = io.StringIO()
    handler = logging.StreamHandler(buf)
    handler.setFormatter(fmt)
    handler.addFilter(RedactFilter(secrets))
    log = logging.getLogger(f"test-{id(buf)}")
    log.handlers = [handler]
    log.propagate = False
    log.setLevel(logging.DEBUG)
    return log, buf


def test_json_logs_are_one_object_per_line_and_redacted() -> None:
    log, buf = _logger(JsonFormatter(), ["sk-test-SECRET-123456"])
    log.info("[%s] calling with key %s", "telegram:1:2:", "sk-test-SECRET-123456")
    try:
        raise RuntimeError("boom sk-test-SECRET-123456")
    except RuntimeError:
        log.exception("failed")
    lines = buf.getvalue().splitlines()
    assert len(lines) == 2
    first, second = (orjson.loads(line) for line in lines)
    assert first["msg"] == "[telegram:1:2:] calling with key ***"
    assert first["level"] == "info"
    assert "sk-test-SECRET" not in buf.getvalue()
    assert "boom ***" in second["exc"]


def test_text_logs_redact_secrets_in_arguments() -> None:
    log, buf = _logger(logging.Formatter("%(message)s"), ["xoxb-very-secret-token"])
    log.warning("token %r rejected", "xoxb-very-secret-token")
    assert buf.getvalue().strip() == "token '***' rejected"


def test_interaction_tokens_in_urls_are_redacted() -> None:
    """discord.py logs each request's URL at DEBUG; an interaction's token is in it."""
    log, buf = _logger(logging.Formatter("%(message)s"), [])
    token = "aW50ZXJhY3Rpb246MTIzNDU2Nzg5OmFiY2RlZg"
    base = "https://discord.com/api/v10"
    log.debug(
        "%s %s with %s has returned %s",
        "POST",
        f"{base}/interactions/1234567890/{token}/callback",
        None,
        204,
    )
    log.debug("POST %s/webhooks/42/%s/messages/@original has returned 200", base, token)
    try:
        raise RuntimeError(f"cannot POST {base}/webhooks/42/{token}?wait=true")
    except RuntimeError:
        log.exception("failed")
    out = buf.getvalue()
    assert token not in out
    assert f"{base}/interactions/1234567890/***/callback" in out
    assert f"{base}/webhooks/42/***/messages/@original" in out
    assert "/webhooks/42/***?wait=true" in out
    log.info("GET %s/channels/42/messages/777 has returned 200", base)  # no token: as it is
    assert buf.getvalue().endswith(f"GET {base}/channels/42/messages/777 has returned 200\n")


def test_interaction_tokens_in_rate_limit_bucket_keys_are_redacted() -> None:
    """discord.py logs a bucket's "major parameters" (``<webhook id>+<token>``) on a 429."""
    log, buf = _logger(logging.Formatter("%(message)s"), [])
    token = "aW50ZXJhY3Rpb246MTIzNDU2Nzg5OmFiY2RlZg"
    log.debug(
        "Rate limit is being handled by bucket hash %s with %r major parameters",
        "abcd",
        f"1234567890123456789+{token}",
    )
    log.debug("version %s+%s", "1", "local")  # not a bucket key: as it is
    out = buf.getvalue()
    assert token not in out and "'1234567890123456789+***' major parameters" in out
    assert "version 1+local" in out


def test_slack_response_urls_are_redacted() -> None:
    """A response_url (or an incoming webhook's URL) lets its holder post as the app:
    slack_sdk's webhook client logs it at DEBUG."""
    log, buf = _logger(logging.Formatter("%(message)s"), [])
    secret = "AbCdEfGhIjKlMnOpQrStUvWx"
    for kind, middle in (("actions", "1234567890"), ("commands", "987654"), ("services", "B0001")):
        log.debug(
            "Sending a request - url: https://hooks.slack.com/%s/T0001/%s/%s, body: {}",
            kind,
            middle,
            secret,
        )
    log.debug("url: https://hooks.slack-gov.com/workflows/T0001/A01/123/%s?x=1", secret)
    out = buf.getvalue()
    assert secret not in out
    assert "url: https://hooks.slack.com/actions/T0001/***, body: {}" in out
    assert "https://hooks.slack.com/services/T0001/***, body" in out
    assert "https://hooks.slack-gov.com/workflows/T0001/***?x=1" in out
    log.info("GET https://slack.com/api/chat.postMessage")  # no capability: as it is
    assert buf.getvalue().endswith("GET https://slack.com/api/chat.postMessage\n")


def test_a_bad_format_in_a_library_log_call_never_raises_into_the_caller() -> None:
    """`log.warning("retry %d of %d", "x")` from a third-party library: the redaction
    filter formats the message, and Handler.filter does not guard filters, so before
    this the TypeError reached the caller.  Now one line, redacted, saying so."""
    for fmt in (JsonFormatter(), logging.Formatter("%(message)s")):
        log, buf = _logger(fmt, ["sk-test-SECRET-123456"])
        log.warning("retry %d of %d", "x")  # must not raise
        log.warning("key %s and %d", "sk-test-SECRET-123456", "y")
        out = buf.getvalue()
        lines = out.splitlines()
        assert len(lines) == 2, out
        assert "unformattable log message" in lines[0] and "retry %d of %d" in lines[0]
        assert "sk-test-SECRET" not in out and "***" in lines[1], out
        if isinstance(fmt, JsonFormatter):
            assert [orjson.loads(line)["level"] for line in lines] == ["warning", "warning"]


SECRETS_REPR_ESCAPES = ["p4ss\\w0rd", "it's\"quoted", "tab\there"]


def test_an_unformattable_record_redacts_secrets_that_repr_escapes() -> None:
    """The arguments of a record whose format does not match were printed with
    repr(), which escapes a backslash, a quote or a control character: the secret
    no longer matched and printed in clear (escaped)."""
    for fmt in (logging.Formatter("%(message)s"), JsonFormatter()):
        log, buf = _logger(fmt, SECRETS_REPR_ESCAPES)
        for secret in SECRETS_REPR_ESCAPES:
            log.warning("retry %d of %d", secret)
            log.warning("retry %d of %d", f"x{secret}y", 3)
            log.warning("retry %(n)d", {"n": secret})
        out = buf.getvalue()
        assert out.count("unformattable") == 9, out
        for secret in SECRETS_REPR_ESCAPES:
            for form in (secret, repr(secret)[1:-1], orjson.dumps(secret).decode()[1:-1]):
                assert form not in out, (form, out)


def test_a_secret_logged_with_repr_is_redacted() -> None:
    log, buf = _logger(logging.Formatter("%(message)s"), SECRETS_REPR_ESCAPES)
    for secret in SECRETS_REPR_ESCAPES:
        log.info("key %r", secret)
        log.info("key %s", secret)
    out = buf.getvalue()
    assert len(out.splitlines()) == 6 and all("***" in x for x in out.splitlines()), out
    for secret in SECRETS_REPR_ESCAPES:
        assert secret not in out and repr(secret)[1:-1] not in out, out
