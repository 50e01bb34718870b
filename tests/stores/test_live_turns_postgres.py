"""PostgreSQL reads a live task's turns from its own row (issue #49, decision 2).

A message is numbered in its room on its task row (``turn_seq``) and its reply is the stored
result, so an ingest and a result write no ``turns`` row; the rows come back as copies when a
task is deleted, and a prune or a re-drive keeps the count right. A schema of the version
before moves its live tasks' turns onto their rows as it upgrades.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest

from support.clock import FakeClock
from support.migrations import postgres_schema_at, postgres_step
from tether.bridge import PostgresStore, Task
from tether.bridge.custody import Claim
from tether.bridge.stores.postgres import _schema as pg_schema
from tether.bridge.stores.postgres._sql import Sql


@pytest.fixture
async def pg(postgres_dsn: str, fake_clock: FakeClock) -> AsyncIterator[PostgresStore]:
    store = await PostgresStore.open(
        postgres_dsn, schema=f"s_{secrets.token_hex(5)}", clock=fake_clock, pool_size=2
    )
    try:
        yield store
    finally:
        await store.aclose()


def _rows(dsn: str, query: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(query.encode()).fetchall()


def _turn_rows(dsn: str, store: PostgresStore) -> list[tuple[int, str, str, str]]:
    """The ``turns`` rows: (seq, role, task, outcome) in time order."""
    s = store.db.s
    query = f"SELECT seq, role, task_id, outcome FROM {s}.turns ORDER BY seq, role DESC"
    return [(int(seq), role, task, outcome) for seq, role, task, outcome in _rows(dsn, query)]


def _places(dsn: str, store: PostgresStore) -> dict[str, tuple[int | None, int | None]]:
    """Each task's (turn_seq, reply_seq)."""
    query = f"SELECT id, turn_seq, reply_seq FROM {store.db.s}.tasks"
    return {id: (turn, reply) for id, turn, reply in _rows(dsn, query)}


async def _said(store: PostgresStore, room: str = "r") -> list[tuple[str, str, str, str]]:
    view = await store.room(room, limit=100)
    assert view is not None
    return [(t.role, t.text, t.outcome, t.task_id) for t in view.turns]


async def _count(store: PostgresStore, room: str = "r") -> int:
    view = await store.room(room)
    assert view is not None
    return view.turn_count


async def _claim(store: PostgresStore, id: str) -> Claim:
    claim = await store.claim("w1", leaderless=True)
    assert claim is not None
    assert claim.task.id == id
    return claim


async def test_an_ingest_a_result_and_a_delivery_write_no_turn_row(
    postgres_dsn: str, pg: PostgresStore
) -> None:
    await pg.ingest_many([Task("m1", "hi", room="r"), Task("m2", "there", room="r")])
    await pg.ingest(Task("n1", "no room"))
    await pg.complete(await _claim(pg, "m1"), "hello")
    await pg.mark_delivered("m1")
    assert _turn_rows(postgres_dsn, pg) == []  # the old schema wrote 3 here
    assert _places(postgres_dsn, pg) == {"m1": (1, None), "m2": (2, None), "n1": (None, None)}
    assert await _said(pg) == [
        ("user", "hi", "received", "m1"),
        ("assistant", "hello", "delivered", "m1"),
        ("user", "there", "received", "m2"),
    ]
    assert await _count(pg) == 3
    history = (await pg.conversation("m2")).history
    assert [(t.role, t.text, t.outcome) for t in history] == [
        ("user", "hi", "received"),
        ("assistant", "hello", "delivered"),
    ]


async def test_a_replayed_message_takes_no_number_and_is_not_counted(
    postgres_dsn: str, pg: PostgresStore
) -> None:
    assert await pg.ingest_many([Task("a", "one", room="r"), Task("a", "one", room="r")]) == [
        True,
        False,
    ]
    assert not await pg.ingest(Task("a", "one", room="r"))
    assert await pg.ingest(Task("b", "two", room="r"))
    assert _places(postgres_dsn, pg) == {"a": (1, None), "b": (2, None)}
    assert await _count(pg) == 2


