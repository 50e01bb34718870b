"""A child process of the PostgreSQL fleet test: a bridge-like or a worker process.

``bridge``: ingests tasks ``t0 .. t<total-1>`` in gateway batches (every bridge ingests every
id: replays must be no-ops), runs the lease reconciler, and delivers ready results, printing
``delivered <id>`` after each ``mark_delivered`` returned.
``worker``: claims leaderless, works a little while renewing its lease, completes, printing
``claimed <id> <attempt>`` and then ``completed ...`` or ``fenced ...``. A ``staller`` stops
renewing and sleeps past its lease on its first tasks, so it gets fenced. A ``holder`` works
like a worker for five tasks, then holds its next claim (renewing it) until it is killed,
printing ``holding <id> <attempt>``: the test kills it holding a lease for sure (a short run
could finish between "claimed" and the SIGKILL, issue 21.11).
Every line is flushed, so the parent knows exactly what returned before a SIGKILL.
Usage: FLEET_DSN=... python pg_fleet_child.py bridge|worker|staller|holder SCHEMA NAME TOTAL LEASE_S
(the DSN, with its password, comes from the environment, not argv where ps shows it)
"""

from __future__ import annotations

import os
import random
import sys

import trio

from tether.bridge import PostgresStore, Task
from tether.bridge.custody import Claim, StaleLease
from tether.bridge.pool import Reconciler


def say(line: str) -> None:
    print(line, flush=True)


async def bridge(store: PostgresStore, total: int) -> None:
    async def ingest() -> None:
        ids = list(range(total))
        for start in range(0, total, 10):
            await store.ingest_many([Task(f"t{i}", f"body {i}") for i in ids[start : start + 10]])
            await trio.sleep(0.01)

    async def reconcile() -> None:
        reconciler = Reconciler(store)
        while True:
            await reconciler.run_once()
            await trio.sleep(0.1)

    async def deliver() -> None:
        while True:
            ready = await store.ready_results(limit=20)
            for result in ready:
                await store.mark_delivered(result.task.id)
                say(f"delivered {result.task.id}")
            if not ready:
                await store.wait_for_results(0.2)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ingest)
        nursery.start_soon(reconcile)
        nursery.start_soon(deliver)


async def worker(store: PostgresStore, name: str, stalls: int, hold_after: int | None) -> None:
    rng = random.Random(name)
    completed = 0
    while True:
        claim = await store.claim(name, leaderless=True)
        if claim is None:
            await store.wait_for_work(0.2)
            continue
        id, attempt = claim.task.id, claim.attempt
        say(f"claimed {id} {attempt}")
        if stalls > 0:
            stalls -= 1
            await trio.sleep(store.lease_s * 2.5)  # no heartbeat: the lease runs out
        else:
            async with trio.open_nursery() as nursery:

                async def heartbeat(current: Claim) -> None:
                    while True:
                        await trio.sleep(store.lease_s / 3)
                        current = await store.renew(current)

                nursery.start_soon(heartbeat, claim)
                if hold_after is not None and completed >= hold_after:
                    say(f"holding {id} {attempt}")
                    await trio.sleep_forever()
                await trio.sleep(rng.uniform(0.01, 0.06))
                nursery.cancel_scope.cancel()
        try:
            await store.complete(claim, f"reply to {id} by {name}#{attempt}")
        except StaleLease:
            say(f"fenced {id} {attempt}")
        else:
            completed += 1
            say(f"completed {id} {attempt}")


async def main(mode: str, dsn: str, schema: str, name: str, total: int, lease_s: float) -> None:
    store = await PostgresStore.open(dsn, schema=schema, lease_s=lease_s, pool_size=3)
    say("ready")
    try:
        if mode == "bridge":
            await bridge(store, total)
        else:
            stalls = 2 if mode == "staller" else 0
            await worker(store, name, stalls, hold_after=5 if mode == "holder" else None)
    finally:
        await store.aclose()


if __name__ == "__main__":
    mode, schema, name, total, lease_s = sys.argv[1:]
    trio.run(main, mode, os.environ["FLEET_DSN"], schema, name, int(total), float(lease_s))
