"""Gateway protocol v1, optional route ``POST /v1/tasks/<id>/messages`` (issue #36): a message
to the person before the task's final reply (an ask's question), idempotent by (id, seq).

Request ``{"seq": 1, "body": "8 pm, shall I book?"}``; answer ``{"id", "seq", "duplicate"}``
(``duplicate``: the gateway already had this seq of this task and kept the first body). A
gateway without the route answers 404; the bridge then ends the ask ``unsupported``.
"""

from __future__ import annotations

from typing import Any, Final

import attrs

from .._plumbing._converter import structure
from ._messages import require_object

MAX_MESSAGE_CHARS: Final = 16_000
"""The longest message body (characters), as a question may be."""


@attrs.frozen
class InterimMessage:
    seq: int
    body: str


@attrs.frozen
class InterimReceipt:
    id: str
    seq: int
    duplicate: bool = False


def parse_interim(data: Any) -> InterimMessage:
    message = structure(require_object(data), InterimMessage)
    if isinstance(message.seq, bool) or message.seq < 1:
        raise ValueError(f"seq must be an integer >= 1, got {message.seq!r}")
    if not message.body.strip():
        raise ValueError("body is empty")
    if len(message.body) > MAX_MESSAGE_CHARS:
        raise ValueError(
            f"body has {len(message.body)} characters; the limit is {MAX_MESSAGE_CHARS}"
        )
    if "\x00" in message.body:
        raise ValueError("body contains a NUL character")
    return message
