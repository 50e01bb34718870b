"""Workers as services on Trio's mock clock: claims, leases, outcomes, leaderless mode, stops."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio

from support.agents.handler import agent
from support.clock import FakeClock
from support.pool_fixtures import LEASE_S, MAX_ATTEMPTS, StoreAwareClock
from support.waiting import wait_until
from tether import Session
from tether.agents import echo
from tether.bridge import CustodyState, Reply, SqliteStore, Task
from tether.bridge.pool import AgentError, PoolWorker, Reconciler

S = CustodyState


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
        await wait_until(lambda: state_is(timed_store, "t1", S.RESULT))
        assert worker.leaderless  # no lead ever beat
    (result,) = await timed_store.ready_results()
    assert (result.body, result.worker, result.attempt, result.no_send) == (
        "echo: hello",
        "w1",
        1,
        False,
    )
    assert worker.counts.completed == 1
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
    await timed_store.beat("w2", "worker", 4)  # alive: its assignment is its own
    worker = PoolWorker(timed_store, "w1", echo.factory, lead_dead_after=10.0)
    async with running(worker):
        await wait_until(lambda: state_is(timed_store, "mine", S.RESULT))
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
        await wait_until(lambda: state_is(timed_store, "long", S.CLAIMED))
        w2 = PoolWorker(timed_store, "w2", echo.factory)
        reconciler = Reconciler(timed_store)
        async with trio.open_nursery() as inner:
            await inner.start(partial(reconciler.run, interval=0.5))
            async with running(w2):
                await wait_until(
                    lambda: state_is(timed_store, "long", S.RESULT), within=LEASE_S * 20
                )
            inner.cancel_scope.cancel()
        assert reconciler.passes > LEASE_S * 10 / 0.5 * 0.9
    rec = await timed_store.get("long")
    assert rec is not None
    assert (rec.state, rec.owner, rec.attempt, rec.result) == (S.RESULT, "w1", 1, "finally")
    assert (w1.counts.lost, w2.counts.completed) == (0, 0)


async def test_an_empty_reply_is_refused_and_recorded_as_a_failure(
    timed_store: SqliteStore,
    mock_clock: StoreAwareClock,
) -> None:
    async def empty(task: Task) -> str:
        return ""

    await timed_store.ingest(Task("t", "x"))
    worker = PoolWorker(timed_store, "w1", agent(empty))
    async with running(worker):
        await wait_until(lambda: state_is(timed_store, "t", S.DEAD))
    rec = await timed_store.get("t")
    assert rec is not None
    assert rec.reason is not None
    assert rec.attempt == MAX_ATTEMPTS
    assert "EmptyReply" in rec.reason
    assert "empty reply" in rec.reason
    assert worker.counts.failed == MAX_ATTEMPTS


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
        await wait_until(lambda: state_is(timed_store, "t", S.DEAD))
    rec = await timed_store.get("t")
    assert rec is not None
    assert calls == ["t"] * MAX_ATTEMPTS
    assert rec.reason == f"failed on attempt {MAX_ATTEMPTS} of {MAX_ATTEMPTS}: ValueError: boom 3"


async def test_each_failed_attempt_is_one_line_and_the_traceback_is_logged_once(
    timed_store: SqliteStore, mock_clock: StoreAwareClock, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 33: "task X attempt n of m failed: ...; retry at ..."; the agent's traceback
    once per task at WARNING, the later ones at DEBUG."""

    async def crash(task: Task) -> str:
        raise ValueError("boom")

    caplog.set_level(logging.DEBUG, logger="tether.bridge.pool")
    await timed_store.ingest(Task("t", "x"))
    async with running(PoolWorker(timed_store, "w1", agent(crash))):
        await wait_until(lambda: state_is(timed_store, "t", S.DEAD))
    failed = [r for r in caplog.records if "failed:" in r.getMessage() and r.levelno >= 30]
    assert [r.getMessage().split(": ", 1)[1].split(":")[0] for r in failed] == [
        f"task t attempt {n} of {MAX_ATTEMPTS} failed" for n in range(1, MAX_ATTEMPTS + 1)
    ]
    assert "ValueError: boom; retry at " in failed[0].getMessage()
    assert failed[-1].getMessage().endswith("ValueError: boom; now dead")
    assert [r.exc_info is not None for r in failed] == [True] + [False] * (MAX_ATTEMPTS - 1)
    quiet = [r for r in caplog.records if r.levelno == logging.DEBUG and r.exc_info]
    assert len(quiet) == MAX_ATTEMPTS - 1


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
        await wait_until(lambda: state_is(timed_store, "t", S.RESULT))
    rec = await timed_store.get("t")
    assert rec is not None
    assert (rec.attempt, rec.result, rec.reason) == (2, "second time works", None)
    # the failure is history, kept by the journal, not a stale reason (issue 47.5)
    assert "RuntimeError: first time fails" in [e.reason for e in await timed_store.journal("t")]


