"""The pool's costs, measured against baselines in one run (rounds interleaved, medians).

1. Lead sweep: assigning 1000 pending tasks with one ``assign_many`` (one thread hop, one
   commit) against a baseline of one ``assign`` call per task (a hop and a commit each).
2. End to end: 2000 tasks through a lead and 4 workers (concurrency 8, the ``noop`` agent) on
   one store, against a baseline of 32 bare claim/complete loops on the store with no lead, no
   sessions, no heartbeats: what the pool machinery costs on top of custody itself.

Run: ``uv run python benchmarks/pool_throughput.py``. Synchronous is FULL (durable commits).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import trio

from tether.agents import noop
from tether.bridge import CustodyState, SqliteStore, Task
from tether.bridge.pool import PoolLead, PoolWorker

ROUNDS = 3
SWEEP_TASKS = 1000
E2E_TASKS = 2000


async def sweep(db: Path, batched: bool) -> float:
    store = await SqliteStore.open(db)
    try:
        await store.ingest_many([Task(f"t{i}", "x") for i in range(SWEEP_TASKS)])
        for w in range(4):
            await store.beat(f"w{w}", "worker", SWEEP_TASKS)
        start = time.perf_counter()
        if batched:
            report = await PoolLead(store).sweep_once()
            assert len(report.assigned) == SWEEP_TASKS
        else:
            for i, task in enumerate(await store.pending(limit=SWEEP_TASKS)):
                await store.assign(task.id, f"w{i % 4}")
        elapsed = time.perf_counter() - start
        assert (await store.counts())[CustodyState.ASSIGNED] == SWEEP_TASKS
    finally:
        await store.aclose()
    return elapsed


async def pool(db: Path) -> float:
    store = await SqliteStore.open(db)
    try:
        await store.ingest_many([Task(f"t{i}", "x") for i in range(E2E_TASKS)])
        start = time.perf_counter()
        async with trio.open_nursery() as nursery:
            lead = PoolLead(store, sweep_interval=0.01)
            workers = [
                PoolWorker(store, f"w{i}", noop.factory, concurrency=8, poll_interval=0.01)
                for i in range(4)
            ]
            await nursery.start(lead.run)
            for w in workers:
                await nursery.start(w.run)
            while (await store.counts())[CustodyState.RESULT] < E2E_TASKS:  # noqa: ASYNC110
                await trio.sleep(0.01)
            elapsed = time.perf_counter() - start
            nursery.cancel_scope.cancel()
    finally:
        await store.aclose()
    return elapsed


async def bare(db: Path) -> float:
    store = await SqliteStore.open(db)
    try:
        await store.ingest_many([Task(f"t{i}", "x") for i in range(E2E_TASKS)])

        async def loop(n: int) -> None:
            while (claim := await store.claim(f"b{n}", leaderless=True)) is not None:
                await store.complete(claim, "ok")

        start = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for n in range(32):
                nursery.start_soon(loop, n)
        elapsed = time.perf_counter() - start
        assert (await store.counts())[CustodyState.RESULT] == E2E_TASKS
    finally:
        await store.aclose()
    return elapsed


async def main() -> None:
    times: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        n = 0
        for _ in range(ROUNDS):
            for name, fn in (
                ("sweep: assign_many", lambda db: sweep(db, True)),
                ("sweep: assign each", lambda db: sweep(db, False)),
                ("pool end to end", pool),
                ("bare claim loops", bare),
            ):
                n += 1
                times.setdefault(name, []).append(await fn(Path(tmp) / f"{n}.db"))
    med = {name: statistics.median(ts) for name, ts in times.items()}
    print(f"lead sweep of {SWEEP_TASKS} tasks (median of {ROUNDS}):")
    print(f"  one assign_many      {med['sweep: assign_many'] * 1e3:8.1f} ms")
    print(f"  one assign per task  {med['sweep: assign each'] * 1e3:8.1f} ms")
    print(f"  ratio                {med['sweep: assign each'] / med['sweep: assign_many']:8.1f}x")
    print(f"{E2E_TASKS} tasks end to end (median of {ROUNDS}):")
    print(f"  pool (lead + 4 workers x 8, noop)  {E2E_TASKS / med['pool end to end']:8.0f} tasks/s")
    print(
        f"  bare claim/complete loops (32)     {E2E_TASKS / med['bare claim loops']:8.0f} tasks/s"
    )
    ratio = med["bare claim loops"] / med["pool end to end"]
    print(f"  pool / bare                        {ratio:8.2f}")


if __name__ == "__main__":
    trio.run(main)
