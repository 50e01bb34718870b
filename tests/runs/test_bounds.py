"""Bounds (issue #53): a step's result, a room's state and a reply over its size limit fail
the run at once, ``TooLarge`` (a ``Permanent``): the task is dead on its first attempt, the
reason giving what it was, its size and the limit, and nothing of it is stored. A value at its
limit is kept. A handler that wraps the bound still fails permanently; one that answers
completes. Both stores, a real worker, real clock (waits on store states); retries would be
immediate (``RetryBackoff(0, 0)``), so a run that was retried would show it at once."""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from support.agents.bounds import factory
from support.custody import MAX_ATTEMPTS, Backend
from support.waiting import wait_until
from tether.bridge import CustodyState, SqliteStore, Task, TooLarge
from tether.bridge.custody import MAX_TASK_STEP_BYTES, Store, TaskRecord
from tether.bridge.pool import Bounds, PoolWorker, RetryBackoff
from tether.bridge.runs._bounds import within_store

S = CustodyState
BOUNDS = Bounds(step=1000, state=2000, reply=500)


@asynccontextmanager
async def working(backend: Backend, *tasks: Task, **options: Any) -> AsyncIterator[Store]:
    """A store with ``tasks`` ingested, served by one worker (``BOUNDS``, immediate retries)
    until the block ends."""
    store = await backend.open(backend.fresh(), time.time)  # a thread's clock (PostgreSQL)
    try:
        await store.ingest_many(list(tasks), room_policy="concurrent")
        options.setdefault("bounds", BOUNDS)
        worker = PoolWorker(
            store,
            "w1",
            factory,
            concurrency=4,
            poll_interval=0.05,
            retry_backoff=RetryBackoff(0, 0),
            **options,
        )
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            yield store
            worker.request_stop()
    finally:
        await store.aclose()


async def settled(store: Store, *ids: str) -> None:
    async def all_settled() -> bool:
        return all([await store.state(id) in (S.DEAD, S.RESULT) for id in ids])

    await wait_until(all_settled, within=60)


async def dead_at_once(store: Store, id: str) -> TaskRecord:
    """``id`` is dead on attempt 1: one claim, one failure, no retry."""
    record = await store.get(id)
    assert record is not None
    assert (record.state, record.attempt) == (S.DEAD, 1), record.reason
    moves = [(e.src, e.dst, e.attempt) for e in await store.journal(id)]
    assert moves == [(None, S.PENDING, 1), (S.PENDING, S.CLAIMED, 1), (S.CLAIMED, S.DEAD, 1)]
    return record


async def test_a_value_over_its_bound_kills_the_run_at_once_saying_its_size(
    backend: Backend,
) -> None:
    assert MAX_ATTEMPTS > 1
    tasks = [
        Task("step", "step 1001"),
        Task("state", "state 2001", room="r"),
        Task("reply", "reply 501"),
        Task("wrapped", "wrapped 1001"),
    ]
    async with working(backend, *tasks) as store:
        await settled(store, *(t.id for t in tasks))
        step = await dead_at_once(store, "step")
        assert step.reason == (
            "permanent failure on attempt 1: step 'fetch' returned 1,001 bytes of JSON, over "
            "the 1,000 bytes a step may record (--max-step-bytes); record a reference (a file "
            "name, an id) instead"
        )
        assert await store.steps("step") == []  # nothing recorded
        state = await dead_at_once(store, "state")
        assert state.reason == (
            "permanent failure on attempt 1: the state of room 'r' is 2,001 bytes of JSON, "
            "over the 2,000 bytes a room's state may hold (--max-state-bytes); keep less in it"
        )
        room = await store.room("r")
        assert room is not None
        assert (room.state, room.version) == ({}, 0)  # not stored
        reply = await dead_at_once(store, "reply")
        assert reply.reason == (
            "permanent failure on attempt 1: the reply to task 'reply' is 501 bytes, over the "
            "500 bytes a reply may be (--max-reply-bytes); send a link or a file instead"
        )
        assert reply.result is None
        wrapped = await dead_at_once(store, "wrapped")  # what the handler made of it: the same
        assert wrapped.reason is not None
        assert "step 'fetch' returned 1,001 bytes of JSON, over the 1,000 bytes" in wrapped.reason


async def test_a_value_at_its_bound_is_kept_and_a_handler_may_answer_past_one(
    backend: Backend,
) -> None:
    tasks = [
        Task("step", "step 1000"),
        Task("state", "state 2000", room="r"),
        Task("reply", "reply 500"),
        Task("caught", "caught 1001"),
    ]
    async with working(backend, *tasks) as store:
        await settled(store, *(t.id for t in tasks))
        for id in ("step", "state", "reply", "caught"):
            record = await store.get(id)
            assert record is not None
            assert (record.state, record.attempt) == (S.RESULT, 1), record.reason
        assert (await store.get("step")).result == "fetched 998"  # type: ignore[union-attr]
        [fetched] = await store.steps("step")
        assert (fetched.name, fetched.size) == ("fetch", 1000)
        view = await store.room("r")
        assert view is not None
        assert (view.version, view.state_bytes) == (1, 2000)
        assert (await store.get("reply")).result == "x" * 500  # type: ignore[union-attr]
        assert (await store.get("caught")).result == "fell back"  # type: ignore[union-attr]
        assert await store.steps("caught") == []


async def test_steps_past_their_tasks_total_kill_the_run_at_once(backend: Backend) -> None:
    """The stores refuse a step past the task's total (``MAX_TASK_STEP_BYTES``): the run
    fails as over any bound, at once."""
    parts = MAX_TASK_STEP_BYTES // (1 << 20)
    async with working(backend, Task("total", f"total {parts}"), bounds=None) as store:
        await settled(store, "total")
        record = await dead_at_once(store, "total")
        assert record.reason is not None
        assert record.reason.startswith("permanent failure on attempt 1: step 'one-more': its ")
        assert record.reason.endswith(f"over the {MAX_TASK_STEP_BYTES:,} bytes a task may record")
        assert len(await store.steps("total")) == parts


def test_a_bound_is_a_permanent_failure_an_author_can_catch() -> None:
    from tether.bridge import Permanent

    assert issubclass(TooLarge, Permanent)
    exc = TooLarge("the reply is too long", size=10, limit=5)
    assert (exc.reason, exc.size, exc.limit) == ("the reply is too long", 10, 5)


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"step": 0}, "max_step_bytes must be a number of bytes from 1 to 1,048,576"),
        ({"state": (1 << 20) + 1}, "max_state_bytes must be a number of bytes from 1 to"),
        ({"reply": (1 << 20) + 1}, "(the store's body limit: a reply is stored as a result)"),
        ({"reply": True}, "max_reply_bytes must be"),
    ],
)
def test_a_bound_outside_what_the_stores_take_is_refused(fields: dict[str, Any], says: str) -> None:
    with pytest.raises(ValueError, match=re.escape(says)):
        Bounds(**fields)


async def test_a_worker_keeps_its_replies_within_what_its_store_takes(tmp_path: Path) -> None:
    async with await SqliteStore.open(tmp_path / "small.db", max_body_bytes=1000) as store:
        with pytest.raises(ValueError, match=r"max_reply_bytes \(2,000\) is over the store's"):
            PoolWorker(store, "w1", factory, bounds=Bounds(reply=2000))
        assert PoolWorker(store, "w1", factory, bounds=Bounds(reply=1000))
        assert within_store(None, store) == Bounds(reply=1000)  # the default, lowered to it
    assert within_store(None, object()) == Bounds()
