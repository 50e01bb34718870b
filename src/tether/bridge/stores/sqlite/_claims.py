"""A worker's claim on SQLite, in the caller's transaction: the worker's own ``claim_many``
and the lead's claims for its own process's workers (``plan_assign_and_claim``) are one rule.

Suspects first where the process quarantines them, else the rule of a suspect running alone
(``custody._crashes``); then the worker's own assignments, then (leaderless) pending tasks,
each in queue order.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any

from ...custody._crashes import process_prefix
from ...custody._records import Hand
from ...custody._rules import Claim, queues_of
from . import _rows
from . import _sql as sql
from ._ready import WalkHint, ready_pending


def claim_rows(
    conn: sqlite3.Connection,
    walks: WalkHint,
    worker: str,
    limit: int,
    leaderless: bool,
    now: float,
    until: float,
    quarantine: int | None,
    queues: str,
) -> list[Claim]:
    """Claim up to ``limit`` tasks for ``worker``, leases until ``until``. With ``quarantine``
    a number: up to that many suspects first (marked quarantined), then ordinary work; None:
    the rule of suspects running alone in their process. Pending tasks and suspects only of
    ``queues`` (a JSON list)."""
    prefix = process_prefix(worker)

    def op(conn: sqlite3.Connection) -> list[Claim]:
        p = {"worker": worker, "prefix": prefix, "now": now, "until": until, "quarantined": 0}
        p["queues"] = queues
        if quarantine is not None:
            # suspects run in quarantine children (custody._crashes), most crashed first,
            # one statement each (so each passes its room's gate), beside ordinary work
            suspects: list[Claim] = []
            for _ in range(min(quarantine, limit)):
                rows = conn.execute(sql.CLAIM_SUSPECT, {**p, "quarantined": 1}).fetchall()
                if not rows:
                    break
                suspects += [_suspect_claim(conn, r, worker, now, until) for r in rows]
            if len(suspects) == limit:
                return suspects
            return suspects + ordinary(conn, limit - len(suspects), True)
        # a suspect runs alone (custody._crashes): first the isolation rule, then the
        # worker's own assignments, then (leaderless) pending tasks, each queue in
        # (priority, age) order; one UPDATE claims each queue's share
        here, anywhere, waiting, mine = conn.execute(sql.SUSPECT_FLAGS, p).fetchone()
        if here:
            return []  # a suspect runs in this process: nothing else does
        if waiting and not anywhere:
            if conn.execute(sql.PROCESS_BUSY, p).fetchone()[0]:
                return []  # the process drains, then takes the suspect alone
            rows = conn.execute(sql.CLAIM_SUSPECT, p).fetchall()
            for room in {room for _, _, room, *_ in rows if room is not None}:
                _rows.note_room(conn, room, worker, now)
            return [_rows.claim_of(r, worker, until) for r in rows]
        return ordinary(conn, limit, bool(mine))

    def ordinary(conn: sqlite3.Connection, limit: int, mine: bool) -> list[Claim]:
        assigned = (worker, until, now, worker, limit)
        rows = conn.execute(sql.CLAIM_ASSIGNED, assigned).fetchall() if mine else []
        taken = len(rows)
        ready = (
            ready_pending(conn, now, limit - taken, hint=walks, queues=queues)
            if taken < limit and leaderless
            else []
        )
        if ready:
            rows += conn.execute(
                sql.claim_ready(len(ready)), (worker, until, now, *ready)
            ).fetchall()
        if len(rows) > 1:  # RETURNING order is unspecified: queue order, assignments first
            rows[:taken] = sorted(rows[:taken], key=_rows.queue_place)
            rows[taken:] = sorted(rows[taken:], key=_rows.queue_place)
        for room in {room for _, _, room, *_ in rows if room is not None}:
            _rows.note_room(conn, room, worker, now)  # the claiming worker keeps these rooms
        return [_rows.claim_of(r, worker, until) for r in rows]

    return op(conn)


def claim_for(
    conn: sqlite3.Connection, walks: WalkHint, worker: str, hand: Hand, now: float, until: float
) -> list[Claim]:
    """The lead's claim for ``worker`` of its own process: what the worker's own claim of its
    assignments would take (never leaderless), in the sweep's transaction."""
    quarantine = 0 if hand.quarantines else None
    row = conn.execute("SELECT queues FROM workers WHERE name = ?", (worker,)).fetchone()
    queues = json.dumps(queues_of(None if row is None else row[0]))
    return claim_rows(conn, walks, worker, hand.slots, False, now, until, quarantine, queues)


def _suspect_claim(
    conn: sqlite3.Connection, row: Sequence[Any], worker: str, now: float, until: float
) -> Claim:
    """A suspect claimed to run in quarantine (its room noted for the worker)."""
    claim = _rows.claim_of(row, worker, until, suspect=True)
    if claim.task.room is not None:
        _rows.note_room(conn, claim.task.room, worker, now)
    return claim
