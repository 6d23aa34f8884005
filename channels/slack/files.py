"""Downloading a file a user posted in Slack, for the agent (a photo for a vision model).

A file's ``url_private`` is fetched with the bot token (``Authorization: Bearer``),
which Slack accepts only if the app has the ``files:read`` scope.  Without it
Slack does not refuse plainly: it redirects to the workspace's sign-in page
(``?redir=...``), or serves that page with a 200 (``text/html``).  Both are
refused here with a reason naming the scope, and logged once.
``url_private_download`` is preferred over ``url_private``
(channels/slack/parse.py): it serves the bytes themselves.

The address comes from the event and is kept in Redis, so it is not trusted: the
token goes only to Slack's file hosts (:data:`FILE_ORIGINS`), or to the origin of
``SLACK_API_BASE_URL`` when that is not Slack's own (tests, proxies), never
elsewhere (:func:`channels.download.fetch_capped` checks every request).  A
redirect is followed by hand, with the token, only to one of those hosts and at
most :data:`MAX_HOPS` times: Enterprise Grid workspaces answer ``files.slack.com``
with a 302 to ``files-origin.slack.com`` (an HTTP client drops the token on such a
cross-host redirect, and Slack then serves its sign-in page).  A redirect
anywhere else is not followed; the reason names where it pointed.

A file shared from another organisation (Slack Connect) arrives as its id only,
``{"id": "F…", "mode": "file_access", "file_access": "check_file_info"}``:
:func:`complete` asks ``files.info`` (scope ``files:read``) for its name, type,
size and address before the model is told about it or it is downloaded.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from urllib.parse import urljoin

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from agent_core.errors import SendFailed
from agent_core.events import Attachment
from channels.download import Redirected, fetch_capped, origin

from .parse import file_attachments
from .settings import DEFAULT_API_BASE_URL

log = logging.getLogger(__name__)

FILES_ORIGIN = "https://files.slack.com"
# Enterprise Grid serves files from here, after a 302 from files.slack.com
GRID_FILES_ORIGIN = "https://files-origin.slack.com"
FILE_ORIGINS = frozenset({FILES_ORIGIN, GRID_FILES_ORIGIN})
MAX_HOPS = 3
NEEDS_SCOPE = (
    "Slack did not hand over the file: the Slack app needs the files:read scope "
    "(add it and reinstall the app)"
)


def file_origins(api_base_url: str) -> frozenset[str]:
    """Where the bot token may be sent for a file."""
    origins = set(FILE_ORIGINS)
    api = origin(api_base_url)
    if api and api != origin(DEFAULT_API_BASE_URL):
        origins.add(api)
    return frozenset(origins)


@dataclass
class SlackFiles:
    session: aiohttp.ClientSession
    token: str = field(repr=False)
    origins: frozenset[str] = FILE_ORIGINS
    _warned: bool = field(default=False, repr=False)

    async def fetch(self, attachment: Attachment, max_bytes: int) -> bytes:
        if attachment.size and attachment.size > max_bytes:
            raise SendFailed(f"file is larger than {max_bytes} bytes")
        url = attachment.ref
        if "://" not in url:
            raise SendFailed("Slack gave no download address for this file")
        if not self.token:
            raise SendFailed("no Slack bot token to download the file with")
        for _hop in range(MAX_HOPS + 1):
            try:
                data, ctype = await fetch_capped(
                    self.session,
                    url,
                    origins=self.origins,
                    max_bytes=max_bytes,
                    headers={"Authorization": f"Bearer {self.token}"},
                )
                break
            except Redirected as exc:
                target = urljoin(url, exc.location)
                if "redir=" in exc.location:  # to the sign-in page: no files:read
                    self._missing_scope()
                    raise SendFailed(f"{NEEDS_SCOPE} ({exc})") from exc
                where = origin(target)
                if where not in self.origins:  # the token never leaves Slack's file hosts
                    raise SendFailed(
                        f"Slack redirected the download to {where or 'another address'}; "
                        "not followed"
                    ) from exc
                url = target  # e.g. Enterprise Grid's files-origin host
        else:
            raise SendFailed(f"Slack redirected the download more than {MAX_HOPS} times")
        if ctype == "text/html" and not attachment.mime.startswith("text/html"):
            self._missing_scope()  # the sign-in page, served instead of the file
            raise SendFailed(NEEDS_SCOPE)
        return data

    def _missing_scope(self) -> None:
        if self._warned:
            return
        self._warned = True
        log.warning(
            "Slack files cannot be downloaded: the app lacks the files:read scope. "
            "Add it (OAuth & Permissions, or the manifest in deploy/) and reinstall "
            "the app; until then photos are not shown to the model (docs/slack.md)"
        )


def needs_info(attachment: Attachment) -> bool:
    """A file Slack sent as its id only (no address): Slack Connect's check_file_info."""
    return bool(attachment.ref) and "://" not in attachment.ref


async def complete(
    web: AsyncWebClient, attachments: tuple[Attachment, ...]
) -> tuple[Attachment, ...]:
    """``attachments`` with every id-only file looked up with ``files.info`` (all at
    once); one that cannot be looked up stays as it is (the model is told what
    little is known)."""
    if not any(needs_info(a) for a in attachments):
        return attachments

    async def one(a: Attachment) -> Attachment:
        if not needs_info(a):
            return a
        try:
            resp = await web.files_info(file=a.ref)
        except SlackApiError as exc:
            error = exc.response.get("error") if exc.response is not None else ""
            log.info("Slack files.info failed for a shared file: %s", error or "error")
            return a
        except (aiohttp.ClientError, TimeoutError) as exc:
            log.info("Slack files.info failed for a shared file: %s", type(exc).__name__)
            return a
        found = file_attachments([resp.get("file")])
        return found[0] if found else a

    return tuple(await asyncio.gather(*(one(a) for a in attachments)))
