"""A stop that ends a worker's completion batcher and its runs together cancels the runs: the
batcher's ending (which wakes its callers) never turns a cut-off run into an error."""

from __future__ import annotations

import trio

from tether.bridge import CustodyState, SqliteStore, Task
from tether.bridge.runs._completions import CompletionBatcher

from .test_completion_batching import RecordingStore


async def test_a_run_stopped_with_its_batcher_mid_commit_is_cancelled_not_failed(
    timed_store: SqliteStore,
) -> None:
    await timed_store.ingest(Task("t", "x"))
    claim = await timed_store.claim("w1", leaderless=True)
    assert claim is not None
    store = RecordingStore(timed_store, hold=True)  # its complete_many waits (cancellably)
    batcher = CompletionBatcher(store)  # type: ignore[arg-type]
    outcome: list[type[BaseException]] = []

    async def run() -> None:
        try:
            await batcher.complete(claim, "reply")
        except BaseException as exc:
            outcome.append(type(exc))
            raise

    with trio.CancelScope() as stop:
        async with trio.open_nursery() as nursery:
            await nursery.start(batcher.run)
            nursery.start_soon(run)
            await store.entered.wait()  # the reply is in a batch being stored
            stop.cancel()  # a hard stop: the batcher and the run end together
    assert outcome == [trio.Cancelled]
    assert await timed_store.state("t") == CustodyState.CLAIMED  # not stored: its lease runs out
