"""Parley's commands as Discord slash commands (global application commands).

Registration (the process holding the gateway, at start; ``DISCORD_COMMANDS``):
Parley's command list becomes the application's global commands.  Discord allows
200 command creations a day, so the current list is read first
(``GET /applications/{app}/commands``) and written (``PUT``, a bulk overwrite)
only when it differs: restarts write nothing.

* a name Discord refuses (1-32 lower-case letters, digits, ``-``, ``_``) is left
  out, and at most 100 commands are offered;
* the description is the command's help line (1-100 characters);
* a command with arguments (a usage such as ``[name]``) gets one optional string
  option ``text`` described by its usage; the others get no options.

Invocation: the gateway publishes a slash command as the message ``/<name> <text>``
addressed to the bot (:func:`channels.discord.parse.parse_command`), then answers
the interaction within Discord's 3 s with a visible echo of the invocation
(CHANNEL_MESSAGE_WITH_SOURCE).  The agent's answer follows as an ordinary message
from a worker.  What cannot be taken is answered privately (ephemeral).
"""

from __future__ import annotations

import logging
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import aiohttp
import discord
from discord.http import HTTPClient

from agent_core.events import ThreadKey

from .http import ParleyHTTPClient
from .parse import COMMAND_TEXT_OPTION, RawInteraction, interaction_user
from .render import NO_MENTIONS

log = logging.getLogger(__name__)

MAX_COMMANDS = 100  # Discord's limit on global commands
MAX_DESCRIPTION = 100
MAX_NAME = 32
CHAT_INPUT = 1  # application command type: a slash command
STRING = 3  # option type
CHANNEL_MESSAGE_WITH_SOURCE = 4  # interaction response type
EPHEMERAL = 64  # message flag: only the invoker sees it
PRIVATE_CHANNEL = 2  # interaction context: a DM or group DM the bot is not part of
MAX_CONTENT = 2000
ALREADY_ANSWERED = 40060  # Discord's code: this interaction has a response
RESPONSE_TIMEOUT = 5.0  # a response later than 3 s is refused anyway

FAILED_COMMAND_TEXT = (
    "Sorry, I could not confirm that I took that command: my storage is slow or down. "
    "If nothing happens within a minute, try again."
)
NO_SEND_TEXT = (
    "I cannot post in this channel (I lack the Send Messages permission here), "
    "so I could not answer. Ask a server admin, or write to me in a DM."
)
SEND_MESSAGES = 1 << 11
SEND_MESSAGES_IN_THREADS = 1 << 38
THREAD_TYPES = frozenset({10, 11, 12})  # announcement, public, private thread
REFUSED_COMMAND_TEXT = "Sorry, I cannot take that command now."
BOT_COMMAND_TEXT = "I do not take commands from bots."
UNKNOWN_COMMAND_TEXT = "`/{name}` is not one of my commands (any more); `/help` lists them."
ELSEWHERE_TEXT = "I can answer only in servers I am in and in DMs with me."


def valid_name(name: str) -> bool:
    """Discord's ``^[-_\\p{L}\\p{N}]{1,32}$``, lower case."""
    return (
        0 < len(name) <= MAX_NAME
        and name == name.lower()
        and all(c in "-_" or unicodedata.category(c)[0] in "LN" for c in name)
    )


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def app_commands(commands: Iterable[tuple[str, str, str]]) -> list[dict[str, Any]]:
    """Parley's (name, help, usage) list as the body of Discord's bulk overwrite."""
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for name, help_, usage in commands:
        if not valid_name(name) or name in seen:
            continue
        seen.add(name)
        text = " ".join(help_.split()) or name
        cmd: dict[str, Any] = {
            "name": name,
            "description": _cut(text[:1].upper() + text[1:], MAX_DESCRIPTION),
            "type": CHAT_INPUT,
        }
        usage = " ".join(usage.split())
        if usage:
            cmd["options"] = [
                {
                    "type": STRING,
                    "name": COMMAND_TEXT_OPTION,
                    "description": _cut(usage, MAX_DESCRIPTION),
                }
            ]
        out.append(cmd)
    return out[:MAX_COMMANDS]


