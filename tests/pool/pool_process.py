"""One pool member as its own process, for the multi-process test (run with ``sys.executable``).

``pool_process.py DB lead NAME`` runs a lead and a reconciler; ``pool_process.py DB worker NAME``
runs a worker whose agent takes ``DELAY`` seconds per task. Workers append ``start <id>`` when a
run begins and ``done <id>`` once its result is durably stored to ``DB.<name>.log``, so the test
can kill a worker mid-task and check that every task was completed exactly once. Prints
``ready`` when the service runs.
"""

from __future__ import annotations

import sys
from functools import partial

import trio

from tether import Session
from tether.bridge import SqliteStore, Task
from tether.bridge.pool import PoolLead, PoolWorker, Reconciler

DELAY = 0.3
LEASE_S = 1.0
DEAD_AFTER = 1.5


def log_line(path: str, line: str) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(line + "\n")
        f.flush()


async def main(db: str, role: str, name: str) -> None:
    store = await SqliteStore.open(db, lease_s=LEASE_S, max_attempts=5, synchronous="NORMAL")
    log = f"{db}.{name}.log"

    def factory(session: Session) -> None:
        @session.on("task")
        async def work(task: Task) -> str:
            log_line(log, f"start {task.id}")
            await trio.sleep(DELAY)
            return f"done {task.id}"

    async def stored(task: Task) -> None:
        log_line(log, f"done {task.id}")

    try:
        async with trio.open_nursery() as nursery:
            if role == "lead":
                lead = PoolLead(
                    store, name=name, sweep_interval=0.1, dead_after=DEAD_AFTER, stuck_after=5.0
                )
                await nursery.start(partial(Reconciler(store).run, interval=0.2))
                await nursery.start(lead.run)
            else:
                worker = PoolWorker(
                    store,
                    name,
                    factory,
                    concurrency=2,
                    heartbeat_interval=0.25,
                    poll_interval=0.05,
                    lead_dead_after=DEAD_AFTER,
                    after_complete=stored,
                )
                await nursery.start(worker.run)
            print("ready", flush=True)
    finally:
        await store.aclose()


if __name__ == "__main__":
    trio.run(main, sys.argv[1], sys.argv[2], sys.argv[3])
