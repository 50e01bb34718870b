"""Flow control in the pool (issue #38), on virtual time with a real SQLite store.

``run.limit(key)`` holds a permit of a key shared through the store: never more in flight than
its cap, never more starts than its bucket allows, waits that spend no attempt; a wait past
``park_after`` parks the task (the worker's slot free) until the wait is over; ``Retry(after=,
key=)`` and ``.pause(after)`` stop the key for every worker on the store.
"""

from __future__ import annotations

import trio

from support.agents.handler import agent
from support.pool_fixtures import StoreAwareClock
from support.waiting import wait_until
from tether.bridge import CustodyState, Retry, SqliteStore, Task, run_of
from tether.bridge.custody._limits import LimitSpec
from tether.bridge.pool import PoolWorker, Reconciler, RetryBackoff
from tether.bridge.runs._permits import METRICS
from tether.bridge.service._admin import bridge_observed
from tether.observe import Metrics

S = CustodyState


async def _all(store: SqliteStore, ids: list[str], state: S) -> bool:
    return all([await store.state(id) is state for id in ids])


async def test_permits_hold_the_cap_and_the_rate_across_workers_and_spend_no_attempt(
    timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    """Two workers of 4 slots each on one store; ``openai`` allows 3 at once and 2 a second
    (burst 2) around a 1 s call: at most 3 in flight, at most 2 + 2 starts in any 1 s, every
    task answered on its first attempt."""
    await timed_store.set_limit(LimitSpec("openai", rate=2.0, burst=2, concurrency=3))
    starts: list[float] = []
    flight = [0, 0]  # now, most
    granted, waits, timed = METRICS.granted, METRICS.waits, METRICS.wait.total

    async def handle(task: Task) -> str:
        async with run_of(task).limit("openai"):
            starts.append(trio.current_time())
            flight[0] += 1
            flight[1] = max(flight[1], flight[0])
            await trio.sleep(1.0)
            flight[0] -= 1
        return "ok"

    workers = [
        PoolWorker(timed_store, f"w{i}", agent(handle), concurrency=4, poll_interval=0.2)
        for i in (1, 2)
    ]
    ids = [f"t{i}" for i in range(12)]
    for id in ids:
        await timed_store.ingest(Task(id, "x"))
    async with trio.open_nursery() as nursery:
        for worker in workers:
            await nursery.start(worker.run)
        await wait_until(lambda: _all(timed_store, ids, S.RESULT), within=60)
        for worker in workers:
            worker.request_stop()
    assert len(starts) == 12
    assert flight[1] == 3
    assert max(sum(1 for t in starts if s <= t < s + 1.0) for s in starts) <= 2 + 2
    assert starts[-1] - starts[0] >= (12 - 2) / 2.0 - 0.01  # the rate, after the burst
    for id in ids:
        record = await timed_store.get(id)
        assert record is not None
        assert record.attempt == 1
    [view] = await timed_store.limit_views()
    assert view.in_flight == 0
    # the process's flow control on /metrics: every permit given back, waits timed
    assert (METRICS.in_flight, METRICS.granted - granted) == (0, 12)
    assert METRICS.waits - waits == METRICS.wait.total - timed >= 1


async def test_metrics_show_permits_in_flight_waits_and_pauses() -> None:
    from tether import open_runtime

    async with open_runtime() as runtime:
        text = (await Metrics(bridge_observed(runtime)).render()).decode()
    for name in (
        "tether_permits_in_flight ",
        "tether_permits_granted_total ",
        "tether_permit_waits_total ",
        "tether_permit_parks_total ",
        "tether_limit_pauses_total ",
        "tether_permit_wait_seconds_count ",
    ):
        assert name in text


async def test_a_wait_past_park_after_parks_the_task_until_the_key_is_free(
    timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    """A provider's 429 (``Retry(after=120, key=)``) pauses the key for everyone: another task
    that wants it parks (its slot free for a message that needs no permit) and runs once the
    pause is over; the failing task comes back after it too."""
    await timed_store.set_limit(LimitSpec("openai", concurrency=5))
    answered: dict[str, float] = {}
    tried: list[str] = []

    async def handle(task: Task) -> str:
        if task.body == "free":
            answered[task.id] = trio.current_time()
            return "free"
        async with run_of(task).limit("openai"):
            tried.append(task.id)
            if task.id == "429" and tried.count("429") == 1:
                raise Retry("rate limited", after=120, key="openai")
            answered[task.id] = trio.current_time()
        return "ok"

    worker = PoolWorker(
        timed_store,
        "w1",
        agent(handle),
        concurrency=1,
        poll_interval=1.0,
        park_after=30,
        retry_backoff=RetryBackoff(0, 0),
    )
    reconciler = Reconciler(timed_store)
    await timed_store.ingest(Task("429", "x"))
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        await wait_until(lambda: _all(timed_store, ["429"], S.PENDING))
        paused_at = trio.current_time()

        async def pause_end_of_openai() -> float | None:
            views = await timed_store.limit_views()
            return next(v.paused_until for v in views if v.spec.key == "openai")

        async def paused() -> bool:
            return await pause_end_of_openai() is not None

        await wait_until(paused)
        pause_end = await pause_end_of_openai()
        assert pause_end is not None
        nursery.start_soon(lambda: reconciler.run(interval=5.0))
        await timed_store.ingest(Task("later", "x"))
        await wait_until(lambda: _all(timed_store, ["later"], S.WAITING))
        record = await timed_store.get("later")
        assert record is not None
        assert "waiting for a permit of openai (paused)" in (record.reason or "")
        await timed_store.ingest(Task("q", "free"))
        await wait_until(lambda: _all(timed_store, ["q"], S.RESULT))
        assert answered["q"] - paused_at < 10  # the only slot was free for it
        await wait_until(lambda: _all(timed_store, ["429", "later"], S.RESULT), within=200)
        worker.request_stop()
        nursery.cancel_scope.cancel()
    # nothing ran before the pause's end (a parked run now wakes right at it, so it is read
    # from the store: the test's own look found the 429 up to a poll after it happened)
    assert answered["later"] >= pause_end
    assert answered["429"] >= pause_end
    assert pause_end - paused_at >= 120 - 0.1
    assert tried == ["429", "429", "later"] or tried == ["429", "later", "429"]
    later = await timed_store.get("later")
    assert later is not None
    assert later.attempt == 1  # waiting and parking spent no attempt


async def test_a_pause_from_the_block_stops_the_key_and_a_detached_run_is_unlimited(
    timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    async def handle(task: Task) -> str:
        limited = run_of(task).limit("search", weight=2)
        async with limited as permit:
            assert permit.id is not None
            await limited.pause(5)
        return "ok"

    await timed_store.set_limit(LimitSpec("search", rate=1.0, burst=2))
    worker = PoolWorker(timed_store, "w1", agent(handle), poll_interval=0.2)
    await timed_store.ingest(Task("t", "x"))
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        await wait_until(lambda: _all(timed_store, ["t"], S.RESULT))
        worker.request_stop()
    [view] = await timed_store.limit_views()
    assert view.paused_until is not None
    assert view.paused_until > timed_store.clock()
    # outside a worker there is nothing to share: a permit at once, whatever the store says
    async with run_of(Task("alone", "x")).limit("search", weight=2) as permit:
        assert permit.id is None
