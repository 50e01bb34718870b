"""A worker hands each run its room's conversation (``conversation_of``) and stores the state
a run returns with its reply (issue #34), on Trio's mock clock: the history the run reads,
the state carried from message to message, a stale state run again at once (not a failed
attempt), and the partial reply a barge-in interrupted, as the person saw it."""

from __future__ import annotations

from typing import Any

import trio

from support.pool_fixtures import StoreAwareClock
from support.waiting import wait_until
from tether import Session
from tether.bridge import CustodyState, Reply, SqliteStore, Task, conversation_of, progress_of
from tether.bridge.pool import PoolWorker, ProgressUpdate

S = CustodyState


def counting_agent(seen: list[tuple[str, list[str], dict[str, Any]]]) -> Any:
    def install(session: Session) -> None:
        @session.on("task")
        async def reply(task: Task) -> Reply:
            conversation = await conversation_of(task)
            texts = [t.text for t in conversation.history]
            seen.append((task.id, texts, dict(conversation.state)))
            count = conversation.state.get("count", 0) + 1
            await trio.sleep(0.01)
            return Reply(f"#{count}", state={"count": count})

    return install


async def _delivered(store: SqliteStore, id: str) -> bool:
    if await store.state(id) is S.RESULT:
        await store.mark_delivered(id)
    return await store.state(id) is S.DELIVERED


async def test_a_run_reads_its_rooms_history_and_state_and_stores_the_next(
    timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    seen: list[tuple[str, list[str], dict[str, Any]]] = []
    worker = PoolWorker(timed_store, "w1", counting_agent(seen))
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        for i in range(3):
            await timed_store.ingest(Task(f"m{i}", f"hello {i}", room="r"), room_policy="serial")
            await wait_until(lambda i=i: _delivered(timed_store, f"m{i}"))  # type: ignore[misc]
        worker.request_stop()
    assert seen == [
        ("m0", [], {}),
        ("m1", ["hello 0", "#1"], {"count": 1}),
        ("m2", ["hello 0", "#1", "hello 1", "#2"], {"count": 2}),
    ]
    view = await timed_store.room("r")
    assert view is not None
    assert (view.state, view.version) == ({"count": 3}, 3)


async def test_a_stale_state_in_a_concurrent_room_runs_again_at_once(
    timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    seen: list[tuple[str, list[str], dict[str, Any]]] = []
    worker = PoolWorker(timed_store, "w1", counting_agent(seen), concurrency=4)
    tasks = [Task(f"m{i}", f"hello {i}", room="r") for i in range(4)]
    await timed_store.ingest_many(tasks, room_policy="concurrent")
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        for i in range(4):
            await wait_until(lambda i=i: _delivered(timed_store, f"m{i}"))  # type: ignore[misc]
        worker.request_stop()
    view = await timed_store.room("r")
    assert view is not None
    assert view.state == {"count": 4}  # each message counted once, none lost to a race
    replies = sorted(t.text for t in view.turns if t.role == "assistant")
    assert replies == ["#1", "#2", "#3", "#4"]
    assert worker.counts.state_conflicts >= 1  # four runs read version 0 at once
    assert (worker.counts.completed, worker.counts.failed) == (4, 0)
    for i in range(4):
        record = await timed_store.get(f"m{i}")
        assert record is not None
        assert record.attempt == 1  # a conflict is not a failed attempt


async def test_a_barge_in_keeps_the_partial_reply_the_person_saw(
    timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    histories: dict[str, list[tuple[str, str, str]]] = {}
    sent: list[ProgressUpdate] = []

    def agent(session: Session) -> None:
        @session.on("task", policy="replace")
        async def reply(task: Task) -> str:
            histories[task.id] = [
                (t.role, t.text, t.outcome) for t in (await conversation_of(task)).history
            ]
            if task.id == "old":
                progress_of(task).stream("Once upon")
                await trio.sleep(1.0)
                progress_of(task).stream(" a time")
                await trio.sleep(1000)
            return "a joke"

    async def on_progress(update: ProgressUpdate) -> bool:
        sent.append(update)
        return True

    worker = PoolWorker(
        timed_store,
        "w1",
        agent,
        on_progress=on_progress,
        progress_interval=0.5,
        heartbeat_interval=1.0,
        supersede_grace=0.0,
    )
    await timed_store.ingest(Task("old", "tell me a story", room="r"), room_policy="replace")
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        await wait_until(lambda: _shown(timed_store, "Once upon a time"))
        await timed_store.ingest(Task("new", "a joke instead", room="r"), room_policy="replace")
        await wait_until(lambda: _delivered(timed_store, "new"))
        worker.request_stop()
    assert any(u.partial == "Once upon a time" for u in sent)
    assert histories["new"] == [
        ("user", "tell me a story", "received"),
        ("assistant", "Once upon a time", "interrupted"),
    ]


async def _shown(store: SqliteStore, text: str) -> bool:
    """The gateway took ``text`` and the worker recorded it as shown."""
    view = await store.room("r")
    return view is not None and any(t.text == text and t.outcome == "shown" for t in view.turns)
