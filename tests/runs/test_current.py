"""The current run is one context variable, set in the handler's own task: what the handler
and the tasks it starts read with ``run_of``, ``conversation_of`` and ``progress_of`` is its
run's, never another run's, and nothing of it outlives the run."""

from __future__ import annotations

from functools import partial

import trio

from support.agents.handler import agent
from support.pool_fixtures import StoreAwareClock
from support.waiting import wait_until
from tether.bridge import (
    CustodyState,
    SqliteStore,
    Task,
    conversation_of,
    progress_of,
    run_of,
)
from tether.bridge.pool import PoolWorker
from tether.bridge.runs import Run


async def test_tasks_a_handler_starts_see_its_run_and_equal_tasks_of_two_runs_do_not_mix(
    timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    seen: dict[str, list[tuple[Run, object, object]]] = {}
    arrived: list[str] = []
    both_running = trio.Event()

    def reads(task: Task) -> tuple[Run, object, object]:
        return run_of(task), progress_of(task), conversation_of(task)

    async def handle(task: Task) -> str:
        arrived.append(task.id)
        if len(arrived) == 2:
            both_running.set()
        await both_running.wait()  # the two runs are current at once, each in its own task
        seen[task.id] = [reads(task)]

        async def helper() -> None:  # a task the handler starts inherits its run
            seen[task.id].append(reads(task))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(helper)
        await run_of(task).step("mark", lambda: task.id)
        return task.id

    worker = PoolWorker(timed_store, "w1", agent(handle), concurrency=2, poll_interval=0.2)
    await timed_store.ingest(Task("a", "same body"))
    await timed_store.ingest(Task("b", "same body"))
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        for id in ("a", "b"):
            await wait_until(partial(_is, timed_store, id, CustodyState.RESULT))
        worker.request_stop()
    (own_a, helper_a), (own_b, _) = seen["a"], seen["b"]
    assert all(mine is theirs for mine, theirs in zip(own_a, helper_a, strict=True))
    assert own_a[0].durable
    assert own_b[0].durable
    assert own_a[0] is not own_b[0]
    assert own_a[1] is not own_b[1]
    assert [s.name for s in await timed_store.steps("a")] == ["mark"]
    assert not run_of(Task("a", "same body")).durable  # no run is current here


async def test_outside_a_run_each_reader_gives_a_detached_value() -> None:
    task = Task("t", "x")
    assert not run_of(task).durable
    assert (await conversation_of(task)).history == ()
    assert progress_of(task) is not progress_of(task)  # nothing is kept between calls


async def _is(store: SqliteStore, id: str, state: CustodyState) -> bool:
    return await store.state(id) is state
