"""Child runs: a parent that starts 3 children and waits for all, tether beside DBOS Transact's
child workflows (issue #51).

tether's side is the pool as users run it on one SQLite file: a ``PoolLead``, a worker of 4
slots (``PoolWorker``'s defaults otherwise) and the reconciler, with a planner agent that
``run.spawn``s three no-op children and ``run.join``s them; a parent is done when its reply is
durable in the store (the worker's ``after_complete``). DBOS's is a ``@DBOS.workflow`` that
starts three no-op child workflows (``DBOS.start_workflow``, each one ``@DBOS.step``) and waits
for their handles' results, on its default SQLite system database, its settings printed.

Two shapes: ``--parents`` parents one after another (p50/p99 of one parent's time), and the
same number with ``--lanes`` (default 8) at once (tether: Trio tasks; DBOS: threads). Then the
fan-out: one tether parent joining ``--fan-out`` (default 100) no-op children, its time from
ingest to reply (the children's own work is nothing, so all of it is tether's). Rounds
interleave the sides (a fresh file each); medians and spreads printed, and each round's ratio.

    uv run --group bench python benchmarks/child_runs.py [--parents 100] [--rounds 3]
        [--lanes 8] [--fan-out 100]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import trio

from _stats import percentile
from tether import Session
from tether.bridge import SqliteStore, Task, run_of
from tether.bridge.pool import PoolLead, PoolWakeups, PoolWorker, Reconciler

CHILDREN = 3


def _planner(children: int) -> Callable[[Session], None]:
    async def handle(task: Task) -> str:
        if task.parent is not None:
            return "ok"
        run = run_of(task)
        kids = [await run.spawn(f"c{i}", "x") for i in range(children)]
        return str(len(await run.join(*kids, timeout=600)))

    def factory(session: Session) -> None:
        session.add_handler("task", handle)

    return factory


async def _pool(
    store: SqliteStore, children: int, body: Callable[[Callable[[str], Awaitable[float]]], Any]
) -> Any:
    """Run ``body(parent)`` beside a pool of one lead, one worker and a reconciler;
    ``parent(id)`` ingests a parent and returns its seconds to a durable reply."""
    done: dict[str, trio.Event] = {}

    async def stored(task: Task) -> None:
        if task.id in done:
            done[task.id].set()

    wakeups = PoolWakeups()
    worker = PoolWorker(store, "w1", _planner(children), wakeups=wakeups, after_complete=stored)
    lead = PoolLead(store, name="lead", wakeups=wakeups)
    reconciler = Reconciler(store, on_woken=wakeups.tasks_pending)
    wakeups.on_parked = reconciler.parked_until

    async def parent(id: str) -> float:
        done[id] = trio.Event()
        t0 = time.perf_counter()
        await store.ingest(Task(id, "plan"))  # rings the pool (its store's work bell)
        await done[id].wait()
        return time.perf_counter() - t0

    with store.work_bell.listening(wakeups.tasks_pending):
        async with trio.open_nursery() as nursery:
            await nursery.start(lead.run)
            await nursery.start(worker.run)
            nursery.start_soon(reconciler.run)
            try:
                return await body(parent)
            finally:
                worker.request_stop()
                nursery.cancel_scope.cancel()


def tether_round(parents: int, lanes: int) -> tuple[float, list[float]]:
    async def main() -> tuple[float, list[float]]:
        with tempfile.TemporaryDirectory() as tmp:
            async with await SqliteStore.open(Path(tmp) / "custody.db") as store:

                async def body(
                    parent: Callable[[str], Awaitable[float]],
                ) -> tuple[float, list[float]]:
                    times: list[float] = []

                    async def lane(k: int) -> None:
                        for n in range(k, parents, lanes):
                            times.append(await parent(f"p{n}"))

                    start = time.perf_counter()
                    async with trio.open_nursery() as nursery:
                        for k in range(lanes):
                            nursery.start_soon(lane, k)
                    return time.perf_counter() - start, times

                result: tuple[float, list[float]] = await _pool(store, CHILDREN, body)
                return result

    return trio.run(main)


def fan_out_round(children: int) -> float:
    async def main() -> float:
        with tempfile.TemporaryDirectory() as tmp:
            async with await SqliteStore.open(Path(tmp) / "custody.db") as store:

                async def body(parent: Callable[[str], Awaitable[float]]) -> float:
                    return await parent("wide")

                seconds: float = await _pool(store, children, body)
                return seconds

    return trio.run(main)


_TIMES: list[float] = []


def dbos_round(parents: int, lanes: int) -> tuple[float, list[float]] | None:
    try:
        from dbos import DBOS
    except ImportError:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{tmp}/dbos.sqlite"
        DBOS(config={"name": "bench", "system_database_url": url, "log_level": "WARNING"})

        @DBOS.step()  # type: ignore[untyped-decorator]
        def noop() -> int:
            return 1

        @DBOS.workflow()  # type: ignore[untyped-decorator]
        def child() -> str:
            noop()
            return "ok"

        @DBOS.workflow()  # type: ignore[untyped-decorator]
        def parent() -> int:
            handles = [DBOS.start_workflow(child) for _ in range(CHILDREN)]
            return len([h.get_result() for h in handles])

        DBOS.launch()
        try:
            _TIMES.clear()
            errors: list[BaseException] = []

            def lane(units: int) -> None:
                try:
                    for _ in range(units):
                        t0 = time.perf_counter()
                        parent()
                        _TIMES.append(time.perf_counter() - t0)
                except BaseException as exc:
                    errors.append(exc)

            shares = [parents // lanes + (1 if k < parents % lanes else 0) for k in range(lanes)]
            threads = [threading.Thread(target=lane, args=(n,)) for n in shares]
            start = time.perf_counter()
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            elapsed = time.perf_counter() - start
            if errors:
                raise errors[0]
            return elapsed, list(_TIMES)
        finally:
            DBOS.destroy(destroy_registry=True)


def _shape(parents: int, lanes: int, rounds: int) -> None:
    print(f"\n{parents} parents x {CHILDREN} children, {lanes} at once, {rounds} rounds")
    sides: dict[str, Callable[[int, int], Any]] = {"tether": tether_round, "dbos": dbos_round}
    rates: dict[str, list[float]] = {name: [] for name in sides}
    times: dict[str, list[float]] = {name: [] for name in sides}
    ratios: list[float] = []
    for k in range(rounds):
        names = list(sides)[k % 2 :] + list(sides)[: k % 2]  # rotate who goes first
        for name in names:
            got = sides[name](parents, lanes)
            if got is None:
                print(f"  {name}: not installed (uv sync --group bench), skipped")
                continue
            wall, each = got
            rates[name].append(parents / wall)
            times[name].extend(each)
        if len(rates["dbos"]) == k + 1:
            ratios.append(rates["tether"][-1] / rates["dbos"][-1])
        print(
            f"  round {k + 1}: "
            + ", ".join(f"{n} {rates[n][-1]:.1f} parents/s" for n in sides if rates[n])
            + (f", tether / dbos {ratios[-1]:.2f}x" if len(ratios) == k + 1 else ""),
            flush=True,
        )
    for name in sides:
        if rates[name]:
            r, t = rates[name], times[name]
            print(
                f"  {name:>7}: {statistics.median(r):7.1f} parents/s (spread {min(r):.1f}-"
                f"{max(r):.1f})  per parent p50 {percentile(t, 0.5) * 1e3:.1f} ms  "
                f"p99 {percentile(t, 0.99) * 1e3:.1f} ms"
            )
    if ratios:
        print(
            f"  tether / dbos per round: median {statistics.median(ratios):.2f}x "
            f"[{min(ratios):.2f}-{max(ratios):.2f}]"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parents", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--lanes", type=int, default=8)
    parser.add_argument("--fan-out", type=int, default=100)
    args = parser.parse_args()
    print(
        "child runs on SQLite (WAL). tether: PoolLead + PoolWorker (4 slots, defaults) + "
        "Reconciler, synchronous=NORMAL (a reply is durable when the worker stores it); "
        "dbos: DBOS Transact defaults (its SQLite system database), child workflows started "
        "with DBOS.start_workflow and joined by handle.get_result()"
    )
    _shape(args.parents, 1, args.rounds)
    _shape(args.parents, args.lanes, args.rounds)
    wide = [fan_out_round(args.fan_out) for _ in range(args.rounds)]
    print(
        f"\nfan-out: one parent joining {args.fan_out} no-op children, ingest to durable "
        f"reply: median {statistics.median(wide) * 1e3:.1f} ms "
        f"(spread {min(wide) * 1e3:.1f}-{max(wide) * 1e3:.1f})"
    )


if __name__ == "__main__":
    main()
