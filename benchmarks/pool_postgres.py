"""tether's pool on PostgreSQL as users run it, beside pgqueuer at its best (issue 50).

A fresh database per side and round on one server (a throwaway one started for this run with
``fsync`` and ``synchronous_commit`` on, or ``TETHER_BENCH_PG_DSN``); ``--jobs`` no-op jobs are
enqueued before the clock starts. The sides:

- **tether pool**: an embedded ``WorkerService`` exactly as a user builds one:
  ``WorkerConfig(store=<url>, store_password_file=<file>)`` with every other setting at its
  default (4 workers x 4, a lead, adaptive capacity, NOTIFY wake-ups), the bundled ``noop``
  agent. The clock runs from the service's start until every job's result is stored (state
  ``result``, counted in the store every ``POLL`` s).
- **tether claim_many(100)**: the store's own batches by hand, 8 Trio tasks each
  ``claim_many(100)`` -> ``complete_many``: the floor the pool's machinery sits on.
- **pgqueuer**: at its fastest found here (``peers_postgres.py``): asyncpg, one
  ``QueueManager``, ``batch_size=100``, ``dequeue_timeout`` 0.01 s, drain mode, no
  ``concurrency_limit``.

Server CPU per job is the CPU time of the server's processes (the postmaster, its live children
and the children it reaped, from ``/proc``) over the drain, divided by the jobs; the server must
run on this machine. After each tether round the store is checked: every job in state
``result`` and journaled into it exactly once.

``--statements`` runs the server with ``pg_stat_statements`` (a throwaway server only) and
prints, for the tether pool, each statement's calls per job and its share of the server's
execution time: what the pool's default path runs per job.

    uv run --group bench python benchmarks/pool_postgres.py [--jobs 2000] [--rounds 3]
        [--only "tether pool,pgqueuer"] [--statements]
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import attrs
import psycopg
import trio
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from _pg_cpu import postmaster_pid, server_cpu
from peers_postgres import PGQUEUER_BATCH, fresh_database, pgqueuer_best_drain
from tether.agents import noop
from tether.bridge import CustodyState, PostgresStore, Task, WorkerConfig, WorkerService
from tether.bridge.stores.postgres._throwaway import NoPostgres, throwaway_postgres

POLL = 0.02
"""Seconds between the tether pool side's looks at the store for the last result (each look
is a statement on the server: 50 a second at most)."""
BATCH = PGQUEUER_BATCH
"""The by-hand side's claim: the mirror of pgqueuer's batch."""
BY_HAND_TASKS = 8


@attrs.frozen
class Drain:
    seconds: float
    server_cpu: float
    """Seconds of server CPU over the drain."""
    client_cpu: float
    """Seconds of this process's CPU (every thread) over the drain."""


@attrs.frozen
class Started:
    """The clocks as a drain starts: ``Started.now(postmaster).drain()`` as it ends."""

    postmaster: int
    seconds: float
    server_cpu: float
    client_cpu: float

    @classmethod
    def now(cls, postmaster: int) -> Started:
        return cls(postmaster, time.perf_counter(), server_cpu(postmaster), time.process_time())

    def drain(self) -> Drain:
        return Drain(
            time.perf_counter() - self.seconds,
            server_cpu(self.postmaster) - self.server_cpu,
            time.process_time() - self.client_cpu,
        )


# -- the server --------------------------------------------------------------------------------


@contextlib.contextmanager
def server(statements: bool) -> Iterator[str]:
    given = os.environ.get("TETHER_BENCH_PG_DSN")
    if given:
        if statements:
            raise SystemExit("--statements needs a throwaway server (unset TETHER_BENCH_PG_DSN)")
        yield given
        return
    counting = {
        "shared_preload_libraries": "pg_stat_statements",
        "pg_stat_statements.track_planning": "on",
        "pg_stat_statements.track": "all",  # the triggers' statements too
    }
    with throwaway_postgres(fsync=True, settings=counting if statements else None) as pg:
        yield pg.dsn


# -- the sides ---------------------------------------------------------------------------------


async def _ingest(store: PostgresStore, jobs: int) -> None:
    for start in range(0, jobs, 100):
        await store.ingest_many([Task(f"t{i}", "{}") for i in range(start, min(jobs, start + 100))])


async def _check_every_job_done_once(store: PostgresStore, jobs: int) -> None:
    counts = await store.counts()
    assert sum(counts.values()) == jobs, counts
    assert all(n == 0 for s, n in counts.items() if s.value != "result"), counts


