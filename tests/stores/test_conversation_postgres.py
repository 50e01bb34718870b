"""Many bridges on one PostgreSQL see one conversation (issue #34): two workers, each with its
own ``PostgresStore`` (its own pool of connections, as two bridges or ``tether worker run``
processes on two hosts would have), take turns on one room's messages; every run sees every
turn before its message whoever stored it, and the state counts each message once."""

from __future__ import annotations

import secrets

import trio

from support.waiting import wait_until
from tether import Session
from tether.bridge import CustodyState, PostgresStore, Reply, Task, conversation_of
from tether.bridge.pool import PoolWorker


async def test_two_stores_on_one_database_share_the_rooms_conversation(postgres_dsn: str) -> None:
    schema = f"s_{secrets.token_hex(5)}"
    seen: dict[str, tuple[str, int]] = {}

    def agent(label: str) -> object:
        def install(session: Session) -> None:
            @session.on("task")
            async def reply(task: Task) -> Reply:
                talk = await conversation_of(task)
                seen[task.id] = (label, len(talk.history))
                count = talk.state.get("count", 0) + 1
                return Reply(f"{count} by {label}", state={"count": count})

        return install

    a = await PostgresStore.open(postgres_dsn, schema=schema)
    b = await PostgresStore.open(postgres_dsn, schema=schema)
    try:
        stores = {"a": a, "b": b}
        for i in range(6):  # the bridges take turns: a, b, a, ...
            label = "ab"[i % 2]
            store = stores[label]
            worker = PoolWorker(store, f"bridge-{label}-w1", agent(label), poll_interval=0.02)  # type: ignore[arg-type]
            async with trio.open_nursery() as nursery:
                await nursery.start(worker.run)
                await store.ingest(Task(f"m{i}", f"message {i}", room="r"), room_policy="serial")

                async def delivered(id: str = f"m{i}", store: PostgresStore = store) -> bool:
                    if await store.state(id) is CustodyState.RESULT:
                        await store.mark_delivered(id)
                    return await store.state(id) is CustodyState.DELIVERED

                await wait_until(delivered, within=30)
                worker.request_stop()
        view = await b.room("r")
    finally:
        await a.aclose()
        await b.aclose()
    assert view is not None
    assert view.state == {"count": 6}
    replies = [t.text.split(" by ")[0] for t in view.turns if t.role == "assistant"]
    assert replies == ["1", "2", "3", "4", "5", "6"]
    assert [seen[f"m{i}"] for i in range(6)] == [  # every turn before it, whoever stored it
        ("a", 0),
        ("b", 2),
        ("a", 4),
        ("b", 6),
        ("a", 8),
        ("b", 10),
    ]


async def test_batches_sharing_rooms_in_opposite_orders_never_deadlock(postgres_dsn: str) -> None:
    """The ingest trigger numbers a room's messages under the room's row lock: two bridges
    whose batches share rooms in opposite orders take those locks in one order (the rooms'),
    so neither waits for the other forever (PostgreSQL would abort one as a deadlock)."""
    schema = f"s_{secrets.token_hex(5)}"
    rooms = [f"r{i}" for i in range(8)]
    a = await PostgresStore.open(postgres_dsn, schema=schema)
    b = await PostgresStore.open(postgres_dsn, schema=schema)
    try:
        for n in range(40):
            async with trio.open_nursery() as nursery:
                forward = [Task(f"a{n}-{r}", "x", room=r) for r in rooms]
                backward = [Task(f"b{n}-{r}", "x", room=r) for r in reversed(rooms)]
                nursery.start_soon(a.ingest_many, forward)
                nursery.start_soon(b.ingest_many, backward)
        for room in rooms:
            view = await a.room(room, limit=100)
            assert view is not None
            assert view.turn_count == 80  # every message a turn, none lost to an abort
    finally:
        await a.aclose()
        await b.aclose()