async def test_a_deleted_task_leaves_its_turns_as_rows_and_the_count_unchanged(
    postgres_dsn: str, pg: PostgresStore, fake_clock: FakeClock
) -> None:
    await pg.ingest_many(
        [Task("a", "one", room="r"), Task("b", "two", room="r")], room_policy="concurrent"
    )
    await pg.complete(await _claim(pg, "a"), "re one")
    await pg.complete(await _claim(pg, "b"), "re two")
    await pg.mark_delivered_many(["a", "b"])
    await pg.ingest(Task("c", "three", room="r"))
    before = await _said(pg)
    fake_clock.advance(10)
    assert await pg.prune_delivered(fake_clock.now) == 2
    assert _turn_rows(postgres_dsn, pg) == [
        (1, "user", "a", "received"),
        (1, "assistant", "a", "delivered"),
        (2, "user", "b", "received"),
        (2, "assistant", "b", "delivered"),
    ]
    assert await _said(pg) == before
    assert await _count(pg) == 5
    # a deleted task's run is found by its copied user turn
    history = (await pg.conversation("b")).history
    assert [t.text for t in history] == ["one", "re one"]
    assert [t.text for t in (await pg.conversation("c")).history] == [
        "one",
        "re one",
        "two",
        "re two",
    ]


async def test_a_redrive_takes_the_undeliverable_reply_back_and_its_count(
    postgres_dsn: str, pg: PostgresStore
) -> None:
    await pg.ingest(Task("a", "one", room="r"))
    await pg.complete(await _claim(pg, "a"), "re one")
    await pg.dead_letter("a", "the gateway refused it")
    assert await _said(pg) == [
        ("user", "one", "received", "a"),
        ("assistant", "re one", "result", "a"),  # undeliverable: still said
    ]
    assert await _count(pg) == 2
    await pg.redrive(["a"])
    assert await _said(pg) == [("user", "one", "received", "a")]
    assert await _count(pg) == 1
    await pg.complete(await _claim(pg, "a"), "re one, again")
    assert await _said(pg) == [
        ("user", "one", "received", "a"),
        ("assistant", "re one, again", "result", "a"),
    ]
    assert await _count(pg) == 2


async def test_a_reply_shown_then_stored_replaces_the_shown_row_and_counts_once(
    postgres_dsn: str, pg: PostgresStore
) -> None:
    await pg.ingest(Task("a", "one", room="r"))
    claim = await _claim(pg, "a")
    assert await pg.record_shown(claim, "re o")
    assert _turn_rows(postgres_dsn, pg) == [(1, "assistant", "a", "shown")]
    assert await _count(pg) == 2
    await pg.complete(claim, "re one")
    assert _turn_rows(postgres_dsn, pg) == []
    assert await _said(pg) == [
        ("user", "one", "received", "a"),
        ("assistant", "re one", "result", "a"),
    ]
    assert await _count(pg) == 2


async def test_a_prune_that_takes_a_message_keeps_its_stored_reply(
    postgres_dsn: str, pg: PostgresStore
) -> None:
    await pg.ingest(Task("a", "one", room="r"), room_policy="concurrent")
    await pg.complete(await _claim(pg, "a"), "re one")
    await pg.ingest_many(
        [Task("b", "two", room="r"), Task("c", "three", room="r")], room_policy="concurrent"
    )
    assert await pg.prune_turns(keep=3) == 1
    assert _places(postgres_dsn, pg) == {"a": (None, 1), "b": (2, None), "c": (3, None)}
    assert await _said(pg) == [
        ("assistant", "re one", "result", "a"),
        ("user", "two", "received", "b"),
        ("user", "three", "received", "c"),
    ]
    assert await _count(pg) == 3
    # b's message goes before its reply is stored: the reply is not recorded
    assert await pg.prune_turns(keep=1) == 2
    assert _places(postgres_dsn, pg) == {"a": (None, None), "b": (None, None), "c": (3, None)}
    await pg.complete(await _claim(pg, "b"), "re two")
    assert await _said(pg) == [("user", "three", "received", "c")]
    assert await _count(pg) == 1
    assert _turn_rows(postgres_dsn, pg) == []


async def test_an_answered_ask_places_the_askers_reply_under_the_answer(
    postgres_dsn: str, pg: PostgresStore, fake_clock: FakeClock
) -> None:
    await pg.ingest(Task("t1", "book a table", room="r"), room_policy="serial")
    claim = await _claim(pg, "t1")
    await pg.ask(claim, "~ask:1", "8 pm?", fake_clock.now + 600, "asked")
    await pg.ingest(Task("a1", "yes", room="r"), room_policy="serial")
    assert _places(postgres_dsn, pg) == {"t1": (1, 3), "a1": (3, None)}
    await pg.complete(await _claim(pg, "t1"), "booked")
    assert await _said(pg) == [
        ("user", "book a table", "received", "t1"),
        ("assistant", "8 pm?", "asked", "t1"),
        ("user", "yes", "received", "a1"),
        ("assistant", "booked", "result", "t1"),
    ]
    assert await _count(pg) == 4
    assert _turn_rows(postgres_dsn, pg) == [(2, "assistant", "t1", "asked")]


