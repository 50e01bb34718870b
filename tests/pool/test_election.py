"""One leader among the lead candidates of every process on a store; standbys take over fast.

The rule (``elect``): the live lead candidate that has beaten the longest leads; a newcomer
never unseats it; a silent leader is replaced once its ``lease`` (in which a candidate beats
three times) passed since its last beat, a soft-stopped one at the standby's next beat (it
removes its beat).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
import trio

from support.clock import StoreAwareClock
from support.waiting import wait_until
from tether.bridge import CustodyState, SqliteStore, Task
from tether.bridge.custody._records import WorkerInfo, WorkerRole
from tether.bridge.pool import PoolLead, elect
from tether.bridge.pool._lead import BEATS_PER_LEASE

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
    first = PoolLead(_NoGoodbye(store), name="first-lead", sweep_interval=0.05, lease=0.75)
    second = PoolLead(store, name="second-lead", sweep_interval=0.05, lease=0.75)
    async with trio.open_nursery() as nursery:
        # "w1" only beats here (nothing claims): the assignments stay visible
        await store.beat("w1", "worker", 1000)
        first_scope = await _start_killable(nursery, first)
        await nursery.start(second.run)
        assert first.leading
        assert not second.leading
        assert second.leader is not None
        assert second.leader.name == "first-lead"
        for i in range(5):
            await store.ingest(Task(f"t{i}", "x"))
        await wait_until(lambda: _count(store, S.ASSIGNED, 5))
        assert second.sweeps == 0  # a standby reads beats, never the queue
        assert first.sweeps > 0

        async def keep_beating_w1() -> None:
            while True:
                await store.beat("w1", "worker", 1000)
                await trio.sleep(1.0)

        nursery.start_soon(keep_beating_w1)
        killed_at = trio.current_time()
        first_scope.cancel()
        await wait_until(lambda: _leads(second))
        took = trio.current_time() - killed_at
        assert took <= second.lease + 0.2, took
        assert second.takeovers == 1
        assert second.leading_since is not None
        await store.ingest(Task("after", "x"))
        await wait_until(lambda: _owner_is(store, "after", "w1"))
        second.request_stop()
        nursery.cancel_scope.cancel()


async def test_a_soft_stopped_leader_hands_over_at_the_next_beat_and_a_newcomer_stands_by(
    timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    store = timed_store
    a = PoolLead(store, name="a-lead", sweep_interval=0.05, lease=0.75)
    b = PoolLead(store, name="b-lead", sweep_interval=0.05, lease=0.75)
    async with trio.open_nursery() as nursery:
        async with trio.open_nursery() as first:
            await first.start(a.run)
            await nursery.start(b.run)
            await trio.sleep(2.0)
            assert a.leading
            assert not b.leading
            stopped_at = trio.current_time()
            a.request_stop()
        await wait_until(lambda: _leads(b))
        assert trio.current_time() - stopped_at <= b.lease / BEATS_PER_LEASE + 0.1
        c = PoolLead(store, name="c-lead", sweep_interval=0.05, lease=0.75)
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


@pytest.mark.parametrize("phase", [0.0, 0.1, 0.25, 0.5, 0.75, 0.99])
async def test_a_new_leader_assigns_within_a_lease_of_the_crash_whenever_it_comes(
    timed_store: SqliteStore, mock_clock: StoreAwareClock, phase: float
) -> None:
    """The failover goal of the pool guide, on every phase of the leader's beat: from the
    SIGKILL of the leading process (here: its lead stops beating, its beat stays) to the new
    leader's first assignment, within a lease (and a beat for the sweep). The worst phase is a
    kill just after a beat: the standby must wait out the lease from that beat in full."""
    store = timed_store
    lease = 0.75
    beat = lease / BEATS_PER_LEASE
    first = PoolLead(_NoGoodbye(store), name="first-lead", sweep_interval=0.05, lease=lease)
    second = PoolLead(store, name="second-lead", sweep_interval=0.05, lease=lease)

    async def keep_beating_w1() -> None:  # a worker that only beats: assignments stay
        while True:
            await store.beat("w1", "worker", 1000)
            await trio.sleep(1.0)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(keep_beating_w1)
        first_scope = await _start_killable(nursery, first)
        await nursery.start(second.run)
        await trio.sleep(3.2)
        assert first.leading
        assert not second.leading
        last = await _last_beat(store, "first-lead")
        await wait_until(lambda: _beat_moved(store, "first-lead", last), step=0.001)
        await trio.sleep(phase * beat)
        killed_at = trio.current_time()
        first_scope.cancel()
        gone_at = await _last_beat(store, "first-lead") + second.lease
        for i in range(3):
            await store.ingest(Task(f"after-{i}", "x"))
        await wait_until(lambda: _assigned(second), step=0.001)
        assert second.first_assigned_at is not None
        took = second.first_assigned_at - killed_at
        assert 0 < took <= lease + beat, took
        assert second.takeovers == 1
        # the standby looked again the moment the leader's last beat turned a lease old, not
        # at its own next beat
        assert second.leading_since is not None
        assert gone_at <= second.leading_since <= gone_at + 0.01
        nursery.cancel_scope.cancel()


async def _start_killable(nursery: trio.Nursery, lead: PoolLead) -> trio.CancelScope:
    """Start ``lead.run``; cancelling the scope returned ends it at once (as a SIGKILL of its
    process would, given a store that never removes its beat: ``_NoGoodbye``)."""
    scope = trio.CancelScope()

    async def run(task_status: trio.TaskStatus[None]) -> None:
        with scope:
            await lead.run(task_status=task_status)

    await nursery.start(run)
    return scope


async def _last_beat(store: SqliteStore, name: str) -> float:
    return next(m.last_beat for m in await store.workers() if m.name == name)


async def _beat_moved(store: SqliteStore, name: str, before: float) -> bool:
    return await _last_beat(store, name) != before


async def _assigned(lead: PoolLead) -> bool:
    return lead.first_assigned_at is not None


async def test_a_leader_whose_beat_comes_late_by_less_than_an_interval_keeps_the_lead(
    timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    """The failover is fast without unseating a live leader: a beat may come two beats (two
    thirds of the lease) late (a slow commit, a pause of the process) before a standby takes
    over; and a leader that was only slow leads again once it beats (it has beaten longest)."""
    store = timed_store
    beat = 0.5  # the lease is 1.5 of these: a beat every half
    late = _LateBeats(store, "first-lead")
    first = PoolLead(late, name="first-lead", sweep_interval=0.05, lease=1.5 * beat)
    second = PoolLead(store, name="second-lead", sweep_interval=0.05, lease=1.5 * beat)
    async with trio.open_nursery() as nursery:
        await nursery.start(first.run)
        await nursery.start(second.run)
        await trio.sleep(2.0)
        assert first.leading
        late.delay = 0.9 * beat  # the next beat only: comes 0.9 intervals late
        await trio.sleep(3.0)
        assert late.delayed == 1
        assert first.leading
        assert second.takeovers == 0
        late.delay = 1.2 * beat  # too late: the standby takes over, then hands back
        await wait_until(lambda: _leads(second), step=0.001)
        assert late.delayed == 2
        await wait_until(lambda: _not_leading(second), step=0.001)
        assert first.leading
        await trio.sleep(2.0)
        assert first.leading
        assert not second.leading
        assert second.takeovers == 1
        nursery.cancel_scope.cancel()


class _LateBeats(_NoGoodbye):
    """The store as a process sees it that pauses once before one beat of ``name``."""

    def __init__(self, store: SqliteStore, name: str) -> None:
        super().__init__(store)
        self._name = name
        self.delay = 0.0
        self.delayed = 0

    async def beat(
        self, worker: str, role: WorkerRole, capacity: int, *, queues: Sequence[str] = ("default",)
    ) -> Sequence[WorkerInfo]:
        if worker == self._name and self.delay:
            delay, self.delay = self.delay, 0.0
            self.delayed += 1
            await trio.sleep(delay)
        return await self._store.beat(worker, role, capacity, queues=queues)


async def _not_leading(lead: PoolLead) -> bool:
    return not lead.leading


class _SlowAnswers(_NoGoodbye):
    """The store as a busy writer makes it: ``name``'s beats are stamped and committed, and
    their answer comes ``delay`` seconds later (other jobs were ahead in the writer's queue)."""

    def __init__(self, store: SqliteStore, name: str) -> None:
        super().__init__(store)
        self._name = name
        self.delay = 0.0

    async def beat(
        self, worker: str, role: WorkerRole, capacity: int, *, queues: Sequence[str] = ("default",)
    ) -> Sequence[WorkerInfo]:
        members = await self._store.beat(worker, role, capacity, queues=queues)
        if worker == self._name:
            await trio.sleep(self.delay)
        return members


async def test_a_lone_leader_keeps_the_lead_when_a_busy_writer_answers_its_beats_late(
    timed_store: SqliteStore, mock_clock: StoreAwareClock, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 33: under load a single bridge logged "standing by (leader is nobody)", then "now
    leading": its own beat, stamped before the writer's queue, looked dead once answered."""
    slow = _SlowAnswers(timed_store, "only-lead")
    lead = PoolLead(slow, name="only-lead", sweep_interval=0.05, lease=0.75)
    async with trio.open_nursery() as nursery:
        await nursery.start(lead.run)
        slow.delay = 1.0  # longer than the lease (0.75 s)
        await trio.sleep(5.0)
        assert lead.leading
        nursery.cancel_scope.cancel()
    assert lead.takeovers == 1
    assert "standing by" not in caplog.text


class _Outage(_NoGoodbye):
    """The store out of reach: while ``down`` every call waits; ``back(name)`` lets that
    candidate's calls through again (candidates come back one after the other)."""

    def __init__(self, store: SqliteStore) -> None:
        super().__init__(store)
        self.down = False
        self.up: set[str] = set()
        self.changed = trio.Event()

    def back(self, name: str) -> None:
        self.up.add(name)
        self.changed.set()
        self.changed = trio.Event()

    async def _wait(self, name: str) -> None:
        while self.down and name not in self.up:
            await self.changed.wait()

    async def beat(
        self, worker: str, role: WorkerRole, capacity: int, *, queues: Sequence[str] = ("default",)
    ) -> Sequence[WorkerInfo]:
        await self._wait(worker)
        return await self._store.beat(worker, role, capacity, queues=queues)


async def test_two_candidates_do_not_swap_the_lead_when_they_come_back_from_an_outage(
    timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    """Issue 33: after an outage the younger candidate came back first, took the lead from the
    older one (its beat stale) and lost it to it 20-40 ms later. Back from a silence of its
    own, a candidate holds off a ``lease``; a leader that claims the lead keeps it."""
    outage = _Outage(timed_store)
    first = PoolLead(outage, name="first-lead", sweep_interval=0.05, lease=0.75)
    second = PoolLead(outage, name="second-lead", sweep_interval=0.05, lease=0.75)
    async with trio.open_nursery() as nursery:
        await nursery.start(first.run)
        await nursery.start(second.run)
        await trio.sleep(1.0)
        assert (first.leading, second.leading) == (True, False)
        outage.down = True
        await trio.sleep(3.0)
        outage.back("second-lead")  # the younger one's beat lands first
        await trio.sleep(0.03)
        outage.back("first-lead")
        await trio.sleep(3.0)
        assert (first.leading, second.leading) == (True, False)
        assert (first.takeovers, second.takeovers) == (1, 0)
        nursery.cancel_scope.cancel()


class _CountedReads(_NoGoodbye):
    """The store, counting the reads of the beats that are not a beat (``workers``)."""

    def __init__(self, store: SqliteStore) -> None:
        super().__init__(store)
        self.reads = 0

    async def workers(self) -> Sequence[WorkerInfo]:
        self.reads += 1
        return await self._store.workers()


async def test_a_standby_reads_the_beats_only_with_its_own_while_the_leader_beats(
    timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    """Issue 39: a standby read the beats eight times a second besides its own beats. It waits
    on the leader's lease instead: while the leader beats, its own beats (three a lease) are
    all it reads; a read of its own comes only as the leader's lease runs out."""
    counted = _CountedReads(timed_store)
    first = PoolLead(timed_store, name="first-lead", sweep_interval=0.05, lease=3.0)
    second = PoolLead(counted, name="second-lead", sweep_interval=0.05, lease=3.0)
    async with trio.open_nursery() as nursery:
        first_scope = await _start_killable(nursery, first)
        await nursery.start(second.run)
        await trio.sleep(30.0)
        assert (first.leading, second.leading) == (True, False)
        assert counted.reads == 0
        first_scope.cancel()  # a crash: its beat stays, the lease runs out
        await wait_until(lambda: _leads(second))
        assert counted.reads <= 1  # at the lease's end (unless its own beat came first)
        nursery.cancel_scope.cancel()
