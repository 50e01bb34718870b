"""Assignments a newer pending task outranks (issue #47, item 2), in SQL for both backends.

A lead assigns a worker more than its free slots (prefetch), in queue order as it stood. A
task that arrives later with a better place (another tenant's turn, a higher priority) would
wait behind those assignments, defeating the queue's order; the lead gives them back
(``assigned -> pending``, the worst placed first) so its next sweep assigns in queue order.
"""

from __future__ import annotations

from typing import Final

SQLITE: Final = (
    "UPDATE tasks SET state = 'pending', owner = NULL, updated_at = :now WHERE id IN ("
    "SELECT t.id FROM tasks t JOIN (SELECT priority, fair, rowid AS r FROM tasks "
    "WHERE id = :ahead AND state = 'pending') h "
    "WHERE t.state = 'assigned' AND (t.priority, t.fair, t.rowid) > (h.priority, h.fair, h.r) "
    "ORDER BY t.priority DESC, t.fair DESC, t.rowid DESC LIMIT :limit) "
    "AND state = 'assigned' RETURNING id"
)


def postgres(s: str) -> str:
    """The same for PostgreSQL schema ``s`` (quoted), waking idle workers (``NOTIFY``); the
    rows are updated by key, as every batch statement finds them (a join to the picked rows
    made the planner guess their number and hash the whole table)."""
    return (
        f"WITH h AS (SELECT priority, fair, seq FROM {s}.tasks "
        "WHERE id = %(ahead)s AND state = 'pending'), "
        f"o AS (SELECT t.id FROM {s}.tasks t, h WHERE t.state = 'assigned' "
        "AND (t.priority, t.fair, t.seq) > (h.priority, h.fair, h.seq) "
        "ORDER BY t.priority DESC, t.fair DESC, t.seq DESC LIMIT %(limit)s "
        "FOR UPDATE OF t SKIP LOCKED), "
        f"u AS (UPDATE {s}.tasks t SET state = 'pending', owner = NULL, updated_at = %(now)s "
        "WHERE t.id = ANY(ARRAY(SELECT id FROM o)) AND t.state = 'assigned' RETURNING t.id) "
        "SELECT id, pg_notify(%(chan)s, 'pending')::text FROM u"
    )
