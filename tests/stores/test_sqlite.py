"""What only SqliteStore promises: file modes, WAL, the state CHECK, migrations, group commit."""

from __future__ import annotations

import os
import sqlite3
import stat
import threading
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from support.clock import FakeClock
from support.migrations import sqlite_from, sqlite_step
from tether.bridge import CustodyState, SchemaTooNew, SqliteStore, Task
from tether.bridge.custody import CustodyConflict
from tether.bridge.custody._rules import MAX_BODY_BYTES
from tether.bridge.stores.sqlite._schema import SCHEMA_VERSION


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


async def _pragma(store: SqliteStore, name: str) -> Any:
    return await store.db.writer.run(lambda conn: conn.execute(f"PRAGMA {name}").fetchone()[0])


async def test_files_are_private_and_the_journal_is_wal(tmp_path: Path) -> None:
    db = tmp_path / "new-dir" / "custody.db"
    store = await SqliteStore.open(db)
    try:
        await store.ingest(Task("t1", "secret"))
        assert _mode(db.parent) == 0o700
        assert _mode(db) == 0o600
        for suffix in ("-wal", "-shm"):
            assert _mode(Path(f"{db}{suffix}")) == 0o600
        assert await _pragma(store, "journal_mode") == "wal"
        assert await _pragma(store, "synchronous") == 1  # NORMAL, durable at promises
        assert await _pragma(store, "user_version") == SCHEMA_VERSION
    finally:
        await store.aclose()


async def test_an_existing_file_is_made_private_and_synchronous_is_configurable(
    tmp_path: Path,
) -> None:
    db = tmp_path / "custody.db"
    db.touch(mode=0o644)
    os.chmod(db, 0o644)
    store = await SqliteStore.open(db, synchronous="FULL")
    try:
        assert _mode(db) == 0o600
        assert await _pragma(store, "synchronous") == 2  # FULL
        assert store.db.writer.barrier is None  # each commit is synced: no barrier needed
    finally:
        await store.aclose()


async def test_every_open_defaults_to_synchronous_normal_with_a_barrier_and_wal(
    tmp_path: Path,
) -> None:
    """Power-loss durability of what was promised rests on these settings and the barrier (the
    SIGKILL test cannot show it; ``test_durable_at_promises`` cuts the WAL back to it).

    ``synchronous`` is a per-connection setting, not stored in the file, so the default must be
    applied on every open, also of a file last opened with a weaker setting.
    """
    db = tmp_path / "custody.db"
    weak = await SqliteStore.open(db, synchronous="OFF")
    try:
        assert await _pragma(weak, "synchronous") == 0
    finally:
        await weak.aclose()
    for _ in range(2):  # reopening an existing file, twice
        store = await SqliteStore.open(db)
        try:
            assert await _pragma(store, "synchronous") == 1  # NORMAL
            assert store.db.writer.barrier is not None
            assert await _pragma(store, "journal_mode") == "wal"
        finally:
            await store.aclose()
    fresh = await SqliteStore.open(tmp_path / "fresh.db")
    try:
        assert await _pragma(fresh, "synchronous") == 1
        assert fresh.db.writer.barrier is not None
        assert await _pragma(fresh, "journal_mode") == "wal"
    finally:
        await fresh.aclose()


def _insert(conn: sqlite3.Connection, id: str, state: str, **cols: Any) -> None:
    row = {
        "id": id,
        "body": "b",
        "priority": 1,
        "headers": "{}",
        "state": state,
        "attempt": 1,
        "created_at": 0.0,
        "updated_at": 0.0,
        **cols,
    }
    names = ", ".join(row)
    marks = ", ".join("?" * len(row))
    conn.execute(f"INSERT INTO tasks ({names}) VALUES ({marks})", tuple(row.values()))


