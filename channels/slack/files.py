"""Downloading a file a user posted in Slack, for the agent (a photo for a vision model).

A file's ``url_private`` is fetched with the bot token (``Authorization: Bearer``),
which Slack accepts only if the app has the ``files:read`` scope.  Without it
Slack does not refuse plainly: it redirects to the workspace's sign-in page
(``?redir=...``), or serves that page with a 200 (``text/html``).  Both are
refused here with a reason naming the scope, and logged once.  A redirect to
anywhere else is not followed either (the token would have to go along); the
reason names where it pointed.  ``url_private_download`` is preferred over
``url_private`` (channels/slack/parse.py): it serves the bytes themselves.

The address comes from the event and is kept in Redis, so it is not trusted: the
token goes only to ``https://files.slack.com``, or to the origin of
``SLACK_API_BASE_URL`` when that is not Slack's own (tests, proxies), never
elsewhere (:func:`channels.download.fetch_capped` checks, and never follows a
redirect).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from urllib.parse import urljoin

import aiohttp

from agent_core.errors import SendFailed
from agent_core.events import Attachment
from channels.download import Redirected, fetch_capped, origin

from .settings import DEFAULT_API_BASE_URL

log = logging.getLogger(__name__)

FILES_ORIGIN = "https://files.slack.com"
NEEDS_SCOPE = (
    "Slack did not hand over the file: the Slack app needs the files:read scope "
    "(add it and reinstall the app)"
)


def file_origins(api_base_url: str) -> frozenset[str]:
    """Where the bot token may be sent for a file."""
    origins = {FILES_ORIGIN}
    api = origin(api_base_url)
    if api and api != origin(DEFAULT_API_BASE_URL):
        origins.add(api)
    return frozenset(origins)


@dataclass
class SlackFiles:
    session: aiohttp.ClientSession
    token: str = field(repr=False)
    origins: frozenset[str] = frozenset({FILES_ORIGIN})
    _warned: bool = field(default=False, repr=False)

    async def fetch(self, attachment: Attachment, max_bytes: int) -> bytes:
        if attachment.size and attachment.size > max_bytes:
            raise SendFailed(f"file is larger than {max_bytes} bytes")
        url = attachment.ref
        if "://" not in url:
            raise SendFailed("Slack gave no download address for this file")
        if not self.token:
            raise SendFailed("no Slack bot token to download the file with")
        try:
            data, ctype = await fetch_capped(
                self.session,
                url,
                origins=self.origins,
                max_bytes=max_bytes,
                headers={"Authorization": f"Bearer {self.token}"},
            )
        except Redirected as exc:
            if "redir=" in exc.location:  # to the sign-in page: no files:read
                self._missing_scope()
                raise SendFailed(f"{NEEDS_SCOPE} ({exc})") from exc
            # elsewhere (another Slack file host, e.g. on Enterprise Grid): the token
            # does not follow a redirect, so the file is not fetched
            where = origin(urljoin(url, exc.location)) or "another address"
            raise SendFailed(f"Slack redirected the download to {where}; not followed") from exc
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