def _read_to_complete(dsn: str, behind: int) -> dict[str, int]:
    """The rows of ``turns`` and ``tasks`` PostgreSQL read (scanned or fetched by index) as
    ``first``, a message with ``behind`` more queued after it in its room (statistics taken),
    became a result through the store's own statement: counted in the updating transaction
    itself (``pg_stat_xact_user_tables``), so nothing else is counted."""
    read = (
        "SELECT relname, seq_tup_read + coalesce(idx_tup_fetch, 0) "
        "FROM pg_stat_xact_user_tables WHERE schemaname = %(schema)s "
        "AND relname IN ('turns', 'tasks')"
    )
    with psycopg.connect(dsn, autocommit=True) as conn:
        schema = f"s_{secrets.token_hex(5)}"
        params = {"schema": schema}
        return _complete_behind(conn, schema, behind, read, params)


def _complete_behind(
    conn: psycopg.Connection[tuple[Any, ...]],
    schema: str,
    behind: int,
    read: str,
    params: dict[str, Any],
) -> dict[str, int]:
    s = f'"{schema}"'
    conn.execute(f"CREATE SCHEMA {s}")
    conn.execute(
        f"CREATE TABLE {s}.schema_version (version integer PRIMARY KEY, "
        "applied_at timestamptz NOT NULL DEFAULT now())"
    )
    try:
        pg_schema.migrate(conn, schema)
        conn.execute(
            f"INSERT INTO {s}.conversations (room, next_seq, turns) VALUES ('r', %(n)s, %(n)s)",
            {"n": behind + 1},
        )
        conn.execute(
            f"INSERT INTO {s}.tasks (id, body, room, priority, headers, state, attempt, owner, "
            "run_no, lease_until, created_at, updated_at, turn_seq) SELECT "
            "CASE WHEN n = 1 THEN 'first' ELSE 'later' || n END, 'x', 'r', 1, '{}', "
            "CASE WHEN n = 1 THEN 'claimed' ELSE 'pending' END, 1, "
            "CASE WHEN n = 1 THEN 'w1' END, 1, CASE WHEN n = 1 THEN 1e12 END, n, n, n "
            "FROM generate_series(1, %(n)s) AS n",
            {"n": behind + 1},
        )
        conn.execute(f"ANALYZE {s}.tasks")
        conn.execute(f"ANALYZE {s}.turns")
        complete = Sql(s).complete
        fence = {"id": "first", "worker": "w1", "run": 1, "now": 2.0, "body": b"hi there"}
        fence.update(no_send=False, chan="c", payload="p")
        with conn.transaction():
            before = dict(conn.execute(read, params).fetchall())
            assert conn.execute(complete, fence).fetchone() == (1, 1)
            after = dict(conn.execute(read, params).fetchall())
        [(turns,)] = conn.execute(f"SELECT turns FROM {s}.conversations").fetchall()
        assert turns == behind + 2  # the reply counted
        return {rel: int(after.get(rel, 0)) - int(before.get(rel, 0)) for rel in after}
    finally:
        conn.execute(f"DROP SCHEMA {s} CASCADE")


def test_storing_a_result_reads_no_turn_and_none_of_the_messages_after_it(
    postgres_dsn: str,
) -> None:
    few = _read_to_complete(postgres_dsn, 10)  # (a table this small may be scanned)
    many = _read_to_complete(postgres_dsn, 2000)
    assert few["turns"] == many["turns"] == 0
    assert many["tasks"] <= 4, many  # the task's row, by its key: not the 2,000 after it


PG_STEP = postgres_step("ADD COLUMN turn_seq")
"""This migration's place in the list (found by its content: other issues append theirs)."""

