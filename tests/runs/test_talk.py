"""Conversations are read on demand (issue #49, DESIGN): the claim reads no history; the
first ``await conversation_of(task)`` of a run reads it in one store query, later awaits read
nothing; a state returned without a read is based on the room's current version (and refused,
then run again, when another run stored one meanwhile); a sync handler reads with ``.read()``;
the old sync form says what to write instead. Both stores, real clock (waits on store states)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import attrs
import pytest
import trio

from support.custody import Backend
from support.waiting import wait_until
from tether import Session
from tether.bridge import CustodyState, Reply, Task, conversation_of
from tether.bridge.custody import Conversation, Store
from tether.bridge.pool import PoolWorker
from tether.bridge.runs._current import detached_run

S = CustodyState


@attrs.define
class Calls:
    """What a store was asked: each ``claim_many``'s ``history`` and each conversation read
    (task id, limit)."""

    claims: list[int | None] = attrs.Factory(list)
    reads: list[tuple[str, int | None]] = attrs.Factory(list)


def watched(store: Store) -> Calls:
    """Record ``store``'s claims and conversation reads (its methods wrapped on the instance)."""
    calls = Calls()
    claim_many, conversation = store.claim_many, store.conversation

    async def claiming(*args: Any, **kwargs: Any) -> Any:
        calls.claims.append(kwargs.get("history"))
        return await claim_many(*args, **kwargs)

    async def reading(id: str, *args: Any, **kwargs: Any) -> Any:
        calls.reads.append((id, kwargs.get("limit", args[0] if args else None)))
        return await conversation(id, *args, **kwargs)

    store.claim_many = claiming  # type: ignore[method-assign]
    store.conversation = reading  # type: ignore[method-assign,assignment]
    return calls


@asynccontextmanager
async def opened(backend: Backend) -> AsyncIterator[Store]:
    store = await backend.open(backend.fresh(), time.time)  # a thread's clock (PostgreSQL)
    try:
        yield store
    finally:
        await store.aclose()


@asynccontextmanager
async def working(store: Store, install: Callable[[Session], None], **options: Any) -> Any:
    worker = PoolWorker(store, "w1", install, poll_interval=0.05, **options)
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        yield worker
        worker.request_stop()


def handler(fn: Callable[[Task], Any]) -> Callable[[Session], None]:
    def install(session: Session) -> None:
        session.add_handler("task", fn)

    return install


async def stored(store: Store, *ids: str) -> None:
    async def all_stored() -> bool:
        return all([await store.state(id) is S.RESULT for id in ids])

    await wait_until(all_stored, within=30)


async def test_a_run_that_never_asks_for_its_conversation_reads_none(backend: Backend) -> None:
    async def reply(task: Task) -> str:
        return "ok"

    async with opened(backend) as store:
        await store.ingest(Task("m0", "hello", room="r"), room_policy="serial")
        await store.ingest(Task("m1", "again", room="r"), room_policy="serial")
        calls = watched(store)
        async with working(store, handler(reply)):
            await stored(store, "m0")
            await store.mark_delivered("m0")
            await stored(store, "m1")
    assert calls.claims
    assert set(calls.claims) == {None}  # the claim asks for no history
    assert calls.reads == []


async def test_a_run_that_awaits_twice_reads_once_in_one_query(backend: Backend) -> None:
    seen: list[tuple[str, ...]] = []

    async def reply(task: Task) -> Reply:
        talks: list[Conversation] = []

        async def read() -> None:
            talks.append(await conversation_of(task))

        async with trio.open_nursery() as nursery:  # two tasks of the handler at once
            nursery.start_soon(read)
            nursery.start_soon(read)
        again = await conversation_of(task)
        assert talks[0] is talks[1] is again
        seen.append(tuple(t.text for t in again.history))
        return Reply(f"#{again.version + 1}", state={"n": again.version + 1})

    async with opened(backend) as store:
        await store.ingest(Task("m0", "hello", room="r"), room_policy="serial")
        await store.ingest(Task("m1", "again", room="r"), room_policy="serial")
        calls = watched(store)
        async with working(store, handler(reply), history_turns=7):
            await stored(store, "m0")
            await store.mark_delivered("m0")
            await stored(store, "m1")
        view = await store.room("r")
    assert calls.reads == [("m0", 7), ("m1", 7)]  # one read per run, of the worker's window
    assert seen == [(), ("hello", "#1")]
    assert view is not None
    assert (view.state, view.version) == ({"n": 2}, 2)


