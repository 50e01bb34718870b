"""A claimed run's calls: each call of the handler has its own reporter and its own
conversation, and a task the handler leaves behind finds no run once the call is over."""

from __future__ import annotations

from functools import partial

import trio

from support.agents.handler import agent
from support.pool_fixtures import StoreAwareClock
from support.waiting import wait_until
from tether import Session
from tether.bridge import (
    CustodyState,
    Reply,
    SqliteStore,
    Task,
    conversation_of,
    progress_of,
    run_of,
)
from tether.bridge.pool import PoolWorker


async def test_a_rerun_after_a_state_conflict_streams_its_reply_anew(
    timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    def streaming(session: Session) -> None:
        @session.on("task")
        async def reply(task: Task) -> Reply:
            talk = await conversation_of(task)
            count = int(talk.state.get("count", 0)) + 1
            await trio.sleep(0.01)  # the four runs read the same version, then race

            async def chunks() -> trio.MemoryReceiveChannel[str]:
                send, receive = trio.open_memory_channel[str](1)
                async with send:
                    await send.send(f"#{count}")
                return receive

            body = await progress_of(task).stream_from(await chunks())
            return Reply(body, state={"count": count})

    worker = PoolWorker(timed_store, "w1", streaming, concurrency=4)
    await timed_store.ingest_many(
        [Task(f"m{i}", "hi", room="r") for i in range(4)], room_policy="concurrent"
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        for i in range(4):
            await wait_until(partial(_is, timed_store, f"m{i}", CustodyState.RESULT))
        worker.request_stop()
    assert worker.counts.state_conflicts >= 1
    results: list[str] = []
    for i in range(4):
        record = await timed_store.get(f"m{i}")
        assert record is not None
        assert record.result is not None
        results.append(record.result)
    assert sorted(results) == ["#1", "#2", "#3", "#4"]  # no rerun repeats an earlier call's text


async def test_runs_of_tasks_without_a_room_do_not_share_a_state(
    timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    states: dict[str, dict[str, object]] = {}

    async def handle(task: Task) -> str:
        state = (await conversation_of(task)).state
        states[task.id] = dict(state)
        assert isinstance(state, dict)
        state[task.id] = 1  # a run may change its (empty) state
        return "ok"

    worker = PoolWorker(timed_store, "w1", agent(handle), concurrency=1)
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        for id in ("a", "b"):
            await timed_store.ingest(Task(id, "x"))
            await wait_until(partial(_is, timed_store, id, CustodyState.RESULT))
        worker.request_stop()
    assert states == {"a": {}, "b": {}}


async def test_a_task_the_handler_leaves_behind_finds_no_run_once_the_call_is_over(
    timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    late: list[bool] = []
    answered, looked = trio.Event(), trio.Event()

    async with trio.open_nursery() as outer:

        async def handle(task: Task) -> str:
            async def later() -> None:  # started in a nursery that outlives the run
                await answered.wait()
                late.append(run_of(task).durable)
                looked.set()

            outer.start_soon(later)
            return "ok"

        worker = PoolWorker(timed_store, "w1", agent(handle))
        await outer.start(worker.run)
        await timed_store.ingest(Task("t", "x"))
        await wait_until(partial(_is, timed_store, "t", CustodyState.RESULT))
        answered.set()
        await looked.wait()
        worker.request_stop()
    assert late == [False]
    assert worker.counts.lost == 0


async def _is(store: SqliteStore, id: str, state: CustodyState) -> bool:
    return await store.state(id) is state
