"""OutboundMessage -> chat.postMessage / chat.update arguments (pure).

A message becomes one or more Slack messages of at most ``MESSAGE_LIMIT``
characters of mrkdwn, each made of section blocks of at most
``SECTION_LIMIT`` characters; buttons become one actions block on the last
message.  ``text`` always carries the same content (notifications, clients
without blocks).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from agent_core.events import Button, ButtonStyle, OutboundMessage

from .mrkdwn import split_text, to_mrkdwn

MESSAGE_LIMIT = 3_900  # Slack truncates ``text`` past 4,000 characters
SECTION_LIMIT = 3_000  # section block text limit
MAX_BLOCKS = 50
BUTTON_TEXT_LIMIT = 75
ACTION_PREFIX = "parley"
ACTIONS_BLOCK_ID = "parley_actions"

Block = dict[str, Any]


@dataclass(frozen=True)
class SlackPost:
    """Arguments of one chat.postMessage / chat.update (channel and ts added by the sender)."""

    text: str
    blocks: list[Block] = field(default_factory=list)

    def kwargs(self, *, update: bool = False) -> dict[str, Any]:
        """``text`` and ``blocks``.  A new message without blocks sends no ``blocks``
        field (Slack may refuse an empty array); an update (``chat.update``) always
        sends it: there ``blocks: []`` removes the message's previous blocks, while
        a missing field would keep them."""
        if self.blocks or update:
            return {"text": self.text, "blocks": self.blocks}
        return {"text": self.text}


def action_id(button: Button, index: int) -> str:
    """A stable action_id: ``parley:<label slug>`` (index-suffixed if the slug is empty)."""
    slug = re.sub(r"[^a-z0-9]+", "_", button.label.lower()).strip("_")[:40]
    return f"{ACTION_PREFIX}:{slug or index}"


def _button(button: Button, index: int, used: set[str]) -> Block:
    aid = action_id(button, index)
    if aid in used:
        aid = f"{aid}_{index}"
    used.add(aid)
    label = button.label.strip() or "·"
    if len(label) > BUTTON_TEXT_LIMIT:
        label = label[: BUTTON_TEXT_LIMIT - 1] + "…"
    el: Block = {
        "type": "button",
        "action_id": aid,
        "text": {"type": "plain_text", "text": label, "emoji": True},
        "value": button.payload,
    }
    if button.style in (ButtonStyle.PRIMARY, ButtonStyle.DANGER):
        el["style"] = button.style.value
    return el


def actions_block(buttons: tuple[Button, ...]) -> Block:
    used: set[str] = set()
    return {
        "type": "actions",
        "block_id": ACTIONS_BLOCK_ID,
        "elements": [_button(b, i, used) for i, b in enumerate(buttons[:25])],
    }


def sections(mrkdwn: str) -> list[Block]:
    return [
        {"type": "section", "text": {"type": "mrkdwn", "text": part}}
        for part in split_text(mrkdwn, SECTION_LIMIT)
    ]


def _post(chunk: str, buttons: tuple[Button, ...] = ()) -> SlackPost:
    blocks = sections(chunk) if chunk.strip() else []
    if buttons:
        blocks.append(actions_block(buttons))
    return SlackPost(text=chunk, blocks=blocks[:MAX_BLOCKS])


def render(message: OutboundMessage) -> list[SlackPost]:
    """The Slack messages for ``message``, in order (never empty).  If Slack
    refuses their blocks, :func:`text_only` gives what to send instead."""
    body = to_mrkdwn(message.text)
    if message.notice and body.strip():
        body = "_" + body.strip() + "_" if "\n" not in body and "_" not in body else body
    chunks = split_text(body, MESSAGE_LIMIT) if body.strip() else []
    if message.buttons and chunks and len(chunks[-1]) > SECTION_LIMIT:
        # the prompt with buttons must fit one section: move its head to a separate message
        last = chunks.pop()
        chunks.extend(split_text(last, SECTION_LIMIT))
    if not chunks:
        chunks = [" "] if message.buttons else ["…"]
    posts = [_post(c) for c in chunks[:-1]]
    posts.append(_post(chunks[-1], message.buttons))
    return posts


def text_only(post: SlackPost) -> SlackPost:
    """``post`` without its text blocks, for when Slack refused its blocks
    (``invalid_blocks``): ``text`` alone carries the content (Slack renders it as
    mrkdwn); the buttons, if any, stay as the only block (an actions block alone is
    a valid message), so an approval prompt keeps them."""
    return SlackPost(post.text, [b for b in post.blocks if b.get("type") == "actions"])


def render_preview(message: OutboundMessage) -> SlackPost:
    """One message for a streamed (non-final) edit: the text so far, cut at the limit."""
    body = to_mrkdwn(message.text)
    chunks = split_text(body, MESSAGE_LIMIT) if body.strip() else ["…"]
    head = chunks[0]
    if len(chunks) > 1:
        head = head.rstrip() + " …"
    return _post(head)
