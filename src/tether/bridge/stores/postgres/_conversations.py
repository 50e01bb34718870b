"""PostgresStore's conversations (issue #34): the history window, the state written with a
result, the text a streaming run has shown, an operator's look and erasure, retention.

While a task is kept its turns are read from its own row (issue #49): its message at its
``turn_seq``, its stored reply at ``coalesce(reply_seq, turn_seq)`` (``reply_live``); the
``turns`` table holds the rest (asked, shown and interrupted turns, and the copies of deleted
tasks' turns), and a window merges the three, each read newest first on its own index. Ingest
numbers and counts the messages (``Sql.ingest``), the schema's triggers count a reply and copy
a deleted task's turns; this module writes only what no custody move carries. The state is
written in one transaction with the result: the room's row is locked (``FOR UPDATE``), the
result's compare-and-set runs, then the version is compared, so two runs of a ``concurrent``
room on two bridges cannot both store a state based on the same version.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Final

import attrs
import psycopg

from ...custody._conversation import (
    HISTORY_OUTCOMES,
    Conversation,
    ConversationCounts,
    ForgottenRoom,
    RoomView,
    StateConflict,
    Turn,
    decode_state,
)
from ...custody._rules import Claim, CustodyState, InvalidTask
from .._common import IN_CUSTODY_SQL
from .._conversations import KEPT_HEADERS_SQL, PRUNED_REASON, ConversationFrame
from .._frame import Moves
from ._connection import Conn
from ._db import PostgresDb
from ._rows import complete_params
from ._sql import FENCE, NO_DELIVERY_LEASE

log = logging.getLogger("tether.custody")
FORGET_TRIES: Final = 3
"""Tries of a forget PostgreSQL aborted to break a lock cycle (``_without_deadlock``)."""

_OUTCOMES: Final = ", ".join(f"'{o}'" for o in sorted(HISTORY_OUTCOMES))
_TURN_COLS: Final = "id, body, created_at, result, updated_at, state, no_send, turn_seq, reply_seq"
"""The columns of a task row its live turns are read from."""


def reply_live(t: str) -> str:
    """Task row ``t``'s reply is a turn: it has a place, is stored and sent, and the task is
    a result, delivered or dead (an undeliverable reply stays said; a re-drive drops it)."""
    return (
        f"coalesce({t}.reply_seq, {t}.turn_seq) IS NOT NULL AND NOT {t}.no_send "
        f"AND {t}.result IS NOT NULL AND {t}.state IN ('result', 'delivered', 'dead')"
    )


def _reply_outcome(t: str) -> str:
    return f"CASE WHEN {t}.state = 'delivered' THEN 'delivered' ELSE 'result' END"


def window_sql(s: str, room: str, below: str | None, outcomes: str | None) -> str:
    """The newest ``%(limit)s`` turns of room ``room`` (an SQL expression) before seq
    ``below`` (none: all), newest first, as ``(seq, role, text, task_id, at, outcome)``:
    merged from the user turns of the task rows (and their replies at the same seq), the
    replies placed apart (``reply_seq``) and the ``turns`` rows with ``outcomes`` (none: any),
    each a bounded read down its own index."""
    user = f" AND turn_seq < {below}" if below else ""
    apart = f" AND reply_seq < {below}" if below else ""
    rows = f" AND seq < {below}" if below else ""
    kept = f" AND outcome IN ({outcomes})" if outcomes else ""
    return (
        f"WITH a AS MATERIALIZED (SELECT {_TURN_COLS} FROM {s}.tasks "
        f"WHERE room = {room} AND turn_seq IS NOT NULL{user} "
        "ORDER BY turn_seq DESC LIMIT %(limit)s) "
        "SELECT seq, role, text, task_id, at, outcome FROM ("
        "SELECT turn_seq AS seq, 'user' AS role, body AS text, id AS task_id, "
        "created_at AS at, 'received' AS outcome FROM a "
        f"UNION ALL SELECT turn_seq, 'assistant', result, id, updated_at, {_reply_outcome('a')} "
        f"FROM a WHERE a.reply_seq IS NULL AND {reply_live('a')} "
        f"UNION ALL (SELECT reply_seq, 'assistant', result, id, updated_at, "
        f"{_reply_outcome('b')} FROM {s}.tasks b WHERE room = {room} "
        f"AND reply_seq IS NOT NULL{apart} AND {reply_live('b')} "
        "ORDER BY reply_seq DESC LIMIT %(limit)s) "
        f"UNION ALL (SELECT seq, role, text, task_id, at, outcome FROM {s}.turns "
        f"WHERE room = {room}{rows}{kept} ORDER BY seq DESC, role ASC LIMIT %(limit)s)"
        ") m ORDER BY seq DESC, role ASC LIMIT %(limit)s"
    )


def conversation_sql(s: str) -> str:
    """A run's conversation in one statement (one snapshot, one round trip): where task
    ``%(id)s``'s message sits (its row; a deleted task's copied user turn), the window of
    turns before it (kind 0, in time order) and its room's state and version (kind 1, last)."""
    window = window_sql(s, "(SELECT room FROM at)", "(SELECT seq FROM at)", _OUTCOMES)
    return (
        "WITH k AS MATERIALIZED (SELECT room, turn_seq AS seq FROM "
        f"{s}.tasks WHERE id = %(id)s), "
        f"p AS MATERIALIZED (SELECT room, seq FROM {s}.turns WHERE task_id = %(id)s "
        "AND role = 'user' AND NOT EXISTS (SELECT FROM k) ORDER BY seq DESC LIMIT 1), "
        "at AS MATERIALIZED (SELECT room, seq FROM k UNION ALL SELECT room, seq FROM p), "
        f"w AS ({window}) "
        "SELECT 0 AS kind, seq, role, text, task_id, at, outcome, NULL::text AS state, "
        "NULL::bigint AS version FROM w "
        "UNION ALL SELECT 1, NULL, NULL, NULL, NULL, NULL, NULL, c.state, c.version "
        f"FROM {s}.conversations c WHERE c.room = (SELECT room FROM at) "
        "ORDER BY kind, seq, role DESC"
    )


