"""PostgresStore beside PostgreSQL job queues: 10,000 no-op jobs drained by 8 concurrent workers.

Every side gets a fresh database on the same server (a throwaway one started for this run with
``fsync`` and ``synchronous_commit`` on, or ``TETHER_BENCH_PG_DSN``), the jobs are enqueued
before the clock starts, and the clock stops when the last job is durably done:

- **tether, one by one**: 8 Trio tasks, each ``claim`` -> ``complete`` per job (two commits).
- **tether, batched 10** and **batched 100**: 8 Trio tasks, each ``claim_many(n)`` ->
  ``complete_many`` (two commits per n jobs, every claim a fenced lease, every completion
  fenced on its own lease, every move journaled). The batch is tether's setting as
  ``batch_size`` is pgqueuer's: batched 100 is the mirror of pgqueuer at 100.
- **tether, batched 100, FULL**: the same with every commit synchronous (``--synchronous
  full``). The two above run tether's default, durable at promises: claims and completions
  promise nothing outside (the ingest, whose ack follows, and delivery's read wait for the
  flush), so they commit with ``synchronous_commit = off``.
- **pgqueuer**: at its fastest found here: the asyncpg driver (its docs' recommendation), one
  ``QueueManager``, ``batch_size=100``, a short ``dequeue_timeout`` (0.01 s), drain mode, and
  no ``concurrency_limit`` on the entrypoint (the jobs are no-ops: with ``concurrency_limit=8``
  it drained 65-72/s here, with none 446/s at ``batch_size=10`` and ~1,000/s at 100).
- **pgqueuer, 8 managers, psycopg**: the earlier setup (8 ``QueueManager`` instances on the
  psycopg driver, a connection each, its 30 s default ``dequeue_timeout``), for comparison.
- **procrastinate**: its recommended worker, one ``run_worker_async`` with ``concurrency=8``,
  ``wait=False`` (stops when empty).

What pgqueuer does per job, for reading the ratio: one statement claims a batch (and logs the
picks); completions wait in a buffer in memory (up to ``batch_size`` of them or 0.1 s) and one
statement then deletes the jobs and logs them, fenced by nothing (a worker whose job was taken
over still deletes it); a crash loses the buffered completions, whose jobs run again after the
heartbeat timeout. No result is kept.

Rounds rotate the order; medians, spreads and the per-round ratios tether / pgqueuer (at its
best) are printed. Bar (issue 39): >= 4x. Peers come from the optional ``bench`` group
(``uv sync --group bench``); a missing one is skipped with a line saying so.

    uv run python benchmarks/peers_postgres.py [--jobs 10000] [--rounds 3] [--only a,b]
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
from typing import Any, TypeVar

import psycopg
import trio

from tether.bridge import PostgresStore, Task
from tether.bridge.stores.postgres._throwaway import NoPostgres, throwaway_postgres

S = TypeVar("S")
T = TypeVar("T")

WORKERS = 8
BATCH = 10
"""pgqueuer's batch in its earlier setup (8 managers, psycopg)."""
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


def tether_side(
    dsn: str, jobs: int, *, batched: bool, mode: Any = "NORMAL", batch: int = BATCH
) -> float:
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
                        claims = await store.claim_many(name, batch, leaderless=True)
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
    return pgqueuer_best_drain(dsn, jobs, time.perf_counter, lambda t0: time.perf_counter() - t0)


