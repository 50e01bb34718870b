"""Versions, forks and mismatches through a real worker (issue #53): a fork in its source's
room reads the conversation as its source did; a step that no longer matches its record ends
the task dead on the attempt it ran, even when the handler catches the mismatch."""

from __future__ import annotations

from functools import partial

from support.one_slot import serve_one_slot
from support.waiting import state_is
from tether.bridge import CustodyState, SqliteStore, StepMismatch, Task, conversation_of, run_of

S = CustodyState


async def test_a_fork_in_its_rooms_reads_the_history_its_source_read(store: SqliteStore) -> None:
    async def handle(task: Task) -> str:
        seen = len((await conversation_of(task)).history)
        await run_of(task).step("draft", lambda: seen)
        return f"{task.body} saw {seen}"

    async def delivered(*ids: str) -> bool:
        """Deliver each stored reply (a serial room runs its next message once the reply
        before it is delivered); have ``ids`` all been?"""
        for record in await store.records(S.RESULT, limit=10):
            await store.mark_delivered(record.task.id)
        return all([await store.state(id) is S.DELIVERED for id in ids])

    for id in ("m1", "m2"):
        await store.ingest(Task(id, f"hello {id}", room="r"))
    await serve_one_slot(store, handle, partial(delivered, "m1", "m2"), within=60)
    assert (await store.get("m2")).result == "hello m2 saw 2"  # type: ignore[union-attr]
    same = await store.fork("m2", "draft")
    other = await store.fork("m2", "draft", room="elsewhere")
    assert same.done
    assert other.done
    await serve_one_slot(store, handle, partial(delivered, same.id, other.id), within=60)
    # not after the source's exchange and its own copy of the message: as the source did
    assert (await store.get(same.id)).result == "hello m2 saw 2"  # type: ignore[union-attr]
    assert (await store.get(other.id)).result == "hello m2 saw 0"  # type: ignore[union-attr]


async def test_a_mismatch_the_handler_catches_still_ends_the_task_dead_at_once(
    store: SqliteStore,
) -> None:
    effects: list[str] = []

    def book(seat: str) -> str:
        effects.append(seat)
        return f"booked {seat}"

    async def handle(task: Task) -> str:
        try:
            await run_of(task).step("book", book, "12B")
        except StepMismatch:
            await run_of(task).step("after", book, "never")  # goes no further
        return "done"

    await store.ingest(Task("t1", "go"))
    claim = await store.claim("w0", leaderless=True)
    assert claim is not None
    await store.record_step(claim, "book", '"booked 12A"', version="0", fingerprint="0" * 16)
    await store.release(claim)
    worker = await serve_one_slot(store, handle, partial(state_is, store, "t1", S.DEAD), within=60)
    record = await store.get("t1")
    assert record is not None
    assert record.attempt == 1
    assert "step 'book' was recorded by version '0' with other arguments" in (record.reason or "")
    assert effects == []
    assert worker.counts.failed == 1
