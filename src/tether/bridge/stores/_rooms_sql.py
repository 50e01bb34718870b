"""The room rules as SQL, for both dialects (see ``custody._rooms`` for the rules themselves).

Each piece is one self-contained condition or statement, added beside a query's other
conditions (``AND <gate>``), so other rules on the same queries (a not-before time, say) stay
separate lines that merge cleanly.
"""

from __future__ import annotations

from typing import Final

from ._common import IN_CUSTODY_SQL

SUPERSEDED_OWNER: Final = "superseded"
"""The owner a superseded task's no-send result records when no worker held it (the schema
wants an owner on every result)."""


def room_gate(t: str, tasks: str, order: str, sendable: str) -> str:
    """The claim gate on candidate row ``t``: may a task of this room run now?

    Always for a task without a room or ingested under ``concurrent``. Otherwise only while
    no other task of its room is claimed, and no earlier one (by ``order``: arrival) is still
    pending, assigned, or a reply not yet delivered (``sendable``, a condition on the other row
    ``o``: not a no-send result). ``tasks`` is the (schema-qualified) table.
    """
    return (
        f"({t}.room IS NULL OR {t}.room_policy = 'concurrent' OR NOT EXISTS ("
        f"SELECT 1 FROM {tasks} o WHERE o.room = {t}.room AND o.state IN ({IN_CUSTODY_SQL}) "
        f"AND o.{order} <> {t}.{order} AND (o.state = 'claimed' OR (o.{order} < {t}.{order} "
        f"AND (o.state IN ('pending', 'assigned') OR (o.state = 'result' AND {sendable}))))))"
    )


def room_busy(tasks: str) -> str:
    """The rooms with a task claimed now (a run in flight): the lead moves a room to another
    worker only while it has none."""
    return f"SELECT DISTINCT room FROM {tasks} WHERE state = 'claimed' AND room IS NOT NULL"
