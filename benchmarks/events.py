"""Events: runs waiting for an event each, woken one by one, tether beside DBOS Transact's
``DBOS.recv`` / ``DBOS.send`` (issue #52).

tether's side is the pool as users run it on one SQLite file: a ``PoolLead``, a worker of 4
slots (``PoolWorker``'s defaults otherwise) and the reconciler, with an agent whose run waits
for the event of its key (``run.wait_for``) and replies with its body. ``--runs`` tasks are
ingested and park (no slot held); then their events are sent one after another
(``store.send_event``, what ``POST /v1/events`` does), each timed from the send to the run's
durable reply (the worker's ``after_complete``); the same on a PostgreSQL store when a
server can be started (``tether-pg``). DBOS's side starts ``--runs`` workflows that
each ``DBOS.recv`` a topic (one blocked thread each, DBOS's model), then ``DBOS.send``s to each
in turn, timed from the send to its handle's result, on its default SQLite system database.

Then all at once: every event sent together, the time until every run replied. Rounds
interleave the sides (a fresh file each); medians and spreads printed, and each round's ratio.

    uv run --group bench python benchmarks/events.py [--runs 20] [--rounds 3]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

from _stats import percentile
from tether import Session
from tether.bridge import CustodyState, PostgresStore, SqliteStore, Task, run_of
from tether.bridge.pool import PoolLead, PoolWakeups, PoolWorker, Reconciler


def _factory(session: Session) -> None:
    async def handle(task: Task) -> str:
        return str(await run_of(task).wait_for(f"ev.{task.id}", timeout=600))

    session.add_handler("task", handle)


def tether_round(runs: int, postgres: str | None = None) -> tuple[list[float], float]:
    """(each event's seconds from its send to its run's durable reply, one by one; the
    seconds from sending every event at once to the last reply), on a fresh SQLite file or
    (``postgres``, a server's URL) a fresh schema there."""

    async def opened(tmp: str) -> Any:
        if postgres is None:
            return await SqliteStore.open(Path(tmp) / "custody.db")
        return await PostgresStore.open(postgres, schema=f"events_{next(_DATABASES)}")

    async def main() -> tuple[list[float], float]:
        with tempfile.TemporaryDirectory() as tmp:
            async with await opened(tmp) as store:
                done: dict[str, trio.Event] = {}

                async def stored(task: Task) -> None:
                    done[task.id].set()

                wakeups = PoolWakeups()
                worker = PoolWorker(store, "w1", _factory, wakeups=wakeups, after_complete=stored)
                lead = PoolLead(store, name="lead", wakeups=wakeups)
                reconciler = Reconciler(store, on_woken=wakeups.tasks_pending)
                wakeups.on_parked = reconciler.parked_until

                async def parked(ids: list[str]) -> None:
                    for id in ids:
                        done[id] = trio.Event()
                        await store.ingest(Task(id, "wait"))
                    while len(await store.event_waiters()) < len(ids):  # noqa: ASYNC110
                        await trio.sleep(0.01)

                with store.work_bell.listening(wakeups.tasks_pending):
                    async with trio.open_nursery() as nursery:
                        await nursery.start(lead.run)
                        await nursery.start(worker.run)
                        nursery.start_soon(reconciler.run)
                        one = [f"one-{n}" for n in range(runs)]
                        await parked(one)
                        each: list[float] = []
                        for id in one:
                            t0 = time.perf_counter()
                            await store.send_event(f"e-{id}", f"ev.{id}", "paid")
                            await done[id].wait()
                            each.append(time.perf_counter() - t0)
                        many = [f"many-{n}" for n in range(runs)]
                        await parked(many)
                        t0 = time.perf_counter()
                        for id in many:
                            await store.send_event(f"e-{id}", f"ev.{id}", "paid")
                        for id in many:
                            await done[id].wait()
                        together = time.perf_counter() - t0
                        assert await store.state(many[-1]) is CustodyState.RESULT
                        worker.request_stop()
                        nursery.cancel_scope.cancel()
                return each, together

    return trio.run(main)


def dbos_round(runs: int, postgres: str | None = None) -> tuple[list[float], float] | None:
    """DBOS on its SQLite system database, or (``postgres``, a server's URL) on a fresh
    PostgreSQL database there, where its ``recv`` is woken by ``LISTEN``/``NOTIFY``."""
    try:
        from dbos import DBOS
    except ImportError:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{tmp}/dbos.sqlite"
        if postgres is not None:
            url = _fresh_database(postgres)
        DBOS(config={"name": "bench", "system_database_url": url, "log_level": "WARNING"})

        @DBOS.workflow()  # type: ignore[untyped-decorator]
        def waiter() -> str:
            return str(DBOS.recv("ev", timeout_seconds=600))

        DBOS.launch()
        try:

            def started() -> list[Any]:
                handles = [DBOS.start_workflow(waiter) for _ in range(runs)]
                time.sleep(0.5)  # each blocks in recv (no status tells it is there yet)
                return handles

            each: list[float] = []
            for handle in started():
                t0 = time.perf_counter()
                DBOS.send(handle.get_workflow_id(), "paid", "ev")
                handle.get_result()
                each.append(time.perf_counter() - t0)
            handles = started()
            t0 = time.perf_counter()
            for handle in handles:
                DBOS.send(handle.get_workflow_id(), "paid", "ev")
            for handle in handles:
                handle.get_result()
            return each, time.perf_counter() - t0
        finally:
            DBOS.destroy(destroy_registry=True)


_DATABASES = iter(range(1_000_000))


def _fresh_database(server: str) -> str:
    import psycopg

    name = f"dbos_events_{next(_DATABASES)}"
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return server.rsplit("/", 1)[0] + f"/{name}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(
        "events on SQLite (WAL). tether: PoolLead + PoolWorker (4 slots, defaults) + Reconciler, "
        "synchronous=NORMAL, runs parked (no slot held) until store.send_event; dbos: DBOS "
        "Transact defaults (its SQLite system database), workflows blocked in DBOS.recv, woken "
        f"by DBOS.send (on SQLite its recv polls; dbos-pg: on PostgreSQL, LISTEN/NOTIFY; "
        f"tether-pg: tether on the same server, a fresh schema a round). "
        f"{args.runs} runs, {args.rounds} rounds"
    )
    from tether.bridge.stores.postgres._throwaway import NoPostgres, throwaway_postgres

    with contextlib.ExitStack() as stack:
        try:
            pg: str | None = stack.enter_context(throwaway_postgres(fsync=True)).dsn
            print("dbos-pg: a throwaway PostgreSQL server (fsync on), a fresh database a round")
        except NoPostgres as exc:
            pg = None
            print(f"dbos-pg: skipped ({exc})")
        _compare(args.runs, args.rounds, pg)


