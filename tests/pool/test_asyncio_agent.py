"""Agents written for asyncio (issue #40, item 1), on Trio's mock clock: the handler runs on an
asyncio loop, and each way Trio stops a run (its timeout, a newer message that supersedes it,
an operator's cancel, a soft stop) cancels the asyncio task; ``progress_of`` and ``trio_as_asyncio``
work from the asyncio side; the service's one loop is shared by every run."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
import trio

from support.pool_fixtures import StoreAwareClock
from support.waiting import wait_until
from tether import open_session
from tether.bridge import CustodyState, Reply, SqliteStore, Task, asyncio_agent, trio_as_asyncio
from tether.bridge.custody import Conversation
from tether.bridge.pool import PoolWorker, Progress, RetryBackoff, progress_of
from tether.bridge.pool._asyncio import loop_for
from tether.bridge.runs import Run
from tether.bridge.runs._current import Current, entering

S = CustodyState


class Seen:
    """What the asyncio side saw: each run's loop, and how each ended."""

    def __init__(self) -> None:
        self.loops: list[asyncio.AbstractEventLoop] = []
        self.ends: dict[str, str] = {}
        self.started: set[str] = set()


def stuck_agent(seen: Seen, **options: object) -> object:
    async def handle(task: Task) -> str:
        seen.loops.append(asyncio.get_running_loop())
        seen.started.add(task.id)
        try:
            await asyncio.sleep(0.1 if task.body == "quick" else 1000)
        except asyncio.CancelledError:
            seen.ends[task.id] = "cancelled"
            raise
        seen.ends[task.id] = "answered"
        return f"answer to {task.id}"

    return asyncio_agent(handle, **options)  # type: ignore[arg-type]


def holds(check: Callable[[], bool]) -> Callable[[], Awaitable[bool]]:
    async def checked() -> bool:
        return check()

    return checked


async def test_a_run_past_its_timeout_cancels_the_asyncio_task(
    timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    seen = Seen()
    factory = stuck_agent(seen, run_timeout=5.0)
    worker = PoolWorker(timed_store, "w1", factory, retry_backoff=RetryBackoff(0, 0))  # type: ignore[arg-type]
    await timed_store.ingest(Task("t", "x"))
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)

        async def failed_once() -> bool:
            record = await timed_store.get("t")
            return record is not None and record.attempt >= 2

        await wait_until(failed_once, within=10.0)
        worker.request_stop()
    record = await timed_store.get("t")
    assert record is not None
    assert record.reason == "timed out after 5 s"
    assert seen.ends["t"] == "cancelled"


async def test_supersede_operator_cancel_and_soft_stop_cancel_the_asyncio_task(
    timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    seen = Seen()
    factory = stuck_agent(seen, room_policy="replace")
    worker = PoolWorker(
        timed_store,
        "w1",
        factory,  # type: ignore[arg-type]
        supersede_grace=0.0,
        stop_grace=1.0,
        heartbeat_interval=1.0,
    )
    await timed_store.ingest(Task("old", "slow", room="r"), room_policy="replace")
    await timed_store.ingest(Task("doomed", "slow", room="s"), room_policy="replace")
    async with loop_for(factory), trio.open_nursery() as nursery:  # type: ignore[arg-type]
        await nursery.start(worker.run)
        await wait_until(holds(lambda: {"old", "doomed"} <= seen.started))
        await timed_store.ingest(Task("new", "slow", room="r"), room_policy="replace")
        await timed_store.cancel(["doomed"], "the operator says no")
        await wait_until(holds(lambda: "old" in seen.ends and "doomed" in seen.ends))
        await wait_until(holds(lambda: "new" in seen.started))
        worker.request_stop()  # soft stop: "new" gets stop_grace, then is cancelled
    assert seen.ends == {"old": "cancelled", "doomed": "cancelled", "new": "cancelled"}
    assert await timed_store.state("new") is S.PENDING  # released unfinished, not failed
    assert await timed_store.state("doomed") is S.DEAD
    old = await timed_store.get("old")
    assert old is not None
    assert (old.state, old.reason) == (S.RESULT, "superseded by new")
    assert len(set(map(id, seen.loops))) == 1  # the runs shared loop_for's loop


async def test_progress_and_trio_side_calls_work_from_the_asyncio_side() -> None:
    release = trio.Event()
    shown: list[str] = []

    async def trio_wait(text: str) -> str:  # a Trio-side API, as run.step will be
        shown.append(progress_of(task).partial)
        await release.wait()
        return text.upper()

    async def handle(task: Task) -> Reply:
        progress = progress_of(task)
        progress.status("thinking")
        progress.stream("Once")
        progress.stream(" upon")
        loud = await trio_as_asyncio(trio_wait)("a time")
        return Reply(progress.partial + " " + loud)

    task = Task("t", "x")
    async with open_session("asyncio-agent") as session:
        asyncio_agent(handle)(session)
        session.wrap_handlers("task", entering)  # as a worker does
        progress = Progress()
        async with trio.open_nursery() as nursery:
            results: list[object] = []

            async def call() -> None:
                current = Current(Run(task), Conversation(), progress)
                results.extend(await session.call("task", current))

            nursery.start_soon(call)
            await wait_until(holds(lambda: bool(shown)))
            release.set()
    assert shown == ["Once upon"]
    assert progress.snapshot()[1] == "thinking"
    assert results == [Reply("Once upon A TIME")]


async def test_an_asyncio_agent_is_refused_a_plain_function() -> None:
    def handle(task: Task) -> str:
        return "hi"

    with pytest.raises(TypeError, match="async def"):
        asyncio_agent(handle)  # type: ignore[arg-type]
    async with loop_for():  # no asyncio agent: no loop, nothing imported for it
        pass
