"""Run timeouts (issue #16, item 2), on virtual time.

A run past its timeout is cancelled and counts as a failed attempt ("timed out after N s"); an
agent factory's ``run_timeout`` attribute overrides the worker's; a sync handler's thread is
abandoned at the timeout and its late answer stored nowhere; a run whose outcome is still not
stored ``stop_grace`` after its timeout loses its lease to the reconciler, and the fence
refuses what it stores late.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable
from typing import Any, cast

import pytest
import trio

from support.pool_fixtures import LEASE_S, MAX_ATTEMPTS, StoreAwareClock
from support.waiting import state_is as _is
from support.waiting import wait_until
from tether import Session
from tether.bridge import CustodyState, SqliteStore, Task
from tether.bridge.custody import Claim, WorkerStore
from tether.bridge.pool import PoolWorker, Reconciler, RetryBackoff
from tether.bridge.pool._agent import agent_run_timeout

S = CustodyState
NO_BACKOFF = RetryBackoff(0, 0)


def agent(fn: Callable[[Task], Any], **attributes: Any) -> Callable[[Session], None]:
    def factory(session: Session) -> None:
        session.add_handler("task", fn)

    for name, value in attributes.items():
        setattr(factory, name, value)
    return factory


async def _failed_once(store: SqliteStore, id: str) -> bool:
    record = await store.get(id)
    return record is not None and record.attempt >= 2


async def test_a_run_past_its_timeout_is_cancelled_and_counts_as_a_failure(
    timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    starts: list[float] = []
    cancelled = 0

    async def stuck(task: Task) -> str:
        nonlocal cancelled
        starts.append(trio.current_time())
        try:
            await trio.sleep_forever()
        finally:
            cancelled += 1

    worker = PoolWorker(timed_store, "w1", agent(stuck), run_timeout=30.0, retry_backoff=NO_BACKOFF)
    await timed_store.ingest(Task("t", "x"))
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        await wait_until(lambda: _failed_once(timed_store, "t"), within=40.0)
        record = await timed_store.get("t")
        assert record is not None
        assert (record.attempt, record.reason) == (2, "timed out after 30 s")
        assert trio.current_time() - starts[0] >= 30.0
        await wait_until(lambda: _is(timed_store, "t", S.DEAD), within=200.0)
        worker.request_stop()
    record = await timed_store.get("t")
    assert record is not None
    assert (
        record.reason == f"failed on attempt {MAX_ATTEMPTS} of {MAX_ATTEMPTS}: timed out after 30 s"
    )
    assert cancelled == len(starts) == MAX_ATTEMPTS  # each run was really cancelled
    assert (worker.counts.failed, worker.let_go) == (MAX_ATTEMPTS, 0)


async def test_an_agent_factory_sets_its_own_timeout(
    timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    async def slow(task: Task) -> str:
        await trio.sleep(8.0)
        return "late"

    quick = PoolWorker(timed_store, "w1", agent(slow, run_timeout=5.0), run_timeout=600.0)
    await timed_store.ingest(Task("t", "x"))
    async with trio.open_nursery() as nursery:
        await nursery.start(quick.run)
        await wait_until(lambda: _failed_once(timed_store, "t"), within=10.0)
        quick.request_stop()
    record = await timed_store.get("t")
    assert record is not None
    assert record.reason == "timed out after 5 s"
    assert agent_run_timeout(agent(slow), None) is None
    assert agent_run_timeout(agent(slow, run_timeout=None), 30.0) is None
    for bad in (0, -1, float("inf"), "5", True):
        with pytest.raises(ValueError, match="run_timeout"):
            PoolWorker(timed_store, "w1", agent(slow, run_timeout=bad))


async def test_a_blocked_thread_is_abandoned_and_its_late_answer_stored_nowhere(
    timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    gate = threading.Event()
    calls: list[int] = []

    def blocking(task: Task) -> str:  # a sync handler: it runs in a thread
        calls.append(len(calls) + 1)
        if len(calls) == 1:
            gate.wait(timeout=30)  # ignores cancellation: only the test lets it go
            return "late answer of attempt 1"
        return "answer of attempt 2"

    worker = PoolWorker(
        timed_store, "w1", agent(blocking), run_timeout=3.0, retry_backoff=NO_BACKOFF
    )
    await timed_store.ingest(Task("t", "x"))
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            await wait_until(lambda: _is(timed_store, "t", S.RESULT), within=20.0)
            worker.request_stop()
    finally:
        gate.set()
    record = await timed_store.get("t")
    assert record is not None
    assert (record.attempt, record.result) == (2, "answer of attempt 2")
    assert record.reason is None  # a result keeps no stale reason (issue 47.5): the journal does
    assert "timed out after 3 s" in [e.reason for e in await timed_store.journal("t")]


class _StuckOutcomes:
    """A store whose ``fail`` hangs until ``unblock`` (a commit stuck behind a lock).

    The hung call is shielded, as a commit already in the database is: the worker cancels an
    older attempt's run when it claims the task again, and that must not keep the late
    outcome from reaching the store (where the fence refuses it)."""

    def __init__(self, store: SqliteStore) -> None:
        self._store = store
        self.unblock = trio.Event()
        self.refused: list[Exception] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def fail(self, claim: Claim, reason: str, **options: Any) -> CustodyState:
        with trio.CancelScope(shield=True):
            await self.unblock.wait()
            try:
                state = await self._store.fail(claim, reason, **options)
            except Exception as exc:
                self.refused.append(exc)
                raise
        return state


async def test_a_run_whose_outcome_hangs_past_timeout_and_grace_loses_its_lease(
    timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    async def stuck(task: Task) -> str:
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    stuck_store = _StuckOutcomes(timed_store)
    worker = PoolWorker(
        cast(WorkerStore, stuck_store),
        "w1",
        agent(stuck),
        run_timeout=5.0,
        stop_grace=2.0,
        heartbeat_interval=1.0,
        retry_backoff=NO_BACKOFF,
    )
    await timed_store.ingest(Task("t", "x"))
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        await trio.sleep(5.0 + 2.0 + LEASE_S + 1.0)  # timeout, grace, then the lease lapses
        assert worker.let_go == 1
        [expiry] = (await Reconciler(timed_store).run_once()).expired
        assert (expiry.id, expiry.attempt, expiry.outcome) == ("t", 1, S.PENDING)
        stuck_store.unblock.set()  # the late outcome of attempt 1 is fenced out

        async def refused() -> bool:
            return bool(stuck_store.refused)

        await wait_until(refused)
        worker.request_stop()
    assert "StaleLease" in type(stuck_store.refused[0]).__name__
    record = await timed_store.get("t")
    assert record is not None
    assert record.attempt >= 2
    assert record.state is not S.DEAD


async def test_a_soft_stop_says_what_it_waits_for_and_until_when(
    timed_store: SqliteStore, mock_clock: StoreAwareClock, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 32.5: a graceful stop with runs in flight waited its grace in silence."""
    caplog.set_level(logging.INFO, logger="tether.bridge.pool.worker")

    async def stuck(task: Task) -> str:
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    worker = PoolWorker(timed_store, "w1", agent(stuck), stop_grace=4.0)
    await timed_store.ingest(Task("t", "x"))
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        await wait_until(lambda: _is(timed_store, "t", S.CLAIMED), within=5.0)
        stopped_at = trio.current_time()
        worker.request_stop()
    assert trio.current_time() - stopped_at == pytest.approx(4.0, abs=0.5)
    lines = [r.getMessage() for r in caplog.records]
    waiting = [line for line in lines if "stopping" in line]
    assert len(waiting) == 1, lines
    assert re.fullmatch(
        r"worker w1: stopping: waiting up to 4\.0 s \(until \d\d:\d\d:\d\d\) for 1 run in "
        r"hand \(t\) to finish; then it is cancelled and its task goes back to the pool",
        waiting[0],
    ), waiting[0]
    assert "worker w1: cancelled 1 run still going after the 4.0 s stop grace (t)" in lines
