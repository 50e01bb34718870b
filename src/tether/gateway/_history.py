"""A room's history, bounded (issue #48): one read of ``GET /v1/messages?room=R`` held every
body whole, 200 messages of 32,000 characters with replies of a megabyte each took 38 MB a
response, and six at once took the gateway from 67 to 413 MB.

In a history page each text, reply and question is cut to ``SHOWN_CHARS`` characters in the
query itself (the whole never leaves SQLite), a message keeps its newest ``SHOWN_QUESTIONS``
questions, and a page stops at ``PAGE_BUDGET_BYTES`` of such text (always one message at
least). A cut message says so (``truncated``); ``GET /v1/messages/<id>`` has it whole, and
``before=<id>`` reads the page before a message.
"""

from __future__ import annotations

import sqlite3
from typing import Final

import attrs

SHOWN_CHARS: Final = 2_000
"""Characters of a message's text, reply, partial reply or question a history page shows."""
SHOWN_QUESTIONS: Final = 8
"""A message's newest questions (the worker side's messages before its reply) a page shows."""
PAGE_BUDGET_BYTES: Final = 1 << 20
"""UTF-8 bytes of text one history page holds at most (past one message)."""

_CUT: Final = "substr({col}, 1, :shown)"
_COLUMNS: Final = (
    f"id, room, sender, {_CUT.format(col='body')}, created_at, state, lease_until, deliveries, "
    f"acked_at, {_CUT.format(col='reply')}, worker, answered_at, "
    "(SELECT reason FROM rejections r WHERE r.id = tasks.id), priority, "
    "(SELECT at FROM notices n WHERE n.id = tasks.id AND n.kind = 'stall'), "
    "(SELECT age_s FROM notices n WHERE n.id = tasks.id AND n.kind = 'stall'), trace, "
    "(SELECT json_group_array(json_object('seq', q.seq, 'body', q.body, 'at', q.at)) FROM "
    f"(SELECT seq, {_CUT.format(col='body')} AS body, at FROM messages m "
    "WHERE m.id = tasks.id ORDER BY seq DESC LIMIT :questions) q), tenant, "
    # was anything cut?
    "length(body) > :shown OR coalesce(length(reply), 0) > :shown OR EXISTS "
    "(SELECT 1 FROM messages m WHERE m.id = tasks.id AND length(m.body) > :shown) OR "
    "(SELECT count(*) FROM messages m WHERE m.id = tasks.id) > :questions"
)
_PAGE: Final = (
    f"SELECT {_COLUMNS} FROM tasks WHERE room = :room AND (:before IS NULL OR rowid < "
    "(SELECT rowid FROM tasks WHERE id = :before)) ORDER BY rowid DESC LIMIT :limit + 1"
)
_IN_ROOM: Final = "SELECT 1 FROM tasks WHERE id = ? AND room = ?"


class UnknownBefore(LookupError):
    """``before`` names no message of the room."""


@attrs.frozen
class HistoryRow:
    """One message of a page, as ``StoredTask``'s fields (cut), and whether anything was."""

    fields: tuple[object, ...]
    cut: bool


@attrs.frozen
class HistoryPage:
    """A page of a room's history, oldest first; ``more``: older messages exist."""

    rows: tuple[HistoryRow, ...]
    more: bool


def read_page(db: sqlite3.Connection, room: str, limit: int, before: str | None) -> HistoryPage:
    """The room's last ``limit`` messages (before message ``before``, if given), cut and
    within the page's budget."""
    if before is not None and db.execute(_IN_ROOM, (before, room)).fetchone() is None:
        raise UnknownBefore(f"'before' names no message of room {room!r}: {before!r:.140}")
    params = {"room": room, "before": before, "limit": limit}
    params.update(shown=SHOWN_CHARS, questions=SHOWN_QUESTIONS)
    rows = db.execute(_PAGE, params).fetchall()
    more = len(rows) > limit
    kept: list[HistoryRow] = []
    spent = 0
    for row in rows[:limit]:  # newest first
        size = sum(len(str(row[i] or "").encode("utf-8", "surrogatepass")) for i in (3, 9, 17))
        if kept and spent + size > PAGE_BUDGET_BYTES:
            more = True
            break
        spent += size
        kept.append(HistoryRow(tuple(row[:-1]), bool(row[-1])))
    return HistoryPage(tuple(reversed(kept)), more)
