"""Workers as services on Trio's mock clock: claims, leases, outcomes, leaderless mode, stops."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio

from tether import Session
from tether.agents import echo
from tether.bridge import (
    AgentError,
    CustodyState,
    PoolWorker,
    Reconciler,
    Reply,
    SqliteStore,
    Task,
)

from .conftest import LEASE_S, MAX_ATTEMPTS, StoreAwareClock
from .pool_support import wait_for

S = CustodyState


def agent(fn: Callable[[Task], Any]) -> Callable[[Session], None]:
    def factory(session: Session) -> None:
        session.add_handler("task", fn)

    return factory


@asynccontextmanager
async def running(*services: Any) -> AsyncIterator[trio.Nursery]:
    async with trio.open_nursery() as nursery:
        for service in services:
            await nursery.start(service.run)
        yield nursery
        for service in services:
            service.request_stop()


async def state_is(store: SqliteStore, id: str, *states: S) -> bool:
    return await store.state(id) in states


async def test_a_worker_runs_tasks_through_its_agent_session(
    timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    worker = PoolWorker(timed_store, "w1", echo.factory)
    await timed_store.ingest(Task("t1", "hello", room="r"))
    async with running(worker):
        await wait_for(lambda: state_is(timed_store, "t1", S.RESULT))
        assert worker.leaderless  # no lead ever beat
    (result,) = await timed_store.ready_results()
    assert (result.body, result.worker, result.attempt, result.no_send) == (
        "echo: hello",
        "w1",
        1,
        False,
    )
    assert worker.completed == 1
    assert await timed_store.workers() == []  # a clean stop forgets the worker's beat


async def _lead_beat_at(path: Path, offset: float) -> None:
    """Beat a lead from a second store on the same file, its clock ``offset`` seconds off."""
    skewed = await SqliteStore.open(path, clock=lambda: trio.current_time() + offset)
    try:
        await skewed.beat("lead", "lead", 0)
    finally:
        await skewed.aclose()


@pytest.mark.parametrize(
    ("lead_offset", "leaderless"),
    [(None, True), (-11.0, True), (+5.0, True), (+0.5, False), (-3.0, False)],
    ids=["absent", "stale", "future", "small-future-skew", "recent"],
)
async def test_leaderless_fallback_follows_the_leads_beat(
    timed_store: SqliteStore,
    mock_clock: StoreAwareClock,
    lead_offset: float | None,
    leaderless: bool,
) -> None:
    if lead_offset is not None:
        await _lead_beat_at(timed_store.path, lead_offset)
    await timed_store.ingest(Task("loose", "x"))
    await timed_store.ingest(Task("mine", "x"))
    await timed_store.assign("mine", "w1")
    await timed_store.ingest(Task("theirs", "x"))
    await timed_store.assign("theirs", "w2")
    worker = PoolWorker(timed_store, "w1", echo.factory, lead_dead_after=10.0)
    async with running(worker):
        await wait_for(lambda: state_is(timed_store, "mine", S.RESULT))
        await trio.sleep(0.5)  # several more claim polls
        assert worker.leaderless is leaderless
        expected = S.RESULT if leaderless else S.PENDING
        assert await timed_store.state("loose") is expected
        # never another worker's assignment, leaderless or not
        assert await timed_store.state("theirs") is S.ASSIGNED


async def test_a_long_task_of_a_renewing_worker_is_never_stolen(
    timed_store: SqliteStore,
    mock_clock: StoreAwareClock,
) -> None:
    async def slow(task: Task) -> str:
        await trio.sleep(LEASE_S * 10)
        return "finally"

    await timed_store.ingest(Task("long", "x"))
    w1 = PoolWorker(timed_store, "w1", agent(slow))
    async with running(w1):
        await wait_for(lambda: state_is(timed_store, "long", S.CLAIMED))
        w2 = PoolWorker(timed_store, "w2", echo.factory)
        reconciler = Reconciler(timed_store)
        async with trio.open_nursery() as inner:
            await inner.start(partial(reconciler.run, interval=0.5))
            async with running(w2):
                await wait_for(lambda: state_is(timed_store, "long", S.RESULT), within=LEASE_S * 20)
            inner.cancel_scope.cancel()
        assert reconciler.passes > LEASE_S * 10 / 0.5 * 0.9
    rec = await timed_store.get("long")
    assert rec is not None
    assert (rec.state, rec.owner, rec.attempt, rec.result) == (S.RESULT, "w1", 1, "finally")
    assert (w1.lost, w2.completed) == (0, 0)


async def test_an_empty_reply_is_refused_and_recorded_as_a_failure(
    timed_store: SqliteStore,
    mock_clock: StoreAwareClock,
) -> None:
    async def empty(task: Task) -> str:
        return ""

    await timed_store.ingest(Task("t", "x"))
    worker = PoolWorker(timed_store, "w1", agent(empty))
    async with running(worker):
        await wait_for(lambda: state_is(timed_store, "t", S.DEAD))
    rec = await timed_store.get("t")
    assert rec is not None
    assert rec.reason is not None
    assert rec.attempt == MAX_ATTEMPTS
    assert "EmptyReply" in rec.reason
    assert "empty reply" in rec.reason
    assert worker.failed == MAX_ATTEMPTS


async def test_a_handler_crash_is_retried_then_dead_with_the_tracebacks_last_line(
    timed_store: SqliteStore,
    mock_clock: StoreAwareClock,
) -> None:
    calls: list[str] = []

    async def crash(task: Task) -> str:
        calls.append(task.id)
        raise ValueError(f"boom {len(calls)}")

    await timed_store.ingest(Task("t", "x"))
    worker = PoolWorker(timed_store, "w1", agent(crash))
    async with running(worker):
        await wait_for(lambda: state_is(timed_store, "t", S.DEAD))
    rec = await timed_store.get("t")
    assert rec is not None
    assert calls == ["t"] * MAX_ATTEMPTS
    assert rec.reason == f"failed on attempt {MAX_ATTEMPTS} of {MAX_ATTEMPTS}: ValueError: boom 3"


async def test_a_crash_then_success_is_one_result(
    timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    calls = 0

    def sometimes(task: Task) -> str:  # a sync handler runs in a thread
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("first time fails")
        return "second time works"

    await timed_store.ingest(Task("t", "x"))
    async with running(PoolWorker(timed_store, "w1", agent(sometimes))):
        await wait_for(lambda: state_is(timed_store, "t", S.RESULT))
    rec = await timed_store.get("t")
    assert rec is not None
    assert (rec.attempt, rec.result, rec.reason) == (
        2,
        "second time works",
        "RuntimeError: first time fails",
    )


async def test_a_no_send_reply_may_be_empty(
    timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    async def quiet(task: Task) -> Reply:
        return Reply("", no_send=True)

    await timed_store.ingest(Task("t", "x"))
    async with running(PoolWorker(timed_store, "w1", agent(quiet))):
        await wait_for(lambda: state_is(timed_store, "t", S.RESULT))
    (result,) = await timed_store.ready_results()
    assert (result.body, result.no_send) == ("", True)


@pytest.mark.parametrize("bad", [42, None, ["a list"]])
async def test_a_reply_of_the_wrong_type_is_a_failure(
    timed_store: SqliteStore, mock_clock: StoreAwareClock, bad: Any
) -> None:
    async def wrong(task: Task) -> Any:
        return bad

    await timed_store.ingest(Task("t", "x"))
    async with running(PoolWorker(timed_store, "w1", agent(wrong))):
        await wait_for(lambda: state_is(timed_store, "t", S.DEAD))
    rec = await timed_store.get("t")
    assert rec is not None
    assert rec.reason is not None
    assert "must return a str or a tether.bridge.Reply" in rec.reason


async def test_concurrency_is_capped_per_worker(
    timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    running_now = 0
    peak = 0

    async def busy(task: Task) -> str:
        nonlocal running_now, peak
        running_now += 1
        peak = max(peak, running_now)
        await trio.sleep(1)
        running_now -= 1
        return "done"

    for i in range(10):
        await timed_store.ingest(Task(f"t{i}", "x"))
    worker = PoolWorker(timed_store, "w1", agent(busy), concurrency=3)
    async with running(worker):
        await wait_for(
            lambda: _count(timed_store, S.RESULT, 10),
        )
    assert peak == 3
    assert worker.completed == 10


async def _count(store: SqliteStore, state: S, n: int) -> bool:
    return (await store.counts())[state] == n


async def test_a_soft_stop_finishes_work_within_the_grace(
    timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    async def slow(task: Task) -> str:
        await trio.sleep(2)
        return "made it"

    await timed_store.ingest(Task("t", "x"))
    worker = PoolWorker(timed_store, "w1", agent(slow), concurrency=1, stop_grace=5)
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        await wait_for(lambda: state_is(timed_store, "t", S.CLAIMED))
        await timed_store.ingest(Task("later", "x"))
        await timed_store.assign("later", "w1")  # no free slot: it waits, unclaimed
        worker.request_stop()
        await trio.sleep(0.1)
        # while it finishes, the lead sees a member that takes nothing more ...
        (me,) = await timed_store.workers()
        assert me.capacity == 0
        # ... and its waiting assignment is back in the pool at once
        assert await timed_store.state("later") is S.PENDING
        assert await timed_store.state("t") is S.CLAIMED
    assert await timed_store.state("t") is S.RESULT
    # its unclaimed assignment went back to pending for the others
    rec = await timed_store.get("later")
    assert rec is not None
    assert (rec.state, rec.owner) == (S.PENDING, None)


async def test_a_soft_stop_releases_unfinished_work_without_burning_an_attempt(
    timed_store: SqliteStore,
    mock_clock: StoreAwareClock,
) -> None:
    async def forever(task: Task) -> str:
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    await timed_store.ingest(Task("t", "x"))
    worker = PoolWorker(timed_store, "w1", agent(forever), stop_grace=2)
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        await wait_for(lambda: state_is(timed_store, "t", S.CLAIMED))
        started = trio.current_time()
        worker.request_stop()
    assert trio.current_time() - started == pytest.approx(2, abs=0.5)
    rec = await timed_store.get("t")
    assert rec is not None
    assert (rec.state, rec.attempt, rec.owner) == (S.PENDING, 1, None)
    assert worker.released == 1


async def test_a_hard_cancel_still_releases_the_claims(
    timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    async def forever(task: Task) -> str:
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    for id in ("a", "b"):
        await timed_store.ingest(Task(id, "x"))
    worker = PoolWorker(timed_store, "w1", agent(forever))
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        await wait_for(lambda: _count(timed_store, S.CLAIMED, 2))
        nursery.cancel_scope.cancel()
    assert (await timed_store.counts())[S.PENDING] == 2
    assert {(await timed_store.get(id)).attempt for id in ("a", "b")} == {1}  # type: ignore[union-attr]


async def test_a_fenced_out_worker_stops_the_run_and_stores_nothing(
    timed_store: SqliteStore,
    mock_clock: StoreAwareClock,
) -> None:
    finished = trio.Event()

    async def slow(task: Task) -> str:
        try:
            await trio.sleep(LEASE_S * 3)
        finally:
            finished.set()
        return "too late"

    await timed_store.ingest(Task("t", "x"))
    worker = PoolWorker(timed_store, "w1", agent(slow))
    async with running(worker):
        await wait_for(lambda: state_is(timed_store, "t", S.CLAIMED))
        await timed_store.dead_letter("t", "operator gave up")  # someone else moved it on
        with trio.fail_after(LEASE_S):
            await finished.wait()
    assert worker.lost == 1
    rec = await timed_store.get("t")
    assert rec is not None
    assert (rec.state, rec.reason) == (S.DEAD, "operator gave up")


async def test_an_agent_without_a_task_handler_is_refused(
    timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    def nothing(session: Session) -> None:
        pass

    with pytest.raises(AgentError, match="registered no handler"):
        await PoolWorker(timed_store, "w1", nothing).run()


@pytest.mark.parametrize(
    ("option", "value", "match"),
    [
        ("concurrency", 0, "concurrency"),
        ("heartbeat_interval", LEASE_S, "shorter than the store's lease"),
        ("poll_interval", -1, "poll_interval"),
        ("stop_grace", float("inf"), "stop_grace"),
        ("capacity", 3, "capacity must be an int >= concurrency"),
    ],
)
async def test_bad_worker_options_are_refused(
    timed_store: SqliteStore, mock_clock: StoreAwareClock, option: str, value: Any, match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        PoolWorker(timed_store, "w1", echo.factory, **{option: value})


async def test_a_worker_asks_the_lead_for_twice_its_concurrency(
    timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    worker = PoolWorker(timed_store, "w1", echo.factory, concurrency=3)
    async with running(worker):
        (me,) = await timed_store.workers()
        assert (me.name, me.role, me.capacity) == ("w1", "worker", 6)


async def test_a_worker_can_send_stall_notices_for_its_own_claims(
    timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    notices: list[tuple[str, float]] = []

    async def slow(task: Task) -> str:
        await trio.sleep(30)
        return "slow"

    async def notify(task_id: str, age: float) -> None:
        notices.append((task_id, age))

    await timed_store.ingest(Task("mine", "x"))
    await timed_store.ingest(Task("theirs", "x"))
    await timed_store.assign("theirs", "w2")
    assert await timed_store.claim("w2") is not None  # held (and left to expire) by w2
    worker = PoolWorker(
        timed_store, "w1", agent(slow), on_stall=notify, stall_after=10.0, heartbeat_interval=1
    )
    async with running(worker):
        await wait_for(lambda: state_is(timed_store, "mine", S.RESULT), within=60)
    assert [id for id, _ in notices] == ["mine"]
    assert 10.0 <= notices[0][1] <= 11.0
