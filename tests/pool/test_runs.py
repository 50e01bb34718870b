"""Durable runs in the pool (issue #35), on virtual time with a real SQLite store.

``run.step`` runs a step's function once per task: a later attempt gets the recorded value
without calling it; ``run.key`` is the same in every attempt; ``run.replaying`` says which
steps were recorded before. ``run.sleep`` sleeps in place up to ``park_after`` and parks the
task in ``waiting`` beyond (the worker's slot free for other messages), and the reconciler
wakes it: the handler runs from the top, recorded steps replay, the sleep returns at once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from functools import partial
from typing import Any

import pytest
import trio

from support.agents.handler import agent
from support.pool_fixtures import StoreAwareClock
from support.waiting import state_is as _is
from support.waiting import wait_until
from tether.bridge import CustodyState, SqliteStore, StepError, Task, run_of
from tether.bridge.pool import PoolWakeups, PoolWorker, Reconciler, RetryBackoff

S = CustodyState


async def test_a_recorded_step_is_not_run_again_by_a_later_attempt(
    timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    calls: Counter[str] = Counter()
    seen: list[tuple[int, str, bool]] = []
    keys: list[str] = []

    def effect(name: str) -> Callable[[], dict[str, Any]]:
        def do() -> dict[str, Any]:
            calls[name] += 1
            return {"did": name, "n": (1, 2)}

        return do

    async def handle(task: Task) -> str:
        run = run_of(task)
        attempt = sum(calls.values())
        seen.append((attempt, "a", run.replaying))
        a = await run.step("a", effect("a"))
        seen.append((attempt, "b", run.replaying))
        b = await run.step("b", effect("b"))
        keys.append(run.key("b"))
        if calls["c"] == 0 and len(keys) == 1:
            raise ConnectionError("the model provider went away")  # after a and b recorded
        c = await run.step("c", effect("c"))
        assert a == {"did": "a", "n": [1, 2]}  # JSON-shaped in every attempt alike
        return f"{a['did']}{b['did']}{c['did']}"

    worker = PoolWorker(
        timed_store, "w1", agent(handle), poll_interval=0.2, retry_backoff=RetryBackoff(0, 0)
    )
    await timed_store.ingest(Task("t", "x"))
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        await wait_until(lambda: _is(timed_store, "t", S.RESULT))
        worker.request_stop()
    assert calls == {"a": 1, "b": 1, "c": 1}
    assert keys[0] == keys[1]
    assert keys[0] != run_of(Task("other", "x")).key("b")
    # before b, the 2nd run knows b was recorded (the records are read at a run's first step)
    assert [r for _, _, r in seen] == [False, False, False, True]
    [result] = await timed_store.ready_results()
    assert result.body == "abc"
    steps = await timed_store.steps("t")
    assert [(s.name, s.attempt) for s in steps] == [("a", 1), ("b", 1), ("c", 2)]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("twice", "step 'x' ran twice in one run"),
        ("not-json", "step 'x' returned a value that is not JSON"),
        ("bad-name", "step name 'a b'"),
    ],
)
async def test_a_step_that_cannot_be_recorded_fails_the_run_naming_it(
    timed_store: SqliteStore, mock_clock: StoreAwareClock, body: str, message: str
) -> None:
    async def handle(task: Task) -> str:
        run = run_of(task)
        if task.body == "twice":
            await run.step("x", lambda: 1)
            await run.step("x", lambda: 2)
        elif task.body == "not-json":
            await run.step("x", lambda: {1, 2})
        else:
            await run.step("a b", lambda: 1)
        return "unreachable"

    worker = PoolWorker(
        timed_store, "w1", agent(handle), poll_interval=0.2, retry_backoff=RetryBackoff(0, 0)
    )
    await timed_store.ingest(Task("t", body))
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        await wait_until(lambda: _is(timed_store, "t", S.DEAD))
        worker.request_stop()
    record = await timed_store.get("t")
    assert record is not None
    assert message in (record.reason or "")


async def test_a_step_whose_record_meets_an_outage_is_recorded_once_the_store_answers(
    timed_store: SqliteStore, mock_clock: StoreAwareClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The effect has happened: a lost connection (a failover, issue #45) delays the record
    and never fails the run, so the step is not run again by a retry."""
    effects: list[str] = []
    real = timed_store.record_step
    failures = [ConnectionError("lost the connection"), TimeoutError("not confirmed")]

    async def flaky(*args: Any, **kwargs: Any) -> Any:
        if failures:
            raise failures.pop(0)
        return await real(*args, **kwargs)

    monkeypatch.setattr(timed_store, "record_step", flaky)

    def book() -> str:
        effects.append("booked")
        return "ref-1"

    async def handle(task: Task) -> str:
        ref = await run_of(task).step("book", book)
        return f"booked {ref}"

    worker = PoolWorker(timed_store, "w1", agent(handle), poll_interval=0.2)
    await timed_store.ingest(Task("t", "go"))
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        await wait_until(lambda: _is(timed_store, "t", S.RESULT))
        worker.request_stop()
    assert effects == ["booked"]
    assert failures == []
    record = await timed_store.get("t")
    assert record is not None
    assert (record.attempt, record.result) == (1, "booked ref-1")


