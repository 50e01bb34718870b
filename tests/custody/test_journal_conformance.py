"""Conformance: the custody journal (issue #16, item 5), on every backend.

Every state change is appended to the task's history in the same transaction (time, from, to,
worker, attempt, reason, actor); a replay or a renew appends nothing; retention prunes the
history with its task.
"""

from __future__ import annotations

from collections.abc import Sequence

from support.clock import FakeClock
from support.custody import LEASE_S
from tether.bridge import CustodyState, Task
from tether.bridge.custody import JournalEntry, Store
from tether.bridge.pool import Reconciler

S = CustodyState


def _steps(journal: Sequence[JournalEntry]) -> list[tuple[object, ...]]:
    return [(e.src, e.dst, e.worker, e.attempt, e.reason, e.actor) for e in journal]


async def test_a_tasks_whole_journey_is_journaled_with_who_did_what(
    store: Store, fake_clock: FakeClock
) -> None:
    t0 = fake_clock.now
    assert await store.ingest(Task("t1", "hello"))
    assert not await store.ingest(Task("t1", "hello"))  # a replay moves nothing
    fake_clock.advance(1)
    await store.assign("t1", "w1")
    first = await store.claim("w1")
    assert first is not None
    await store.renew(first)  # not a move
    fake_clock.advance(1)
    await store.fail(first, "ConnectionError: 503", retry_after=5)
    fake_clock.advance(5)
    second = await store.claim("w2", leaderless=True)
    assert second is not None
    fake_clock.advance(LEASE_S)
    await Reconciler(store).run_once()  # the lease of attempt 2 lapsed
    third = await store.claim("w1", leaderless=True)
    assert third is not None
    await store.complete(third, "hi back")
    fake_clock.advance(1)
    await store.mark_delivered("t1")
    journal = list(await store.journal("t1"))
    expiry = journal[5].reason
    assert expiry is not None
    assert expiry.startswith("lease of worker w2 on attempt 2 expired")
    assert _steps(journal) == [
        (None, S.PENDING, None, 1, None, "bridge"),
        (S.PENDING, S.ASSIGNED, "w1", 1, None, "lead"),
        (S.ASSIGNED, S.CLAIMED, "w1", 1, None, "worker"),
        (S.CLAIMED, S.PENDING, "w1", 1, "ConnectionError: 503", "worker"),
        (S.PENDING, S.CLAIMED, "w2", 2, None, "worker"),
        (S.CLAIMED, S.PENDING, "w2", 2, expiry, "reconciler"),
        (S.PENDING, S.CLAIMED, "w1", 3, None, "worker"),
        (S.CLAIMED, S.RESULT, "w1", 3, None, "worker"),
        (S.RESULT, S.DELIVERED, "w1", 3, None, "bridge"),
    ]
    assert [e.at - t0 for e in journal] == [0, 1, 1, 2, 7, 7 + LEASE_S] + [7 + LEASE_S] * 2 + [
        8 + LEASE_S
    ]


async def test_dead_letters_assignments_given_back_and_releases_are_journaled(
    store: Store,
) -> None:
    await store.ingest_many([Task("a", "x"), Task("b", "y"), Task("c", "z")])
    assert await store.assign_many([("a", "w1"), ("b", "w1")]) == [True, True]
    assert list(await store.return_assignments("w1")) == ["a", "b"]
    claim = await store.claim("w2", leaderless=True)
    assert claim is not None
    assert claim.task.id == "a"
    await store.release(claim)
    await store.dead_letter("c", "undeliverable: gone")
    permanent = await store.claim("w3", leaderless=True)
    assert permanent is not None
    await store.fail(permanent, "no such city", permanent=True)
    assert _steps(await store.journal("a")) == [
        (None, S.PENDING, None, 1, None, "bridge"),
        (S.PENDING, S.ASSIGNED, "w1", 1, None, "lead"),
        (S.ASSIGNED, S.PENDING, "w1", 1, None, "lead"),
        (S.PENDING, S.CLAIMED, "w2", 1, None, "worker"),
        (S.CLAIMED, S.PENDING, "w2", 1, None, "worker"),
        (S.PENDING, S.CLAIMED, "w3", 1, None, "worker"),
        (S.CLAIMED, S.DEAD, "w3", 1, "permanent failure on attempt 1: no such city", "worker"),
    ]
    assert _steps(await store.journal("c"))[-1] == (
        S.PENDING,
        S.DEAD,
        None,
        1,
        "undeliverable: gone",
        "bridge",
    )
    assert await store.journal("never-seen") == []


async def test_retention_prunes_the_journal_with_its_task(
    store: Store, fake_clock: FakeClock
) -> None:
    for id in ("old", "kept"):
        await store.ingest(Task(id, "x"))
        claim = await store.claim("w1", leaderless=True)
        assert claim is not None
        await store.complete(claim, "done")
    await store.mark_delivered("old")
    fake_clock.advance(100)
    assert await store.prune_delivered(fake_clock.now) == 1
    assert await store.journal("old") == []
    assert len(await store.journal("kept")) == 3
    assert not await store.ingest(Task("old", "x"))  # the tombstone: still nothing journaled
    assert await store.journal("old") == []