def _compare(runs: int, rounds: int, pg: str | None) -> None:
    sides: dict[str, Callable[[int], Any]] = {"tether": tether_round, "dbos": dbos_round}
    if pg is not None:
        sides["tether-pg"] = lambda n: tether_round(n, pg)
        sides["dbos-pg"] = lambda n: dbos_round(n, pg)
    p50s: dict[str, list[float]] = {name: [] for name in sides}
    args = argparse.Namespace(runs=runs, rounds=rounds)
    walls: dict[str, list[float]] = {name: [] for name in sides}
    every: dict[str, list[float]] = {name: [] for name in sides}
    for k in range(args.rounds):
        for name in list(sides)[k % len(sides) :] + list(sides)[: k % len(sides)]:  # rotate
            got = sides[name](args.runs)
            if got is None:
                print(f"  {name}: not installed (uv sync --group bench), skipped")
                continue
            each, together = got
            p50s[name].append(statistics.median(each))
            walls[name].append(together)
            every[name].extend(each)
        print(
            f"  round {k + 1}: "
            + ", ".join(
                f"{n} p50 {p50s[n][-1] * 1e3:.1f} ms, all at once {walls[n][-1] * 1e3:.0f} ms"
                for n in sides
                if p50s[n]
            ),
            flush=True,
        )
    for name in sides:
        if p50s[name]:
            p, w = p50s[name], walls[name]
            print(
                f"  {name:>7}: send -> durable reply p50 {statistics.median(p) * 1e3:.1f} ms "
                f"(spread {min(p) * 1e3:.1f}-{max(p) * 1e3:.1f}), p99 "
                f"{percentile(every[name], 0.99) * 1e3:.1f} ms; {args.runs} at once "
                f"{statistics.median(w) * 1e3:.0f} ms (spread {min(w) * 1e3:.0f}-"
                f"{max(w) * 1e3:.0f})"
            )
    for ours, peer in (("tether", "dbos"), ("tether-pg", "dbos-pg")):
        if p50s.get(peer) and p50s.get(ours):
            ratios = [d / t for d, t in zip(p50s[peer], p50s[ours], strict=True)]
            print(
                f"  {peer} p50 / {ours} p50 per round: median {statistics.median(ratios):.2f}x "
                f"[{min(ratios):.2f}-{max(ratios):.2f}]"
            )


if __name__ == "__main__":
    main()