async def test_a_state_returned_without_a_read_is_based_on_the_current_version(
    backend: Backend,
) -> None:
    """In a ``concurrent`` room: run ``a`` reads version 0 and waits; run ``b`` never reads,
    so its state is based on the version current when it completes (read then: 0), and that
    read waits until ``a`` has stored its state (version 1). ``b``'s state is refused as stale
    and ``b`` runs again at once, based on version 1 this time."""
    a_read, b_based = trio.Event(), trio.Event()
    runs: list[str] = []

    async def reply(task: Task) -> Reply:
        runs.append(task.id)
        if task.id == "a":
            talk = await conversation_of(task)
            a_read.set()
            await b_based.wait()
            return Reply("a", state={"by": ["a"], "read": talk.version})
        await a_read.wait()
        return Reply("b", state={"by": ["b"], "run": runs.count("b")})

    async with opened(backend) as store:
        calls = watched(store)
        reading = store.conversation

        async def base_read(id: str, *args: Any, **kwargs: Any) -> Any:
            got = await reading(id, *args, **kwargs)
            if id == "b" and not b_based.is_set():  # b's first base read: a stores first
                b_based.set()
                await wait_until(lambda: _is(store, "a", S.RESULT), within=30)
            return got

        store.conversation = base_read  # type: ignore[method-assign,assignment]
        await store.ingest_many(
            [Task("a", "x", room="r"), Task("b", "y", room="r")], room_policy="concurrent"
        )
        async with working(store, handler(reply), concurrency=2) as worker:
            await stored(store, "a", "b")
        view = await store.room("r")
    assert worker.counts.state_conflicts == 1
    assert runs.count("b") == 2  # refused once, run again at once (not a failed attempt)
    assert calls.reads == [("a", 50), ("b", 0), ("b", 0)]  # b read versions only, no history
    assert view is not None
    assert (view.state, view.version) == ({"by": ["b"], "run": 2}, 2)


async def test_a_sync_handler_reads_its_conversation_with_read(backend: Backend) -> None:
    seen: list[tuple[int, int]] = []

    def reply(task: Task) -> Reply:  # in the session's worker thread
        talk = conversation_of(task).read()
        assert conversation_of(task).read() is talk  # read once
        seen.append((len(talk.history), talk.version))
        return Reply("ok", state={"v": talk.version + 1})

    async with opened(backend) as store:
        await store.ingest(Task("m0", "hello", room="r"), room_policy="serial")
        await store.ingest(Task("m1", "again", room="r"), room_policy="serial")
        calls = watched(store)
        async with working(store, handler(reply)):
            await stored(store, "m0")
            await store.mark_delivered("m0")
            await stored(store, "m1")
    assert seen == [(0, 0), (2, 1)]
    assert [id for id, _ in calls.reads] == ["m0", "m1"]


async def test_the_old_sync_form_raises_a_type_error_saying_what_to_write(
    backend: Backend,
) -> None:
    raised: list[str] = []

    async def reply(task: Task) -> str:
        for name in ("history", "state", "version"):
            try:
                getattr(conversation_of(task), name)
            except TypeError as exc:
                raised.append(str(exc))
        try:
            conversation_of(task).read()  # blocks: not in an async handler
        except TypeError as exc:
            raised.append(str(exc))
        return "ok"

    async with opened(backend) as store:
        await store.ingest(Task("m0", "hello", room="r"))
        calls = watched(store)
        async with working(store, handler(reply)):
            await stored(store, "m0")
    assert len(raised) == 4
    for message, name in zip(raised, ("history", "state", "version"), strict=False):
        assert "write `talk = await conversation_of(task)`" in message
        assert f"then read talk.{name}" in message
    assert "in an async handler write `talk = await conversation_of(task)`" in raised[3]
    assert calls.reads == []  # asking the wrong way read nothing


async def test_a_detached_run_gives_its_conversation_to_await_and_to_read() -> None:
    task = Task("t", "x", room="r")
    given = Conversation(state={"home": "Porto"}, version=3)
    with detached_run(task, conversation=given):
        assert await conversation_of(task) is given
        assert await trio.to_thread.run_sync(lambda: conversation_of(task).read()) is given
    assert (await conversation_of(task)).state == {}  # outside a run: an empty one
    with pytest.raises(TypeError, match=r"await conversation_of\(task\)"):
        _ = conversation_of(task).history


async def _is(store: Store, id: str, state: CustodyState) -> bool:
    return await store.state(id) is state