async def test_the_state_check_accepts_exactly_the_custody_states(tmp_path: Path) -> None:
    db = tmp_path / "custody.db"
    await (await SqliteStore.open(db)).aclose()
    shape: dict[CustodyState, dict[str, Any]] = {
        CustodyState.PENDING: {},
        CustodyState.ASSIGNED: {"owner": "w"},
        CustodyState.CLAIMED: {"owner": "w", "lease_until": 1.0},
        CustodyState.RESULT: {"owner": "w", "result": "r"},
        CustodyState.DELIVERED: {"owner": "w", "result": "r"},
        CustodyState.DEAD: {"reason": "why"},
        CustodyState.WAITING: {"not_before": 5.0},
    }
    conn = sqlite3.connect(db)
    try:
        for state in CustodyState:
            _insert(conn, f"ok-{state.value}", state.value, **shape[state])
        for bad in ("completed", "PENDING", "", "claimed "):
            with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
                _insert(conn, "bad", bad)
        # the shape rules: a claim without a lease, a pending task with an owner, a silent death
        for bad_state, cols in [
            ("claimed", {"owner": "w"}),
            ("pending", {"owner": "w"}),
            ("dead", {}),
            ("result", {"owner": "w"}),
            ("assigned", {}),
        ]:
            with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
                _insert(conn, "bad", bad_state, **cols)
    finally:
        conn.close()


async def test_a_database_from_a_newer_tether_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "custody.db"
    await (await SqliteStore.open(db)).aclose()
    conn = sqlite3.connect(db)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(RuntimeError, match="could not be opened") as info:
        await SqliteStore.open(db)
    assert isinstance(info.value.__cause__, SchemaTooNew)
    assert "newer than this tether supports" in str(info.value)


async def test_reopening_does_not_migrate_again(tmp_path: Path) -> None:
    db = tmp_path / "custody.db"
    first = await SqliteStore.open(db)
    await first.ingest(Task("t1", "hi"))
    await first.aclose()
    again = await SqliteStore.open(db)
    try:
        assert await again.state("t1") is CustodyState.PENDING
        assert await _pragma(again, "user_version") == SCHEMA_VERSION
    finally:
        await again.aclose()


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("lease_s", 0),
        ("max_attempts", 0),
        ("max_body_bytes", 0),
        ("synchronous", "SOMETIMES"),
        ("max_batch", 0),
    ],
)
async def test_bad_options_are_refused(tmp_path: Path, option: str, value: Any) -> None:
    with pytest.raises(ValueError, match=option):
        await SqliteStore.open(tmp_path / "c.db", **{option: value})
    assert not (tmp_path / "c.db").exists()


async def _ingest_concurrently(store: SqliteStore, n: int) -> list[bool]:
    results: list[bool] = [False] * n

    async def one(i: int) -> None:
        results[i] = await store.ingest(Task(f"t{i}", "hi"))

    async with trio.open_nursery() as nursery:
        for i in range(n):
            nursery.start_soon(one, i)
    return results


async def test_group_commit_shares_commits_between_callers(tmp_path: Path) -> None:
    store = await SqliteStore.open(tmp_path / "group.db")
    try:
        before = store.commits
        assert all(await _ingest_concurrently(store, 300))
        group_commits = store.commits - before
    finally:
        await store.aclose()
    single = await SqliteStore.open(tmp_path / "single.db", max_batch=1)
    try:
        before = single.commits
        assert all(await _ingest_concurrently(single, 300))
        assert single.commits - before == 300
    finally:
        await single.aclose()
    assert group_commits <= 30, f"300 concurrent ingests took {group_commits} commits"


async def test_a_failing_transition_does_not_spoil_its_batch(
    tmp_path: Path, fake_clock: FakeClock
) -> None:
    store = await SqliteStore.open(tmp_path / "c.db", clock=fake_clock)
    try:
        await store.ingest(Task("taken", "hi"))
        await store.assign("taken", "w1")
        errors: list[BaseException] = []

        async def conflicting() -> None:
            try:
                await store.assign("taken", "w2")
            except CustodyConflict as exc:
                errors.append(exc)

        commits = store.commits
        async with trio.open_nursery() as nursery:
            for i in range(50):
                nursery.start_soon(store.ingest, Task(f"t{i}", "hi"))
                if i == 25:
                    nursery.start_soon(conflicting)
        assert len(errors) == 1
        assert store.commits - commits < 51  # they did share commits
        counts = await store.counts()
        assert (counts[CustodyState.PENDING], counts[CustodyState.ASSIGNED]) == (50, 1)
        rec = await store.get("taken")
        assert rec is not None
        assert rec.owner == "w1"
    finally:
        await store.aclose()


