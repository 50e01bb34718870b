"""What a tenant costs the custody path, in SQLite virtual machine steps (issue #56, item 6):
a count that the machine's load does not blur, beside ``tenants.py``'s drain.

A store is given a backlog of ``--backlog`` tasks over ``--rooms`` rooms; then each cycle takes
16 new tasks in, assigns 16 to a worker in queue order (keeping ``--ahead`` assigned ahead of
its claims, as a lead's prefetch does), claims 16, completes and delivers them. Printed: each
operation's steps per message, without tenants and with ``--tenants`` (a seeded random tenant
per message). Run it on each version's source (``PYTHONPATH=<other checkout>/src``).
"""

from __future__ import annotations

import argparse
import random
import sqlite3
import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

from tether._plumbing import _sqlite_writer
from tether.bridge import SqliteStore, Task

BATCH = 16
OPERATIONS = ("ingest_many", "assign_many", "claim_many", "complete", "mark_delivered")


def args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backlog", type=int, default=2000)
    parser.add_argument("--cycles", type=int, default=200)
    parser.add_argument("--rooms", type=int, default=100)
    parser.add_argument("--tenants", type=int, default=1000)
    parser.add_argument("--ahead", type=int, default=48, help="tasks kept assigned ahead")
    return parser.parse_args()


def count_steps(steps: Counter[str]) -> None:
    """Count each writer job's steps under the name of the store operation that made it."""
    real = _sqlite_writer.SqliteWriter.run

    async def run(self: Any, fn: Callable[[sqlite3.Connection], Any], **kw: Any) -> Any:
        name = getattr(fn, "__qualname__", "").split(".<locals>")[0].split(".")[-1]

        def counted(conn: sqlite3.Connection) -> Any:
            n = [0]

            def tick() -> int:
                n[0] += 1
                return 0

            conn.set_progress_handler(tick, 1)
            try:
                return fn(conn)
            finally:
                conn.set_progress_handler(None, 0)
                steps[name.lstrip("_")] += n[0]

        return await real(self, counted, **kw)

    setattr(_sqlite_writer.SqliteWriter, "run", run)  # noqa: B010 - for this process


async def drain(opts: argparse.Namespace, tenants: int, steps: Counter[str]) -> None:
    pick = random.Random(56)

    def task(i: int) -> Task:
        headers = {"tenant": f"tenant-{pick.randrange(tenants)}"} if tenants else {}
        return Task(f"m-{i}", "x", room=f"room-{i % opts.rooms}", headers=headers)

    with tempfile.TemporaryDirectory() as tmp:
        store = await SqliteStore.open(Path(tmp, "custody.db"))
        try:
            await store.beat("w", "worker", opts.ahead + BATCH)
            made = 0
            while made < opts.backlog:
                await store.ingest_many([task(made + k) for k in range(100)])
                made += 100
            ids = [f"m-{k}" for k in range(made)]
            await store.assign_many([(id, "w") for id in ids[: opts.ahead]])
            handed = opts.ahead
            steps.clear()
            for _ in range(opts.cycles):
                await store.ingest_many([task(made + k) for k in range(BATCH)])
                ids += [f"m-{made + k}" for k in range(BATCH)]
                made += BATCH
                await store.assign_many([(id, "w") for id in ids[handed : handed + BATCH]])
                handed += BATCH
                for claim in await store.claim_many("w", limit=BATCH, leaderless=False):
                    await store.complete(claim, "ok")
                    await store.mark_delivered(claim.task.id)
        finally:
            await store.aclose()


async def main() -> None:
    opts = args()
    steps: Counter[str] = Counter()
    count_steps(steps)
    messages = opts.cycles * BATCH
    print(
        f"{opts.backlog} tasks of backlog over {opts.rooms} rooms, {opts.ahead} assigned ahead, "
        f"{messages} messages through; SQLite steps per message:"
    )
    for tenants in (0, opts.tenants):
        await drain(opts, tenants, steps)
        parts = ", ".join(f"{op} {steps[op] / messages:.0f}" for op in OPERATIONS)
        total = sum(steps[op] for op in OPERATIONS) / messages
        print(f"  {f'{tenants} tenants' if tenants else 'no tenants':<14} {parts}; all {total:.0f}")


if __name__ == "__main__":
    trio.run(main)
