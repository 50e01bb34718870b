"""A worker stores the replies of runs that answer together with one ``complete_many``, each
still fenced on its own (virtual time, a real SQLite store)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs
import pytest
import trio
import trio.lowlevel

from support.pool_fixtures import StoreAwareClock
from support.waiting import wait_until
from tether.bridge import CustodyState, SqliteStore, Task
from tether.bridge.custody import Claim, StaleLease
from tether.bridge.custody._rules import InvalidTask
from tether.bridge.pool import PoolWorker
from tether.bridge.runs._completions import CompletionBatcher

S = CustodyState
SLOW = 60.0
PROMPT = 0.5


@attrs.define(eq=False)
class RecordingStore:
    """A real store that records every ``complete_many`` (its size) and ``complete`` call, and
    can hold ``complete_many`` until ``release`` is set."""

    inner: SqliteStore
    many: list[int] = attrs.field(factory=list)
    single: list[str] = attrs.field(factory=list)
    hold: bool = False
    entered: trio.Event = attrs.field(factory=trio.Event)
    release: trio.Event = attrs.field(factory=trio.Event)

    async def complete_many(
        self, outcomes: Sequence[tuple[Claim, str]], *, no_send: bool = False
    ) -> list[bool]:
        self.many.append(len(outcomes))
        if self.hold:
            self.entered.set()
            await self.release.wait()
        return await self.inner.complete_many(outcomes, no_send=no_send)

    async def complete(self, claim: Claim, body: str, *, no_send: bool = False) -> None:
        self.single.append(claim.task.id)
        await self.inner.complete(claim, body, no_send=no_send)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


async def _counts(store: SqliteStore) -> dict[CustodyState, int]:
    return dict(await store.counts())


async def test_runs_answering_together_are_stored_with_one_complete_many(
    timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    gate = trio.Event()

    async def held(task: Task) -> str:
        await gate.wait()
        return f"done {task.id}"

    def factory(session: Any) -> None:
        session.add_handler("task", held)

    store = RecordingStore(timed_store, hold=True)  # the first commit waits for the test
    await timed_store.ingest_many([Task(f"t{i}", "x") for i in range(4)])
    await timed_store.assign_many([(f"t{i}", "w1") for i in range(4)])
    worker = PoolWorker(store, "w1", factory, concurrency=4, poll_interval=SLOW)  # type: ignore[arg-type]
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        await wait_until(lambda: _n(timed_store, S.CLAIMED, 4), within=PROMPT, step=0.01)
        gate.set()
        await store.entered.wait()

        async def all_answered() -> bool:
            return store.many[0] + worker.completions.queued == 4

        await wait_until(all_answered, within=PROMPT, step=0.01)
        assert await _n(timed_store, S.RESULT, 0)  # nothing counts as stored before its commit
        assert worker.counts.completed == 0
        store.hold = False
        store.release.set()
        await wait_until(lambda: _n(timed_store, S.RESULT, 4), within=PROMPT, step=0.01)

        async def counted() -> bool:  # the worker counts once its commit's answer reaches it
            return worker.counts.completed == 4

        await wait_until(counted, within=PROMPT, step=0.01)
        # the replies that answered while the first commit ran went in one more write
        assert sum(store.many) == 4
        assert len(store.many) <= 2
        assert store.single == []
        for i in range(4):
            record = await timed_store.get(f"t{i}")
            assert record is not None
            assert record.result == f"done t{i}"
        worker.request_stop()


async def _n(store: SqliteStore, state: CustodyState, n: int) -> bool:
    return (await store.counts())[state] == n


async def test_replies_finishing_during_a_commit_form_the_next_batch(
    timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    store = RecordingStore(timed_store, hold=True)
    await timed_store.ingest_many([Task(f"t{i}", "x") for i in range(4)])
    claims = await timed_store.claim_many("w1", 4, leaderless=True)
    batcher = CompletionBatcher(store)  # type: ignore[arg-type]
    async with trio.open_nursery() as nursery:
        await nursery.start(batcher.run)
        nursery.start_soon(batcher.complete, claims[0], "first")
        await store.entered.wait()  # the first reply's commit is in flight
        store.hold = False
        for claim in claims[1:]:
            nursery.start_soon(batcher.complete, claim, "later")
        await trio.sleep(1)
        assert await _n(timed_store, S.RESULT, 0)  # nothing acknowledged before its commit
        store.release.set()
        await wait_until(lambda: _n(timed_store, S.RESULT, 4), within=PROMPT, step=0.01)
        assert store.many == [1, 3]
        nursery.cancel_scope.cancel()


async def test_a_fenced_out_reply_fails_alone_and_the_rest_of_its_batch_is_stored(
    timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    store = RecordingStore(timed_store)
    await timed_store.ingest_many([Task(f"t{i}", "x") for i in range(3)])
    claims = await timed_store.claim_many("w1", 3, leaderless=True)
    await timed_store.release(claims[1])  # t1 is no longer this claim's: its fence fails
    batcher = CompletionBatcher(store)  # type: ignore[arg-type]
    outcomes: dict[str, BaseException | None] = {}

    async def complete(claim: Claim) -> None:
        try:
            await batcher.complete(claim, f"reply {claim.task.id}")
        except StaleLease as exc:
            outcomes[claim.task.id] = exc
        else:
            outcomes[claim.task.id] = None

    async with trio.open_nursery() as nursery:
        await nursery.start(batcher.run)
        async with trio.open_nursery() as calls:
            for claim in claims:
                calls.start_soon(complete, claim)
        nursery.cancel_scope.cancel()
    assert store.many == [3]
    assert store.single == ["t1"]  # asked alone, to name why
    assert outcomes["t0"] is None
    assert outcomes["t2"] is None
    assert isinstance(outcomes["t1"], StaleLease)
    counts = await _counts(timed_store)
    assert (counts[S.RESULT], counts[S.PENDING]) == (2, 1)


async def test_a_refused_body_fails_alone_and_the_rest_of_its_batch_is_stored(
    tmp_path: Any, mock_clock: StoreAwareClock
) -> None:
    inner = await SqliteStore.open(
        tmp_path / "small.db", clock=trio.current_time, max_body_bytes=64
    )
    try:
        store = RecordingStore(inner)
        await inner.ingest_many([Task(f"t{i}", "x") for i in range(3)])
        claims = await inner.claim_many("w1", 3, leaderless=True)
        batcher = CompletionBatcher(store)  # type: ignore[arg-type]
        refused: list[str] = []

        async def complete(claim: Claim, body: str) -> None:
            try:
                await batcher.complete(claim, body)
            except InvalidTask:
                refused.append(claim.task.id)

        async with trio.open_nursery() as nursery:
            await nursery.start(batcher.run)
            async with trio.open_nursery() as calls:
                calls.start_soon(complete, claims[0], "fine")
                calls.start_soon(complete, claims[1], "x" * 65)
                calls.start_soon(complete, claims[2], "fine too")
            nursery.cancel_scope.cancel()
        assert refused == ["t1"]
        counts = await _counts(inner)
        assert (counts[S.RESULT], counts[S.CLAIMED]) == (2, 1)
    finally:
        await inner.aclose()


async def test_a_reply_cancelled_before_its_batch_is_not_stored(
    timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    store = RecordingStore(timed_store, hold=True)
    await timed_store.ingest_many([Task(f"t{i}", "x") for i in range(2)])
    first, second = await timed_store.claim_many("w1", 2, leaderless=True)
    batcher = CompletionBatcher(store)  # type: ignore[arg-type]
    async with trio.open_nursery() as nursery:
        await nursery.start(batcher.run)
        nursery.start_soon(batcher.complete, first, "first")
        await store.entered.wait()
        with trio.move_on_after(1):  # queued behind the first commit, then given up
            await batcher.complete(second, "second")
        store.release.set()
        await wait_until(lambda: _n(timed_store, S.RESULT, 1), within=PROMPT, step=0.01)
        await trio.sleep(1)
        nursery.cancel_scope.cancel()
    assert store.many == [1]
    second_record = await timed_store.get("t1")
    assert second_record is not None
    assert second_record.state is S.CLAIMED


async def test_without_its_run_the_batcher_stores_directly(
    timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    store = RecordingStore(timed_store)
    await timed_store.ingest_many([Task("t0", "x")])
    [claim] = await timed_store.claim_many("w1", 1, leaderless=True)
    await CompletionBatcher(store).complete(claim, "direct")  # type: ignore[arg-type]
    assert (store.many, store.single) == ([], ["t0"])
    with pytest.raises(StaleLease):
        await CompletionBatcher(store).complete(claim, "again")  # type: ignore[arg-type]


async def test_a_reply_cancelled_while_its_batch_commits_still_learns_it_was_stored(
    timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    store = RecordingStore(timed_store, hold=True)
    await timed_store.ingest_many([Task("t0", "x")])
    [claim] = await timed_store.claim_many("w1", 1, leaderless=True)
    batcher = CompletionBatcher(store)  # type: ignore[arg-type]
    learned: list[str] = []
    caller = trio.CancelScope()

    async def complete() -> None:
        with caller:
            await batcher.complete(claim, "reply")
            learned.append("stored")  # the caller knows the outcome, then its cancel lands
            await trio.lowlevel.checkpoint()
            learned.append("unreachable")

    async with trio.open_nursery() as nursery:
        await nursery.start(batcher.run)
        nursery.start_soon(complete)
        await store.entered.wait()
        caller.cancel()  # a stop lands while the batch commits
        await trio.sleep(1)
        assert learned == []  # still waiting for the commit's answer
        store.release.set()
        await wait_until(lambda: _n(timed_store, S.RESULT, 1), within=PROMPT, step=0.01)
        await trio.sleep(0.1)
        nursery.cancel_scope.cancel()
    assert learned == ["stored"]
