"""A child of the PostgreSQL pool fleet test: the pool's real services on ``PostgresStore``.

``bridge``: a ``PoolLead`` and a ``Reconciler`` (two bridge processes run two leads: their
assignments are compare-and-sets, so they compete safely), ingest of every task id in gateway
batches (each bridge ingests all of them: replays are no-ops) and delivery, printing
``delivered <id>``. ``worker``: a ``PoolWorker`` whose agent takes a little while, printing
``start <id>`` when a run begins and ``done <id>`` once its result is durably stored.
``holder``: a worker that, after three results, holds every further run until it is killed
(printing ``holding <id>``), so the test kills it holding a task for sure: a 50 ms run often
finished between "start" and the SIGKILL (issue 21.11).
Usage: FLEET_DSN=... python pg_pool_fleet_child.py bridge|worker|holder SCHEMA NAME TOTAL
"""

from __future__ import annotations

import os
import sys
from functools import partial

import trio

from tether import Session
from tether.bridge import PostgresStore, Task
from tether.bridge.pool import PoolLead, PoolWorker, Reconciler

LEASE_S = 1.0
DEAD_AFTER = 1.5


def say(line: str) -> None:
    print(line, flush=True)


async def main(dsn: str, role: str, schema: str, name: str, total: int) -> None:
    store = await PostgresStore.open(dsn, schema=schema, lease_s=LEASE_S, pool_size=3)
    try:
        async with trio.open_nursery() as nursery:
            if role == "bridge":
                lead = PoolLead(
                    store, name=name, sweep_interval=0.1, dead_after=DEAD_AFTER, stuck_after=5.0
                )
                await nursery.start(partial(Reconciler(store).run, interval=0.2))
                await nursery.start(lead.run)
                nursery.start_soon(ingest, store, total)
                nursery.start_soon(deliver, store)
            else:
                results = 0

                def factory(session: Session) -> None:
                    @session.on("task")
                    async def work(task: Task) -> str:
                        say(f"start {task.id}")
                        if role == "holder" and results >= 3:
                            say(f"holding {task.id}")
                            await trio.sleep_forever()
                        await trio.sleep(0.05)
                        return f"reply to {task.id} by {name}"

                async def stored(task: Task) -> None:
                    nonlocal results
                    results += 1
                    say(f"done {task.id}")

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
            say("ready")
    finally:
        await store.aclose()


async def ingest(store: PostgresStore, total: int) -> None:
    for start in range(0, total, 10):
        await store.ingest_many([Task(f"t{i}", f"body {i}") for i in range(start, start + 10)])
        await trio.sleep(0.02)


async def deliver(store: PostgresStore) -> None:
    while True:
        ready = await store.ready_results(limit=20)
        for result in ready:
            await store.mark_delivered(result.task.id)
            say(f"delivered {result.task.id}")
        if not ready:
            await store.wait_for_results(0.2)


if __name__ == "__main__":
    role, schema, name, total = sys.argv[1:]
    trio.run(main, os.environ["FLEET_DSN"], role, schema, name, int(total))
