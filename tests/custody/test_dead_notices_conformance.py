"""Conformance of the dead-notice marker (``unreported_dead``, ``mark_dead_reported``,
``unreported_dead_count``) on every backend: which dead tasks the gateway still has to hear
about, durably, with nothing else about a dead task ever changing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from support.clock import FakeClock
from support.custody import MAX_ATTEMPTS, Backend, drive_to
from tether.bridge import CustodyState, Task
from tether.bridge.custody import Store
from tether.bridge.pool import Reconciler

S = CustodyState


async def test_every_way_to_die_is_unreported_until_marked(
    store: Store, fake_clock: FakeClock
) -> None:
    # dead_letter (delivery's refusal), fail past max_attempts (a crashing agent), and an
    # expired lease past max_attempts (the reconciler): all three land in unreported_dead
    await drive_to(store, "refused", S.DEAD)
    fake_clock.advance(1)
    await store.ingest(Task("crashing", "boom"))
    for _ in range(MAX_ATTEMPTS):
        claim = await store.claim("w1", leaderless=True)
        assert claim is not None
        state = await store.fail(claim, "RuntimeError: boom")
    assert state is S.DEAD
    fake_clock.advance(1)
    await store.ingest(Task("stuck", "zzz"))
    for _ in range(MAX_ATTEMPTS):
        assert await store.claim("w2", leaderless=True) is not None
        fake_clock.advance(store.lease_s + 1)
        await Reconciler(store).run_once()
    assert await store.state("stuck") is S.DEAD
    for state in (S.PENDING, S.CLAIMED, S.RESULT, S.DELIVERED):
        await drive_to(store, f"alive-{state.value}", state)

    dead = await store.unreported_dead()
    assert [r.task.id for r in dead] == ["refused", "crashing", "stuck"]  # the order they died
    assert all(r.state is S.DEAD and r.reason for r in dead)
    assert "boom" in (dead[1].reason or "")
    assert await store.unreported_dead_count() == 3
    assert [r.task.id for r in await store.unreported_dead(limit=2)] == ["refused", "crashing"]

    assert await store.mark_dead_reported(["crashing"]) == [True]
    assert [r.task.id for r in await store.unreported_dead()] == ["refused", "stuck"]
    assert await store.unreported_dead_count() == 2


async def test_marking_changes_nothing_but_the_marker(store: Store, fake_clock: FakeClock) -> None:
    await drive_to(store, "d1", S.DEAD)
    before = await store.get("d1")
    fake_clock.advance(50)
    assert await store.mark_dead_reported(["d1"]) == [True]
    assert await store.get("d1") == before  # reason, updated_at, attempt: all unchanged
    assert (await store.counts())[S.DEAD] == 1
    assert [r.task.id for r in await store.records(S.DEAD)] == ["d1"]


async def test_mark_is_idempotent_and_refuses_what_is_not_dead(store: Store) -> None:
    await drive_to(store, "d1", S.DEAD)
    await drive_to(store, "d2", S.DEAD)
    await drive_to(store, "live", S.RESULT)
    await drive_to(store, "done", S.DELIVERED)
    answers = await store.mark_dead_reported(["d1", "live", "nobody", "done", "d1", "d2"])
    assert answers == [True, False, False, False, True, True]
    assert await store.mark_dead_reported(["d1", "d2"]) == [True, True]  # a repeat: still True
    assert await store.unreported_dead() == []
    assert await store.state("live") is S.RESULT
    assert await store.state("nobody") is None
    assert await store.mark_dead_reported([]) == []


async def test_malformed_id_refuses_the_whole_mark(store: Store) -> None:
    await drive_to(store, "d1", S.DEAD)
    with pytest.raises(ValueError, match="task id"):
        await store.mark_dead_reported(["d1", "bad id"])
    assert [r.task.id for r in await store.unreported_dead()] == ["d1"]
    with pytest.raises(ValueError, match="limit"):
        await store.unreported_dead(limit=0)


async def test_the_marker_survives_a_reopen(
    backend: Backend, where: Any, fake_clock: FakeClock
) -> None:
    store = await backend.open(where, fake_clock)
    try:
        await drive_to(store, "d1", S.DEAD)
        await drive_to(store, "d2", S.DEAD)
        assert await store.mark_dead_reported(["d1"]) == [True]
    finally:
        await store.aclose()
    store = await backend.open(where, fake_clock)
    try:
        assert [r.task.id for r in await store.unreported_dead()] == ["d2"]
        assert await store.unreported_dead_count() == 1
    finally:
        await store.aclose()


async def test_retention_never_prunes_a_dead_task_reported_or_not(
    store: Store, fake_clock: FakeClock
) -> None:
    await drive_to(store, "unreported", S.DEAD)
    await drive_to(store, "reported", S.DEAD)
    await drive_to(store, "delivered", S.DELIVERED)
    assert await store.mark_dead_reported(["reported"]) == [True]
    fake_clock.advance(10_000)
    assert await store.prune_delivered(fake_clock.now) == 1
    assert await store.prune_tombstones(fake_clock.now) == 1
    assert (await store.counts())[S.DEAD] == 2
    assert [r.task.id for r in await store.unreported_dead()] == ["unreported"]


async def test_sqlite_dead_tasks_from_before_migration_4_are_unreported(tmp_path: Path) -> None:
    # an upgraded bridge tells the gateway about the dead letters of its older self too
    import sqlite3

    from tether.bridge import SqliteStore
    from tether.bridge.stores.sqlite._schema import MIGRATIONS, _statements

    db = tmp_path / "custody.db"
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        for migration in MIGRATIONS[:3]:
            for statement in _statements(migration):
                conn.execute(statement)
        conn.execute("PRAGMA user_version = 3")
        conn.execute(
            "INSERT INTO tasks (id, body, priority, headers, state, attempt, reason, "
            "created_at, updated_at) VALUES ('old-dead', 'b', 1, '{}', 'dead', 3, 'boom', 1, 2)"
        )
    finally:
        conn.close()
    async with await SqliteStore.open(db) as store:
        [record] = await store.unreported_dead()
        assert (record.task.id, record.reason, record.updated_at) == ("old-dead", "boom", 2.0)
        assert await store.mark_dead_reported(["old-dead"]) == [True]
        assert await store.unreported_dead_count() == 0
