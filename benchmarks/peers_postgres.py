"""PostgresStore beside PostgreSQL job queues: 2,000 no-op jobs drained by 8 concurrent workers.

Every side gets a fresh database on the same server (a throwaway one started for this run with
``fsync`` and ``synchronous_commit`` on, or ``TETHER_BENCH_PG_DSN``), the jobs are enqueued
before the clock starts, and the clock stops when the last job is durably done:

- **tether, one by one**: 8 Trio tasks, each ``claim`` -> ``complete`` per job (two commits).
- **tether, batched**: 8 Trio tasks, each ``claim_many(10)`` -> ``complete_many`` (two commits
  per 10 jobs, every completion still fenced on its own lease).
- **tether, batched, FULL**: the same with every commit synchronous (``--synchronous full``).
  The two above run tether's default, durable at promises: claims and completions promise
  nothing outside (the ingest, whose ack follows, and delivery's read wait for the flush), so
  they commit with ``synchronous_commit = off``.
- **pgqueuer**: at its fastest found here: the asyncpg driver (its docs' recommendation), one
  ``QueueManager``, ``batch_size=100``, a short ``dequeue_timeout`` (0.01 s), drain mode, and
  no ``concurrency_limit`` on the entrypoint (the jobs are no-ops: with ``concurrency_limit=8``
  it drained 65-72/s here, with none 446/s at ``batch_size=10`` and ~1,000/s at 100).
- **pgqueuer, 8 managers, psycopg**: the earlier setup (8 ``QueueManager`` instances on the
  psycopg driver, a connection each, its 30 s default ``dequeue_timeout``), for comparison.
- **procrastinate**: its recommended worker, one ``run_worker_async`` with ``concurrency=8``,
  ``wait=False`` (stops when empty).

Rounds rotate the order; medians, spreads and the per-round ratio tether (batched) / pgqueuer
(at its best) are printed. Bar (issue 39): >= 4x. Peers come from the optional ``bench`` group
(``uv sync --group bench``); a missing one is skipped with a line saying so.

    uv run python benchmarks/peers_postgres.py [--jobs 2000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import os
import secrets
import statistics
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import psycopg
import trio

from tether.bridge import PostgresStore, Task
from tether.bridge.stores.postgres._throwaway import NoPostgres, throwaway_postgres

WORKERS = 8
BATCH = 10
PGQUEUER_BATCH = 100


@contextlib.contextmanager
def server() -> Iterator[str]:
    given = os.environ.get("TETHER_BENCH_PG_DSN")
    if given:
        yield given
        return
    with throwaway_postgres(fsync=True) as pg:
        yield pg.dsn


def fresh_database(dsn: str) -> str:
    """A new empty database on the server of ``dsn``; its DSN."""
    name = f"bench_{secrets.token_hex(4)}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return psycopg.conninfo.make_conninfo(dsn, dbname=name)


def tether_side(dsn: str, jobs: int, *, batched: bool, mode: Any = "NORMAL") -> float:
    async def main() -> float:
        store = await PostgresStore.open(dsn, synchronous=mode)
        try:
            for start in range(0, jobs, 100):
                await store.ingest_many(
                    [Task(f"t{i}", "{}") for i in range(start, min(jobs, start + 100))]
                )

            async def worker(name: str) -> None:
                while True:
                    if batched:
                        claims = await store.claim_many(name, BATCH, leaderless=True)
                        if not claims:
                            return
                        done = await store.complete_many([(c, "") for c in claims])
                        assert all(done)
                    else:
                        claim = await store.claim(name, leaderless=True)
                        if claim is None:
                            return
                        await store.complete(claim, "")

            t0 = time.perf_counter()
            async with trio.open_nursery() as nursery:
                for k in range(WORKERS):
                    nursery.start_soon(worker, f"w{k}")
            elapsed = time.perf_counter() - t0
            counts = await store.counts()
            assert sum(counts.values()) == jobs, counts
            assert all(n == 0 for s, n in counts.items() if s.value != "result"), counts
            return elapsed
        finally:
            await store.aclose()

    return trio.run(main)


def pgqueuer_best_side(dsn: str, jobs: int) -> float:
    """pgqueuer at its fastest: asyncpg, one manager, big batches, a short dequeue timeout."""
    import asyncpg
    from pgqueuer import AsyncpgDriver, Queries, QueueManager
    from pgqueuer.types import QueueExecutionMode

    info = psycopg.conninfo.conninfo_to_dict(dsn)  # a libpq string: asyncpg takes keywords
    kwargs = {"host": info.get("host"), "port": info.get("port"), "user": info.get("user")}
    kwargs.update(password=info.get("password"), database=info.get("dbname"))

    async def main() -> float:
        admin = await asyncpg.connect(**kwargs)
        queries = Queries(AsyncpgDriver(admin))
        await queries.install()
        for start in range(0, jobs, 100):
            k = min(jobs, start + 100) - start
            await queries.enqueue(["noop"] * k, [None] * k, [0] * k)
        conn = await asyncpg.connect(**kwargs)
        qm = QueueManager(Queries(AsyncpgDriver(conn)))

        async def noop(job: Any) -> None:
            pass

        qm.entrypoint("noop")(noop)
        t0 = time.perf_counter()
        await qm.run(
            batch_size=PGQUEUER_BATCH,
            mode=QueueExecutionMode.drain,
            dequeue_timeout=timedelta(seconds=0.01),
        )
        elapsed = time.perf_counter() - t0
        left = await admin.fetchval("SELECT count(*) FROM pgqueuer")
        assert left == 0, left
        await conn.close()
        await admin.close()
        return elapsed

    return asyncio.run(main())


def pgqueuer_side(dsn: str, jobs: int) -> float:
    from pgqueuer import PsycopgDriver, Queries, QueueManager
    from pgqueuer.types import QueueExecutionMode

    async def main() -> float:
        admin = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
        queries = Queries(PsycopgDriver(admin))
        await queries.install()
        for start in range(0, jobs, 100):
            k = min(jobs, start + 100) - start
            await queries.enqueue(["noop"] * k, [None] * k, [0] * k)
        managers = []
        connections = []
        for _ in range(WORKERS):
            conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
            connections.append(conn)
            qm = QueueManager(Queries(PsycopgDriver(conn)))

            async def noop(job: Any) -> None:
                pass

            qm.entrypoint("noop")(noop)
            managers.append(qm)
        t0 = time.perf_counter()
        await asyncio.gather(
            *(qm.run(batch_size=BATCH, mode=QueueExecutionMode.drain) for qm in managers)
        )
        elapsed = time.perf_counter() - t0
        left = await (await admin.execute("SELECT count(*) FROM pgqueuer")).fetchone()
        assert left is not None
        assert left[0] == 0, left
        for conn in [*connections, admin]:
            await conn.close()
        return elapsed

    return asyncio.run(main())


def procrastinate_side(dsn: str, jobs: int) -> float:
    import procrastinate

    async def main() -> float:
        app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=dsn))

        async def run_noop() -> None:
            pass

        noop = app.task(name="noop")(run_noop)

        async with app.open_async():
            await app.schema_manager.apply_schema_async()
            for start in range(0, jobs, 100):
                k = min(jobs, start + 100) - start
                await noop.batch_defer_async(*([{}] * k))
            t0 = time.perf_counter()
            await app.run_worker_async(
                concurrency=WORKERS, wait=False, install_signal_handlers=False
            )
            return time.perf_counter() - t0

    return asyncio.run(main())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    sides: dict[str, Callable[[str, int], float]] = {
        "tether one by one": lambda dsn, n: tether_side(dsn, n, batched=False),
        "tether batched": lambda dsn, n: tether_side(dsn, n, batched=True),
        "tether batched FULL": lambda dsn, n: tether_side(dsn, n, batched=True, mode="FULL"),
    }
    print(
        f"tether: synchronous=NORMAL (durable at promises) unless FULL; pgqueuer: asyncpg, one "
        f"QueueManager, no concurrency_limit, batch_size={PGQUEUER_BATCH}, "
        f"dequeue_timeout=0.01 s; "
        f"pgqueuer 8x psycopg: {WORKERS} managers, batch_size={BATCH}, dequeue_timeout 30 s; "
        f"procrastinate: run_worker_async(concurrency={WORKERS}, wait=False)"
    )
    for name, module, side in (
        ("pgqueuer", "asyncpg", pgqueuer_best_side),
        ("pgqueuer 8x psycopg", "pgqueuer", pgqueuer_side),
        ("procrastinate", "procrastinate", procrastinate_side),
    ):
        if importlib.util.find_spec(module) is None:
            print(f"skipped {name}: not installed (uv sync --group bench)")
        else:
            sides[name] = side
    try:
        with server() as dsn:
            rates: dict[str, list[float]] = {name: [] for name in sides}
            ratios: list[float] = []
            full_ratios: list[float] = []
            order = list(sides)
            for r in range(args.rounds):
                this: dict[str, float] = {}
                for name in order[r % len(order) :] + order[: r % len(order)]:
                    this[name] = args.jobs / sides[name](fresh_database(dsn), args.jobs)
                    rates[name].append(this[name])
                if "pgqueuer" in this:
                    ratios.append(this["tether batched"] / this["pgqueuer"])
                    full_ratios.append(this["tether batched FULL"] / this["pgqueuer"])
                print(
                    f"round {r + 1}: " + "  ".join(f"{k} {v:,.0f}/s" for k, v in this.items()),
                    flush=True,
                )
    except NoPostgres as exc:
        print(f"skipped: {exc}; set TETHER_BENCH_PG_DSN to use a running server")
        return
    print(f"\n{args.jobs} no-op jobs, {WORKERS} workers, medians of {args.rounds} rounds:")
    for name, v in rates.items():
        print(f"  {name}: {statistics.median(v):,.0f}/s [{min(v):,.0f}-{max(v):,.0f}]")
    if ratios:
        print(
            f"  tether batched / pgqueuer: median {statistics.median(ratios):.2f}x "
            f"[{min(ratios):.2f}-{max(ratios):.2f}] (bar 4x)"
        )
        print(
            f"  tether batched FULL / pgqueuer: median {statistics.median(full_ratios):.2f}x "
            f"[{min(full_ratios):.2f}-{max(full_ratios):.2f}]"
        )


if __name__ == "__main__":
    main()
