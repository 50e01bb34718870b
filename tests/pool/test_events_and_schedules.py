"""Events and schedules in the pool (issue #52), on virtual time with a real SQLite store.

A run that waits for an event parks (its slot free, no attempt spent) until the event comes;
the event wakes it once and its handler runs again from the top, where the wait returns the
event's body (recorded: a later run gets the same). An event sent before its wait is taken at
once; a wait past its deadline raises ``WaitTimeout``. A schedule's due times fire through the
reconciler and run as tasks.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable

import trio

from support.one_slot import serve_one_slot
from support.pool_fixtures import StoreAwareClock
from support.waiting import state_is as _is
from support.waiting import wait_until
from tether.bridge import CustodyState, SqliteStore, Task, WaitTimeout, run_of
from tether.bridge.custody._schedules import ScheduleSpec, firing_id
from tether.bridge.pool import PoolWorker

S = CustodyState


async def _serve(
    store: SqliteStore,
    handle: Callable[[Task], Awaitable[str]],
    done: Callable[[], Awaitable[bool]],
    meanwhile: Callable[[], Awaitable[None]] | None = None,
    step: float = 0.05,
) -> PoolWorker:
    return await serve_one_slot(
        store, handle, done, within=3 * 86400, meanwhile=meanwhile, step=step
    )


async def test_a_run_parks_on_an_event_and_the_event_wakes_it_once(
    timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    runs: Counter[str] = Counter()

    async def handle(task: Task) -> str:
        runs[task.id] += 1
        paid = await run_of(task).wait_for(f"pay.{task.id}", timeout=3600)
        return f"{task.id} paid {paid['amount']}"

    await timed_store.ingest(Task("o1", "order"))
    await timed_store.ingest(Task("o2", "order"))

    async def pay() -> None:
        await wait_until(lambda: _is(timed_store, "o1", S.WAITING), within=60)
        await wait_until(lambda: _is(timed_store, "o2", S.WAITING), within=60)
        await trio.sleep(600)  # both wait ten minutes, holding no slot
        sent = await timed_store.send_event("p-1", "pay.o2", {"amount": 12})
        assert sent.woken == ("o2",)
        await timed_store.send_event("p-1", "pay.o2", {"amount": 12})  # a replay wakes nothing
        await timed_store.send_event("p-2", "pay.o1", {"amount": 7})

    async def both_done() -> bool:
        return await _is(timed_store, "o1", S.RESULT) and await _is(timed_store, "o2", S.RESULT)

    worker = await _serve(timed_store, handle, both_done, pay)
    for id, amount in (("o1", 7), ("o2", 12)):
        record = await timed_store.get(id)
        assert record is not None
        assert record.result == f"{id} paid {amount}"
        assert record.attempt == 1  # the park spent no attempt
    assert runs == {"o1": 2, "o2": 2}  # parked once, woken once
    assert worker.counts.parked == 2
    assert [s.name for s in await timed_store.steps("o2")] == ["~wait:1:until", "~wait:1"]


async def test_an_event_before_its_wait_is_taken_at_once_and_each_wait_takes_the_next(
    timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    runs: Counter[str] = Counter()

    async def handle(task: Task) -> str:
        runs[task.id] += 1
        run = run_of(task)
        first = await run.wait_for("ci.pr-17", timeout=3600)
        second = await run.wait_for("ci.pr-17", timeout=3600)
        return f"{first} then {second}"

    await timed_store.send_event("ci-1", "ci.pr-17", "red")
    await timed_store.ingest(Task("t", "watch the PR"))

    async def fixed() -> None:
        await wait_until(lambda: _is(timed_store, "t", S.WAITING), within=60)
        await timed_store.send_event("ci-2", "ci.pr-17", "green")

    await _serve(timed_store, handle, lambda: _is(timed_store, "t", S.RESULT), fixed)
    record = await timed_store.get("t")
    assert record is not None
    assert record.result == "red then green"
    assert runs["t"] == 2  # ran, took "red" at once, parked on the second wait, woke once


async def test_a_wait_past_its_deadline_raises_wait_timeout(
    timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    async def handle(task: Task) -> str:
        try:
            await run_of(task).wait_for("never", timeout=900)
        except WaitTimeout as exc:
            return f"gave up: {exc}"
        return "unreachable"

    await timed_store.ingest(Task("t", "x"))
    start = trio.current_time()
    await _serve(timed_store, handle, lambda: _is(timed_store, "t", S.RESULT), step=5)
    record = await timed_store.get("t")
    assert record is not None
    assert record.result is not None
    assert record.result.startswith("gave up: task 't': no event of 'never' came")
    assert 900 <= trio.current_time() - start < 960  # woken at its deadline, not later


async def test_a_schedule_fires_through_the_reconciler_and_each_time_runs_once(
    timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    ran: list[str] = []

    async def handle(task: Task) -> str:
        ran.append(task.id)
        return f"report for {task.room}"

    view = await timed_store.add_schedule(ScheduleSpec("often", "ops", "report", every=600))
    expected = [firing_id("often", view.next_due + 600 * n) for n in range(6)]

    async def delivered_all() -> bool:  # as delivery does: the room's next run waits for it
        for result in await timed_store.ready_results():
            await timed_store.mark_delivered(result.task.id)
        return await _is(timed_store, expected[-1], S.DELIVERED)

    await _serve(timed_store, handle, delivered_all, step=60)
    assert ran == expected  # on time (the reconciler passes when one is due), once each
    [kept] = await timed_store.schedules()
    assert kept.fired == 6


async def test_a_timed_out_wait_stays_timed_out_when_its_event_comes_later(
    timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    """The timeout is recorded: a run that parks after it (here a long sleep) and runs again
    once the event came takes the same branch, never the event's."""
    branches: list[str] = []

    async def handle(task: Task) -> str:
        run = run_of(task)
        try:
            body = await run.wait_for("late", timeout=60)
            branch = f"event {body}"
        except WaitTimeout:
            branch = "timed out"
        branches.append(branch)
        await run.sleep(600)  # parks: the handler runs again from the top after it
        again = await run.wait_for("late", timeout=60)  # a later wait takes the late event
        return f"{branch}, then {again}"

    await timed_store.ingest(Task("t", "x"))

    async def late_event() -> None:
        await wait_until(lambda: _is(timed_store, "t", S.WAITING), within=60)
        await wait_until(lambda: trio.to_thread.run_sync(lambda: len(branches) == 1), within=600)
        await timed_store.send_event("e1", "late", "here")  # while the run sleeps

    await _serve(timed_store, handle, lambda: _is(timed_store, "t", S.RESULT), late_event, step=5)
    record = await timed_store.get("t")
    assert record is not None
    assert record.result == "timed out, then here"
    assert branches == ["timed out", "timed out"]
