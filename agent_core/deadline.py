"""The turn's deadline, and the waits for a platform that do not count toward it.

A turn runs under ``TURN_TIMEOUT_SECS`` (``agent_core.proactive.recovery``), as
an ``asyncio.Timeout`` that :func:`turn_deadline` makes visible here (a
ContextVar: the turn's task, and the tasks it starts, see it).  The time a turn
spends waiting out a platform's rate limit (a Retry-After, a pace another
worker paused after a 429, the pacing slot of a message the answer needs) is
the platform's, not the turn's: whoever waits calls :func:`platform_wait`, or
:func:`held` around a wait of its own, and the deadline moves back by as long.
So a Telegram ``retry after 3600`` no longer cancels a turn that times out at
600 s: the answer goes out once the wait is over, as the platform asked.

Droppable calls (a streamed preview's edit, the typing indicator) never wait and
never move the deadline.  Outside a turn (no deadline set) these only wait.
Platform-free: the channels call it, it knows none of them.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from contextvars import ContextVar

_TURN: ContextVar[asyncio.Timeout | None] = ContextVar("parley_turn_deadline", default=None)


@contextlib.contextmanager
def turn_deadline(timeout: asyncio.Timeout | None) -> Iterator[None]:
    """Within this block (the turn), :func:`hold` moves ``timeout`` back."""
    token = _TURN.set(timeout)
    try:
        yield
    finally:
        _TURN.reset(token)


def turn_expired() -> bool:
    """Whether the turn's deadline has run out: a CancelledError seen inside the
    turn then comes from ``TURN_TIMEOUT_SECS`` (else: /interrupt's own cancel of
    a wait, a shutdown), and a streamed preview may still be marked as cut off."""
    tm = _TURN.get()
    return tm is not None and tm.expired()


def _move(secs: float) -> None:
    tm = _TURN.get()
    if tm is None or tm.expired():
        return
    when = tm.when()
    if when is None:
        return
    with contextlib.suppress(RuntimeError):  # the turn's block has ended (a task it
        tm.reschedule(when + secs)  # started, waiting on after it): nothing to move


def hold(secs: float) -> None:
    """The turn (if any) is about to wait ``secs`` for the platform: its deadline
    moves back by that much."""
    if secs > 0:
        _move(secs)


@contextlib.contextmanager
def held(secs: float) -> Iterator[None]:
    """A wait for the platform of at most ``secs`` runs in this block: the deadline
    moves back by ``secs`` before it, and what the wait did not use (it ended
    early: /interrupt, a shutdown) is taken off again after it."""
    if secs <= 0:
        yield
        return
    loop = asyncio.get_running_loop()
    start = loop.time()
    hold(secs)
    try:
        yield
    finally:
        unused = secs - (loop.time() - start)
        if unused > 0:
            _move(-unused)


async def platform_wait(secs: float) -> None:
    """Sleep ``secs`` for the platform, off the turn's clock."""
    if secs <= 0:
        return
    with held(secs):
        await asyncio.sleep(secs)