def pgqueuer_best_drain(dsn: str, jobs: int, start: Callable[[], S], stop: Callable[[S], T]) -> T:
    """``jobs`` no-op jobs enqueued, then drained by pgqueuer at its fastest; ``stop(start())``
    around the drain alone (what a caller measures: seconds, CPU), checked empty after."""
    import asyncpg
    from pgqueuer import AsyncpgDriver, Queries, QueueManager
    from pgqueuer.types import QueueExecutionMode

    info = psycopg.conninfo.conninfo_to_dict(dsn)  # a libpq string: asyncpg takes keywords
    kwargs = {"host": info.get("host"), "port": info.get("port"), "user": info.get("user")}
    kwargs.update(password=info.get("password"), database=info.get("dbname"))

    async def main() -> T:
        admin = await asyncpg.connect(**kwargs)
        queries = Queries(AsyncpgDriver(admin))
        await queries.install()
        for start_at in range(0, jobs, 100):
            k = min(jobs, start_at + 100) - start_at
            await queries.enqueue(["noop"] * k, [None] * k, [0] * k)
        conn = await asyncpg.connect(**kwargs)
        qm = QueueManager(Queries(AsyncpgDriver(conn)))

        async def noop(job: Any) -> None:
            pass

        qm.entrypoint("noop")(noop)
        began = start()
        await qm.run(
            batch_size=PGQUEUER_BATCH,
            mode=QueueExecutionMode.drain,
            dequeue_timeout=timedelta(seconds=0.01),
        )
        measured = stop(began)
        left = await admin.fetchval("SELECT count(*) FROM pgqueuer")
        assert left == 0, left
        await conn.close()
        await admin.close()
        return measured

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
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--only",
        default="",
        help="comma-separated sides to run (default: all; procrastinate, at ~140/s here, "
        "takes 70 s a round of 10,000 jobs)",
    )
    args = parser.parse_args()
    big = PGQUEUER_BATCH
    sides: dict[str, Callable[[str, int], float]] = {
        "tether one by one": lambda dsn, n: tether_side(dsn, n, batched=False),
        f"tether batched {BATCH}": lambda dsn, n: tether_side(dsn, n, batched=True),
        f"tether batched {big}": lambda dsn, n: tether_side(dsn, n, batched=True, batch=big),
        f"tether batched {big} FULL": lambda dsn, n: tether_side(
            dsn, n, batched=True, batch=big, mode="FULL"
        ),
    }
    ratio_of = [f"tether batched {BATCH}", f"tether batched {big}", f"tether batched {big} FULL"]
    print(
        f"tether: {WORKERS} workers, claim_many(n) -> complete_many, synchronous=NORMAL (durable "
        f"at promises) unless FULL; pgqueuer: asyncpg, one "
        f"QueueManager, no concurrency_limit, batch_size={PGQUEUER_BATCH}, "
        f"dequeue_timeout=0.01 s, drain mode, server synchronous_commit on; "
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
    if args.only:
        wanted = [name.strip() for name in args.only.split(",")]
        unknown = [name for name in wanted if name not in sides]
        if unknown:
            parser.error(f"--only: no side named {unknown[0]!r}; the sides: {', '.join(sides)}")
        sides = {name: side for name, side in sides.items() if name in wanted}
        ratio_of = [name for name in ratio_of if name in sides]
    try:
        with server() as dsn:
            rates: dict[str, list[float]] = {name: [] for name in sides}
            ratios: dict[str, list[float]] = {name: [] for name in ratio_of}
            order = list(sides)
            for r in range(args.rounds):
                this: dict[str, float] = {}
                for name in order[r % len(order) :] + order[: r % len(order)]:
                    this[name] = args.jobs / sides[name](fresh_database(dsn), args.jobs)
                    rates[name].append(this[name])
                shown = "  ".join(f"{k} {v:,.0f}/s" for k, v in this.items())
                if "pgqueuer" in this:
                    for name in ratio_of:
                        ratios[name].append(this[name] / this["pgqueuer"])
                    shown += "  ratios to pgqueuer: " + " ".join(
                        f"{ratios[name][-1]:.2f}x" for name in ratio_of
                    )
                print(f"round {r + 1}: {shown}", flush=True)
    except NoPostgres as exc:
        print(f"skipped: {exc}; set TETHER_BENCH_PG_DSN to use a running server")
        return
    print(f"\n{args.jobs} no-op jobs, {WORKERS} workers, medians of {args.rounds} rounds:")
    for name, v in rates.items():
        print(f"  {name}: {statistics.median(v):,.0f}/s [{min(v):,.0f}-{max(v):,.0f}]")
    for name, v in ratios.items():
        if v:
            print(
                f"  {name} / pgqueuer: median {statistics.median(v):.2f}x "
                f"[{min(v):.2f}-{max(v):.2f}] (bar 4x)"
            )


if __name__ == "__main__":
    main()
