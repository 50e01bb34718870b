"""Flow control (issue #38): what an acquire costs, and how close two processes keep to a rate,
beside pgqueuer's ``requests_per_second``.

- **acquire, plenty**: one run acquires and releases a permit of a key with tokens to spare,
  one after another (SQLite file; PostgreSQL): µs per acquire (the release timed apart).
- **acquire, contended**: 8 Trio tasks of one process acquire and release one key with a
  concurrency cap of 4 (they wait their turn as a run does): µs per granted acquire.
- **rate, 2 processes**: two processes, each with 4 runs that acquire (``Run.acquire``) a key
  of ``RATE``/s (burst ``BURST``) on one PostgreSQL for ``SECONDS``: the rate of grants across
  both, after the first second, against the limit.
- **pgqueuer, 2 processes**: pgqueuer's ``requests_per_second=RATE`` on one entrypoint, two
  processes each running a ``QueueManager`` (the asyncpg driver, as its docs recommend) over a
  queue of no-op jobs: jobs run per second after the first. pgqueuer 1.x dropped the option;
  this runs pgqueuer 0.18.10 (its last line with it) in its own environment (``uv run
  --no-project --with pgqueuer==0.18.10 --with asyncpg``).

Rounds interleave the sides; medians and spreads are printed with the settings. Goal: tether's
rate within 5% of the limit, at < 1 ms per acquire.

    TETHER_BENCH_PG_DSN=postgresql://... uv run python benchmarks/limits.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from peers_postgres import server

RATE = 100.0
BURST = 10.0
"""A tenth of a second of tokens: a bucket of 1 loses every moment no waiter is ready."""
SECONDS = 4.0
PLENTY_N = 1000
CONTENDED_N = 800
PGQUEUER = "pgqueuer==0.18.10"
START_AFTER = 8.0


async def _claimed(store: Any, n: int = 1) -> list[Any]:
    from tether.bridge import Task

    ids = [f"t{secrets.token_hex(6)}" for _ in range(n)]
    await store.ingest_many([Task(id, "x") for id in ids])
    claims = list(await store.claim_many(f"w{secrets.token_hex(3)}", n, leaderless=True))
    assert len(claims) == n
    return claims


async def acquire_cost(store: Any) -> dict[str, float]:
    """µs per acquire: plenty (one run, one after another) and contended (8 runs, cap 4)."""
    from tether.bridge.custody import Granted, LimitSpec, NoPermit

    await store.set_limit(LimitSpec("plenty", rate=1e9, burst=1e9))
    [claim] = await _claimed(store)
    spent = released = 0.0
    for _ in range(PLENTY_N):
        t0 = time.perf_counter()
        got = await store.acquire_permit(claim, "plenty")
        t1 = time.perf_counter()
        assert isinstance(got, Granted)
        assert got.permit is not None
        await store.release_permit(got.permit)
        spent, released = spent + t1 - t0, released + time.perf_counter() - t1
    import trio

    await store.set_limit(LimitSpec("contended", concurrency=4))
    claims = await _claimed(store, 8)
    granted = 0

    async def one(claim: Any) -> None:
        nonlocal granted
        while granted < CONTENDED_N:
            got = await store.acquire_permit(claim, "contended")
            if isinstance(got, NoPermit):
                await trio.lowlevel.checkpoint()
                continue
            granted += 1
            assert got.permit is not None
            await store.release_permit(got.permit)

    t0 = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for c in claims:
            nursery.start_soon(one, c)
    contended = (time.perf_counter() - t0) / granted
    return {
        "plenty_us": spent / PLENTY_N * 1e6,
        "release_us": released / PLENTY_N * 1e6,
        "contended_us": contended * 1e6,
    }


def tether_cost(target: str, schema: str | None) -> dict[str, float]:
    import trio

    from tether.bridge import PostgresStore, SqliteStore

    async def main() -> dict[str, float]:
        if schema is None:
            store: Any = await SqliteStore.open(target)
        else:
            store = await PostgresStore.open(target, schema=schema)
        try:
            return await acquire_cost(store)
        finally:
            await store.aclose()

    return trio.run(main)


def tether_rate_child(dsn: str, schema: str, start: float, out: Path) -> None:
    """One process of the rate side: 4 runs acquiring ``rate`` until ``start + SECONDS``."""
    import trio

    from tether.bridge import PostgresStore
    from tether.bridge.runs import run_for

    async def main() -> None:
        store = await PostgresStore.open(dsn, schema=schema)
        grants: list[float] = []
        try:
            claims = await _claimed(store, 4)
            late = time.time() > start
            await trio.sleep(max(0.0, start - time.time()))

            async def one(claim: Any) -> None:
                run = run_for(claim, store)
                while time.time() < start + SECONDS:
                    permit = await run.acquire("rate")
                    grants.append(time.time())
                    await permit.release()

            async with trio.open_nursery() as nursery:
                for c in claims:
                    nursery.start_soon(one, c)
        finally:
            await store.aclose()
        await trio.Path(out).write_text(json.dumps([late, grants]))

    trio.run(main)


def pgqueuer_child(dsn: str, start: float, out: Path) -> None:
    """One process of pgqueuer's side: a QueueManager with ``requests_per_second=RATE``."""
    from datetime import timedelta

    import asyncpg
    from pgqueuer.db import AsyncpgDriver
    from pgqueuer.qm import QueueManager

    async def main() -> None:
        conn = await asyncpg.connect(dsn)
        qm = QueueManager(AsyncpgDriver(conn))
        ran: list[float] = []

        @qm.entrypoint("call", requests_per_second=RATE)  # type: ignore[untyped-decorator]
        async def call(job: Any) -> None:
            ran.append(time.time())

        late = time.time() > start
        await asyncio.sleep(max(0.0, start - time.time()))
        loop = asyncio.get_running_loop()
        loop.call_later(SECONDS, qm.shutdown.set)
        await qm.run(dequeue_timeout=timedelta(seconds=0.05))
        await conn.close()
        await asyncio.to_thread(out.write_text, json.dumps([late, ran]))

    asyncio.run(main())