async def test_cancellation_before_a_call_stores_nothing(tmp_path: Path) -> None:
    store = await SqliteStore.open(tmp_path / "c.db")
    try:
        with trio.CancelScope() as scope:
            scope.cancel()
            await store.ingest(Task("t1", "hi"))
        assert scope.cancelled_caught
        assert await store.state("t1") is None
    finally:
        await store.aclose()


async def test_a_caller_cancelled_mid_call_still_learns_the_outcome(tmp_path: Path) -> None:
    store = await SqliteStore.open(tmp_path / "c.db")
    answers: list[bool] = []
    entered, gate = threading.Event(), threading.Event()

    def occupy_the_writer(conn: sqlite3.Connection) -> None:
        entered.set()
        gate.wait(10)

    try:
        async with trio.open_nursery() as nursery:
            # hold the writer thread so the caller's ingest is surely queued when the cancel lands
            nursery.start_soon(store.db.writer.run, occupy_the_writer)
            await trio.to_thread.run_sync(entered.wait, 10)
            scope = trio.CancelScope()

            async def caller() -> None:
                with scope:
                    answers.append(await store.ingest(Task("t1", "hi")))
                    await trio.sleep_forever()  # the cancel strikes at the next checkpoint

            nursery.start_soon(caller)
            await trio.testing.wait_all_tasks_blocked()
            scope.cancel()
            gate.set()
        assert answers == [True]
        assert scope.cancelled_caught
        assert await store.state("t1") is CustodyState.PENDING
    finally:
        gate.set()
        await store.aclose()


async def test_a_job_that_raises_alone_is_rolled_back(tmp_path: Path) -> None:
    store = await SqliteStore.open(tmp_path / "c.db")
    try:

        def half_done(conn: sqlite3.Connection) -> None:
            _insert(conn, "half", "pending")
            raise RuntimeError("boom after a write")

        with pytest.raises(RuntimeError, match="boom"):
            await store.db.writer.run(half_done)
        assert await store.state("half") is None
        # and inside a shared batch: only its own work is undone
        async with trio.open_nursery() as nursery:
            for i in range(20):
                nursery.start_soon(store.ingest, Task(f"t{i}", "hi"))
            nursery.start_soon(_expect_boom, store, half_done)
        assert await store.state("half") is None
        assert (await store.counts())[CustodyState.PENDING] == 20
    finally:
        await store.aclose()


async def _expect_boom(store: SqliteStore, fn: Any) -> None:
    with pytest.raises(RuntimeError, match="boom"):
        await store.db.writer.run(fn)


async def test_a_closed_store_refuses_calls(tmp_path: Path) -> None:
    store = await SqliteStore.open(tmp_path / "c.db")
    await store.aclose()
    await store.aclose()  # idempotent
    with pytest.raises(trio.ClosedResourceError):
        await store.ingest(Task("t1", "hi"))


async def test_one_store_serves_consecutive_trio_runs(tmp_path: Path) -> None:
    """The writer wakes each caller through its own run's token (the model test relies on it)."""
    store = await SqliteStore.open(tmp_path / "c.db")
    try:

        def in_another_thread() -> bool:
            return trio.run(store.ingest, Task("from-elsewhere", "hi"))

        assert await trio.to_thread.run_sync(in_another_thread)
        assert await store.state("from-elsewhere") is CustodyState.PENDING
    finally:
        await store.aclose()


