"""How the agent talks back: the contract each channel's sender implements.

The agent hands an :class:`~agent_core.events.OutboundMessage` (markdown, maybe
buttons) to the thread's channel; the channel renders it, splits it at its
platform's limit, paces it under its platform's rate limits and returns a
:class:`~agent_core.events.MessageRef` so the message can be edited later
(streaming, resolving an approval prompt).
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Protocol

from redis.commands.core import AsyncScript

from agent_core.events import InboundEvent, MessageRef, OutboundMessage, ThreadKey


class Outbox(Protocol):
    # Minimum seconds between streamed edits of one message; None: this channel
    # does not stream (the answer is sent once, whole).
    stream_interval: float | None

    async def send(
        self, thread: ThreadKey, message: OutboundMessage, *, reply_to: MessageRef | None = None
    ) -> MessageRef:
        """Send a new message into ``thread``. Raises ChannelError subclasses."""
        ...

    async def edit(self, ref: MessageRef, message: OutboundMessage) -> MessageRef:
        """Replace the message at ``ref`` (the whole text, buttons as given)."""
        ...

    async def typing(self, thread: ThreadKey) -> None:
        """Show a working indicator (best effort, never raises)."""
        ...

    async def turn_finished(self, thread: ThreadKey, event: InboundEvent | None) -> None:
        """The turn caused by ``event`` is over: clear indicators (best effort)."""
        ...

    async def answer_action(self, event: InboundEvent, text: str) -> None:
        """Acknowledge a button press privately to its presser (e.g. 'not yours').

        Called exactly once for every press the agent handles; ``text == ""``
        means "acknowledge silently" (Telegram needs every callback answered).
        """
        ...


# --- presses that wait ------------------------------------------------------
# A channel whose platform takes a press's answer only for a short while
# (Telegram: ~10-15 s) may define ``press_waiting(event) -> None`` (not async:
# it schedules what it needs).  The worker calls it when it hands off a press
# that cannot run next (another worker holds its thread, or earlier events of
# the thread come first, a turn running here included), so the channel can stop
# the button's spinner in time if the press's own turn comes too late.  The
# press's own ``answer_action`` still follows when its turn runs.


# --- which messages a turn took in -------------------------------------------
# A turn answers its first message and any plain messages that arrived while it
# ran (read into the running loop).  A channel that waits for "its" turn to end
# (the console) may define ``async turn_finished_with(thread, event, taken_in)``:
# called instead of ``turn_finished``, with the ids of every message the turn
# took in, ``event``'s first (see :func:`finish_turn`).


async def finish_turn(
    outbox: Outbox, thread: ThreadKey, event: InboundEvent | None, taken_in: Sequence[str]
) -> None:
    """End a turn on its channel: ``turn_finished_with`` when the channel has it."""
    hook = getattr(outbox, "turn_finished_with", None)
    if hook is not None:
        await hook(thread, event, list(taken_in))
    else:
        await outbox.turn_finished(thread, event)


# --- group text ---------------------------------------------------------------
# A channel whose sender sets ``group_text_reaches = False`` says that in a group a
# plain message not addressed to the bot (no mention, not a reply to one of its
# messages) never reaches Parley (Telegram and Discord with GROUP_REPLY=mention).
# The approval prompt in a group then asks for a *reply* to it with yes / no, or
# /approve or /deny, instead of "typing yes works too" (absent: it reaches).
#
# A channel where that differs between conversations of one kind defines
# ``typed_command(thread) -> str | None`` (not async), asked for the conversation
# at hand: None, ``group_text_reaches`` decides; a command (e.g. "/parley"): a
# plain message never reaches this conversation, the words do as that command's
# text ("/parley yes"), which is what the prompt and the notices then say; '':
# typed words cannot reach it at all (the buttons only, no hint).


# --- the wire hook ----------------------------------------------------------
# A channel whose sender sets ``wire_hook = True`` promises to ``await on_wire()``
# right before the platform request that creates a message (after its own
# pacing waits).  The agent uses the moment to claim the reply part in Redis,
# fenced by the thread lock, so the window in which a crash leaves it unsure
# whether a message reached the platform is the request itself, not the
# pacing wait before it.  The hook may raise (lock lost, part already sent):
# the channel must let that exception propagate and send nothing.
#
# The claim is one script call (``WireClaim``).  A channel that books its
# pacing slot in Redis right before the request passes ``wire_claim()`` to
# ``Pacer.reserve(..., claim=)``, which sends the claim in the booking's round
# trip and keeps it only if no wait is due (agent_core/store/pacing.py); the
# ``on_wire()`` that follows is then a no-op.  One round trip fewer per message.


@dataclass(frozen=True)
class WireClaim:
    """The hook's claim as a script call, what to make of its reply, and how to
    take it back (a claim made too early, or for a request that must wait to be
    repeated)."""

    call: tuple[AsyncScript, Sequence[str], Sequence[str | int]]  # script, keys, args
    settle: Callable[[Any], None]  # the script's reply -> None, or raises as the hook does
    release: Callable[[], Awaitable[object]]  # take the claim back if it is still this one


@dataclass
class _Hook:
    callback: Callable[[], Awaitable[None]]
    claim: WireClaim | None
    done: bool = False  # claimed (by on_wire or by a pacer)
    created: bool = False  # a platform message of this part exists (wire_created)
    wired: bool = False  # on_wire() returned: the request may have left (wire_unsent)


_ON_WIRE: ContextVar[_Hook | None] = ContextVar("parley_on_wire", default=None)


async def on_wire() -> None:
    """Called by a channel right before the request that creates a message."""
    hook = _ON_WIRE.get()
    if hook is None:
        return
    if not hook.done:
        hook.done = True
        await hook.callback()
    hook.wired = True  # the request follows: from here on the part may be showing


def wire_claim() -> WireClaim | None:
    """The claim ``on_wire()`` would make now, for a pacer to send early (or None)."""
    hook = _ON_WIRE.get()
    return hook.claim if hook is not None and not hook.done else None


def wire_claimed() -> None:
    """The pending claim was made (and settled) elsewhere: ``on_wire()`` does nothing."""
    hook = _ON_WIRE.get()
    if hook is not None:
        hook.done = True


def wire_unsent() -> bool:
    """Whether the armed hook's request provably never left: ``on_wire()`` has not
    returned since the hook was armed (or since its claim was last taken back) and
    no message of the part was created.  A send that fails so (a Redis error while
    booking its pacing slot, with the claim riding along) leaves no "maybe sent"
    part: its claim, if it was made, is to be taken back (``ReplyWriter``)."""
    hook = _ON_WIRE.get()
    return hook is not None and not hook.wired and not hook.created


def wire_created() -> None:
    """A platform message of the part being sent now exists (a part the platform
    splits into several messages: the first of them went out).  From here on the
    claim is kept whatever happens to the rest: the part is partly on screen."""
    hook = _ON_WIRE.get()
    if hook is not None:
        hook.created = True


def wire_shown() -> bool:
    """Whether a platform message of the part being sent exists (``wire_created``):
    the send that failed is partly on screen and is not to be made again."""
    hook = _ON_WIRE.get()
    return hook is not None and hook.created


async def wire_retry() -> None:
    """The request after the claim did not create the message (the platform said
    to retry later, or nothing left this machine) and will be repeated after a
    wait: take the claim back, so that a crash during the wait leaves the part
    unclaimed (sent by the rerun), and claim again before the next attempt.
    Nothing to do for a request that claimed nothing (an edit), or once a message
    of the part was created (``wire_created``).  Raises RedisError if the claim
    could not be taken back (the next attempt claims again all the same: the
    claim script finds this send's own marker, or nothing)."""
    await _take_back()


async def wire_refused() -> None:
    """The send failed for good and created no message of the part (the channel
    raised a ChannelError other than SendUnconfirmed): take the claim back, so a
    rerun of the turn sends the part instead of taking it for maybe sent.  The
    same no-ops and RedisError as ``wire_retry``."""
    await _take_back()


async def _take_back() -> None:
    hook = _ON_WIRE.get()
    if hook is None or not hook.done or hook.created:
        return
    try:
        if hook.claim is not None:
            await hook.claim.release()
    finally:
        hook.done = False
        hook.wired = False  # the request created nothing; the next one calls on_wire()


def set_on_wire(
    callback: Callable[[], Awaitable[None]] | None, claim: WireClaim | None = None
) -> object:
    """Arm the hook for one message-creating request (``claim``: the same claim as a
    script call, for a pacer to send early; needed for ``wire_retry``)."""
    return _ON_WIRE.set(None if callback is None else _Hook(callback, claim))


def reset_on_wire(token: object) -> None:
    _ON_WIRE.reset(token)  # type: ignore[arg-type]


# --- the part being sent -------------------------------------------------------
# The agent names every message it sends ("<event_id>:<n>").  A channel whose
# sender sets ``idempotent_parts = True`` uses that name so that sending the
# same part twice shows one message (the local channels key their transcript
# entries by it); the agent may then resend a part whose first sender died
# mid-send instead of leaving it unsent.  A sender that can look a part up on
# its platform implements
# ``async def find_part(thread, part, claimed_ms, *, reply_to) -> MessageRef | None``
# (None: the part is not there; raises ChannelError if the platform cannot say;
# ``reply_to``: what the part answers, as given to ``send``): the rerun
# of a part whose sender died edits what it finds, or sends the part (Slack).
#
# A sender that can remove a message implements ``async def delete(ref) -> None``
# (every platform message ``ref`` stands for; best effort, raises ChannelError at
# most).  The agent uses it for a part an earlier execution of a turn sent and the
# rerun did not write again (its answer came out in fewer parts); on a channel
# without it that part is edited to a short note instead.  The Telegram sender
# has it.

_PART: ContextVar[str | None] = ContextVar("parley_part", default=None)


def current_part() -> str | None:
    """The name of the reply part being sent, if the agent is sending one."""
    return _PART.get()


def set_current_part(name: str | None) -> object:
    return _PART.set(name)


def reset_current_part(token: object) -> None:
    _PART.reset(token)  # type: ignore[arg-type]


# --- skipped streamed edits -----------------------------------------------------
# A droppable edit (a streamed preview's, ``message.final`` False) may be skipped
# by the channel (no pacing slot free, a 429, a timeout, its own pace): the edit
# call still returns normally, with the ref as it stands.  The channel then calls
# :func:`edit_skipped` (also when only part of the edit was made), so the core
# knows the message does not show that text and edits again once it may
# (``StreamingReply``'s catch-up edit).  Outside :func:`watch_skips` a no-op.


@dataclass
class SkipWatch:
    skipped: bool = False


_SKIPS: ContextVar[SkipWatch | None] = ContextVar("parley_edit_skips", default=None)


def edit_skipped() -> None:
    """The droppable edit under way was skipped (in whole or in part)."""
    watch = _SKIPS.get()
    if watch is not None:
        watch.skipped = True


@contextlib.contextmanager
def watch_skips() -> Iterator[SkipWatch]:
    """Within this block, a channel's :func:`edit_skipped` sets ``.skipped``."""
    watch = SkipWatch()
    token = _SKIPS.set(watch)
    try:
        yield watch
    finally:
        _SKIPS.reset(token)
