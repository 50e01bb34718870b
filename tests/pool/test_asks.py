"""Asking the person in the pool (issue #36), on virtual time with a real SQLite store.

``run.ask`` ends the run where it asks: the worker records the question with the park (the
only slot free for other rooms' messages), the room's next message is the answer, and the
handler runs again from the top: the ask returns the answer, or raises ``AskTimeout``, the
same in every later run. Several asks of one run are told apart by position or name.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest
import trio

from support.agents.handler import agent
from support.pool_fixtures import StoreAwareClock
from support.waiting import state_is as _is
from support.waiting import wait_until
from tether.bridge import AskTimeout, AskUnsupported, CustodyState, SqliteStore, Task, run_of
from tether.bridge.custody._asks import AskRecord
from tether.bridge.pool import PoolWorker, Reconciler
from tether.bridge.runs._asks import asks_fields, asks_from, parked_fields, parked_from
from tether.bridge.runs._journal import ParkedAsk

S = CustodyState


async def test_an_ask_parks_its_task_and_the_rooms_next_message_answers_it(
    timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    calls: Counter[str] = Counter()
    asked: list[int] = []

    async def handle(task: Task) -> str:
        if task.room == "other":
            return "hello"
        run = run_of(task)
        table = await run.step("find", lambda: calls.update(["find"]) or "T-4")
        asked.append(1)
        first = await run.ask(f"{table} at 8 pm, book it?", timeout=3600)
        cake = await run.ask("a cake too?", timeout=3600, name="cake")
        return f"booked: {first}; cake: {cake}"

    recorded: list[int] = []
    worker = PoolWorker(
        timed_store,
        "w1",
        agent(handle),
        concurrency=1,
        poll_interval=1.0,
        on_asked=lambda: recorded.append(1),
    )
    await timed_store.ingest(Task("t1", "a table for 4", room="r"), room_policy="serial")
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        await wait_until(lambda: _is(timed_store, "t1", S.WAITING))
        await timed_store.ingest(Task("o1", "hi", room="other"), room_policy="serial")
        await wait_until(lambda: _is(timed_store, "o1", S.RESULT))  # the only slot was free
        await timed_store.ingest(Task("a1", "yes", room="r"), room_policy="serial")
        await wait_until(
            lambda: timed_store_has_asks(timed_store, "t1", 2), within=60
        )  # the second ask parked it again
        await timed_store.ingest(Task("a2", "no thanks", room="r"), room_policy="serial")
        await wait_until(lambda: _is(timed_store, "t1", S.RESULT))
        worker.request_stop()
    results = {r.task.id: r for r in await timed_store.ready_results()}
    assert results["t1"].body == "booked: yes; cake: no thanks"
    assert results["a1"].no_send
    assert results["a2"].no_send
    assert calls == {"find": 1}  # the step before the asks ran once in three runs
    assert len(asked) == 3
    assert len(recorded) == 2
    assert worker.counts.parked == 2
    record = await timed_store.get("t1")
    assert record is not None
    assert record.attempt == 1  # asking spent no attempt
    asks = await timed_store.asks("t1")
    assert [(a.name, a.seq, a.question) for a in asks] == [
        ("~ask:1", 1, "T-4 at 8 pm, book it?"),
        ("cake", 2, "a cake too?"),
    ]


async def timed_store_has_asks(store: SqliteStore, id: str, n: int) -> bool:
    asks = await store.asks(id)
    return len(asks) == n and await store.state(id) is S.WAITING


async def test_an_unanswered_ask_times_out_and_the_timeout_replays(
    timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    outcomes: list[str] = []

    async def handle(task: Task) -> str:
        run = run_of(task)
        try:
            answer = await run.ask("still there?", timeout=600)
        except AskTimeout:
            outcomes.append("timeout")
            raise  # fails this attempt: the next run meets the recorded timeout again
        return answer

    worker = PoolWorker(timed_store, "w1", agent(handle), poll_interval=1.0)
    reconciler = Reconciler(timed_store)
    await timed_store.ingest(Task("t1", "hi", room="r"), room_policy="serial")
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        await wait_until(lambda: _is(timed_store, "t1", S.WAITING))
        nursery.start_soon(lambda: reconciler.run(interval=30.0))
        await wait_until(lambda: _is(timed_store, "t1", S.DEAD), within=4000)
        worker.request_stop()
        nursery.cancel_scope.cancel()
    assert outcomes == ["timeout"] * timed_store.max_attempts
    [ask] = await timed_store.asks("t1")
    assert ask.status == "timeout"


async def test_outside_a_worker_a_run_cannot_ask() -> None:
    run = run_of(Task("t", "x"))
    with pytest.raises(AskUnsupported, match="detached"):
        await run.ask("hello?", timeout=5)
    with pytest.raises(ValueError, match="timeout"):
        await run.ask("hello?", timeout=0)
    with pytest.raises(ValueError, match="question"):
        await run.ask(" ", timeout=5)


async def test_by_default_only_the_asking_messages_sender_answers(
    timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    """Issue #48: mallory's message in the room is an ordinary message (a run of its own),
    not the answer to the question user was asked; user's next message is."""
    seen: list[str] = []

    async def handle(task: Task) -> str:
        if task.headers.get("sender") != "user":
            seen.append(task.body)
            return "hello"
        answer = await run_of(task).ask("8 pm, book it?", timeout=3600)
        return f"booked: {answer}"

    worker = PoolWorker(timed_store, "w1", agent(handle), poll_interval=1.0)
    user, mallory = {"sender": "user"}, {"sender": "mallory"}
    await timed_store.ingest(Task("t1", "a table", room="r", headers=user), room_policy="serial")
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        await wait_until(lambda: _is(timed_store, "t1", S.WAITING))
        await timed_store.ingest(Task("m1", "yes", room="r", headers=mallory), room_policy="serial")
        await wait_until(lambda: _is(timed_store, "m1", S.RESULT))
        assert await timed_store.state("t1") is S.WAITING
        await timed_store.ingest(Task("a1", "no", room="r", headers=user), room_policy="serial")
        await wait_until(lambda: _is(timed_store, "t1", S.RESULT))
        worker.request_stop()
    results = {r.task.id: r for r in await timed_store.ready_results()}
    assert results["t1"].body == "booked: no"
    assert (results["m1"].body, results["m1"].no_send) == ("hello", False)
    assert results["a1"].no_send
    assert seen == ["yes"]
    [ask] = await timed_store.asks("t1")
    assert ask.answer_from == ("user",)


