"""Progress from a running agent: coalesced, rate-bounded, best effort, never custody."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
import trio

from support.agents.handler import agent
from support.pool_fixtures import StoreAwareClock
from support.waiting import wait_until
from tether import Session
from tether.agents import echo, slow_stream
from tether.bridge import CustodyState, Progress, SqliteStore, Task, progress_of
from tether.bridge.custody import Conversation
from tether.bridge.pool import PoolWorker, ProgressUpdate
from tether.bridge.runs import Run
from tether.bridge.runs._current import Current, entered

from .test_worker import running, state_is

S = CustodyState


def recorder(
    answer: bool = True,
) -> tuple[list[ProgressUpdate], Callable[[ProgressUpdate], Awaitable[bool]]]:
    updates: list[ProgressUpdate] = []

    async def on_progress(update: ProgressUpdate) -> bool:
        updates.append(update)
        return answer

    return updates, on_progress


async def chunked(task: Task) -> str:
    """Streams 100 chunks over 3 s (30 ms apart), after a status line."""
    progress = progress_of(task)
    progress.status("searching the web...")

    async def chunks() -> AsyncIterator[str]:
        for i in range(100):
            await trio.sleep(0.03)
            yield f"{i} "

    return await progress.stream_from(chunks())


async def test_a_streaming_run_sends_few_coalesced_updates_and_its_reply_is_the_result(
    timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    updates, on_progress = recorder()
    worker = PoolWorker(
        timed_store, "w1", agent(chunked), on_progress=on_progress, progress_interval=0.5
    )
    await timed_store.ingest(Task("t1", "question"))
    async with running(worker):
        await wait_until(lambda: state_is(timed_store, "t1", S.RESULT))
    full = "".join(f"{i} " for i in range(100))
    (result,) = await timed_store.ready_results()
    assert result.body == full  # the final reply is the custodial result, whole
    # 100 changes in 3 s travel as one update per 0.5 s, not one per chunk
    assert 4 <= len(updates) <= 7
    assert all(u.id == "t1" and u.attempt == 1 and u.worker == "w1" for u in updates)
    assert [u.seq for u in updates] == sorted({u.seq for u in updates})  # newer each time
    assert updates[0].running_s >= 0.5  # nothing for the first interval
    assert all(u.status == "searching the web..." for u in updates)
    partials = [u.partial or "" for u in updates]
    assert all(full.startswith(p) for p in partials)  # whole prefixes, never deltas
    assert len(partials[-1]) > len(partials[0])


async def test_a_quick_run_sends_no_progress_at_all(
    timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    updates, on_progress = recorder()
    worker = PoolWorker(timed_store, "w1", echo.factory, on_progress=on_progress)
    for i in range(20):
        await timed_store.ingest(Task(f"t{i}", "hi"))
    async with running(worker):
        await wait_until(lambda: _all_results(timed_store, 20))
        await trio.sleep(2.0)
    assert updates == []


async def _all_results(store: SqliteStore, n: int) -> bool:
    return (await store.counts())[S.RESULT] == n


async def test_a_slow_run_says_it_is_working_even_without_progress_calls(
    timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    updates, on_progress = recorder()

    async def thinker(task: Task) -> str:
        await trio.sleep(2.0)
        return "done"

    worker = PoolWorker(timed_store, "w1", agent(thinker), on_progress=on_progress)
    await timed_store.ingest(Task("t1", "q"))
    async with running(worker):
        await wait_until(lambda: state_is(timed_store, "t1", S.RESULT))
    # one "working" update (nothing changed after it), with how long the run has gone
    assert [(u.seq, u.status, u.partial) for u in updates] == [(0, None, None)]
    assert 0.5 <= updates[0].running_s < 1.5


@pytest.mark.parametrize("trouble", ["hangs", "raises"])
async def test_a_receiver_that_hangs_or_fails_never_holds_up_or_fails_the_run(
    timed_store: SqliteStore, mock_clock: StoreAwareClock, trouble: str
) -> None:
    calls = 0
    in_flight = 0
    most_in_flight = 0

    async def bad_receiver(update: ProgressUpdate) -> bool:
        nonlocal calls, in_flight, most_in_flight
        calls += 1
        in_flight += 1
        most_in_flight = max(most_in_flight, in_flight)
        try:
            if trouble == "hangs":
                await trio.sleep_forever()
            raise ConnectionError("gateway unreachable")
        finally:
            in_flight -= 1

    worker = PoolWorker(
        timed_store,
        "w1",
        agent(chunked),
        on_progress=bad_receiver,
        heartbeat_interval=1.0,
    )
    await timed_store.ingest(Task("t1", "question"))
    started = trio.current_time()
    async with running(worker):
        await wait_until(lambda: state_is(timed_store, "t1", S.RESULT))
    assert trio.current_time() - started < 4.0  # the 3 s run, not held up by its progress
    (result,) = await timed_store.ready_results()
    assert result.body.startswith("0 1 2 ")
    assert worker.counts.completed == 1
    assert worker.counts.failed == 0
    assert calls >= 1
    assert most_in_flight == 1  # one send in flight per run: a hang never piles up


async def test_a_receiver_without_progress_support_is_not_called_again(
    timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    updates, on_progress = recorder(answer=False)
    worker = PoolWorker(timed_store, "w1", agent(chunked), on_progress=on_progress)
    await timed_store.ingest(Task("t1", "q1"))
    await timed_store.ingest(Task("t2", "q2"))
    async with running(worker):
        await wait_until(lambda: _all_results(timed_store, 2))
    assert len(updates) <= 2  # the first tick's updates at most, then never again


async def test_the_bundled_slow_stream_agent_streams_its_reply(
    timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    updates, on_progress = recorder()
    worker = PoolWorker(timed_store, "w1", slow_stream.factory, on_progress=on_progress)
    await timed_store.ingest(
        Task("t1", "one two three four five six", headers={"stream-delay": "0.4"})
    )
    async with running(worker):
        await wait_until(lambda: state_is(timed_store, "t1", S.RESULT))
    (result,) = await timed_store.ready_results()
    assert result.body == "stream: one two three four five six"
    assert updates[0].status == "thinking about 6 words..."
    streamed = [u.partial for u in updates if u.partial]
    assert streamed
    assert all(result.body.startswith(p) for p in streamed)
    assert streamed[0] != result.body  # partial text went out before the reply was done


def test_outside_a_run_progress_of_gives_a_detached_reporter_and_reporting_binds_one() -> None:
    task = Task("t1", "q")
    detached = progress_of(task)
    detached.status("nobody hears this")  # records, sends nothing, never raises
    mine = Progress()
    with entered(Current(Run(task), Conversation(), mine)):
        assert progress_of(task) is mine
        assert progress_of(Task("t1", "q")) is not mine  # an equal task of another run
        progress_of(task).stream("a")
        progress_of(task).stream("b")
    assert progress_of(task) is not mine
    assert mine.partial == "ab"
    assert mine.snapshot() == (2, None, "ab")
    mine.clear()
    assert mine.snapshot() == (3, None, None)


def test_progress_refuses_what_is_not_text_and_works_from_threads() -> None:
    progress = Progress()
    with pytest.raises(TypeError, match="status must be a str, got int"):
        progress.status(3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="chunk must be a str, got bytes"):
        progress.stream(b"x")  # type: ignore[arg-type]

    def writer() -> None:
        for _ in range(1000):
            progress.stream("x")

    threads = [threading.Thread(target=writer) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert progress.partial == "x" * 4000
    assert progress.version == 4000


async def test_a_sync_handler_reports_progress_too(timed_store: SqliteStore) -> None:
    # real time: the handler blocks in a real thread
    updates, on_progress = recorder()
    gate = threading.Event()

    def sync_agent(session: Session) -> None:
        @session.on("task")
        def handle(task: Task) -> str:
            progress_of(task).status("in a thread")
            gate.wait(30)
            return "ok"

    worker = PoolWorker(timed_store, "w1", sync_agent, on_progress=on_progress)
    await timed_store.ingest(Task("t1", "q"))
    async with running(worker):
        try:
            await wait_until(lambda: _has_update(updates, "in a thread"), within=20)
        finally:
            gate.set()
        await wait_until(lambda: state_is(timed_store, "t1", S.RESULT))
    assert updates[-1].status == "in a thread"


async def _has_update(updates: list[ProgressUpdate], status: str) -> bool:
    return any(u.status == status for u in updates)


@pytest.mark.parametrize("reports", [False, True], ids=["silent agent", "reporting agent"])
async def test_a_dropped_update_is_named_for_what_it_was(
    timed_store: SqliteStore,
    mock_clock: StoreAwareClock,
    caplog: pytest.LogCaptureFixture,
    reports: bool,
) -> None:
    """Issue 47.11: an agent that sends no progress read "a progress update of task c14 was
    dropped": the update was the worker's own "still working" notice, and the line says so."""

    async def receiver(update: ProgressUpdate) -> bool:
        raise ConnectionResetError("Connection reset by peer")

    async def thinker(task: Task) -> str:
        if reports:
            progress_of(task).status("searching")
        await trio.sleep(2.0)
        return "done"

    worker = PoolWorker(timed_store, "w1", agent(thinker), on_progress=receiver)
    await timed_store.ingest(Task("t1", "q"))
    async with running(worker):
        await wait_until(lambda: state_is(timed_store, "t1", S.RESULT))
    (line,) = [r.getMessage() for r in caplog.records if "did not reach" in r.getMessage()]
    if reports:
        assert "the agent's progress update of task t1 did not reach the gateway" in line
    else:
        assert "the worker's 'still working' notice of task t1" in line
        assert "the agent sends no progress of its own" in line
        assert "progress update" not in line
    assert "Connection reset by peer" in line
