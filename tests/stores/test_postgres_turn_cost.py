"""PostgreSQL reads a tenant's turn at ingest in a few index rows, however many tasks the lead
has assigned (issue #56, item 6).

The queue's clock and a tenant's last turn include the tasks assigned ahead of a worker's free
slots; those were read through the index of a worker's assignments (by owner, not by turn):
every assigned row, twice, per tenant and priority of an ingest. This test runs the store's own
turn read under ``EXPLAIN ANALYZE`` with 1,000 tasks assigned and counts the rows of ``tasks``
it touched (returned by a scan, or read and dropped by its filter).
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator, Mapping
from typing import Any

import psycopg

from tether.bridge import PostgresStore, Task

ASSIGNED = 1_000


def _nodes(plan: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    yield plan
    for child in plan.get("Plans", ()):
        yield from _nodes(child)


def _rows_of_tasks_read(plan_json: Any) -> int:
    return sum(
        (n["Actual Rows"] + n.get("Rows Removed by Filter", 0)) * n["Actual Loops"]
        for n in _nodes(plan_json[0]["Plan"])
        if n.get("Relation Name") == "tasks"
    )


async def test_a_tenants_turn_reads_a_few_rows_however_many_tasks_are_assigned(
    postgres_dsn: str,
) -> None:
    schema = f"s_{secrets.token_hex(5)}"
    store = await PostgresStore.open(postgres_dsn, schema=schema)
    try:
        await store.beat("w1", "worker", 4)
        tasks = [
            Task(f"t{n}", "hi", headers={"tenant": f"tenant-{n % 50}"}) for n in range(2 * ASSIGNED)
        ]
        for start in range(0, len(tasks), 500):
            await store.ingest_many(tasks[start : start + 500])
        assert all(await store.assign_many([(f"t{n}", "w1") for n in range(ASSIGNED)]))
        turns = store.db.sql.turns
    finally:
        await store.aclose()
    params = {"tenants": ["tenant-7"], "ranks": [1]}
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(f'ANALYZE "{schema}".tasks')
        row = conn.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {turns}", params).fetchone()
        assert row is not None
        conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
    read = _rows_of_tasks_read(row[0])
    assert read <= 4, read