def lock_rooms_sql(s: str) -> str:
    """Take the conversation rows of a batch's rooms, in the rooms' order, before its tasks
    are inserted: the ingest numbers each room's messages under its row's lock, and
    two bridges ingesting batches that share rooms would otherwise lock them in their batches'
    orders (a deadlock). A new room's row is made here (its count starts at 0)."""
    return (
        f"INSERT INTO {s}.conversations AS c (room) "
        "SELECT r FROM (SELECT DISTINCT unnest(%(rooms)s::text[]) AS r) x "
        "WHERE r IS NOT NULL ORDER BY r "
        "ON CONFLICT (room) DO UPDATE SET next_seq = c.next_seq"
    )


@attrs.define(eq=False)
class PostgresConversations(ConversationFrame):
    """The rooms part: conversations and rooms on the store's ``PostgresDb``."""

    db: PostgresDb

    async def _conversation(self, task_id: str, limit: int) -> Conversation:
        return await self.db.run(lambda conn: read_conversation(conn, self.db.s, task_id, limit))

    async def _complete_with_state(
        self, claim: Claim, body: str, no_send: bool, state: str, base: int, now: float
    ) -> int:
        s = self.db.s
        id = claim.task.id
        complete = self.db.sql.complete
        params = complete_params(claim, body, no_send, now, self.db.channel)
        size = len(state.encode("utf-8", "surrogatepass"))

        def op(conn: Conn) -> int:
            with conn.transaction():
                row = conn.execute(f"SELECT room FROM {s}.tasks WHERE id = %s", (id,)).fetchone()
                room = None if row is None else row[0]
                if room is not None:  # the room's lock first: the state's writers take turns
                    conn.execute(
                        f"INSERT INTO {s}.conversations (room) VALUES (%s) "
                        "ON CONFLICT (room) DO NOTHING",
                        (room,),
                    )
                    current = conn.execute(
                        f"SELECT version FROM {s}.conversations WHERE room = %s FOR UPDATE",
                        (room,),
                    ).fetchone()
                done = conn.execute(complete, params).fetchone()
                if done is None or done[0] is None:
                    raise self.db.missed(conn, claim, now, "complete")
                if room is None:
                    raise InvalidTask(f"task {id!r} has no room: a state is kept per room")
                version = 0 if current is None else int(current[0])
                if version != base:
                    raise StateConflict(
                        f"task {id!r}: room {room!r}'s state is at version {version}, the run "
                        f"read version {base}"
                    )
                (new,) = conn.execute(
                    f"UPDATE {s}.conversations SET state = %s, version = version + 1, "
                    "state_bytes = %s WHERE room = %s RETURNING version",
                    (state, size, room),
                ).fetchone() or (0,)
                return int(new)

        return await self.db.run(op)

    async def _record_shown(self, claim: Claim, text: str, now: float) -> bool:
        s = self.db.s
        sql = (  # at its message's seq, read off its row under the claim's fence
            f"INSERT INTO {s}.turns AS x (room, seq, role, task_id, text, at, outcome) "
            f"SELECT t.room, t.turn_seq, 'assistant', t.id, %(text)s, %(now)s, 'shown' "
            f"FROM {s}.tasks t WHERE {FENCE} AND t.room IS NOT NULL "
            "AND t.turn_seq IS NOT NULL "
            "ON CONFLICT (room, seq, role) DO UPDATE SET text = excluded.text, at = excluded.at "
            "WHERE x.outcome = 'shown'"
        )
        params = {
            "text": text.encode("utf-8", "surrogatepass"),
            "now": now,
            "id": claim.task.id,
            "worker": claim.worker,
            "run": claim.run,
        }
        return await self.db.run(lambda conn: conn.execute(sql, params).rowcount == 1)

    async def _room(self, room: str, limit: int) -> RoomView | None:
        s = self.db.s
        window = window_sql(s, "%(room)s", None, None)  # the shown turns too

        def op(conn: Conn) -> RoomView | None:
            with conn.transaction():
                conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
                row = conn.execute(
                    f"SELECT turns, state, version, state_bytes FROM {s}.conversations "
                    "WHERE room = %s",
                    (room,),
                ).fetchone()
                if row is None:
                    return None
                rows = conn.execute(window, {"room": room, "limit": limit}).fetchall()
            turns = tuple(_turn(r[1:]) for r in reversed(rows))
            count, state, version, size = row
            return RoomView(room, turns, int(count), decode_state(state), int(version), size)

        return await self.db.run(op)

    async def _forget_room(self, room: str, why: str, now: float) -> tuple[ForgottenRoom, Moves]:
        s = self.db.s
        statements = forget_sql(s)

        def op(conn: Conn) -> tuple[ForgottenRoom, Moves]:
            params: dict[str, Any] = {"room": room, "why": why, "now": now}
            with conn.transaction():
                # the room's row first: the order of every writer of a room's tasks and counter
                row = conn.execute(statements["room"], params).fetchone()
                found = conn.execute(statements["tasks"], params).fetchall()
                # a spawn that held a parent as the walk began committed its child meanwhile
                # (the walk waited for it): walk again, from a snapshot that sees it, until
                # none appears; a later spawn waits for the parent's lock, then is fenced out
                while len(again := conn.execute(statements["tasks"], params).fetchall()) > len(
                    found
                ):
                    found = again
                params["ids"] = [id for id, _ in found]
                cancelled = [id for (id,) in conn.execute(statements["cancel"], params)]
                moved = set(cancelled)
                params["finished"] = [id for id, _ in found if id not in moved]
                for name in ("elsewhere", "blank", "journal_text", "journal_entry"):
                    conn.execute(statements[name], params)
                steps = conn.execute(statements["steps"], params).rowcount
                asks = conn.execute(statements["asks"], params).rowcount
                for name in ("turns", "conversation", "affinity"):
                    conn.execute(statements[name], params)
            forgotten = ForgottenRoom(
                room,
                turns=0 if row is None else int(row[0]),
                state=row is not None and bool(row[1]),
                tasks=len(found),
                cancelled=len(cancelled),
                steps=steps,
                asks=asks,
            )
            return forgotten, {id: CustodyState(state) for id, state in found if id in moved}

        forgotten, moved = await self._without_deadlock(op)
        await self.db.run(lambda conn: vacuum(conn, s))
        return forgotten, moved

    async def _without_deadlock(
        self, op: Callable[[Conn], tuple[ForgottenRoom, Moves]]
    ) -> tuple[ForgottenRoom, Moves]:
        """``op`` run again when PostgreSQL broke a lock cycle by aborting it: a forget locks
        its room, then the tasks, then a child's other room, the reverse of a completion's
        order there; the transaction rolled back whole, so running it again is safe."""
        for attempt in range(FORGET_TRIES):
            try:
                return await self.db.run(op, promise=True)
            except psycopg.errors.DeadlockDetected:
                if attempt == FORGET_TRIES - 1:
                    raise
                log.warning("forget-room: a lock cycle with a completion: trying again")
        raise AssertionError("unreachable")

    async def _prune_turns(self, keep: int, limit: int) -> int:
        s = self.db.s
        prune = prune_sql(s)
        now = self.host.clock()

        def op(conn: Conn) -> int:
            deleted = 0
            with conn.transaction():
                # the room's counter says how many are over, without reading a turn; its row
                # lock keeps two pruners off one room (each would take the same oldest turns
                # from its own count and leave fewer than ``keep``)
                rooms = conn.execute(
                    f"SELECT room, turns - %(keep)s FROM {s}.conversations "
                    "WHERE turns > %(keep)s LIMIT %(limit)s FOR UPDATE SKIP LOCKED",
                    {"keep": keep, "limit": limit},
                ).fetchall()
                for room, over in rooms:
                    params = {
                        "room": room,
                        "limit": min(over, limit - deleted),
                        "now": now,
                        "why": PRUNED_REASON,
                    }
                    row = conn.execute(prune, params).fetchone()
                    deleted += 0 if row is None else int(row[0])
                    if deleted >= limit:
                        break
            return deleted

        return await self.db.run(op)

    async def _prune_rooms(self, before: float, limit: int) -> int:
        s = self.db.s
        return await self.db.run(
            lambda conn: (
                conn.execute(
                    f"DELETE FROM {s}.rooms WHERE room IN (SELECT room FROM {s}.rooms "
                    "WHERE at < %s LIMIT %s)",
                    (before, limit),
                ).rowcount
            )
        )

    async def _conversation_counts(self) -> ConversationCounts:
        s = self.db.s

        def op(conn: Conn) -> ConversationCounts:
            row = conn.execute(
                f"SELECT count(*), coalesce(sum(turns), 0), coalesce(sum(state_bytes), 0) "
                f"FROM {s}.conversations"
            ).fetchone()
            assert row is not None
            rooms, turns, size = row
            return ConversationCounts(int(rooms), int(turns), int(size))

        return await self.db.run(op)