async def _every_result_stored(store: PostgresStore, jobs: int) -> None:
    """Return once ``jobs`` results are stored: a look every ``POLL`` s (a statement each)."""
    while True:
        if (await store.counts()).get(CustodyState.RESULT, 0) >= jobs:
            return
        await trio.sleep(POLL)


def _check_journal(dsn: str, jobs: int) -> None:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT count(*), count(DISTINCT id) FROM tether.journal WHERE dst = 'result'"
        ).fetchone()
    assert row == (jobs, jobs), f"results journaled {row}, jobs {jobs}"


def _tether_drain(dsn: str, jobs: int, drain: Callable[[PostgresStore], Awaitable[Drain]]) -> Drain:
    """``jobs`` jobs ingested, then ``drain(store)``; then every job checked done once (its
    state, and its result journaled once)."""

    async def main() -> Drain:
        store = await PostgresStore.open(dsn)
        try:
            await _ingest(store, jobs)
            drained = await drain(store)
            await _check_every_job_done_once(store, jobs)
            return drained
        finally:
            await store.aclose()

    drained = trio.run(main)
    _check_journal(dsn, jobs)
    return drained


def tether_pool_side(
    dsn: str,
    jobs: int,
    postmaster: int,
    settings: list[str],
    before_clock: Callable[[], None] | None = None,
) -> Drain:
    info = conninfo_to_dict(dsn)
    password = str(info.pop("password"))
    url = make_conninfo("", **info)  # the store setting never holds a password

    async def drain(store: PostgresStore) -> Drain:
        with tempfile.TemporaryDirectory() as tmp:
            secret = Path(tmp) / "pg-password"
            secret.write_text(password + "\n")
            secret.chmod(0o600)
            config = WorkerConfig(
                store=url,
                store_password_file=secret,
                log_level="WARNING",
                status_file=Path(tmp) / "status.json",
                admin_token_file=Path(tmp) / "admin-token",
            )
            if not settings:
                settings.append(
                    f"WorkerService defaults: {config.workers} workers x "
                    f"{config.concurrency}, lead={config.lead}, capacity={config.capacity}, "
                    f"sweep_interval={config.sweep_interval}, "
                    f"poll_interval={config.poll_interval}, "
                    f"synchronous={config.synchronous}"
                )
            service = WorkerService(config, factory=noop.factory)
            if before_clock is not None:
                before_clock()
            started = Started.now(postmaster)
            async with trio.open_nursery() as nursery:
                await nursery.start(service.run)
                await _every_result_stored(store, jobs)
                drained = started.drain()
                nursery.cancel_scope.cancel()
            return drained

    return _tether_drain(dsn, jobs, drain)


def tether_batches_side(dsn: str, jobs: int, postmaster: int, settings: list[str]) -> Drain:
    async def drain(store: PostgresStore) -> Drain:
        async def worker(name: str) -> None:
            while claims := await store.claim_many(name, BATCH, leaderless=True):
                assert all(await store.complete_many([(c, "") for c in claims]))

        started = Started.now(postmaster)
        async with trio.open_nursery() as nursery:
            for k in range(BY_HAND_TASKS):
                nursery.start_soon(worker, f"w{k}")
        return started.drain()

    return _tether_drain(dsn, jobs, drain)


def pgqueuer_side(dsn: str, jobs: int, postmaster: int, settings: list[str]) -> Drain:
    return pgqueuer_best_drain(dsn, jobs, lambda: Started.now(postmaster), Started.drain)


# -- statements per job ------------------------------------------------------------------------


