"""Tasks per second through the whole custody path: ingest -> assign -> claim -> complete ->
deliver, 20k tasks, every transition durable (``synchronous=FULL``), against the same path with
one commit per transition (fewer tasks: it is slow), and against the same path without the
custody journal (its triggers dropped: what the journal costs). Rounds interleaved, medians
reported.

Each of ``LANES`` concurrent lanes plays gateway, lead, worker and delivery for one task at a
time (``WORKERS`` worker names), so many lanes' transitions share each commit, as they would
when a bridge runs its services concurrently.
"""

from __future__ import annotations

import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

import trio

from tether.bridge import CustodyState, SqliteStore, Task

TASKS = 20_000
BASELINE_TASKS = 1_000
LANES = 256
WORKERS = 8
ROUNDS = 3


def drop_journal(db: Path) -> None:
    """Create the store at ``db`` and drop its journal triggers (the journal-free baseline)."""
    trio.run(_create, db)
    with sqlite3.connect(db) as conn:
        for trigger in ("journal_ingest", "journal_move", "journal_prune"):
            conn.execute(f"DROP TRIGGER {trigger}")


async def _create(db: Path) -> None:
    await (await SqliteStore.open(db)).aclose()


async def pipeline(db: Path, n: int, max_batch: int) -> float:
    store = await SqliteStore.open(db, max_batch=max_batch)
    try:
        ids = iter(range(n))

        async def lane(k: int) -> None:
            worker = f"w{k % WORKERS}"
            for i in ids:
                await store.ingest(
                    Task(f"t{i}", f"message {i}", room=f"room-{i % 50}"), room_policy="concurrent"
                )
                await store.assign(f"t{i}", worker)
                # every claim of this worker follows one of its assignments, so there is one
                claim = await store.claim(worker)
                assert claim is not None
                await store.complete(claim, f"reply to {claim.task.body}")
                await store.mark_delivered(claim.task.id)

        start = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for k in range(LANES):
                nursery.start_soon(lane, k)
        elapsed = time.perf_counter() - start
        assert (await store.counts())[CustodyState.DELIVERED] == n
    finally:
        await store.aclose()
    return n / elapsed


async def main() -> None:
    group: list[float] = []
    single: list[float] = []
    bare: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(ROUNDS):
            group.append(await pipeline(Path(tmp, f"g{r}.db"), TASKS, 512))
            single.append(await pipeline(Path(tmp, f"s{r}.db"), BASELINE_TASKS, 1))
            await trio.to_thread.run_sync(drop_journal, Path(tmp, f"n{r}.db"))
            bare.append(await pipeline(Path(tmp, f"n{r}.db"), TASKS, 512))
            print(
                f"round {r + 1}: {group[-1]:,.0f} tasks/s  (one commit each: {single[-1]:,.0f}; "
                f"without the journal: {bare[-1]:,.0f})"
            )
    g, s, b = statistics.median(group), statistics.median(single), statistics.median(bare)
    print(
        f"ingest->assign->claim->complete->deliver, {TASKS:,} tasks: {g:,.0f} tasks/s "
        f"= {5 * g:,.0f} durable transitions/s (median of {ROUNDS})"
    )
    print(f"same path, one commit per transition: {s:,.0f} tasks/s; ratio {g / s:.1f}x")
    print(
        f"same path without the custody journal: {b:,.0f} tasks/s; the journal costs "
        f"{100 * (1 - g / b):.1f}% of the rate (per round: "
        f"{', '.join(f'{100 * (1 - x / y):.1f}%' for x, y in zip(group, bare, strict=True))})"
    )


if __name__ == "__main__":
    trio.run(main)
