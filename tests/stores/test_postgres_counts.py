"""PostgreSQL's counts cost the same at any size (issue #56): each statement that moves tasks
appends its net moves per state, a writable reader folds them into a row per state, and a count
reads those rows and the moves not yet folded, never the tasks (the admin endpoint read
``count(*) ... GROUP BY state`` every second: every row kept). A read-only store (``tether store
status``) counts the same without folding; a schema of the version before is counted from its
rows once, as it upgrades."""

from __future__ import annotations

import secrets

import psycopg

from support.migrations import postgres_from, postgres_step
from tether.bridge import PostgresStore, Task
from tether.bridge.custody import CustodyState

S = CustodyState


def _moves(dsn: str, schema: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(f'SELECT count(*) FROM "{schema}".task_count_moves').fetchone()
        assert row is not None
        return int(row[0])


async def test_counts_follow_every_move_and_read_no_task_row(postgres_dsn: str) -> None:
    schema = f"s_{secrets.token_hex(5)}"
    store = await PostgresStore.open(postgres_dsn, schema=schema)
    try:
        await store.ingest_many([Task(f"t{i}", "hi") for i in range(6)])
        claims = await store.claim_many("w1", 4, leaderless=True)
        await store.complete(claims[0], "ok")
        await store.complete(claims[1], "ok")
        await store.mark_delivered_many([claims[0].task.id])
        inspect = await PostgresStore.open(postgres_dsn, schema=schema, read_only=True)
        try:
            expected = {S.PENDING: 2, S.CLAIMED: 2, S.RESULT: 1, S.DELIVERED: 1}
            seen = await inspect.counts()  # reads the moves, folds nothing
            assert {k: v for k, v in seen.items() if v} == expected
            assert _moves(postgres_dsn, schema) > 0
            assert {k: v for k, v in (await store.counts()).items() if v} == expected
            assert _moves(postgres_dsn, schema) == 0  # folded
            read = await inspect.counts()
            assert {k: v for k, v in read.items() if v} == expected
            assert all(type(n) is int for n in read.values())  # bigint sums, not Decimal
        finally:
            await inspect.aclose()
        assert await store.prune_delivered(store.clock() + 1) == 1
        assert (await store.counts())[S.DELIVERED] == 0
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            row = conn.execute(f"EXPLAIN (FORMAT JSON) {store.db.sql.counts}").fetchone()
        assert row is not None
        assert '"tasks"' not in str(row[0]).replace("'", '"')
    finally:
        await store.aclose()


async def test_a_schema_of_the_version_before_is_counted_from_its_rows(postgres_dsn: str) -> None:
    rows = [
        "INSERT INTO {s}tasks (id, body, priority, headers, state, attempt, created_at, "
        f"updated_at) VALUES ('old{i}', 'hi', 1, '{{{{}}}}', 'pending', 1, 1, 1)"
        for i in range(3)
    ]
    async with postgres_from(postgres_dsn, postgres_step("task_count_moves"), *rows) as store:
        assert (await store.counts())[S.PENDING] == 3
        await store.ingest(Task("new", "hi"))
        assert (await store.claim("w1", leaderless=True)) is not None
        counts = await store.counts()
        assert (counts[S.PENDING], counts[S.CLAIMED]) == (3, 1)
