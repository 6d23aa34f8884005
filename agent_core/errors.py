"""Parley's exception tree (agent_core).

::

    ParleyError
    ├── ConfigError                 settings are invalid; one readable line per problem
    ├── StoreError                  Redis unreachable or misbehaving
    │   ├── StoreUnavailable        cannot connect (transient)
    │   └── VersionConflict         optimistic concurrency: someone saved first
    ├── LockLost                    the thread lock expired or was taken: stop sending
    ├── TurnHandedBack              a shutdown during a rate-limit wait: run it later
    ├── LLMError                    see agent_core.llm.errors for the subtree
    └── ChannelError                a platform call failed
        ├── SendRateLimited         429 with retry_after (transient)
        ├── SendFailed              permanent failure for this message
        │   ├── SendUnconfirmed     timed out after the request left: may have arrived
        │   └── SendForbidden       the bot may not post there (a permission, removed):
        │                           a notice in the same place would be refused too
        └── FormattingRejected      the platform refused our markup; resend plain

Transient vs permanent is a type, never a string match at the call site.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agent_core.events import MessageRef


class ParleyError(Exception):
    """Base of everything Parley raises on purpose."""


class ConfigError(ParleyError):
    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("; ".join(problems))


class StoreError(ParleyError):
    pass


class StoreUnavailable(StoreError):
    pass


class VersionConflict(StoreError):
    pass


class LockLost(ParleyError):
    pass


class TurnHandedBack(ParleyError):
    """The worker is stopping while the turn waits out a platform's rate limit
    (SendRateLimited): the turn stops, its message stays queued and the thread is
    handed back, to be run again once ``retry_after`` (what is left of the wait)
    is over (agent_core.worker).  Not a ChannelError: no "could not send" handler
    on the way may swallow it."""

    def __init__(self, retry_after: float) -> None:
        self.retry_after = retry_after
        super().__init__(f"handed back during a rate-limit wait ({retry_after:.1f}s left)")


class ChannelError(ParleyError):
    """A platform call failed.

    ``partial_ref``: set by a channel whose send or edit of one answer spans
    several platform messages and failed part-way, after some of them were
    already created or rewritten: the ref of the messages that now make up the
    answer (None: nothing changed, the ref sent or edited still stands).  The
    reply writer records it and repeats the send or edit from it, so a message
    already out is never sent twice (agent_core.agent.reply)."""

    partial_ref: MessageRef | None = None


class SendRateLimited(ChannelError):
    """The platform asks to wait ``retry_after`` seconds (a 429 the channel did not
    wait out itself).  Transient: the reply writer (agent_core.agent.reply) waits
    and sends again, for as long as the platform asks; the worker hands a turn
    that still ends with it back for later rather than consuming its message."""

    def __init__(self, retry_after: float, message: str = "rate limited") -> None:
        self.retry_after = retry_after
        super().__init__(f"{message} (retry after {retry_after:.1f}s)")


class SendFailed(ChannelError):
    pass


class SendUnconfirmed(SendFailed):
    """The request left but no answer came back (a timeout): the platform may
    have created the message.  Never repeated blindly; the agent records the part
    as sent with an unknown id (see agent_core.agent.reply)."""


class SendForbidden(SendFailed):
    """The platform refuses the bot any post in that conversation: a missing
    permission, the bot removed from it or blocked.  The text names the place and
    what is missing.  A failed turn is then not followed by a failure notice into
    the same conversation (it would be refused the same way): one warning line
    instead (agent_core.worker, agent_core.proactive.recovery)."""


class FormattingRejected(ChannelError):
    pass
