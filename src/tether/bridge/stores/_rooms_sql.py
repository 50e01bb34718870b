"""The room rules as SQL, for both dialects (see ``custody._rooms`` for the rules themselves).

Each piece is one self-contained condition or statement, added beside a query's other
conditions (``AND <gate>``), so other rules on the same queries (a not-before time, say) stay
separate lines that merge cleanly.
"""

from __future__ import annotations

from typing import Final

ROOM_CUSTODY_STATES: Final = "'assigned', 'claimed', 'pending', 'result'"
"""The states of ``tasks_room_custody``'s predicate, word for word (both dialects' indexes):
a condition must repeat them so SQLite's planner uses that index. Not ``IN_CUSTODY_SQL``: it
gained ``waiting`` with durable runs, and the gate's reply test then scanned every earlier
task of the table, delivered ones included (issue 39: 3.7 ms instead of 0.24 per ready read of
40 rooms after 1,000 replies)."""
SUPERSEDED_OWNER: Final = "superseded"
"""The owner a superseded task's no-send result records when no worker held it (the schema
wants an owner on every result)."""


def room_gate(t: str, tasks: str, order: str, sendable: str) -> str:
    """The claim gate on candidate row ``t``: may a task of this room run now?

    Always for a task without a room or ingested under ``concurrent``. Otherwise only when no
    earlier task of its room is still pending or assigned (it is the room's head), no task of
    its room is claimed, and no earlier one holds a reply not yet delivered (``sendable``: a
    condition on the other row ``o``, not a no-send result). ``order`` is arrival order
    (SQLite's ``rowid``, PostgreSQL's ``seq``); ``tasks`` the (schema-qualified) table.

    Each test is one seek in a partial index of the room's queue, claims or custody (their
    predicates are repeated word for word, so SQLite's planner matches them), so reading a
    task costs a few index probes whether its room holds one message or thousands.
    """
    return (
        f"({t}.room IS NULL OR {t}.room_policy = 'concurrent' OR ("
        f"NOT EXISTS (SELECT 1 FROM {tasks} o WHERE o.room = {t}.room "
        f"AND o.state IN ('assigned', 'pending') AND o.{order} < {t}.{order}) "
        f"AND NOT EXISTS (SELECT 1 FROM {tasks} o WHERE o.room = {t}.room "
        "AND o.state = 'claimed') "
        f"AND NOT EXISTS (SELECT 1 FROM {tasks} o WHERE o.room = {t}.room "
        f"AND o.state IN ({ROOM_CUSTODY_STATES}) AND o.state = 'result' AND {sendable} "
        f"AND o.{order} < {t}.{order})))"
    )


def room_busy(tasks: str) -> str:
    """The rooms with a task claimed now (a run in flight): the lead moves a room to another
    worker only while it has none."""
    return f"SELECT DISTINCT room FROM {tasks} WHERE state = 'claimed' AND room IS NOT NULL"
