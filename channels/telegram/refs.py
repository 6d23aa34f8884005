"""What Telegram keeps in ``MessageRef.extra`` (adapter-private, compact JSON).

* a sent answer: ``{"p": [[message_id, digest], ...]}`` - every Telegram
  message the answer occupies, in order, with a fingerprint of what each shows
  (so a streamed edit only touches parts that changed and an answer that
  outgrows 4096 characters continues in new messages);
* a button press (``InboundEvent.reply_ref``): ``{"cq": "<callback_query id>"}``
  so ``Outbox.answer_action`` can answer the press.

A message whose send left and was never answered (a timeout or 504: it may
show, under an id the bot does not know) is kept in its place as ``[0, digest]``
(``UNKNOWN``): never sent again, never edited or deleted; the answer's other
messages are edited around it.

``MessageRef.message_id`` is the first known message's id.
"""

from __future__ import annotations

import orjson

UNKNOWN = 0  # the message id of a message that may show under an id we do not know


def encode_parts(parts: list[tuple[int, str]]) -> str:
    return orjson.dumps({"p": [[m, d] for m, d in parts]}).decode()


def encode_callback(callback_query_id: str) -> str:
    return orjson.dumps({"cq": callback_query_id}).decode()


def _load(extra: str) -> dict[str, object]:
    if not extra:
        return {}
    try:
        data = orjson.loads(extra)
    except orjson.JSONDecodeError:
        return {}
    return data if isinstance(data, dict) else {}


def decode_parts(extra: str, first_message_id: str) -> list[tuple[int, str]]:
    """The (message_id, digest) list; a ref without it is one message of unknown content."""
    raw = _load(extra).get("p")
    out: list[tuple[int, str]] = []
    if isinstance(raw, list):
        for item in raw:
            if isinstance(item, list) and len(item) == 2 and isinstance(item[0], int):
                out.append((item[0], str(item[1])))
    if not out and first_message_id.lstrip("-").isdigit():
        out = [(int(first_message_id), "")]
    return out


def decode_callback(extra: str) -> str:
    cq = _load(extra).get("cq")
    return cq if isinstance(cq, str) else ""
