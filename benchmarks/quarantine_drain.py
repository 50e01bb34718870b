"""How long a pool takes to drain after one SIGKILL of a worker process holding 8 claims, 7 of
them only waiting for a permit (issue #47, item 7).

A ``tether worker run`` (one worker, concurrency 8, the default 2 quarantine processes) on a
SQLite store claims 8 tasks whose handler holds the one permit of limit ``k`` (concurrency 1)
for ``WORK_S`` seconds: one runs, seven wait. Once that is so it is killed with SIGKILL and a
new process starts under the same pool name (it takes its predecessor's claims back as crash
expiries at once). Printed per round: how many tasks became suspects, and the seconds from
the restart until all 8 are answered (8 x ``WORK_S`` of work, one at a time). Beside it, a
quarantine child's start: a fresh interpreter importing the child's module (median of 5).

Run it from a checkout: ``uv run python benchmarks/quarantine_drain.py`` (``ROUNDS`` in the
environment, default 3); the settings are printed. Before issue 47.7 every claim became a
suspect and each ran in a quarantine child of its own.
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trio

from tether import Session
from tether.bridge import SqliteStore, Task, run_of
from tether.bridge.custody import CustodyState, LimitSpec

TASKS = 8
WORK_S = 0.375
HERE = Path(__file__).resolve().parent


def factory(session: Session) -> None:
    """The agent: hold the one permit of ``k`` for ``WORK_S`` seconds."""

    @session.on("task")
    async def handle(task: Task) -> str:
        async with run_of(task).limit("k"):
            await trio.sleep(WORK_S)
        return "done"


def _worker(db: Path, log: Path) -> subprocess.Popen[bytes]:
    argv = [
        *(sys.executable, "-m", "tether", "worker", "run"),
        *("--store", str(db), "--agent", "quarantine_drain:factory"),
        *("--pool-name", "drain", "--workers", "1", "--concurrency", str(TASKS)),
        *("--poll-interval", "0.05", "--log-level", "WARNING"),
    ]
    env = {**os.environ, "PYTHONPATH": f"{HERE}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    with log.open("ab") as out:
        return subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)


async def _until(check: object, within: float = 120.0) -> None:
    deadline = time.monotonic() + within
    while not await check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise TimeoutError("the pool did not get there in time")
        await trio.sleep(0.02)


async def one_round(folder: Path) -> tuple[int, float]:
    db, log = folder / "custody.db", folder / "worker.log"
    store = await SqliteStore.open(db)
    try:
        await store.set_limit(LimitSpec("k", concurrency=1))
        await store.ingest_many([Task(f"t{n}", "x") for n in range(TASKS)])

        async def holding() -> bool:
            counts = await store.counts()
            views = {v.spec.key: v for v in await store.limit_views()}
            k = views.get("k")
            return counts[CustodyState.CLAIMED] == TASKS and k is not None and k.in_flight == 1

        first = _worker(db, log)
        try:
            await _until(holding)
            await trio.sleep(0.2)  # the waiters poll (their waiter rows are fresh)
        finally:
            first.send_signal(signal.SIGKILL)
            first.wait()
        started = time.monotonic()
        second = _worker(db, log)
        try:

            async def drained() -> bool:
                return (await store.counts())[CustodyState.RESULT] == TASKS

            await _until(drained)
            seconds = time.monotonic() - started
        finally:
            second.send_signal(signal.SIGTERM)
            second.wait()
        suspects = 0
        for n in range(TASKS):
            journal = await store.journal(f"t{n}")
            suspects += any("a suspect now" in (e.reason or "") for e in journal)
        return suspects, seconds
    finally:
        await store.aclose()


def child_start() -> float:
    """Seconds a fresh interpreter takes to import a quarantine child's module."""
    code = "import tether.bridge.pool._quarantine_child"
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    rounds = int(os.environ.get("ROUNDS", "3"))
    print(
        f"settings: {TASKS} tasks, one permit of k (concurrency 1) held {WORK_S} s each, "
        f"1 worker x concurrency {TASKS}, 2 quarantine processes (default), SQLite, "
        f"{rounds} rounds"
    )
    results = []
    for n in range(rounds):
        with tempfile.TemporaryDirectory() as folder:
            suspects, seconds = trio.run(one_round, Path(folder))
        results.append(seconds)
        print(f"round {n + 1}: {suspects} suspects, drained in {seconds:.2f} s", flush=True)
    print(
        f"drain after SIGKILL: median {statistics.median(results):.2f} s "
        f"(range {min(results):.2f}-{max(results):.2f}); the work itself: {TASKS * WORK_S:.1f} s"
    )
    print(f"quarantine child import, fresh interpreter: median {child_start():.2f} s")


if __name__ == "__main__":
    main()
