"""PostgreSQL's batch claim and completion read a few rows by index, however long the table.

Issue 39: ``claim_many`` joined its picked rows to the table, and for a LIMIT it cannot fold
the planner guesses a tenth of the table: it hashed the whole table to update ten rows, a
cost that grew with every task the table held (25 ms a claim at 50,000 rows). And with
statistics taken while few tasks were pending, it collected every pending row and sorted
them. These tests read the plans PostgreSQL makes for the store's own statements (the claim
under its ``QUEUE_WALK`` setting, as the store runs it) over 2,000 pending tasks beside 2,000
results, with statistics taken before the pending ones came, as each call plans them (bound
values) and as a prepared statement's generic plan (what a pooled session runs after a few
calls): a claim reads the queue by index, in order; no claim, completion or assignment scans
the table (issue 50: the lead's assignment did, 1.8 ms a sweep of 16).
"""

from __future__ import annotations

import json
import re
import secrets
import time
from collections.abc import Iterator, Mapping
from typing import Any

import psycopg
from psycopg import sql as pgsql

from tether.bridge import PostgresStore, Task
from tether.bridge.stores.postgres._sql import QUEUE_WALK

DEPTH = 2_000
"""Enough rows that a sequential scan is what the old claim's plan chose (it did from here)."""


def _nodes(plan: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    yield plan
    for child in plan.get("Plans", ()):
        yield from _nodes(child)


def _scans_of_tasks(plan_json: Any, kinds: tuple[str, ...]) -> list[str]:
    """The scans of these ``kinds`` of the tasks table in an EXPLAIN (FORMAT JSON) plan."""
    return [
        f"{n['Node Type']} on {n['Relation Name']}"
        for n in _nodes(plan_json[0]["Plan"])
        if n["Node Type"] in kinds and n.get("Relation Name") == "tasks"
    ]


def _generic(conn: psycopg.Connection[Any], query: str, params: Mapping[str, Any]) -> Any:
    """The generic plan of ``query`` prepared with ``$n`` placeholders (a pooled session's)."""
    names = list(dict.fromkeys(re.findall(r"%\((\w+)\)s", query)))
    numbered = re.sub(r"%\((\w+)\)s", lambda m: f"${names.index(m.group(1)) + 1}", query)
    name = f"p_{secrets.token_hex(4)}"
    conn.execute(f"PREPARE {name} AS {numbered}")
    conn.execute("SET plan_cache_mode = force_generic_plan")
    args = pgsql.SQL(", ").join(pgsql.Literal(params[n]) for n in names)
    explain = pgsql.SQL("EXPLAIN (FORMAT JSON) EXECUTE {} ({})")
    row = conn.execute(explain.format(pgsql.Identifier(name), args)).fetchone()
    assert row is not None
    return row[0]


def _plans(dsn: str, query: str, params: Mapping[str, Any], walk: bool) -> dict[str, Any]:
    with psycopg.connect(dsn, autocommit=True) as conn, conn.transaction():
        if walk:
            conn.execute(QUEUE_WALK)
        custom = conn.execute(f"EXPLAIN (FORMAT JSON) {query}", params).fetchone()
        assert custom is not None
        plan = custom[0]
        return {"bound": plan, "generic": _generic(conn, query, params)}


async def test_batch_claims_and_completions_never_scan_the_whole_table(postgres_dsn: str) -> None:
    schema = f"s_{secrets.token_hex(5)}"
    store = await PostgresStore.open(postgres_dsn, schema=schema)
    try:
        for start in range(0, 2 * DEPTH, 500):
            if start == DEPTH:  # the first ones are results when the statistics are taken
                with psycopg.connect(postgres_dsn, autocommit=True) as conn:
                    conn.execute(
                        f"UPDATE \"{schema}\".tasks SET state = 'result', owner = 'w0', "
                        "result = ''::bytea"
                    )
                    conn.execute(f'ANALYZE "{schema}".tasks')
            await store.ingest_many([Task(f"t{i}", "{}") for i in range(start, start + 500)])
        claims = await store.claim_many("w1", 10, leaderless=True)
        assert len(claims) == 10
        now = time.time()
        claim = {
            "worker": "w2",
            "leaderless": True,
            "limit": 10,
            "prefix": None,
            "queues": ["default"],
        }
        claim.update(now=now, until=now + 60, quarantined=False)
        complete: dict[str, Any] = {"ids": [c.task.id for c in claims], "no_send": False}
        complete.update(workers=["w1"] * 10, runs=[c.run for c in claims], now=now)
        complete.update(bodies=[b""] * 10, chan="c", payload="result")
        pending = [t.id for t in await store.pending(limit=20)]
        assign = {"ids": pending, "workers": ["w3"] * len(pending), "now": now, "chan": "c"}
        assign["quiet"] = []
        claim_for = {"workers": ["w3", "w4"], "limits": [4, 4], "now": now, "until": now + 60}
        view = {"limit": 100, "skip": ["r1"], "now": now, "lease": 60.0, "skip_queues": []}
        sql = store.db.sql
        whole = ("Seq Scan", "Bitmap Heap Scan")  # a claim reads the queue down its index
        for name, query, params, walk, kinds in (
            ("claim_many", sql.claim_many, claim, True, whole),
            ("claim_many_among_suspects", sql.claim_many_among_suspects, claim, True, whole),
            ("claim_assigned_for_many", sql.claim_assigned_for_many, claim_for, True, whole),
            ("complete_many", sql.complete_many, complete, False, ("Seq Scan",)),
            ("assign_many", sql.assign_many, assign, True, ("Seq Scan",)),
            ("pool_view", sql.pool_view(False), view, False, ("Seq Scan",)),
            ("pool_view skipping", sql.pool_view(True), view, False, ("Seq Scan",)),
        ):
            for kind, plan in _plans(postgres_dsn, query, params, walk).items():
                found = _scans_of_tasks(plan, kinds)
                assert found == [], f"{name} ({kind}): {found}\n{json.dumps(plan)}"
                if name == "assign_many":  # its rows by their keys, not a walk of the queue
                    used = {n.get("Index Name") for n in _nodes(plan[0]["Plan"])}
                    assert "tasks_pending" not in used, f"{kind}: {json.dumps(plan)}"
    finally:
        await store.aclose()


def _trigger_calls(
    dsn: str, schema: str, query: str, params: Mapping[str, Any]
) -> tuple[dict[str, int], int]:
    """Run ``query`` under EXPLAIN ANALYZE in a transaction rolled back: how many times each
    trigger ran, and how many journal entries it wrote."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("BEGIN")
        try:
            journal_rows = f'SELECT count(*) FROM "{schema}".journal'
            before = conn.execute(journal_rows).fetchone()
            row = conn.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {query}", params).fetchone()
            after = conn.execute(journal_rows).fetchone()
        finally:
            conn.execute("ROLLBACK")
    assert row is not None
    assert before is not None
    assert after is not None
    calls = {t["Trigger Name"]: t["Calls"] for t in row[0][0].get("Triggers", ())}
    return calls, after[0] - before[0]


async def test_a_batch_runs_each_trigger_once_and_journals_every_move(postgres_dsn: str) -> None:
    # issue 39: the journal and the permits' release ran once per row (100 calls of each for a
    # batch of 100, 15-30 us a task); now once per statement, every move still journaled
    schema = f"s_{secrets.token_hex(5)}"
    store = await PostgresStore.open(postgres_dsn, schema=schema)
    try:
        await store.ingest_many([Task(f"t{i}", "{}") for i in range(40)])
        now = time.time()
        claim = {
            "worker": "w1",
            "leaderless": True,
            "limit": 20,
            "prefix": None,
            "queues": ["default"],
        }
        claim.update(now=now, until=now + 60, quarantined=False)
        calls, journaled = _trigger_calls(postgres_dsn, schema, store.db.sql.claim_many, claim)
        assert journaled == 20
        assert set(calls.values()) == {1}, calls
        claims = await store.claim_many("w1", 20, leaderless=True)
        complete: dict[str, Any] = {"ids": [c.task.id for c in claims], "no_send": False}
        complete.update(workers=["w1"] * 20, runs=[c.run for c in claims], now=now)
        complete.update(bodies=[b""] * 20, chan="c", payload="result")
        calls, journaled = _trigger_calls(
            postgres_dsn, schema, store.db.sql.complete_many, complete
        )
        assert journaled == 20
        assert set(calls.values()) == {1}, calls
        assert {"journal_move", "permits_free"} <= set(calls), calls
    finally:
        await store.aclose()
