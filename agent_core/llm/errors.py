"""LLM errors: one tree for every backend.

::

    LLMError (agent_core.errors.ParleyError)
    ├── RateLimited(retry_after)   429; transient, honour retry_after
    │   └── RateLimitWindow        not sent: inside the window an earlier 429 announced
    ├── AuthFailed                 401/403; permanent
    │   └── OutOfCredit            402, out of credit / quota; permanent
    ├── ContextLengthExceeded      the prompt does not fit (or is over the TPM limit);
    │                              compact and retry once
    ├── ModelNotAvailable          404 / unknown model; permanent
    ├── BadRequest                 other 4xx: the request itself is wrong; permanent
    ├── RequestFailed              5xx, connection refused, transport errors; transient
    ├── InvalidResponse            malformed JSON, stream cut mid-way; transient
    ├── Timeout                    read / connect timeout; transient
    └── CircuitOpen                the breaker rejected the call without trying

Messages never contain API keys: backends build them from status codes and the
provider's error text, which is scrubbed with :func:`redact`.
"""

from __future__ import annotations

import re

from agent_core.errors import ParleyError


class LLMError(ParleyError):
    transient = False


class RateLimited(LLMError):
    transient = True

    def __init__(self, message: str = "rate limited", retry_after: float | None = None) -> None:
        self.retry_after = retry_after
        super().__init__(message)


class RateLimitWindow(RateLimited):
    """Not sent: the model is inside a rate-limit window an earlier 429 announced
    (``retry_after``: what is left of it).  The provider was not asked, so this is
    no failure of it (failover does not count it towards a cooldown)."""


class AuthFailed(LLMError):
    pass


class OutOfCredit(AuthFailed):
    """The provider account has no credit left (402, Anthropic's "credit balance is
    too low", OpenAI's insufficient_quota): the key is fine, the account is not."""


class ContextLengthExceeded(LLMError):
    """The prompt is too big for the provider.  ``limit``: the tokens it would take
    when it said, and that is below the window (OpenAI's 429 "Request too large ...
    tokens per min (TPM): Limit 30000, Requested 45210": the account's per-minute
    limit, which no wait can lift)."""

    def __init__(self, message: str = "context length exceeded", limit: int | None = None) -> None:
        self.limit = limit
        super().__init__(message)


class ModelNotAvailable(LLMError):
    pass


class BadRequest(LLMError):
    pass


class RequestFailed(LLMError):
    transient = True


class InvalidResponse(LLMError):
    transient = True


class Timeout(LLMError):
    transient = True


class CircuitOpen(LLMError):
    pass


_SECRETISH = re.compile(
    r"(sk-[A-Za-z0-9_\-]{8,}|sk-ant-[A-Za-z0-9_\-]{8,}|Bearer\s+[A-Za-z0-9._\-]{8,}|"
    r"(?:api[_-]?key|token|secret)[\"'=:\s]+[A-Za-z0-9._\-]{8,})",
    re.IGNORECASE,
)
# a URL's userinfo (scheme://user:password@host): the authority runs to the first
# / ? # or space, the userinfo to its last @; the password is masked, the user kept
_URL_USERINFO = re.compile(r"://([^/\s?#]*)@")


def _mask_password(m: re.Match[str]) -> str:
    user, colon, _ = m.group(1).partition(":")
    return f"://{user}:***@" if colon else m.group(0)


def redact(text: str, *secrets: str) -> str:
    """Remove known secrets and anything that looks like a key from ``text``
    (a URL's password too)."""
    for s in secrets:
        if s and len(s) >= 4:
            text = text.replace(s, "***")
    # as URL parsers read it: a raw ? or # ends the authority (a password holding one
    # must be percent-encoded to work at all); masking past it could show a host the
    # request does not go to ("http://localhost:8080?next=@good.example")
    return _URL_USERINFO.sub(_mask_password, _SECRETISH.sub("***", text))
