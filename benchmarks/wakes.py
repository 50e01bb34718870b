"""Waking many parked runs at once (issue #56, item 5): CPU per run woken, at each size.

Each round, for each ``--runs`` size (interleaved): a fresh SQLite store; ``N`` tasks in
``--rooms`` rooms (concurrent policy) whose handler calls ``run.sleep(3600)`` (past
``park_after``) are taken by a lead and 4 workers x 4 (the bridge's shape: ``PoolWakeups``,
the lead's defaults) until all ``N`` are parked
(``waiting``). Then the store's clock jumps two hours, the reconciler's pass wakes them all
(its batch holds all of them), and the same pool answers them: this process's CPU (and wall
time) from that pass until the last result is stored, per run. A woken run returns from its
recorded sleep at once, so what is measured is the wake, the assignment, the claim, the
replay of one recorded step and the completion (its reply turn under the message's turn: found
by walking the room's turns before issue #56's fix, so it grew with the runs woken per room).

``--vm`` also counts SQLite's VM steps per statement on the writer's and reader's connections
during the wake phase (a progress handler every 100 steps, the statement from the trace
callback, literals folded): printed per run woken, so a statement whose cost grows with the
backlog stands out (a trigger's steps count under the statement that fired it). It slows the
run; CPU figures of a ``--vm`` round are not comparable.

    uv run python benchmarks/wakes.py [--runs 1000,10000] [--rounds 3] [--vm]
"""

from __future__ import annotations

import argparse
import re
import sqlite3
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path

import trio

from tether import Session
from tether.bridge import CustodyState, SqliteStore, Task, run_of
from tether.bridge.pool import PoolLead, PoolWakeups, PoolWorker, Reconciler

WORKERS, CONCURRENCY = 4, 4
SLEEP = 3600.0


def args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", default="1000,10000", help="sizes, comma-separated")
    parser.add_argument("--rooms", type=int, default=20, help="rooms the runs are in (0: none)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--vm", action="store_true", help="VM steps per statement (slow)")
    return parser.parse_args()


async def handle(task: Task) -> str:
    await run_of(task).sleep(SLEEP)
    return "woke"


def factory(session: Session) -> None:
    session.add_handler("task", handle)


_LITERAL = re.compile(r"'[^']*'|\b\d+(\.\d+)?(e[+-]?\d+)?\b")


class VmSteps:
    """VM steps per statement on one connection (installed and read in its own thread)."""

    def __init__(self) -> None:
        self.steps: Counter[str] = Counter()
        self._current = ""

    def install(self, conn: sqlite3.Connection) -> None:
        def trace(sql: str) -> None:
            self._current = _LITERAL.sub("?", " ".join(sql.split()))[:160]

        def progress() -> int:
            self.steps[self._current] += 100
            return 0

        conn.set_trace_callback(trace)
        conn.set_progress_handler(progress, 100)

    @staticmethod
    def uninstall(conn: sqlite3.Connection) -> None:
        conn.set_trace_callback(None)
        conn.set_progress_handler(None, 0)


async def count_of(store: SqliteStore, state: CustodyState) -> int:
    return (await store.counts()).get(state, 0)


async def one(db: Path, n: int, rooms: int, vm: bool) -> tuple[float, float, Counter[str]]:
    offset = [0.0]
    base = time.time()

    def clock() -> float:
        return base + offset[0]

    store = await SqliteStore.open(db, clock=clock)
    steps: Counter[str] = Counter()
    try:
        tasks = [Task(f"t{i}", "sleep", room=f"r{i % rooms}" if rooms else None) for i in range(n)]
        await store.ingest_many(tasks, room_policy="concurrent")
        wakeups = PoolWakeups()
        reconciler = Reconciler(store, on_woken=wakeups.tasks_pending)
        lead = PoolLead(store, wakeups=wakeups, clock=clock)
        workers = [
            PoolWorker(
                store,
                f"w{i}",
                factory,
                concurrency=CONCURRENCY,
                park_after=1.0,
                wakeups=wakeups,
                clock=clock,
            )
            for i in range(WORKERS)
        ]
        async with trio.open_nursery() as nursery:
            await nursery.start(lead.run)
            for w in workers:
                await nursery.start(w.run)
            while (await store.waiting_runs()).count < n:  # noqa: ASYNC110 - a store state
                await trio.sleep(0.05)
            await trio.sleep(0.5)  # the last parks' loose ends
            offset[0] = 2 * SLEEP
            counters = (VmSteps(), VmSteps())
            if vm:
                await store.db.writer.run(counters[0].install)
                await store.db.reader.run(counters[1].install, readonly=True)
            cpu, start = time.process_time(), time.perf_counter()
            report = await reconciler.run_once()
            assert len(report.woken) == n, len(report.woken)
            while await count_of(store, CustodyState.RESULT) < n:  # noqa: ASYNC110
                await trio.sleep(0.01)
            elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
            if vm:
                await store.db.writer.run(VmSteps.uninstall)
                await store.db.reader.run(VmSteps.uninstall, readonly=True)
                steps = counters[0].steps + counters[1].steps
            nursery.cancel_scope.cancel()
    finally:
        await store.aclose()
    return cpu / n * 1e3, elapsed, steps


def spread(xs: list[float]) -> str:
    return f"{statistics.median(xs):7.3f} [{min(xs):.3f}-{max(xs):.3f}]"


async def main() -> None:
    opts = args()
    sizes = [int(s) for s in opts.runs.split(",")]
    print(
        f"settings: SQLite (synchronous NORMAL), lead + {WORKERS} workers x {CONCURRENCY}, "
        f"park_after 1 s, run.sleep({SLEEP:.0f}), {opts.rooms} rooms (concurrent), sizes "
        f"{sizes}, {opts.rounds} rounds "
        f"interleaved{', VM steps on' if opts.vm else ''}"
    )
    cpu: dict[int, list[float]] = {n: [] for n in sizes}
    wall: dict[int, list[float]] = {n: [] for n in sizes}
    steps: dict[int, Counter[str]] = {n: Counter() for n in sizes}
    with tempfile.TemporaryDirectory() as tmp:
        k = 0
        for r in range(opts.rounds):
            for n in sizes:
                k += 1
                c, w, s = await one(Path(tmp) / f"{k}.db", n, opts.rooms, opts.vm)
                cpu[n].append(c)
                wall[n].append(w)
                steps[n].update(s)
                print(f"  round {r + 1} n={n}: {c:.3f} ms CPU a run, {n / w:.0f} runs/s")
    print("runs woken   CPU ms a run, median [min-max]   wakes/s median [min-max]")
    for n in sizes:
        rates = [n / w for w in wall[n]]
        print(
            f"{n:>10}   {spread(cpu[n])}             "
            f"{statistics.median(rates):6.0f} [{min(rates):.0f}-{max(rates):.0f}]"
        )
    if opts.vm:
        rounds: int = opts.rounds

        def per(n: int, q: str) -> float:
            return steps[n][q] / n / rounds

        every: set[str] = set().union(*steps.values())
        top = sorted(every, key=lambda q: -max(per(n, q) for n in sizes))[:25]
        print("VM steps a run woken, per statement (" + " / ".join(map(str, sizes)) + "):")
        for q in top:
            print("  " + " / ".join(f"{per(n, q):9.1f}" for n in sizes) + "  " + q)


if __name__ == "__main__":
    trio.run(main)
