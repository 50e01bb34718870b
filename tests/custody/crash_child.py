"""Child process of the crash test: ingests and completes tasks until it is SIGKILLed.

It prints ``ingested <id>`` only after ``await store.ingest`` returned (the point where the
bridge would ack the gateway) and ``completed <id>`` after ``await store.complete`` returned,
flushing each line, so the parent knows exactly what the store promised before the kill.
Usage: python crash_child.py DB ROUND
"""

from __future__ import annotations

import sys

import trio

from tether.bridge import SqliteStore, Task


async def main(db: str, round: int) -> None:
    store = await SqliteStore.open(db, lease_s=3600.0)
    print("ready", flush=True)

    async def lane(lane: int) -> None:
        for i in range(1_000_000):
            id = f"r{round}-{lane}-{i}"
            assert await store.ingest(Task(id, f"body of {id}"))
            print(f"ingested {id}", flush=True)
            claim = await store.claim(f"c{round}-{lane}", leaderless=True)
            if claim is not None:
                await store.complete(claim, f"reply to {claim.task.id}")
                print(f"completed {claim.task.id}", flush=True)

    async with trio.open_nursery() as nursery:
        for n in range(8):
            nursery.start_soon(lane, n)


if __name__ == "__main__":
    trio.run(main, sys.argv[1], int(sys.argv[2]))