OLD_ROWS = (  # written through the version before's triggers, which wrote the turns rows
    # z: delivered, then deleted (retention): its turns stay rows
    "INSERT INTO {s}tasks (id, body, room, priority, headers, state, attempt, created_at, "
    "updated_at, room_policy) VALUES ('z', 'gone', 'r', 1, '{{}}', 'pending', 1, 1, 1, 'serial')",
    "UPDATE {s}tasks SET state = 'result', owner = 'w', result = 're gone', updated_at = 2 "
    "WHERE id = 'z'",
    "UPDATE {s}tasks SET state = 'delivered', updated_at = 3 WHERE id = 'z'",
    "DELETE FROM {s}tasks WHERE id = 'z'",
    # a: delivered, its reply under its message
    "INSERT INTO {s}tasks (id, body, room, priority, headers, state, attempt, created_at, "
    "updated_at, room_policy) VALUES ('a', 'one', 'r', 1, '{{}}', 'pending', 1, 4, 4, 'serial')",
    "UPDATE {s}tasks SET state = 'result', owner = 'w', result = 're one', updated_at = 5 "
    "WHERE id = 'a'",
    "UPDATE {s}tasks SET state = 'delivered', updated_at = 6 WHERE id = 'a'",
    # t (seq 3): asked (seq 4), answered by u (seq 5), its reply under the answer
    "INSERT INTO {s}tasks (id, body, room, priority, headers, state, attempt, created_at, "
    "updated_at, room_policy) VALUES ('t', 'book', 'r', 1, '{{}}', 'pending', 1, 7, 7, 'serial')",
    "UPDATE {s}conversations SET next_seq = next_seq + 1 WHERE room = 'r'",
    "INSERT INTO {s}turns (room, seq, role, task_id, text, at, outcome) "
    "VALUES ('r', 4, 'assistant', 't', '8 pm?', 8, 'asked')",
    "INSERT INTO {s}tasks (id, body, room, priority, headers, state, attempt, created_at, "
    "updated_at, room_policy) VALUES ('u', 'yes', 'r', 1, '{{}}', 'pending', 1, 9, 9, 'serial')",
    "INSERT INTO {s}asks (task_id, name, seq, room, question, status, deadline, at, answer, "
    "answer_id) VALUES ('t', '~ask:1', 1, 'r', '8 pm?', 'answered', 100, 8, 'yes', 'u')",
    "UPDATE {s}tasks SET state = 'result', owner = 'w', result = '', no_send = true, "
    "reason = 'answers the question of t', updated_at = 9 WHERE id = 'u'",
    "UPDATE {s}tasks SET state = 'result', owner = 'w', result = 'booked', updated_at = 10 "
    "WHERE id = 't'",
    # p: pending, waiting for its run
    "INSERT INTO {s}tasks (id, body, room, priority, headers, state, attempt, created_at, "
    "updated_at, room_policy) VALUES ('p', 'later', 'r', 1, '{{}}', 'pending', 1, 11, 11, "
    "'serial')",
    "INSERT INTO {s}tasks (id, body, priority, headers, state, attempt, created_at, "
    "updated_at) VALUES ('n', 'no room', 1, '{{}}', 'pending', 1, 12, 12)",
)
SAID_BEFORE = [
    ("user", "gone", "received", "z"),
    ("assistant", "re gone", "delivered", "z"),
    ("user", "one", "received", "a"),
    ("assistant", "re one", "delivered", "a"),
    ("user", "book", "received", "t"),
    ("assistant", "8 pm?", "asked", "t"),
    ("user", "yes", "received", "u"),
    ("assistant", "booked", "result", "t"),
    ("user", "later", "received", "p"),
]


async def test_a_schema_of_the_previous_version_moves_its_live_turns_onto_their_rows(
    postgres_dsn: str,
) -> None:
    schema = postgres_schema_at(postgres_dsn, PG_STEP, *OLD_ROWS)
    s = f'"{schema}"'
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        [(rows_before,)] = conn.execute(f"SELECT count(*) FROM {s}.turns").fetchall()
        [(count_before,)] = conn.execute(f"SELECT turns FROM {s}.conversations").fetchall()
    assert (rows_before, count_before) == (9, 9)
    store = await PostgresStore.open(postgres_dsn, schema=schema, pool_size=2)
    try:
        assert await _said(store) == SAID_BEFORE
        assert await _count(store) == count_before
        assert _places(postgres_dsn, store) == {
            "a": (2, None),
            "t": (3, 5),
            "u": (5, None),
            "p": (6, None),
            "n": (None, None),
        }
        assert _turn_rows(postgres_dsn, store) == [
            (1, "user", "z", "received"),
            (1, "assistant", "z", "delivered"),
            (4, "assistant", "t", "asked"),
        ]
        await store.mark_delivered("t")
        await store.complete(await _claim(store, "p"), "re later")
        await store.ingest(Task("q", "after", room="r"), room_policy="serial")
        history = (await store.conversation("q")).history
        assert [(t.text, t.outcome) for t in history] == [
            *((text, outcome) for _, text, outcome, _ in SAID_BEFORE[:7]),
            ("booked", "delivered"),
            ("later", "received"),
            ("re later", "result"),
        ]
        assert await _count(store) == count_before + 2
    finally:
        await store.aclose()
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {s} CASCADE")
