"""What observability costs: custody logging, and one look at a big task tree.

1. Custody transitions (ingest, claim, complete, deliver: 4 logged moves per task) through a
   ``SqliteStore`` with ``synchronous=OFF`` (the worst case for relative logging cost: no
   fsync to hide behind), with ``tether.custody`` quiet (INFO, the default: forward moves are
   DEBUG and skipped after one ``isEnabledFor``) versus at DEBUG into the JSON formatter.
   Rounds alternate quiet/debug in one process; the figure is the median per-pair ratio of
   wall time.
2. With ``--tasks`` live tasks parked in a runtime: the time to build the ``/tasks`` tree
   (with and without await stacks) and to render ``/metrics``, medians of ``--rounds``.

    uv run python benchmarks/observe_overhead.py [--tasks-per-round 2000] [--rounds 7]
        [--tasks 10000]
"""

from __future__ import annotations

import argparse
import io
import logging
import statistics
import tempfile
import time
from pathlib import Path

import trio
import trio.testing

from tether import open_runtime
from tether._core._task_tree import task_tree
from tether._plumbing._logging import make_handler
from tether.bridge import SqliteStore, Task
from tether.observe import Metrics, Observed


async def _custody_round(folder: Path, n: int, tag: str) -> float:
    store = await SqliteStore.open(folder / f"{tag}.db", synchronous="OFF")
    try:
        started = time.perf_counter()
        await store.ingest_many([Task(id=f"{tag}-{i}", body="x") for i in range(n)])
        async with trio.open_nursery() as nursery:
            for _ in range(8):
                nursery.start_soon(_drain, store, f"w{_}")
        return time.perf_counter() - started
    finally:
        await store.aclose()


async def _drain(store: SqliteStore, worker: str) -> None:
    while (claim := await store.claim(worker, leaderless=True)) is not None:
        await store.complete(claim, "done")
        await store.mark_delivered(claim.task.id)


async def custody_logging(per_round: int, rounds: int) -> float:
    logger = logging.getLogger("tether.custody")
    sink = io.StringIO()
    handler = make_handler("json", sink)
    logger.addHandler(handler)
    logger.propagate = False
    ratios = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            for r in range(rounds):
                logger.setLevel(logging.INFO)
                quiet = await _custody_round(folder, per_round, f"q{r}")
                logger.setLevel(logging.DEBUG)
                loud = await _custody_round(folder, per_round, f"d{r}")
                sink.seek(0)
                sink.truncate()
                ratios.append(loud / quiet)
                print(
                    f"round {r}: quiet {per_round / quiet:,.0f} tasks/s, "
                    f"debug {per_round / loud:,.0f} tasks/s"
                )
    finally:
        logger.removeHandler(handler)
        logger.propagate = True
        logger.setLevel(logging.NOTSET)
    return statistics.median(ratios)


async def big_tree(tasks: int, rounds: int) -> None:
    async with open_runtime(handle_signals=False) as runtime, trio.open_nursery() as nursery:
        for i in range(tasks):
            nursery.start_soon(trio.sleep_forever, name=f"parked-{i}")
        await trio.testing.wait_all_tasks_blocked()
        metrics = Metrics(Observed.of_runtime(runtime))
        timings: dict[str, list[float]] = {"tree": [], "tree+stacks": [], "metrics": []}
        for _ in range(rounds):
            t0 = time.perf_counter()
            task_tree(runtime.registry)
            t1 = time.perf_counter()
            task_tree(runtime.registry, stacks=True)
            t2 = time.perf_counter()
            await metrics.render()
            t3 = time.perf_counter()
            timings["tree"].append(t1 - t0)
            timings["tree+stacks"].append(t2 - t1)
            timings["metrics"].append(t3 - t2)
        for name, values in timings.items():
            print(f"{name:>12}: {statistics.median(values) * 1000:8.1f} ms for {tasks:,} tasks")
        nursery.cancel_scope.cancel()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks-per-round", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--tasks", type=int, default=10_000)
    args = parser.parse_args()
    ratio = await custody_logging(args.tasks_per_round, args.rounds)
    print(f"custody logging at DEBUG (JSON) vs quiet: {ratio:.2f}x wall time (median)")
    await big_tree(args.tasks, args.rounds)


if __name__ == "__main__":
    trio.run(main)