async def test_a_long_sleep_parks_the_task_and_frees_the_worker_for_other_messages(
    timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    calls: Counter[str] = Counter()
    answered: dict[str, float] = {}
    slept_at: dict[str, float] = {}

    async def handle(task: Task) -> str:
        run = run_of(task)
        if task.body == "quick":
            await run.sleep(5)  # under park_after: sleeps in place
            answered[task.id] = trio.current_time()
            return "quick"
        await run.step("before", lambda: calls.update(["before"]))
        slept_at.setdefault(task.id, trio.current_time())
        await run.sleep(120)
        await run.step("after", lambda: calls.update(["after"]))
        answered[task.id] = trio.current_time()
        return "woke"

    worker = PoolWorker(timed_store, "w1", agent(handle), concurrency=1, poll_interval=1.0)
    reconciler = Reconciler(timed_store)
    await timed_store.ingest(Task("sleeper", "sleep"))
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        await wait_until(lambda: _is(timed_store, "sleeper", S.WAITING))
        parked_at = trio.current_time()
        nursery.start_soon(lambda: reconciler.run(interval=5.0))
        await timed_store.ingest(Task("q", "quick"))
        await wait_until(lambda: _is(timed_store, "q", S.RESULT))
        assert answered["q"] - parked_at < 10  # the only slot was free for it
        assert (await timed_store.waiting_runs()).count == 1
        await wait_until(lambda: _is(timed_store, "sleeper", S.RESULT), within=200)
        worker.request_stop()
        nursery.cancel_scope.cancel()
    assert calls == {"before": 1, "after": 1}
    # woken on time: the reconciler's first pass read the earliest wake-up of the store
    assert 120 <= answered["sleeper"] - slept_at["sleeper"] <= 120 + 2
    assert worker.counts.parked == 1
    record = await timed_store.get("sleeper")
    assert record is not None
    assert record.attempt == 1  # parking spent no attempt
    moves = [(e.src, e.dst) for e in await timed_store.journal("sleeper")]
    assert (S.CLAIMED, S.WAITING) in moves
    assert (S.WAITING, S.PENDING) in moves


async def test_a_parked_run_wakes_on_time_not_at_the_reconcilers_next_pass(
    timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    answered: dict[str, float] = {}

    slept: dict[str, float] = {}

    async def handle(task: Task) -> str:
        slept.setdefault(task.id, trio.current_time())  # the first run's sleep begins
        await run_of(task).sleep(float(task.body))
        answered[task.id] = trio.current_time()
        return "woke"

    wakeups = PoolWakeups()
    worker = PoolWorker(
        timed_store, "w1", agent(handle), concurrency=2, poll_interval=1.0, wakeups=wakeups
    )
    reconciler = Reconciler(timed_store, on_woken=wakeups.tasks_pending)
    wakeups.on_parked = reconciler.parked_until  # as the bridge and `tether worker run` wire it
    # parked before the reconciler's first pass: the store's earliest wake-up at that pass
    early = await timed_store.claim_many("w0", 1, leaderless=True)
    await timed_store.ingest(Task("early", "0"))
    [claim] = await timed_store.claim_many("w0", 1, leaderless=True)
    start = trio.current_time()
    await timed_store.park(claim, timed_store.clock() + 50, "sleeping")
    async with trio.open_nursery() as nursery:
        await nursery.start(partial(reconciler.run, interval=3600.0))
        await nursery.start(worker.run)
        await wait_until(lambda: _is(timed_store, "early", S.RESULT), within=100)
        # parked after the last pass, in this process: the worker tells the reconciler when
        await timed_store.ingest(Task("late", "120"))
        await wait_until(lambda: _is(timed_store, "late", S.RESULT), within=300)
        worker.request_stop()
        nursery.cancel_scope.cancel()
    assert early == []
    assert 50 <= answered["early"] - start <= 50 + 2  # not 3600 s later
    assert 120 <= answered["late"] - slept["late"] <= 120 + 2
    assert reconciler.passes <= 4  # the first, the two wake-ups (and at most one spare)


async def test_outside_a_worker_a_run_is_detached() -> None:
    task = Task("t", "x")
    run = run_of(task)
    assert not run.durable
    assert await run.step("pair", lambda: (1, 2)) == [1, 2]

    async def fetch(n: int, *, plus: int) -> int:
        return n + plus

    assert await run.step("fetch", fetch, 1, plus=2) == 3
    with pytest.raises(StepError, match="ran twice"):
        await run.step("pair", lambda: 0)
    with pytest.raises(StepError, match="names beginning with '~'"):
        await run.step("~mine", lambda: 0)
    with pytest.raises(ValueError, match="seconds"):
        await run.sleep(-1)
    assert run.key("pay") == run_of(task).key("pay")