def forget_sql(s: str) -> dict[str, str]:
    """A room's erasure (``RoomStore.forget_room``) as the statements of one transaction, by
    name, in their order. ``%(ids)s`` are the room's tasks and their descendants (child runs,
    whatever their room: their bodies are made of the room's), ``%(finished)s`` those already
    terminal. The rows stay with ids, states, times and counts; their text goes (message,
    reply, reason, headers, the room's name), with their journal's reasons (one entry per
    task says it was erased), step records, asks and turns, the room's state and affinity."""
    ids = "%(ids)s::text[]"
    return {
        "room": (
            f"SELECT turns, state IS NOT NULL FROM {s}.conversations WHERE room = %(room)s "
            "FOR UPDATE"
        ),
        # no index holds a room's finished tasks: one walk of the table, then each child
        # by its parent; the rows locked (a move of one waits for the erasure, then misses)
        "tasks": (
            f"WITH RECURSIVE f(id) AS (SELECT id FROM {s}.tasks WHERE room = %(room)s "
            f"UNION SELECT c.id FROM {s}.tasks c JOIN f ON c.parent = f.id) "
            f"SELECT t.id, t.state FROM {s}.tasks t WHERE t.id = ANY(ARRAY(SELECT id FROM f)) "
            "ORDER BY t.id FOR UPDATE OF t"
        ),
        # every one still in custody, a reply not yet delivered too, journaled as the
        # operator's move (the reason says so); a running one is fenced out
        "cancel": (
            f"UPDATE {s}.tasks SET state = 'dead', lease_until = NULL, not_before = NULL, "
            f"suspect = false, {NO_DELIVERY_LEASE}, reason = %(why)s, updated_at = %(now)s "
            f"WHERE id = ANY({ids}) AND state IN ({IN_CUSTODY_SQL}) RETURNING id"
        ),
        # a child's live turns in a room of its own leave that room's count
        "elsewhere": (
            f"UPDATE {s}.conversations c SET turns = greatest(c.turns - n.n, 0) "
            "FROM (SELECT room, sum((turn_seq IS NOT NULL)::int "
            f"+ ({reply_live('t')})::int) AS n FROM {s}.tasks t WHERE id = ANY({ids}) "
            "AND room IS NOT NULL AND room <> %(room)s GROUP BY room) n WHERE c.room = n.room"
        ),
        "blank": (
            f"UPDATE {s}.tasks SET body = ''::bytea, result = CASE WHEN result IS NULL "
            "THEN NULL ELSE ''::bytea END, reason = CASE WHEN state = 'dead' THEN %(why)s END, "
            "room = NULL, turn_seq = NULL, reply_seq = NULL, wait_key = NULL, "
            "last_quarantine_death = NULL, headers = (SELECT coalesce(jsonb_object_agg(key, "
            "value), '{}'::jsonb)::text FROM jsonb_each_text(headers::jsonb) "
            f"WHERE key IN ({KEPT_HEADERS_SQL})) WHERE id = ANY({ids})"
        ),
        # a reason may quote the text (a failure's message); the moves stay
        "journal_text": (
            f"UPDATE {s}.journal SET reason = NULL WHERE id = ANY({ids}) "
            "AND reason IS NOT NULL AND reason <> %(why)s"
        ),
        "journal_entry": (
            f"INSERT INTO {s}.journal (id, at, src, dst, worker, attempt, reason, actor) "
            f"SELECT id, %(now)s, state, state, NULL, attempt, %(why)s, 'operator' "
            f"FROM {s}.tasks WHERE id = ANY(%(finished)s::text[]) ORDER BY id"
        ),
        "steps": f"DELETE FROM {s}.steps WHERE task_id = ANY({ids})",
        "asks": f"DELETE FROM {s}.asks WHERE task_id = ANY({ids}) OR room = %(room)s",
        "turns": f"DELETE FROM {s}.turns WHERE room = %(room)s OR task_id = ANY({ids})",
        "conversation": f"DELETE FROM {s}.conversations WHERE room = %(room)s",
        "affinity": f"DELETE FROM {s}.rooms WHERE room = %(room)s",
    }


