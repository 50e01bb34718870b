"""Durable runs on PostgreSQL (issue #35): the steps table, parks and wake-ups as SQL, and the
steps part that runs it.

A step is recorded by ONE statement that reads the task under the lease fence ``FOR SHARE``
and inserts the step: the row lock makes a concurrent move of the task (an expiry, a cancel,
another attempt's claim) wait for the insert's commit, or the fence is read again after that
move and no longer holds. So a zombie whose lease is gone records nothing, and a run that
took over never sees a zombie's record appear after its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import attrs
import psycopg

from ...custody._children import MAX_CHILDREN, ChildView, SpawnError
from ...custody._records import StepRecord, WaitingRuns
from ...custody._rules import Claim, CustodyState, Task, TaskRecord
from ...custody._steps import MAX_TASK_STEP_BYTES, over_task_limit, step_is_a_promise
from ...custody._versions import InFlight
from .._common import FoundState, stale_lease, task_gone
from .._steps_frame import StepsFrame
from ._connection import Conn
from ._db import PostgresDb
from ._made import ingest_made, made_params
from ._rows import decode, fence, record_of, seen
from ._sql import FENCE, RECORD_COLS

_COLS: Final = "name, value, at, attempt, size, version, fingerprint, call"
_DONE: Final = "('result', 'delivered', 'dead')"
_LIVE: Final = "('pending', 'assigned', 'claimed', 'waiting')"


@attrs.frozen
class StepsSql:
    """The statements of durable runs, with the schema (quoted) filled in once."""

    s: str

    @property
    def steps(self) -> str:
        return f"SELECT {_COLS} FROM {self.s}.steps WHERE task_id = %(id)s ORDER BY seq, at"

    @property
    def record(self) -> str:
        """One row: (fence held?, inserted?, the task's total before, the name's earlier
        record's columns or NULLs)."""
        return (
            f"WITH f AS (SELECT t.id, t.attempt FROM {self.s}.tasks t WHERE {FENCE} FOR SHARE), "
            f"old AS (SELECT {_COLS} FROM {self.s}.steps "
            "WHERE task_id = %(id)s AND name = %(name)s), "
            "tot AS (SELECT coalesce(sum(size), 0) AS total, coalesce(max(seq), 0) AS seq "
            f"FROM {self.s}.steps WHERE task_id = %(id)s), "
            f"ins AS (INSERT INTO {self.s}.steps "
            "(task_id, name, seq, value, at, attempt, size, version, fingerprint, call) "
            "SELECT f.id, %(name)s, tot.seq + 1, %(value)s, %(now)s, f.attempt, %(size)s, "
            "%(version)s, %(fingerprint)s, %(call)s "
            "FROM f, tot WHERE NOT EXISTS (SELECT FROM old) "
            f"AND tot.total + %(size)s <= {MAX_TASK_STEP_BYTES} "
            "ON CONFLICT (task_id, name) DO NOTHING RETURNING 1) "
            "SELECT EXISTS (SELECT FROM f), EXISTS (SELECT FROM ins), tot.total, "
            "old.name, old.value, old.at, old.attempt, old.size, old.version, old.fingerprint, "
            "old.call "
            "FROM tot LEFT JOIN old ON true"
        )

    @property
    def _first_version(self) -> str:
        """The version a task's runs began under (its first record's): what it counts under."""
        return (
            f"(SELECT s.version FROM {self.s}.steps s WHERE s.task_id = t.id "
            "ORDER BY s.seq LIMIT 1)"
        )

    @property
    def versions(self) -> str:
        return (
            f"SELECT {self._first_version} AS v, count(*) AS n FROM {self.s}.tasks t "
            f"WHERE t.state IN {_LIVE} GROUP BY v ORDER BY n DESC, v"
        )

    @property
    def of_version(self) -> str:
        return (
            f"SELECT {RECORD_COLS} FROM {self.s}.tasks t WHERE t.state IN {_LIVE} "
            f"AND {self._first_version} IS NOT DISTINCT FROM %(version)s::text "
            "ORDER BY t.created_at, t.id LIMIT %(limit)s"
        )

    @property
    def park(self) -> str:
        return (
            f"UPDATE {self.s}.tasks t SET state = 'waiting', owner = NULL, lease_until = NULL, "
            "not_before = %(until)s, reason = %(why)s, updated_at = %(now)s "
            f"WHERE {FENCE} RETURNING t.id"
        )

    @property
    def wake_due(self) -> str:
        return (
            f"WITH due AS (SELECT id FROM {self.s}.tasks WHERE state = 'waiting' "
            "AND not_before <= %(now)s ORDER BY not_before LIMIT %(limit)s "
            "FOR UPDATE SKIP LOCKED), "
            f"u AS (UPDATE {self.s}.tasks t SET state = 'pending', updated_at = %(now)s "
            "FROM due WHERE t.id = due.id AND t.state = 'waiting' "
            "RETURNING t.id, t.not_before) "
            "SELECT id, not_before, pg_notify(%(chan)s, 'pending')::text FROM u "
            "ORDER BY not_before, id"
        )

    @property
    def spawn_head(self) -> str:
        """One row: (fence held?, the parent's children so far, the spawn's earlier record's
        columns or NULLs); the parent's row kept ``FOR SHARE`` to the commit."""
        return (
            f"WITH f AS (SELECT t.id FROM {self.s}.tasks t WHERE {FENCE} FOR SHARE) "
            "SELECT EXISTS (SELECT FROM f), "
            f"(SELECT count(*) FROM {self.s}.tasks WHERE parent = %(id)s), "
            "old.name, old.value, old.at, old.attempt, old.size, old.version, old.fingerprint, "
            "old.call "
            "FROM (SELECT 1) x "
            f"LEFT JOIN (SELECT {_COLS} FROM {self.s}.steps "
            "WHERE task_id = %(id)s AND name = %(name)s) old ON true"
        )

    @property
    def children(self) -> str:
        return (
            f"SELECT id, state, result, reason FROM {self.s}.tasks "
            "WHERE parent = %(id)s AND id = ANY(%(ids)s::text[])"
        )

    @property
    def await_children(self) -> str:
        """The children of this join awaited, and only they (an earlier join's, one that
        timed out, no longer hold the parent's wake); their rows locked in id order, the
        order a merged completion's statement locks them in (no deadlock between the two)."""
        return (
            f"WITH l AS (SELECT id FROM {self.s}.tasks WHERE parent = %(id)s "
            "AND (awaited OR id = ANY(%(ids)s::text[])) ORDER BY id FOR UPDATE) "
            f"UPDATE {self.s}.tasks t SET awaited = (t.id = ANY(%(ids)s::text[])) FROM l "
            "WHERE t.id = l.id"
        )

    @property
    def park_join(self) -> str:
        """The parent's move, in a statement after its children's marks (a new snapshot: a
        child made done meanwhile is seen done)."""
        live = (
            f"EXISTS (SELECT FROM {self.s}.tasks c WHERE c.parent = %(id)s "
            f"AND c.state IN {_LIVE} AND c.awaited)"
        )
        return (
            f"WITH j AS (SELECT {live} AS live) "
            f"UPDATE {self.s}.tasks t SET state = CASE WHEN j.live THEN 'waiting' "
            "ELSE 'pending' END, owner = NULL, lease_until = NULL, "
            "not_before = CASE WHEN j.live THEN %(until)s::float8 END, "
            "reason = CASE WHEN j.live THEN %(why)s ELSE t.reason END, updated_at = %(now)s "
            f"FROM j WHERE {FENCE} RETURNING t.state, pg_notify(%(chan)s, 'pending')::text"
        )

    @property
    def wake_joined(self) -> str:
        return (
            f"WITH w AS (SELECT p.id FROM {self.s}.tasks p WHERE p.state = 'waiting' "
            "AND p.reason LIKE 'joining %%' AND NOT EXISTS (SELECT FROM "
            f"{self.s}.tasks c WHERE c.parent = p.id AND c.state IN {_LIVE} AND c.awaited) "
            "LIMIT %(limit)s FOR UPDATE SKIP LOCKED), "
            f"u AS (UPDATE {self.s}.tasks t SET state = 'pending', not_before = NULL, "
            "updated_at = %(now)s FROM w WHERE t.id = w.id AND t.state = 'waiting' "
            "RETURNING t.id) "
            "SELECT id, pg_notify(%(chan)s, 'pending')::text FROM u"
        )

    @property
    def orphans(self) -> str:
        return (
            f"WITH o AS (SELECT c.id, c.state AS was, c.parent, p.state AS ended "
            f"FROM {self.s}.tasks c LEFT JOIN {self.s}.tasks p ON p.id = c.parent "
            f"WHERE c.parent IS NOT NULL AND c.state IN {_LIVE} "
            f"AND (p.id IS NULL OR p.state IN {_DONE}) LIMIT %(limit)s "
            "FOR UPDATE OF c SKIP LOCKED), "
            f"u AS (UPDATE {self.s}.tasks t SET state = 'dead', owner = NULL, "
            "lease_until = NULL, not_before = NULL, updated_at = %(now)s, "
            "reason = CASE WHEN o.ended IS NULL THEN 'cancelled: its parent ' || o.parent "
            "|| ' is no longer in the store' ELSE 'cancelled: its parent ' || o.parent "
            "|| ' ended (' || o.ended || ') before joining it' END "
            "FROM o WHERE t.id = o.id AND t.state = o.was RETURNING t.id, o.was, t.reason) "
            "SELECT id, was, reason FROM u"
        )

    @property
    def waiting_runs(self) -> str:
        return f"SELECT count(*), min(not_before) FROM {self.s}.tasks WHERE state = 'waiting'"

    @property
    def forget_ids(self) -> str:
        return (
            f"DELETE FROM {self.s}.steps WHERE task_id IN (SELECT id FROM {self.s}.tasks "
            "WHERE state = 'dead' AND id = ANY(%(ids)s::text[]))"
        )

    @property
    def forget_matching(self) -> str:
        return (
            f"DELETE FROM {self.s}.steps WHERE task_id IN (SELECT id FROM {self.s}.tasks "
            "WHERE state = 'dead' "
            "AND (%(text)s::text IS NULL OR strpos(reason, %(text)s::text) > 0) "
            "AND (%(skip)s::text IS NULL OR reason IS NULL "
            "OR left(reason, length(%(skip)s::text)) <> %(skip)s::text) "
            "ORDER BY updated_at, seq LIMIT %(limit)s)"
        )


def time_out(conn: Conn, s: str, ids: Sequence[str], now: float) -> None:
    """The reconciler woke ``ids``: an ask still open past its deadline timed out (issue #36)."""
    if ids:
        conn.execute(
            f"UPDATE {s}.asks SET status = 'timeout' WHERE task_id = ANY(%(ids)s) "
            "AND status = 'open' AND deadline <= %(now)s",
            {"ids": list(ids), "now": now},
        )


@attrs.define(eq=False)
class PostgresSteps(StepsFrame):
    """The steps part: steps, parks and wake-ups on the store's ``PostgresDb``."""

    db: PostgresDb
    _steps_sql: StepsSql = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self._steps_sql = StepsSql(self.db.s)

    async def _steps(self, id: str) -> list[StepRecord]:
        sql = self._steps_sql.steps
        return await self.db.run(
            lambda conn: [StepRecord(*row) for row in conn.execute(sql, {"id": id})]
        )

    async def _record_step(
        self,
        claim: Claim,
        name: str,
        value: str,
        size: int,
        now: float,
        version: str | None,
        fingerprint: str | None,
        call: str | None,
    ) -> StepRecord:
        params = fence(claim, now)
        params.update(
            name=name,
            value=value,
            size=size,
            version=version,
            fingerprint=fingerprint,
            call=call,
        )
        sql, state_sql = self._steps_sql.record, self.db.sql.cas_state

        def op(conn: Conn) -> StepRecord | FoundState | None:
            row = conn.execute(sql, params).fetchone()
            assert row is not None
            fenced, inserted, total, *old = row
            if not fenced:
                return seen(conn, state_sql, params)
            if inserted:
                return StepRecord(name, value, now, claim.attempt, size, version, fingerprint, call)
            if old[0] is not None:
                return StepRecord(*old)
            raise over_task_limit(name, int(total), size)

        outcome = await self.db.run(op, promise=step_is_a_promise(name))
        if isinstance(outcome, StepRecord):
            return outcome
        if outcome is None:
            raise task_gone(claim.task.id, f"record step {name!r} of")
        raise stale_lease(outcome, claim, now, f"record step {name!r} of")

    async def _spawn(
        self,
        claim: Claim,
        step: str,
        value: str,
        child: Task,
        headers: str,
        now: float,
        version: str | None,
        fingerprint: str,
    ) -> tuple[StepRecord, bool]:
        params = fence(claim, now)
        params.update(
            name=step,
            value=value,
            size=len(value.encode("utf-8")),
            version=version,
            fingerprint=fingerprint,
            call=None,
        )
        steps_sql, sql = self._steps_sql, self.db.sql
        ingest = made_params(self.db, child, headers, now)

        def op(conn: Conn) -> tuple[StepRecord, bool] | FoundState | None:
            with conn.transaction():
                row = conn.execute(steps_sql.spawn_head, params).fetchone()
                assert row is not None
                fenced, count, *old = row
                if not fenced:
                    return seen(conn, sql.cas_state, params)
                if old[0] is not None:
                    return StepRecord(*old), False
                if count >= MAX_CHILDREN:
                    raise SpawnError(
                        f"task {claim.task.id!r} has spawned {count} children: a parent may "
                        f"spawn at most {MAX_CHILDREN}"
                    )
                new = ingest_made(conn, self.db, ingest)
                recorded = conn.execute(steps_sql.record, params).fetchone()
                assert recorded is not None
                assert recorded[0]  # the fence is held (FOR SHARE)
                if not recorded[1]:
                    raise over_task_limit(step, int(recorded[2]), params["size"])
            size = params["size"]
            return StepRecord(step, value, now, claim.attempt, size, version, fingerprint), new

        outcome = await self.db.run(op)
        if isinstance(outcome, tuple):
            return outcome
        if outcome is None:
            raise task_gone(claim.task.id, f"spawn {step!r} of")
        raise stale_lease(outcome, claim, now, f"spawn {step!r} of")

    async def _children(self, parent: str, ids: Sequence[str]) -> list[ChildView | None]:
        sql, params = self._steps_sql.children, {"id": parent, "ids": list(ids)}

        def op(conn: Conn) -> dict[str, ChildView]:
            return {
                id: ChildView(id, CustodyState(state), None if r is None else decode(r), why)
                for id, state, r, why in conn.execute(sql, params)
            }

        found = await self.db.run(op)
        return [found.get(id) for id in ids]

    async def _park_join(
        self, claim: Claim, ids: Sequence[str], until: float, why: str, now: float
    ) -> CustodyState:
        params = fence(claim, now)
        params.update(ids=list(ids), until=until, why=why, chan=self.db.channel)
        steps_sql, state_sql = self._steps_sql, self.db.sql.cas_state

        def once(conn: Conn) -> CustodyState | None:
            with conn.transaction():
                conn.execute(steps_sql.await_children, params)  # the children's rows first
                row = conn.execute(steps_sql.park_join, params).fetchone()
                if row is None:
                    raise psycopg.Rollback  # fenced out: a zombie's marks go with it
            return None if row is None else CustodyState(row[0])

        def op(conn: Conn) -> CustodyState | FoundState | None:
            for tries in range(1, 4):
                try:
                    moved = once(conn)
                except psycopg.errors.DeadlockDetected:  # the server chose it: nothing written
                    if tries == 3:
                        raise
                    continue
                return moved if moved is not None else seen(conn, state_sql, params)
            raise AssertionError("unreachable")

        outcome = await self.db.run(op)
        if isinstance(outcome, CustodyState):
            return outcome
        if outcome is None:
            raise task_gone(claim.task.id, "park")
        raise stale_lease(outcome, claim, now, "park")

    async def _settle_children(
        self, limit: int, now: float
    ) -> tuple[list[str], list[tuple[str, CustodyState, str]]]:
        steps_sql = self._steps_sql
        params: dict[str, Any] = {"limit": limit, "now": now, "chan": self.db.channel}

        def op(conn: Conn) -> tuple[list[str], list[tuple[str, CustodyState, str]]]:
            with conn.pipeline():  # an idle pass: one round trip for both
                joined = conn.execute(steps_sql.wake_joined, params)
                orphaned = conn.execute(steps_sql.orphans, params)
            woken = [r[0] for r in joined.fetchall()]
            found = orphaned.fetchall()
            cancelled = [(id, CustodyState(was), why) for id, was, why in found]
            while found and len(cancelled) < limit:  # their own children: orphans now
                params["limit"] = limit - len(cancelled)
                found = conn.execute(steps_sql.orphans, params).fetchall()
                cancelled.extend((id, CustodyState(was), why) for id, was, why in found)
            return woken, cancelled

        return await self.db.run(op)

    async def _park(self, claim: Claim, until: float, why: str, now: float) -> None:
        params = fence(claim, now)
        params.update(until=until, why=why)
        _, before = await self.db.cas(self._steps_sql.park, params)
        if before is not None:
            raise stale_lease(before, claim, now, "park")

    async def _wake_due(self, limit: int, now: float) -> list[str]:
        sql, s = self._steps_sql.wake_due, self.db.s
        params = {"now": now, "limit": limit, "chan": self.db.channel}

        def op(conn: Conn) -> list[str]:
            with conn.transaction():
                ids = [r[0] for r in conn.execute(sql, params)]
                time_out(conn, s, ids, now)  # an ask past its deadline (issue #36)
            return ids

        return await self.db.run(op)

    async def waiting_runs(self) -> WaitingRuns:
        sql = self._steps_sql.waiting_runs

        def op(conn: Conn) -> WaitingRuns:
            row = conn.execute(sql).fetchone()
            assert row is not None
            count, first = row
            return WaitingRuns(int(count), None if first is None else float(first))

        return await self.db.run(op)

    async def versions_in_flight(self) -> list[InFlight]:
        sql = self._steps_sql.versions
        return await self.db.run(
            lambda conn: [InFlight(v, int(n)) for v, n in conn.execute(sql).fetchall()]
        )

    async def _records_of_version(self, version: str | None, limit: int) -> list[TaskRecord]:
        sql, params = self._steps_sql.of_version, {"version": version, "limit": limit}
        return await self.db.run(
            lambda conn: [record_of(row) for row in conn.execute(sql, params).fetchall()]
        )

    async def forget_dead_steps(
        self, ids: Sequence[str] | None, text: str | None, limit: int, skip: str | None = None
    ) -> None:
        if ids is None:
            sql = self._steps_sql.forget_matching
            text = None if text is None else self.host.stored_text(text)
            params: dict[str, Any] = {"text": text, "limit": limit, "skip": skip}
        else:
            sql, params = self._steps_sql.forget_ids, {"ids": list(ids)}
        await self.db.run(lambda conn: conn.execute(sql, params))