def statements_per_job(dsn: str, jobs: int, postmaster: int) -> None:
    """Run the pool once with pg_stat_statements reset at the clock; print what ran per job."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
    settings: list[str] = []

    def reset() -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("SELECT pg_stat_statements_reset()")

    drain = tether_pool_side(dsn, jobs, postmaster, settings, before_clock=reset)
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT calls, total_exec_time + total_plan_time, rows, plans, toplevel, query "
            "FROM pg_stat_statements "
            "WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) "
            "ORDER BY calls DESC"
        ).fetchall()
    top = sum(r[0] for r in rows if r[4] and r[5] not in ("BEGIN", "COMMIT"))
    nested = sum(r[0] for r in rows if not r[4])
    total_time = sum(r[1] for r in rows if r[4]) or 1.0
    print(
        f"\ntether pool, {jobs} jobs in {drain.seconds:.2f} s, server CPU "
        f"{drain.server_cpu / jobs * 1e6:.0f} us/job: {top / jobs:.2f} statements per job "
        f"(BEGIN and COMMIT aside), and {nested / jobs:.2f} more run by their triggers"
    )
    print(f"  planning and executing them took {total_time * 1e3 / jobs:.0f} us/job")
    print("  calls/job  time share  us/call  rows/call  plans/call  statement")
    for calls, exec_time, nrows, plans, toplevel, query in rows:
        if calls / jobs < 0.005:
            continue
        shown = ("" if toplevel else "(trigger) ") + " ".join(query.split())
        print(
            f"  {calls / jobs:9.3f}  {exec_time / total_time:10.1%}  "
            f"{exec_time * 1e3 / calls:7.0f}  {nrows / calls:9.1f}  {plans / calls:10.2f}  "
            f"{shown[:150]}"
        )


# -- main --------------------------------------------------------------------------------------

Side = Callable[[str, int, int, list[str]], Drain]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", default="", help="comma-separated sides (default: all)")
    parser.add_argument(
        "--statements", action="store_true", help="also count the pool's statements per job"
    )
    args = parser.parse_args()
    sides: dict[str, Side] = {
        "tether pool": tether_pool_side,
        f"tether claim_many({BATCH})": tether_batches_side,
    }
    if importlib.util.find_spec("pgqueuer") is None or importlib.util.find_spec("asyncpg") is None:
        print("skipped pgqueuer: not installed (uv sync --group bench)")
    else:
        sides["pgqueuer"] = pgqueuer_side
    if args.only:
        wanted = [name.strip() for name in args.only.split(",")]
        unknown = [name for name in wanted if name not in sides]
        if unknown:
            parser.error(f"--only: no side named {unknown[0]!r}; the sides: {', '.join(sides)}")
        sides = {name: side for name, side in sides.items() if name in wanted}
    settings: list[str] = []
    try:
        with server(args.statements) as dsn:
            postmaster = postmaster_pid(dsn)
            rates: dict[str, list[float]] = {name: [] for name in sides}
            cpus: dict[str, list[float]] = {name: [] for name in sides}
            clients: dict[str, list[float]] = {name: [] for name in sides}
            ratios: list[float] = []
            order = list(sides)
            for r in range(args.rounds):
                this: dict[str, Drain] = {}
                for name in order[r % len(order) :] + order[: r % len(order)]:
                    this[name] = sides[name](fresh_database(dsn), args.jobs, postmaster, settings)
                    rates[name].append(args.jobs / this[name].seconds)
                    cpus[name].append(this[name].server_cpu / args.jobs * 1e6)
                    clients[name].append(this[name].client_cpu / args.jobs * 1e6)
                shown = "  ".join(
                    f"{k} {args.jobs / d.seconds:,.0f}/s (server "
                    f"{d.server_cpu / args.jobs * 1e6:.0f} us, client "
                    f"{d.client_cpu / args.jobs * 1e6:.0f} us)"
                    for k, d in this.items()
                )
                if "tether pool" in this and "pgqueuer" in this:
                    ratios.append(this["pgqueuer"].seconds / this["tether pool"].seconds)
                    shown += f"  pool/pgqueuer {ratios[-1]:.2f}x"
                print(f"round {r + 1}: {shown}", flush=True)
            if args.statements:
                statements_per_job(fresh_database(dsn), args.jobs, postmaster)
    except NoPostgres as exc:
        print(f"skipped: {exc}; set TETHER_BENCH_PG_DSN to use a running server")
        return
    print(
        f"\nsettings: tether pool: {settings[0] if settings else '-'}; tether claim_many: "
        f"{BY_HAND_TASKS} tasks, claim_many({BATCH}) -> complete_many; pgqueuer: asyncpg, one "
        f"QueueManager, batch_size={BATCH}, dequeue_timeout=0.01 s, drain mode, no "
        f"concurrency_limit; server: fsync and synchronous_commit on"
    )
    print(f"{args.jobs} no-op jobs, medians of {args.rounds} rounds [min-max]:")
    for name in sides:
        v, c, o = rates[name], cpus[name], clients[name]
        print(
            f"  {name}: {statistics.median(v):,.0f}/s [{min(v):,.0f}-{max(v):,.0f}], "
            f"server CPU {statistics.median(c):.0f} us/job [{min(c):.0f}-{max(c):.0f}], "
            f"client CPU {statistics.median(o):.0f} us/job [{min(o):.0f}-{max(o):.0f}]"
        )
    if ratios:
        print(
            f"  tether pool / pgqueuer: median {statistics.median(ratios):.2f}x "
            f"[{min(ratios):.2f}-{max(ratios):.2f}] (goal >= 1.5x)"
        )


if __name__ == "__main__":
    main()