ERASED_TABLES: Final = ("tasks", "journal", "turns", "conversations", "steps", "asks", "rooms")
"""The tables an erasure writes: vacuumed after it."""


def vacuum(conn: Conn, s: str) -> bool:
    """``VACUUM`` the tables an erasure wrote (outside any transaction: the connection is in
    autocommit), so their dead row versions, which still hold the text, are removed and their
    space is free for new rows to overwrite (autovacuum would, later). A table another vacuum
    holds is skipped (that one does the same). False when it did not finish (say the
    statement timeout on a large store): autovacuum does it in its time."""
    tables = ", ".join(f"{s}.{table}" for table in ERASED_TABLES)
    try:
        conn.execute(f"VACUUM (SKIP_LOCKED) {tables}")
    except psycopg.Error as exc:
        log.warning("the erasure's VACUUM did not finish (autovacuum will do it): %s", exc)
        return False
    return True


def _turn(row: Any) -> Turn:
    role, text, task_id, at, outcome = row
    return Turn(role, bytes(text).decode("utf-8", "surrogatepass"), task_id, float(at), outcome)


def prune_sql(s: str) -> str:
    """The oldest ``%(limit)s`` turns of room ``%(room)s`` gone, in time order (seq, the user's
    before the assistant's at one seq), from the merged sources, each walked on its index from
    the start (linear in the turns removed whatever the room keeps, issue #56): ``turns``
    rows deleted (each counts -1 as it goes), task rows' live turns hidden (counted here). A
    message hidden before its live reply leaves the reply in place (``reply_seq``), as does
    one whose ask was answered (its reply goes under the answer); another whose reply is not
    said yet gets none. A delivered task's text goes from its row with its turns (its
    message's, and its reply's once no longer a turn), journaled with ``%(why)s`` at
    ``%(now)s``. The number of turns removed."""
    kept = (
        f"CASE WHEN NOT hid.replied AND (t.reply_seq IS NOT NULL OR {reply_live('t')}) "
        "THEN coalesce(t.reply_seq, t.turn_seq) END"
    )
    done = "t.state = 'delivered'"  # a dead task may be re-driven: it keeps its text
    return (
        f"WITH a AS MATERIALIZED (SELECT {_TURN_COLS} FROM {s}.tasks "
        "WHERE room = %(room)s AND turn_seq IS NOT NULL ORDER BY turn_seq LIMIT %(limit)s), "
        "m AS (SELECT turn_seq AS seq, 'user' AS role, id, false AS kept FROM a "
        f"UNION ALL SELECT turn_seq, 'assistant', id, false FROM a "
        f"WHERE a.reply_seq IS NULL AND {reply_live('a')} "
        f"UNION ALL (SELECT reply_seq, 'assistant', id, false FROM {s}.tasks b "
        f"WHERE room = %(room)s AND reply_seq IS NOT NULL AND {reply_live('b')} "
        "ORDER BY reply_seq LIMIT %(limit)s) "
        f"UNION ALL (SELECT seq, role, NULL, true FROM {s}.turns WHERE room = %(room)s "
        "ORDER BY seq, role DESC LIMIT %(limit)s)), "
        "pick AS MATERIALIZED (SELECT * FROM m ORDER BY seq, role DESC LIMIT %(limit)s), "
        f"gone AS (DELETE FROM {s}.turns x USING pick p WHERE p.kept AND x.room = %(room)s "
        "AND x.seq = p.seq AND x.role = p.role), "
        "hid AS (SELECT id, bool_or(role = 'user') AS said, bool_or(role = 'assistant') "
        "AS replied FROM pick WHERE NOT kept GROUP BY id), "
        f"u AS (UPDATE {s}.tasks t SET turn_seq = NULL, reply_seq = {kept}, "
        # a delivered task's text goes with its turns (issue #53): the message's, and the
        # reply's once it is no longer a turn; a task in custody keeps its text to run
        f"body = CASE WHEN {done} THEN ''::bytea ELSE t.body END, "
        f"result = CASE WHEN {done} AND t.result IS NOT NULL AND ({kept}) IS NULL "
        "THEN ''::bytea ELSE t.result END "
        # the rows found by their keys (``= ANY``, an index probe each), then joined: a join
        # alone was planned as a scan of every task (as the claim found, issue 39)
        "FROM hid WHERE t.id = ANY(ARRAY(SELECT id FROM hid)) AND t.id = hid.id "
        f"RETURNING t.id, t.state, t.attempt, {done} AS done, t.reply_seq IS NULL AS unsaid), "
        # a journal entry for each finished task that had text to lose (read before the
        # update: one snapshot for the whole statement)
        f"o AS (SELECT id, body <> ''::bytea AS message, result <> ''::bytea AS reply "
        f"FROM {s}.tasks WHERE id = ANY(ARRAY(SELECT id FROM hid))), "
        f"j AS (INSERT INTO {s}.journal (id, at, src, dst, worker, attempt, reason, actor) "
        "SELECT u.id, %(now)s, u.state, u.state, NULL, u.attempt, %(why)s, 'bridge' "
        "FROM u JOIN o ON o.id = u.id "
        "WHERE u.done AND (o.message OR (coalesce(o.reply, false) AND u.unsaid))), "
        f"c AS (UPDATE {s}.conversations SET turns = greatest(turns - "
        "(SELECT count(*) FROM pick WHERE NOT kept), 0) WHERE room = %(room)s "
        "AND EXISTS (SELECT FROM pick WHERE NOT kept)) "
        "SELECT count(*) FROM pick"
    )


def read_conversation(conn: Conn, s: str, task_id: str, limit: int) -> Conversation:
    """The conversation of ``task_id``'s run (the turns before its message, at most ``limit``,
    its room's state and version) in one statement; empty for a task in no room."""
    rows = conn.execute(conversation_sql(s), {"id": task_id, "limit": limit}).fetchall()
    history = tuple(_turn(r[2:7]) for r in rows if r[0] == 0)  # in time order
    if rows and rows[-1][0] == 1:
        *_, state, version = rows[-1]
        return Conversation(history, decode_state(state), int(version))
    return Conversation(history)
