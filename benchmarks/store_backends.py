"""SqliteStore vs PostgresStore, same run: tasks per second through ingest -> claim -> complete
-> deliver with 1 and 8 workers, and what a ``trio.to_thread`` hop costs PostgresStore.

A feeder ingests gateway batches (``ingest_many``, BATCH tasks per commit), WORKERS worker tasks
claim (leaderless), complete and go back for more, and one delivery task marks ready results
delivered; the clock stops when every task is delivered. Both stores are durable: SQLite
``synchronous=FULL``, PostgreSQL with ``fsync`` and ``synchronous_commit`` on (a throwaway
server started for this run, or ``TETHER_BENCH_PG_DSN``). Rounds interleave the backends;
medians are reported.

Usage: python benchmarks/store_backends.py [--tasks N] [--rounds R]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import psycopg
import trio

from tether.bridge import CustodyState, PostgresStore, SqliteStore, Task
from tether.bridge.custody import Store
from tether.bridge.stores.postgres._throwaway import NoPostgres, throwaway_postgres

BATCH = 20


async def pipeline(store: Store, tasks: int, workers: int) -> float:
    """Tasks per second through the whole path on ``store``."""
    delivered = 0
    all_fed = trio.Event()

    async def feeder() -> None:
        for start in range(0, tasks, BATCH):
            batch = [Task(f"t{i}", f"message {i}") for i in range(start, min(tasks, start + BATCH))]
            await store.ingest_many(batch)
        all_fed.set()

    async def idle() -> None:
        # PostgreSQL wakes idle workers with LISTEN/NOTIFY; SQLite is in-process: poll soon
        if isinstance(store, PostgresStore):
            await store.wait_for_work(0.05)
        else:
            await trio.sleep(0.002)

    async def worker(name: str) -> None:
        while delivered < tasks:
            claim = await store.claim(name, leaderless=True)
            if claim is None:
                await idle()
                continue
            await store.complete(claim, f"reply to {claim.task.body}")

    async def delivery() -> None:
        nonlocal delivered
        while delivered < tasks:
            ready = await store.ready_results(limit=100)
            if not ready:
                if isinstance(store, PostgresStore):
                    await store.wait_for_results(0.05)
                else:
                    await trio.sleep(0.002)
            for result in ready:
                await store.mark_delivered(result.task.id)
                delivered += 1

    start = time.perf_counter()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(feeder)
        for k in range(workers):
            nursery.start_soon(worker, f"w{k}")
        nursery.start_soon(delivery)
    elapsed = time.perf_counter() - start
    assert (await store.counts())[CustodyState.DELIVERED] == tasks
    return tasks / elapsed


async def hop_costs(dsn: str, n: int = 2000) -> dict[str, float]:
    """Microseconds per call: a bare thread hop, SELECT 1 without a hop, SELECT 1 with one."""

    def noop() -> None:
        pass

    start = time.perf_counter()
    for _ in range(n):
        await trio.to_thread.run_sync(noop)
    hop = (time.perf_counter() - start) / n * 1e6

    def direct() -> float:
        with psycopg.connect(dsn, autocommit=True) as conn:
            t0 = time.perf_counter()
            for _ in range(n):
                conn.execute("SELECT 1").fetchone()
            return (time.perf_counter() - t0) / n * 1e6

    query = await trio.to_thread.run_sync(direct)
    store = await PostgresStore.open(dsn, schema=f"bench_hop_{secrets.token_hex(4)}")
    try:
        start = time.perf_counter()
        for _ in range(n):
            await store.db.run(lambda conn: conn.execute("SELECT 1").fetchone())
        via_store = (time.perf_counter() - start) / n * 1e6
    finally:
        await store.aclose()
    return {"hop": hop, "query": query, "via_store": via_store}


@contextlib.contextmanager
def postgres() -> Iterator[str]:
    given = os.environ.get("TETHER_BENCH_PG_DSN")
    if given:
        yield given
        return
    with throwaway_postgres(fsync=True) as server:
        yield server.dsn


async def main(tasks: int, rounds: int) -> None:
    with postgres() as dsn, tempfile.TemporaryDirectory() as tmp:
        openers: dict[str, Callable[[str], Awaitable[Store]]] = {
            "sqlite": lambda tag: SqliteStore.open(Path(tmp, f"{tag}.db")),
            "postgres": lambda tag: PostgresStore.open(dsn, schema=f"bench_{tag}"),
        }
        figures: dict[tuple[str, int], list[float]] = {}
        for r in range(rounds):
            for workers in (1, 8):
                for name, opener in openers.items():
                    store = await opener(f"r{r}_w{workers}")
                    try:
                        rate = await pipeline(store, tasks, workers)
                    finally:
                        await store.aclose()
                    figures.setdefault((name, workers), []).append(rate)
                    print(f"round {r + 1}, {workers} worker(s), {name}: {rate:,.0f} tasks/s")
        costs = await hop_costs(dsn)
    print(f"\ningest -> claim -> complete -> deliver, {tasks:,} tasks, median of {rounds}:")
    for workers in (1, 8):
        lite = statistics.median(figures["sqlite", workers])
        pg = statistics.median(figures["postgres", workers])
        print(
            f"  {workers} worker(s): SQLite {lite:,.0f} tasks/s, PostgreSQL {pg:,.0f} tasks/s "
            f"(PostgreSQL/SQLite = {pg / lite:.2f}x)"
        )
    share = costs["hop"] / costs["via_store"]
    print(
        f"trio.to_thread hop: {costs['hop']:.0f} us; SELECT 1 on a connection: "
        f"{costs['query']:.0f} us; SELECT 1 through PostgresStore (hop + pool + query): "
        f"{costs['via_store']:.0f} us (the hop is {share:.0%} of it)"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    try:
        trio.run(main, args.tasks, args.rounds)
    except NoPostgres as exc:
        print(f"skipped: {exc}; set TETHER_BENCH_PG_DSN to use a running server")