async def test_two_stores_on_one_file_never_hand_out_a_task_twice(tmp_path: Path) -> None:
    """Two writers (as two processes would have) share the file through SQLite's locks."""
    db = tmp_path / "shared.db"
    first = await SqliteStore.open(db)
    second = await SqliteStore.open(db)
    claimed: list[str] = []
    try:
        for i in range(120):
            await (first if i % 2 else second).ingest(Task(f"t{i}", "hi"))

        async def lane(store: SqliteStore, worker: str) -> None:
            while (claim := await store.claim(worker, leaderless=True)) is not None:
                claimed.append(claim.task.id)
                await store.complete(claim, "ok")

        async with trio.open_nursery() as nursery:
            for k in range(6):
                nursery.start_soon(lane, first, f"a{k}")
                nursery.start_soon(lane, second, f"b{k}")
        assert sorted(claimed) == sorted(f"t{i}" for i in range(120))
        assert (await second.counts())[CustodyState.RESULT] == 120
    finally:
        await first.aclose()
        await second.aclose()


async def test_a_broken_job_fails_its_callers_instead_of_hanging(tmp_path: Path) -> None:
    store = await SqliteStore.open(tmp_path / "c.db")
    try:
        with pytest.raises(sqlite3.OperationalError):
            await store.db.writer.run(lambda conn: conn.execute("SELECT * FROM no_such_table"))
        assert await store.ingest(Task("after", "hi"))
    finally:
        await store.aclose()


async def test_claim_many_is_one_commit(tmp_path: Path) -> None:
    async with await SqliteStore.open(tmp_path / "c.db") as store:
        await store.ingest_many([Task(f"t{i}", "x") for i in range(8)])
        before = store.commits
        claims = await store.claim_many("w1", 8, leaderless=True)
        assert len(claims) == 8
        assert store.commits - before == 1


async def test_the_default_body_limit_is_the_shared_one(tmp_path: Path) -> None:
    """The gateway's request limit is sized from the same constant (tests/gateway)."""
    async with await SqliteStore.open(tmp_path / "c.db") as store:
        assert store.max_body_bytes == MAX_BODY_BYTES


async def test_an_sqlite_too_old_for_the_custody_sql_is_refused_clearly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite3, "sqlite_version_info", (3, 34, 1))
    monkeypatch.setattr(sqlite3, "sqlite_version", "3.34.1")
    with pytest.raises(RuntimeError, match=r"needs SQLite 3\.35\.0 or newer; .* SQLite 3\.34\.1"):
        await SqliteStore.open(tmp_path / "old.db")


OLD = (
    "INSERT INTO {s}tasks (id, body, priority, headers, state, attempt, created_at, "
    "updated_at) VALUES ('old', 'from before', 1, '{{}}', 'pending', 1, 1, 2)"
)
"""A pending task of no room, as a store of an older version held it."""


async def test_a_store_from_before_durable_runs_migrates_with_its_tasks(tmp_path: Path) -> None:
    """Issue #35's migration loosens the state CHECK in place (no rebuild): a file at the
    version before it keeps its tasks, then parks and records steps."""
    async with sqlite_from(
        tmp_path / "custody.db", sqlite_step("CREATE TABLE steps"), OLD
    ) as store:
        claim = await store.claim("w1", leaderless=True)
        assert claim is not None
        assert claim.task.body == "from before"
        await store.record_step(claim, "a", "1")
        await store.park(claim, store.clock() + 60, "sleeping")
        assert await store.state("old") is CustodyState.WAITING
        assert [s.name for s in await store.steps("old")] == ["a"]


async def test_a_store_from_before_flow_control_migrates_with_its_tasks(tmp_path: Path) -> None:
    """Issue #38's migration adds the limits, permits and waiters tables and the trigger that
    frees a task's permits: a file at the version before it keeps its tasks, then limits them."""
    from tether.bridge.custody._limits import Granted, LimitSpec, NoPermit

    async with sqlite_from(
        tmp_path / "custody.db", sqlite_step("CREATE TABLE limits"), OLD
    ) as store:
        claim = await store.claim("w1", leaderless=True)
        assert claim is not None
        assert claim.task.body == "from before"
        await store.set_limit(LimitSpec("k", concurrency=1))
        assert isinstance(await store.acquire_permit(claim, "k"), Granted)
        assert await store.acquire_permit(claim, "k") == NoPermit(None, "concurrency")
        await store.complete(claim, "done")
        assert [v.in_flight for v in await store.limit_views()] == [0]