def _shape(cmd: Mapping[str, Any]) -> tuple[Any, ...]:
    """What Parley sets of a command (Discord's answers add ids, versions, ...)."""
    options = tuple(
        (
            str(o.get("name", "")),
            str(o.get("description", "")),
            int(o.get("type") or 0),
            bool(o.get("required", False)),
        )
        for o in cmd.get("options") or ()
    )
    name, description = str(cmd.get("name", "")), str(cmd.get("description", ""))
    return (name, description, int(cmd.get("type") or CHAT_INPUT), options)


def same_commands(
    current: Sequence[Mapping[str, Any]], wanted: Sequence[Mapping[str, Any]]
) -> bool:
    return sorted(map(_shape, current)) == sorted(map(_shape, wanted))


async def sync_commands(http: HTTPClient, wanted: list[dict[str, Any]]) -> bool:
    """Make the application's global commands ``wanted``: read, and write only when
    they differ.  True when written.  ``http`` is logged in."""
    app = await http.application_info()
    app_id = app["id"]
    current = await http.get_global_commands(app_id)
    if same_commands(current, wanted):
        return False
    await http.bulk_upsert_global_commands(app_id, wanted)
    return True


# --- answering an invocation -------------------------------------------------------


def refusal(raw: RawInteraction, known: frozenset[str] | None) -> str | None:
    """Why Parley does not take this invocation (a private one-line answer), or None.

    ``known``: Parley's command names (None: not known yet, take any)."""
    if interaction_user(raw).get("bot"):
        return BOT_COMMAND_TEXT
    if raw.get("context") == PRIVATE_CHANNEL:
        return ELSEWHERE_TEXT  # the answer could not be posted there
    name = str((raw.get("data") or {}).get("name") or "")
    if known is not None and name not in known:
        return UNKNOWN_COMMAND_TEXT.format(name=name)
    if raw.get("guild_id") and not can_post(raw):
        return NO_SEND_TEXT  # the echo would show, the answer never
    return None


def can_post(raw: RawInteraction) -> bool:
    """Whether the bot may post where the command was used (``app_permissions``,
    which Discord sends with every interaction; unknown: assume yes)."""
    try:
        perms = int(str(raw.get("app_permissions")))
    except ValueError:
        return True
    channel = raw.get("channel") or {}
    needed = SEND_MESSAGES_IN_THREADS if channel.get("type") in THREAD_TYPES else SEND_MESSAGES
    return bool(perms & needed)


def inline_code(text: str) -> str:
    """``text`` as one inline code span (backticks inside kept visible)."""
    text = " ".join(text.split())
    if "`" not in text:
        return f"`{_cut(text, MAX_CONTENT - 2)}`"
    # a double-backtick span may hold single backticks; break up runs of them
    text = text.replace("``", "`\u200b`").replace("``", "`\u200b`")
    return f"`` {_cut(text, MAX_CONTENT - 6)} ``"


def echo(text: str) -> dict[str, Any]:
    """The visible answer to a taken command: the invocation, in inline code
    (Discord shows "<user> used /<name>" above it)."""
    return {
        "type": CHANNEL_MESSAGE_WITH_SOURCE,
        "data": {"content": inline_code(text), "allowed_mentions": NO_MENTIONS},
    }


def private(text: str) -> dict[str, Any]:
    """An answer only the invoker sees."""
    return {
        "type": CHANNEL_MESSAGE_WITH_SOURCE,
        "data": {
            "content": _cut(text, MAX_CONTENT),
            "flags": EPHEMERAL,
            "allowed_mentions": NO_MENTIONS,
        },
    }


async def respond(
    http: ParleyHTTPClient, raw: RawInteraction, body: dict[str, Any], where: ThreadKey | str
) -> None:
    """The interaction's response; a failure is logged (never its token: a secret)."""
    try:
        # outside discord.py's rate limiting: a global 429 it sleeps out would make
        # this miss Discord's 3 s (interaction responses are not globally limited)
        await http.interaction_callback(
            str(raw["id"]), str(raw["token"]), body, timeout=RESPONSE_TIMEOUT
        )
    except discord.HTTPException as exc:
        # already answered: the same interaction was delivered again
        level = logging.DEBUG if exc.code == ALREADY_ANSWERED else logging.WARNING
        log.log(level, "[%s] could not answer command %s: %s", where, raw["id"], exc)
    except (TimeoutError, aiohttp.ClientError, OSError, discord.RateLimited) as exc:
        log.warning("[%s] could not answer command %s: %s", where, raw["id"], type(exc).__name__)