async def test_a_run_may_take_its_answer_from_anyone_or_from_named_senders(
    timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    async def handle(task: Task) -> str:
        run = run_of(task)
        first = await run.ask("anyone?", timeout=3600, from_anyone=True)
        second = await run.ask("boss?", timeout=3600, from_senders=["boss"])
        return f"{first}, {second}"

    worker = PoolWorker(timed_store, "w1", agent(handle), poll_interval=1.0)

    def said(id: str, body: str, sender: str) -> Task:
        return Task(id, body, room="r", headers={"sender": sender})

    await timed_store.ingest(said("t1", "go", "user"), room_policy="concurrent")
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        await wait_until(lambda: _is(timed_store, "t1", S.WAITING))
        await timed_store.ingest(said("a1", "me", "mallory"), room_policy="concurrent")
        await wait_until(lambda: timed_store_has_asks(timed_store, "t1", 2))
        await timed_store.ingest(said("a2", "me too", "user"), room_policy="concurrent")
        await timed_store.ingest(said("a3", "approved", "boss"), room_policy="concurrent")
        await wait_until(lambda: _is(timed_store, "t1", S.RESULT))
        worker.request_stop()
    results = {r.task.id: r for r in await timed_store.ready_results()}
    assert results["t1"].body == "me, approved"
    asks = await timed_store.asks("t1")
    assert [a.answer_from for a in asks] == [None, ("boss",)]


async def test_a_run_asking_with_both_widenings_is_told_to_choose() -> None:
    run = run_of(Task("t", "x"))
    with pytest.raises(ValueError, match="from_anyone or from_senders"):
        await run.ask("hello?", timeout=5, from_anyone=True, from_senders=["a"])


def test_a_quarantined_runs_question_keeps_its_senders_across_the_pipe() -> None:
    """The parked frame is JSON: the senders must come back, or the ask would take anyone's."""
    asked = ParkedAsk("~ask:1", "ok?", 12.5, ("ann", "bob"))
    assert parked_from(json.loads(json.dumps(parked_fields(asked)))) == asked
    record = AskRecord("~ask:1", 1, "ok?", "open", 12.5, 1.0, answer_from=["ann"])
    assert asks_from(json.loads(json.dumps(asks_fields([record])))) == [record]