def pgqueuer_setup(dsn: str, jobs: int) -> None:
    import asyncpg
    from pgqueuer.db import AsyncpgDriver
    from pgqueuer.queries import Queries

    async def main() -> None:
        conn = await asyncpg.connect(dsn)
        queries = Queries(AsyncpgDriver(conn))
        with contextlib.suppress(Exception):
            await queries.uninstall()
        await queries.install()
        for at in range(0, jobs, 500):
            k = min(jobs, at + 500) - at
            await queries.enqueue(["call"] * k, [None] * k, [0] * k)
        await conn.close()

    asyncio.run(main())


def rate_of(grants: list[float], start: float) -> float:
    """Grants a second in the window both processes ran in, after its first second (the burst
    and the start-up)."""
    low, high = start + 1.0, start + SECONDS
    return sum(1 for t in grants if low <= t < high) / (high - low)


def two_processes(command: list[str], tail: list[str], folder: Path) -> tuple[float, list[float]]:
    """Both children wait until one start time (late enough for both to be up and connected
    on a loaded machine); a child that was not ready by then fails the round."""
    start = time.time() + START_AFTER
    outs = [folder / f"grants-{k}-{secrets.token_hex(3)}.json" for k in (1, 2)]
    children = [
        subprocess.Popen([*command, *tail, str(start), str(out)], env={**os.environ})
        for out in outs
    ]
    for child in children:
        if child.wait(timeout=120) != 0:
            raise RuntimeError(f"a child failed: {command}")
    grants: list[float] = []
    for out in outs:
        late, mine = json.loads(out.read_text())
        if late:
            raise RuntimeError(f"a child was not ready {START_AFTER:g} s after it started")
        grants += mine
    return start, grants


def fresh_database(dsn: str) -> str:
    import psycopg

    name = f"bench_{secrets.token_hex(4)}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return psycopg.conninfo.make_conninfo(dsn, dbname=name)


def as_url(dsn: str) -> str:
    """A libpq DSN as the URL asyncpg takes."""
    import psycopg

    p = psycopg.conninfo.conninfo_to_dict(dsn)
    auth = f"{p.get('user', '')}:{p.get('password', '')}@" if p.get("user") else ""
    return f"postgresql://{auth}{p.get('host', '127.0.0.1')}:{p.get('port', 5432)}/{p['dbname']}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, *rest = args.child
        if kind == "tether":
            dsn, schema, start, out = rest
            tether_rate_child(dsn, schema, float(start), Path(out))
        elif kind == "pgqueuer":
            dsn, start, out = rest
            pgqueuer_child(dsn, float(start), Path(out))
        else:
            pgqueuer_setup(rest[0], int(rest[1]))
        return
    import psycopg

    from tether.bridge.custody import LimitSpec

    pgq = ["uv", "run", "--no-project", "-q", "--with", PGQUEUER, "--with", "asyncpg", "python"]
    me = [sys.executable, __file__, "--child"]
    print(
        f"settings: rate {RATE:g}/s (burst {BURST:g}), {SECONDS:g} s a side, "
        "2 processes x 4 runs (tether);"
        f" plenty: {PLENTY_N} acquires one after another; contended: 8 runs, cap 4, "
        f"{CONTENDED_N} grants; pgqueuer {PGQUEUER.split('==')[1]} asyncpg, "
        f"requests_per_second={RATE:g}, dequeue_timeout 0.05 s; rounds {args.rounds}"
    )
    results: dict[str, list[float]] = {}
    with server() as dsn, tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        print(f"postgres: {psycopg.conninfo.conninfo_to_dict(dsn).get('host')}")
        for round_no in range(args.rounds):
            sides = ["cost sqlite", "cost postgres", "rate tether", "rate pgqueuer"]
            shift = round_no % len(sides)
            for side in sides[shift:] + sides[:shift]:
                if side == "cost sqlite":
                    got = tether_cost(str(folder / f"c{round_no}.db"), None)
                    for k, v in got.items():
                        results.setdefault(f"sqlite {k}", []).append(v)
                elif side == "cost postgres":
                    got = tether_cost(dsn, f"cost_{secrets.token_hex(4)}")
                    for k, v in got.items():
                        results.setdefault(f"postgres {k}", []).append(v)
                elif side == "rate tether":
                    schema = f"rate_{secrets.token_hex(4)}"
                    import trio

                    from tether.bridge import PostgresStore

                    async def declare(schema: str = schema) -> None:
                        async with await PostgresStore.open(dsn, schema=schema) as store:
                            await store.set_limit(LimitSpec("rate", rate=RATE, burst=BURST))

                    trio.run(declare)
                    start, grants = two_processes(me, ["tether", dsn, schema], folder)
                    results.setdefault("tether rate/limit", []).append(
                        rate_of(grants, start) / RATE
                    )
                else:
                    db = as_url(fresh_database(dsn))
                    jobs = int(RATE * SECONDS * 3)
                    subprocess.run([*pgq, __file__, "--child", "setup", db, str(jobs)], check=True)
                    child = [*pgq, __file__, "--child"]
                    start, grants = two_processes(child, ["pgqueuer", db], folder)
                    results.setdefault("pgqueuer rate/limit", []).append(
                        rate_of(grants, start) / RATE
                    )
    for name, values in results.items():
        median = statistics.median(values)
        print(f"{name:28} median {median:10.3f}  spread {min(values):.3f} .. {max(values):.3f}")


if __name__ == "__main__":
    main()
