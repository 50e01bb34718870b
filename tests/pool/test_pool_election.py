"""One leader among the lead candidates of every process on a store; standbys take over fast.

The rule (``elect``): the live lead candidate that has beaten the longest leads; a newcomer
never unseats it; a silent leader is replaced once ``lead_dead_after`` (two beat intervals)
passed since its last beat, a soft-stopped one at once (it removes its beat).
"""

from __future__ import annotations

from typing import Any

import trio

from store_clock import StoreAwareClock
from tether.bridge import CustodyState, PoolLead, SqliteStore, Task
from tether.bridge.custody._store import WorkerInfo
from tether.bridge.pool import elect

from .pool_support import wait_for

S = CustodyState


def member(name: str, started: float, beat: float, role: str = "lead") -> WorkerInfo:
    return WorkerInfo(name, role, 0, last_beat=beat, started_at=started)  # type: ignore[arg-type]


def test_the_oldest_live_candidate_leads_and_the_dead_and_workers_never_do() -> None:
    members = [
        member("b", started=5.0, beat=99.5),
        member("a", started=7.0, beat=99.9),
        member("old", started=1.0, beat=90.0),  # silent for 10 s: gone
        member("w", started=0.0, beat=99.9, role="worker"),
    ]
    leader = elect(members, 100.0, lead_dead_after=1.0)
    assert leader is not None
    assert leader.name == "b"
    # a tie on start time goes by name, so every reader picks the same one
    tied = [member("y", 5.0, 99.9), member("x", 5.0, 99.9)]
    assert elect(tied, 100.0, 1.0) == tied[1]
    assert elect([member("b", 5.0, 98.0)], 100.0, 1.0) is None  # leaderless


async def _assigned_to(store: SqliteStore, worker: str) -> int:
    records = await store.records(S.ASSIGNED, limit=1000)
    return sum(1 for r in records if r.owner == worker)


async def test_a_standby_never_sweeps_and_takes_over_within_two_beats_of_a_crash(
    timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    store = timed_store
    # the first lead's process "crashes": it never gets to remove its beat
    first = PoolLead(_NoGoodbye(store), name="first-lead", sweep_interval=0.05, beat_interval=0.5)
    second = PoolLead(store, name="second-lead", sweep_interval=0.05, beat_interval=0.5)
    async with trio.open_nursery() as nursery:
        # "w1" only beats here (nothing claims): the assignments stay visible
        await store.beat("w1", "worker", 1000)
        first_scope = trio.CancelScope()

        async def run_first(task_status: trio.TaskStatus[None]) -> None:
            with first_scope:
                await first.run(task_status=task_status)

        await nursery.start(run_first)
        await nursery.start(second.run)
        assert first.leading
        assert not second.leading
        assert second.leader is not None
        assert second.leader.name == "first-lead"
        for i in range(5):
            await store.ingest(Task(f"t{i}", "x"))
        await wait_for(lambda: _count(store, S.ASSIGNED, 5))
        assert second.sweeps == 0  # a standby reads beats, never the queue
        assert first.sweeps > 0

        async def keep_beating_w1() -> None:
            while True:
                await store.beat("w1", "worker", 1000)
                await trio.sleep(1.0)

        nursery.start_soon(keep_beating_w1)
        killed_at = trio.current_time()
        first_scope.cancel()
        await wait_for(lambda: _leads(second))
        took = trio.current_time() - killed_at
        assert took <= 2 * second.beat_interval + 0.2, took
        assert second.takeovers == 1
        assert second.leading_since is not None
        await store.ingest(Task("after", "x"))
        await wait_for(lambda: _owner_is(store, "after", "w1"))
        second.request_stop()
        nursery.cancel_scope.cancel()


async def test_a_soft_stopped_leader_hands_over_at_once_and_a_newcomer_stands_by(
    timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    store = timed_store
    a = PoolLead(store, name="a-lead", sweep_interval=0.05, beat_interval=0.5)
    b = PoolLead(store, name="b-lead", sweep_interval=0.05, beat_interval=0.5)
    async with trio.open_nursery() as nursery:
        async with trio.open_nursery() as first:
            await first.start(a.run)
            await nursery.start(b.run)
            await trio.sleep(2.0)
            assert a.leading
            assert not b.leading
            stopped_at = trio.current_time()
            a.request_stop()
        await wait_for(lambda: _leads(b))
        assert trio.current_time() - stopped_at <= b.beat_interval / 4 + 0.1
        c = PoolLead(store, name="c-lead", sweep_interval=0.05, beat_interval=0.5)
        await nursery.start(c.run)
        assert b.leading
        assert not c.leading
        assert c.leader is not None
        assert c.leader.name == "b-lead"
        nursery.cancel_scope.cancel()


class _NoGoodbye:
    """The store as a process sees it that is killed: it never removes its beat."""

    def __init__(self, store: SqliteStore) -> None:
        self._store = store

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def remove_worker(self, worker: str) -> bool:
        return False


async def _count(store: SqliteStore, state: S, n: int) -> bool:
    return (await store.counts())[state] == n


async def _leads(lead: PoolLead) -> bool:
    return lead.leading


async def _owner_is(store: SqliteStore, id: str, worker: str) -> bool:
    record = await store.get(id)
    return record is not None and record.owner == worker and record.state is S.ASSIGNED