async def test_a_no_send_reply_may_be_empty(
    timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    async def quiet(task: Task) -> Reply:
        return Reply("", no_send=True)

    await timed_store.ingest(Task("t", "x"))
    async with running(PoolWorker(timed_store, "w1", agent(quiet))):
        await wait_until(lambda: state_is(timed_store, "t", S.RESULT))
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
        await wait_until(lambda: state_is(timed_store, "t", S.DEAD))
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
        await wait_until(
            lambda: _count(timed_store, S.RESULT, 10),
        )
    assert peak == 3
    assert worker.counts.completed == 10


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
        await wait_until(lambda: state_is(timed_store, "t", S.CLAIMED))
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
        await wait_until(lambda: state_is(timed_store, "t", S.CLAIMED))
        started = trio.current_time()
        worker.request_stop()
    assert trio.current_time() - started == pytest.approx(2, abs=0.5)
    rec = await timed_store.get("t")
    assert rec is not None
    assert (rec.state, rec.attempt, rec.owner) == (S.PENDING, 1, None)
    assert worker.counts.released == 1


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
        await wait_until(lambda: _count(timed_store, S.CLAIMED, 2))
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
        await wait_until(lambda: state_is(timed_store, "t", S.CLAIMED))
        await timed_store.dead_letter("t", "operator gave up")  # someone else moved it on
        with trio.fail_after(LEASE_S):
            await finished.wait()
    assert worker.counts.lost == 1
    rec = await timed_store.get("t")
    assert rec is not None
    assert (rec.state, rec.reason) == (S.DEAD, "operator gave up")


async def test_a_task_gone_from_the_store_is_a_lost_lease_and_the_other_runs_go_on(
    timed_store: SqliteStore,
    mock_clock: StoreAwareClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A failover to a standby that never had a task (issue #45) leaves its holder a claim on
    nothing: the same news as a lost lease, not a crash of the worker and its other runs."""
    gate = trio.Event()

    async def held(task: Task) -> str:
        await gate.wait()
        return f"done {task.id}"

    await timed_store.ingest_many([Task("gone", "x"), Task("kept", "y")])
    worker = PoolWorker(timed_store, "w1", agent(held))
    async with running(worker):
        await wait_until(lambda: state_is(timed_store, "gone", S.CLAIMED))
        await wait_until(lambda: state_is(timed_store, "kept", S.CLAIMED))
        await timed_store.db.writer.run(
            lambda conn: conn.execute("DELETE FROM tasks WHERE id = 'gone'")
        )
        gate.set()
        await wait_until(lambda: state_is(timed_store, "kept", S.RESULT))
    assert (worker.counts.lost, worker.counts.completed) == (1, 1)
    assert await timed_store.get("gone") is None
    [lost] = [r.getMessage() for r in caplog.records if "'gone'" in r.getMessage()]
    assert "no such task in the store" in lost


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


async def test_a_worker_asks_the_lead_for_four_times_its_concurrency(
    timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    worker = PoolWorker(timed_store, "w1", echo.factory, concurrency=3)
    async with running(worker):
        (me,) = await timed_store.workers()
        assert (me.name, me.role, me.capacity) == ("w1", "worker", 12)


def _thinking(seconds: float) -> Callable[[Session], None]:
    """An agent that takes ``seconds`` (virtual) to answer."""

    def factory(session: Session) -> None:
        @session.on("task")
        async def reply(task: Task) -> str:
            await trio.sleep(seconds)
            return f"thought about {task.body}"

    return factory


@pytest.mark.parametrize(
    ("run_seconds", "asked"),
    [(0.001, 2 + 6), (0.06, 2 + 4), (0.15, 2 + 2), (3.0, 2 + 1)],
)
async def test_an_unset_capacity_adapts_to_how_long_runs_take(
    timed_store: SqliteStore, mock_clock: StoreAwareClock, run_seconds: float, asked: int
) -> None:
    """0.1 s of work waits assigned: quick runs keep 4 x concurrency (capped), slow ones ask
    for one task more than they run."""
    worker = PoolWorker(
        timed_store, "w1", _thinking(run_seconds), concurrency=2, heartbeat_interval=1.0
    )
    for i in range(6):
        await timed_store.ingest(Task(f"t{i}", "x"))
    async with running(worker):
        (me,) = await timed_store.workers()
        assert me.capacity == 8  # before any run: the quick case
        await wait_until(lambda: state_is(timed_store, "t5", S.RESULT), within=60.0, step=0.5)
        assert worker.asked_capacity == asked
        await trio.sleep(1.5)  # the next beat carries it to the lead
        (me,) = await timed_store.workers()
        assert me.capacity == asked


async def test_a_set_capacity_does_not_adapt(
    timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    worker = PoolWorker(
        timed_store, "w1", _thinking(3.0), concurrency=2, capacity=5, heartbeat_interval=1.0
    )
    await timed_store.ingest(Task("t0", "x"))
    async with running(worker):
        await wait_until(lambda: state_is(timed_store, "t0", S.RESULT), within=60.0, step=0.5)
        await trio.sleep(1.5)
        (me,) = await timed_store.workers()
        assert (worker.asked_capacity, me.capacity) == (5, 5)


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
        await wait_until(lambda: state_is(timed_store, "mine", S.RESULT), within=60)
    assert [id for id, _ in notices] == ["mine"]
    assert 10.0 <= notices[0][1] <= 11.0


async def test_a_refused_session_run_is_released_without_burning_an_attempt(
    timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    """A ``serial`` agent with a short queue refuses calls (``QueueFull``): that task was never
    run, so it goes back to pending with the same attempt instead of failing."""

    def factory(session: Session) -> None:
        @session.on("task", policy="serial", max_queue=1)
        async def one_at_a_time(task: Task) -> str:
            await trio.sleep(1)
            return f"done {task.id}"

    for i in range(6):
        await timed_store.ingest(Task(f"t{i}", "x"))
    worker = PoolWorker(timed_store, "w1", factory, concurrency=4)
    async with running(worker):
        await wait_until(lambda: _count(timed_store, S.RESULT, 6), within=120)
    assert worker.counts.failed == 0
    assert worker.counts.released > 0  # some calls were refused and given back
    for i in range(6):
        rec = await timed_store.get(f"t{i}")
        assert rec is not None
        assert (rec.state, rec.attempt, rec.reason) == (S.RESULT, 1, None)


async def test_an_interrupted_session_run_is_released_without_burning_an_attempt(
    timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    sessions: list[Session] = []
    runs = 0

    def factory(session: Session) -> None:
        sessions.append(session)

        @session.on("task")
        async def slow(task: Task) -> str:
            nonlocal runs
            runs += 1
            await trio.sleep(5)
            return "finished"

    await timed_store.ingest(Task("t", "x"))
    worker = PoolWorker(timed_store, "w1", factory)
    async with running(worker):
        await wait_until(lambda: state_is(timed_store, "t", S.CLAIMED))
        await trio.sleep(1)
        assert sessions[0].interrupt("task") == 1  # HandlerCancelled for the worker's call
        await wait_until(lambda: state_is(timed_store, "t", S.RESULT))
    rec = await timed_store.get("t")
    assert rec is not None
    assert (rec.attempt, rec.result, rec.reason) == (1, "finished", None)
    assert (runs, worker.counts.failed, worker.counts.released) == (2, 0, 1)


async def test_a_worker_reclaiming_its_own_expired_task_keeps_only_the_new_attempt(
    store: SqliteStore, fake_clock: FakeClock
) -> None:
    """Its lease ran out while the run stalled; the reconciler repooled the task and the same
    worker claimed attempt 2. The stale run is dropped, attempt 2 stays in hand (and renewed),
    and the worker service survives both runs ending."""
    gates: list[trio.Event] = []

    async def stalls(task: Task) -> str:
        gate = trio.Event()
        gates.append(gate)
        await gate.wait()
        return f"reply {len(gates)}"

    async def runs(n: int) -> bool:
        return len(gates) >= n

    await store.ingest(Task("t", "x"))
    worker = PoolWorker(store, "w1", agent(stalls), heartbeat_interval=5, poll_interval=0.01)
    async with running(worker):
        await wait_until(lambda: runs(1), step=0.01)
        fake_clock.advance(LEASE_S * 3)  # attempt 1's lease ran out
        [expiry] = (await Reconciler(store).run_once()).repooled
        assert expiry.attempt == 1
        await wait_until(lambda: runs(2), step=0.01)  # w1 claimed attempt 2
        await trio.sleep(0.1)
        assert [(c.task.id, c.attempt) for c in worker.in_hand] == [("t", 2)]
        assert worker.counts.lost == 1  # the stale run was told at once
        gates[0].set()  # the stale run returns (its reply must not be stored)
        await trio.sleep(0.1)
        assert [(c.task.id, c.attempt) for c in worker.in_hand] == [("t", 2)]
        renewed = await store.renew(worker.in_hand[0])  # attempt 2's lease is still live
        assert renewed.attempt == 2
        gates[1].set()
        await wait_until(lambda: state_is(store, "t", S.RESULT), step=0.01)
    rec = await store.get("t")
    assert rec is not None
    assert (rec.attempt, rec.result) == (2, "reply 2")
    assert (worker.counts.completed, worker.counts.lost) == (1, 1)


async def test_a_reply_the_store_refuses_is_a_failure_and_the_worker_carries_on(
    tmp_path: Path, mock_clock: StoreAwareClock
) -> None:
    """A reply over the store's body limit is over the worker's reply bound too (lowered to
    it): dead at once (issue #53); one the store refuses otherwise is a failed attempt."""

    async def replies(task: Task) -> str:
        if task.id == "big":
            return "x" * 1001  # over the store's max_body_bytes
        if task.id == "surrogate":
            return "half a pair: \ud800"  # not encodable as UTF-8
        if task.id == "bad-error":
            raise ValueError("half a pair: \udfff")  # the reason must still be stored
        await trio.sleep(3)  # a sibling run in hand meanwhile
        return "fine"

    store = await SqliteStore.open(
        tmp_path / "small.db",
        clock=trio.current_time,
        lease_s=LEASE_S,
        max_attempts=MAX_ATTEMPTS,
        max_body_bytes=1000,
        synchronous="NORMAL",
    )
    try:
        for id in ("slow", "big", "surrogate", "bad-error"):
            await store.ingest(Task(id, "x"))
        worker = PoolWorker(store, "w1", agent(replies))
        async with running(worker):
            await wait_until(lambda: _count(store, S.DEAD, 3))
            await wait_until(lambda: state_is(store, "slow", S.RESULT))
        big, surrogate = await store.get("big"), await store.get("surrogate")
        assert big is not None
        assert surrogate is not None
        assert big.reason is not None
        assert big.reason == (
            "permanent failure on attempt 1: the reply to task 'big' is 1,001 bytes, over the "
            "1,000 bytes a reply may be (--max-reply-bytes); send a link or a file instead"
        )
        assert big.attempt == 1
        assert surrogate.reason is not None
        assert "lone surrogate" in surrogate.reason
        bad_error = await store.get("bad-error")
        assert bad_error is not None
        assert bad_error.reason is not None
        assert bad_error.reason.endswith("ValueError: half a pair: \\udfff")
        assert (worker.counts.completed, worker.counts.failed) == (1, 1 + 2 * MAX_ATTEMPTS)
    finally:
        await store.aclose()


async def _keep_beating(store: SqliteStore, name: str) -> None:
    while True:
        await store.beat(name, "worker", 4)
        await trio.sleep(1)


async def test_a_leaderless_worker_returns_a_dead_workers_assignments_to_the_pool(
    timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    """The lead assigned to a worker, then both died: without a lead nobody else would ever
    give that assignment back. A leaderless worker does the lead's dead-worker duty (back to
    pending, then claimed like any pending task); a live worker's assignment stays put."""
    await timed_store.beat("dead", "worker", 4)
    await timed_store.ingest(Task("stranded", "x"))
    await timed_store.assign("stranded", "dead")
    await timed_store.ingest(Task("theirs", "x"))
    await timed_store.assign("theirs", "alive")
    await trio.sleep(60)  # "dead" beat a minute ago; no lead ever beat
    worker = PoolWorker(timed_store, "w1", echo.factory, lead_dead_after=10.0)
    await timed_store.beat("alive", "worker", 4)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_keep_beating, timed_store, "alive")
        async with running(worker):
            await wait_until(lambda: state_is(timed_store, "stranded", S.RESULT))
            await trio.sleep(5)  # several more beats
            assert await timed_store.state("theirs") is S.ASSIGNED
        nursery.cancel_scope.cancel()
    rec = await timed_store.get("stranded")
    assert rec is not None
    assert (rec.owner, rec.attempt) == ("w1", 1)
