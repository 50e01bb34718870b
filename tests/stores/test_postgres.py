"""What only PostgresStore promises: the state CHECK, versioned migrations, SKIP LOCKED claims
across hosts (separate pools), LISTEN/NOTIFY wake-ups, and passwords that never show."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import psycopg
import pytest
import trio
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from support.clock import FakeClock
from support.custody import drive_to
from tether.bridge import (
    CustodyState,
    PostgresStore,
    SchemaTooNew,
    SqliteStore,
    Task,
    redact_dsn,
)
from tether.bridge.stores._open import StoreConfigError, open_store
from tether.bridge.stores.postgres._schema import SCHEMA_VERSION
from tether.bridge.stores.postgres._store import StoreTimeout


def _schema() -> str:
    return f"s_{secrets.token_hex(5)}"


def _sql(dsn: str, query: str, params: Any = None) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(query, params)
        return cur.fetchall() if cur.description else []


def _insert(dsn: str, schema: str, id: str, state: str, **cols: Any) -> None:
    row = {"id": id, "body": b"x", "priority": 1, "headers": "{}", "state": state, "attempt": 1}
    row.update(created_at=1.0, updated_at=1.0, **cols)
    names = ", ".join(row)
    marks = ", ".join(f"%({k})s" for k in row)
    _sql(dsn, f'INSERT INTO "{schema}".tasks ({names}) VALUES ({marks})', row)


async def test_the_state_check_accepts_exactly_the_custody_states(postgres_dsn: str) -> None:
    schema = _schema()
    store = await PostgresStore.open(postgres_dsn, schema=schema)
    await store.aclose()
    extra: dict[CustodyState, dict[str, Any]] = {
        CustodyState.ASSIGNED: {"owner": "w"},
        CustodyState.CLAIMED: {"owner": "w", "lease_until": 5.0},
        CustodyState.RESULT: {"owner": "w", "result": b"r"},
        CustodyState.DELIVERED: {"result": b"r"},
        CustodyState.DEAD: {"reason": "why"},
    }
    for state in CustodyState:
        _insert(postgres_dsn, schema, f"ok-{state.value}", state.value, **extra.get(state, {}))
    for bad in ("done", "PENDING", "delivering", ""):
        with pytest.raises(psycopg.errors.CheckViolation):
            _insert(postgres_dsn, schema, "bad", bad)
    with pytest.raises(psycopg.errors.CheckViolation):  # a claim without a lease
        _insert(postgres_dsn, schema, "bad", "claimed", owner="w")
    with pytest.raises(psycopg.errors.CheckViolation):  # dead without a reason
        _insert(postgres_dsn, schema, "bad", "dead")


async def test_migrations_are_versioned_and_a_newer_schema_is_refused(postgres_dsn: str) -> None:
    schema = _schema()
    stores = []
    async with trio.open_nursery() as nursery:  # several bridges starting at once

        async def open_one() -> None:
            stores.append(await PostgresStore.open(postgres_dsn, schema=schema, pool_size=1))

        for _ in range(4):
            nursery.start_soon(open_one)
    for store in stores:
        await store.aclose()
    rows = _sql(postgres_dsn, f'SELECT version FROM "{schema}".schema_version ORDER BY version')
    assert rows == [(v,) for v in range(1, SCHEMA_VERSION + 1)]
    _sql(postgres_dsn, f'INSERT INTO "{schema}".schema_version (version) VALUES (99)')
    with pytest.raises(SchemaTooNew, match="version 99"):
        await PostgresStore.open(postgres_dsn, schema=schema)
    with pytest.raises(ValueError, match="schema name"):
        await PostgresStore.open(postgres_dsn, schema='x"; DROP TABLE y; --')


async def test_concurrent_claims_on_two_hosts_never_hand_out_a_task_twice(
    postgres_dsn: str,
) -> None:
    schema = _schema()
    hosts = [await PostgresStore.open(postgres_dsn, schema=schema) for _ in range(2)]
    try:
        ids = [f"t{n}" for n in range(300)]
        assert all(await hosts[0].ingest_many([Task(i, i) for i in ids]))
        taken: list[str] = []

        async def claimer(store: PostgresStore, worker: str) -> None:
            while (claim := await store.claim(worker, leaderless=True)) is not None:
                taken.append(claim.task.id)
                await store.complete(claim, f"done by {worker}")

        async with trio.open_nursery() as nursery:
            for h, store in enumerate(hosts):
                for k in range(8):
                    nursery.start_soon(claimer, store, f"h{h}-w{k}")
        assert sorted(taken) == sorted(ids)  # every task exactly once
        counts = await hosts[1].counts()
        assert counts[CustodyState.RESULT] == len(ids)
        workers = {r.worker for r in await hosts[1].ready_results(limit=1000)}
        assert {w.split("-")[0] for w in workers} == {"h0", "h1"}  # both hosts did work
    finally:
        for store in hosts:
            await store.aclose()


async def _listening(store: PostgresStore) -> None:
    with trio.fail_after(10):
        while not store.listening:
            await store.wait_for_work(0.01)  # starts the listener
            await trio.sleep(0.01)


async def test_notifications_wake_idle_workers_and_only_the_right_ones(postgres_dsn: str) -> None:
    schema = _schema()
    idle = await PostgresStore.open(postgres_dsn, schema=schema)
    busy = await PostgresStore.open(postgres_dsn, schema=schema)  # another host
    try:
        await _listening(idle)
        woken: dict[str, float] = {}

        async def wait(name: str, worker: str | None = None) -> None:
            start = trio.current_time()
            if await idle.wait_for_work(10.0, worker=worker):
                woken[name] = trio.current_time() - start

        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait, "any")
            await trio.sleep(0.05)
            await busy.ingest(Task("t1", "hi"))
        assert woken["any"] < 2.0  # not the 10 s timeout

        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait, "w2", "w2")
            await trio.sleep(0.05)
            await busy.assign("t1", "w1")  # someone else's assignment: no wake-up
            await trio.sleep(0.3)
            assert "w2" not in woken
            await busy.ingest(Task("t2", "hi"))
            await busy.assign("t2", "w2")
        assert woken["w2"] < 2.0

        results: list[bool] = []

        async def wait_results() -> None:
            results.append(await idle.wait_for_results(10.0))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait_results)
            await trio.sleep(0.05)
            claim = await busy.claim("w2")
            assert claim is not None
            await busy.complete(claim, "reply")
        assert results == [True]
        # nothing happening: the wait times out and says so
        assert await idle.wait_for_work(0.2) is False
    finally:
        await idle.aclose()
        await busy.aclose()
    with pytest.raises(trio.ClosedResourceError):
        await idle.wait_for_work(0.1)
    with pytest.raises(trio.ClosedResourceError):
        await idle.claim("w1", leaderless=True)


def _without_password(dsn: str) -> tuple[str, str]:
    parts = conninfo_to_dict(dsn)
    password = str(parts.pop("password", ""))
    url = f"postgresql://{parts['user']}@{parts['host']}:{parts['port']}/{parts.get('dbname', '')}"
    return url, password


async def test_a_wrong_password_fails_clearly_and_is_never_shown(postgres_dsn: str) -> None:
    secret = "Wr0ng-" + secrets.token_hex(8)
    bad = make_conninfo(postgres_dsn, password=secret)
    with pytest.raises(ConnectionError) as info:
        await PostgresStore.open(bad, schema=_schema(), connect_timeout_s=5)
    message = str(info.value)
    assert secret not in message
    assert redact_dsn(bad) in message
    assert "password authentication failed" in message
    assert "Wr0ng" not in redact_dsn(f"postgresql://u:{secret}@h/db")


async def test_open_store_selects_the_backend_and_takes_the_password_from_a_file(
    postgres_dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PGPASSWORD", raising=False)
    sqlite = await open_store(tmp_path / "custody.db")
    assert isinstance(sqlite, SqliteStore)
    await sqlite.aclose()

    url, password = _without_password(postgres_dsn)
    with_password = url.replace("@", f":{password}@", 1)
    for dsn in (with_password, make_conninfo(postgres_dsn, password=password)):
        with pytest.raises(StoreConfigError, match="carries a password") as info:
            await open_store(dsn)
        assert password not in str(info.value)

    pwfile = tmp_path / "pg-password"
    pwfile.write_text(password + "\n")
    pwfile.chmod(0o644)
    with pytest.raises(StoreConfigError, match="chmod 600"):
        await open_store(url, password_file=pwfile)
    pwfile.chmod(0o600)
    schema = _schema()
    store = await open_store(url, password_file=pwfile, schema=schema, clock=FakeClock())
    try:
        assert isinstance(store, PostgresStore)
        assert store.schema == schema
        assert await store.ingest(Task("t1", "via open_store"))
        assert password not in store.dsn_shown
    finally:
        await store.aclose()

    monkeypatch.setenv("PGPASSWORD", password)  # libpq's own environment works too
    with pytest.raises(StoreConfigError, match="no tether store in schema 'nothing_here'"):
        await open_store(url, schema="nothing_here", must_exist=True)
    assert _sql(postgres_dsn, "SELECT 1 FROM pg_namespace WHERE nspname = 'nothing_here'") == []
    store = await open_store(url, schema=schema, must_exist=True, synchronous="OFF")
    try:
        assert await store.state("t1") is CustodyState.PENDING
    finally:
        await store.aclose()
    with pytest.raises(StoreConfigError, match="is for a postgresql"):
        await open_store(tmp_path / "other.db", password_file=pwfile)


def _kill_backends(dsn: str, schema: str) -> int:
    rows = _sql(
        dsn,
        # each backend is gone (its notice sent, its socket closed) when this returns
        "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity WHERE application_name = %s",
        (f"tether-{schema}",),
    )
    return len(rows)


async def test_connections_killed_under_the_store_are_replaced(postgres_dsn: str) -> None:
    schema = _schema()
    store = await PostgresStore.open(postgres_dsn, schema=schema, pool_size=3)
    try:
        await _listening(store)
        await store.ingest(Task("t1", "hi"))
        assert _kill_backends(postgres_dsn, schema) >= 2  # a pooled one and the listener
        # a dead connection is found when checked out, before a statement runs on it, and
        # replaced: calls work at once (no call learns of it, so none has an unknown outcome)
        with trio.fail_after(5):
            assert await store.state("t1") is CustodyState.PENDING
        for _ in range(6):
            assert await store.state("t1") is CustodyState.PENDING
        # the listener reconnects by itself and wakes waiters again
        with trio.fail_after(10):
            while not store.listening:  # noqa: ASYNC110
                await trio.sleep(0.05)
        other = await PostgresStore.open(postgres_dsn, schema=schema, pool_size=1)
        try:
            async with trio.open_nursery() as nursery:
                woken: list[bool] = []

                async def wait() -> None:
                    woken.append(await store.wait_for_work(10.0))

                nursery.start_soon(wait)
                await trio.sleep(0.05)
                await other.ingest(Task("t2", "hi"))
            assert woken == [True]
        finally:
            await other.aclose()
    finally:
        await store.aclose()


async def test_a_version_1_schema_is_upgraded_in_place(postgres_dsn: str) -> None:
    schema = _schema()
    store = await PostgresStore.open(postgres_dsn, schema=schema)
    try:
        claim = await store.claim("w1", leaderless=True)
        assert claim is None
        await store.ingest(Task("old", "from version 1", room="r"))
    finally:
        await store.aclose()
    s = f'"{schema}"'
    _sql(  # take the schema back to what version 1 created
        postgres_dsn,
        f"DROP TABLE {s}.workers, {s}.rooms, {s}.stall_notices, {s}.tombstones; "
        # schedules and events (issue #52): the wait key's index goes with its column
        f"DROP TABLE {s}.schedules, {s}.events; ALTER TABLE {s}.tasks DROP COLUMN wait_key; "
        # child runs and queues (issue #51): their indexes go with the columns
        f"DROP TRIGGER children_done ON {s}.tasks; DROP FUNCTION {s}.children_done(); "
        f"ALTER TABLE {s}.tasks DROP COLUMN queue, DROP COLUMN parent, DROP COLUMN awaited; "
        f"ALTER TABLE {s}.tasks DROP COLUMN no_send; DROP INDEX {s}.tasks_claimed_age; "
        f"ALTER TABLE {s}.tasks DROP COLUMN dead_reported_at; "
        f"ALTER TABLE {s}.tasks DROP COLUMN delivery_holder, DROP COLUMN delivery_until; "
        f"ALTER TABLE {s}.tasks DROP COLUMN room_policy; "
        f"DROP INDEX {s}.tasks_room_custody, {s}.tasks_room_queue, {s}.tasks_room_claimed; "
        f"ALTER TABLE {s}.tasks DROP COLUMN not_before; "  # (its index goes with it)
        f"DROP TABLE {s}.journal; DROP FUNCTION {s}.journal_note() CASCADE; "
        f"DROP FUNCTION {s}.journal_moves() CASCADE; "  # issue 39: moves once a statement
        # crash accounting (its index and CHECK go with the columns)
        f"ALTER TABLE {s}.tasks DROP COLUMN crash_count, DROP COLUMN crashes_alone, "
        "DROP COLUMN suspect; "
        # the re-drive fence and quarantine (issue #37)
        f"ALTER TABLE {s}.tasks DROP COLUMN run_no, DROP COLUMN quarantined, "
        "DROP COLUMN quarantine_deaths, DROP COLUMN last_quarantine_death; "
        # conversations (issue #34)
        f"DROP TABLE {s}.turns, {s}.conversations; "
        f"DROP FUNCTION {s}.turns_note() CASCADE; DROP FUNCTION {s}.turns_count() CASCADE; "
        # durable runs (issue #35): the steps, and the state CHECK as version 1 had it
        f"DROP TABLE {s}.steps; ALTER TABLE {s}.tasks DROP CONSTRAINT tasks_state_check, "
        "ADD CONSTRAINT tasks_state_check CHECK (state IN "
        "('pending', 'assigned', 'claimed', 'result', 'delivered', 'dead')); "
        f"DROP TABLE {s}.asks; "  # questions to the person (issue #36)
        # flow control (issue #38)
        f"DROP TABLE {s}.limits, {s}.permits, {s}.limit_waiters; "
        f"DROP FUNCTION {s}.permits_free() CASCADE; "
        # fair shares (issue #38): the queue's index goes with the turn
        f"ALTER TABLE {s}.tasks DROP COLUMN tenant, DROP COLUMN fair; DROP TABLE {s}.tenants; "
        f"CREATE INDEX tasks_pending ON {s}.tasks (priority, seq) WHERE state = 'pending'; "
        # counts kept by the moves (issue #56)
        f"DROP TABLE {s}.task_counts, {s}.task_count_moves; "
        f"DROP FUNCTION {s}.task_counts_in() CASCADE; DROP FUNCTION {s}.task_counts_out() CASCADE; "
        # live turns read from the task rows (issue #49): their indexes go with the columns
        f"ALTER TABLE {s}.tasks DROP COLUMN turn_seq, DROP COLUMN reply_seq; "
        f"DROP FUNCTION {s}.turns_copy() CASCADE; "
        f"DELETE FROM {s}.schema_version WHERE version > 1",
    )
    store = await PostgresStore.open(postgres_dsn, schema=schema)
    try:
        rows = _sql(postgres_dsn, f"SELECT version FROM {s}.schema_version ORDER BY version")
        assert rows == [(v,) for v in range(1, SCHEMA_VERSION + 1)]
        claim = await store.claim("w1", leaderless=True)
        assert claim is not None
        assert claim.task.body == "from version 1"
        await store.complete(claim, "", no_send=True)
        [result] = await store.ready_results()
        assert result.no_send is True
        [taken] = await store.ready_results(holder="b1", lease_s=5.0)
        assert taken.task.id == "old"
        assert await store.ready_results(holder="b2", lease_s=5.0) == []
        assert [w.name for w in await store.beat("w1", "worker", 1)] == ["w1"]
    finally:
        await store.aclose()


async def test_a_row_lock_held_elsewhere_times_out_instead_of_hanging(postgres_dsn: str) -> None:
    schema = _schema()
    store = await PostgresStore.open(postgres_dsn, schema=schema, lock_timeout_s=0.3)
    try:
        await drive_to(store, "held", CustodyState.RESULT)
        await drive_to(store, "free", CustodyState.PENDING)
        with psycopg.connect(postgres_dsn) as operator:  # an open transaction holding the row
            operator.execute(f'SELECT 1 FROM "{schema}".tasks WHERE id = %s FOR UPDATE', ("held",))
            start = trio.current_time()
            with pytest.raises(StoreTimeout, match="lock timeout"):
                await store.mark_delivered("held")
            assert trio.current_time() - start < 5
            # claims skip the locked row, and other tasks move on meanwhile
            claim = await store.claim("w1", leaderless=True)
            assert claim is not None
            assert claim.task.id == "free"
            operator.rollback()
        assert await store.state("held") is CustodyState.RESULT  # nothing changed
        await store.mark_delivered("held")
        with pytest.raises(ValueError, match="lock_timeout_s"):
            await PostgresStore.open(postgres_dsn, schema=schema, lock_timeout_s=0)
    finally:
        await store.aclose()
