"""What one long poll costs the reference gateway as its backlog grows.

A poll leases up to 100 tasks in room order (``GatewayStore.claim``: a room's later messages
wait while an earlier one is out on a lease). The backlog is ``N`` queued messages in 40 rooms,
a tenth of them behind a live lease, written straight into a fresh database; each round
leases a batch and acks it, as a bridge does. Printed per backlog: the median and spread of
the poll's time, and its growth against the smallest backlog beside the backlog's own growth
(linear scaling keeps the two equal; a poll that looked back through its room for every
queued task grew with the square: 1.3 s per poll at 20,000 before).

    uv run python benchmarks/gateway_backlog.py [--backlogs 2000,6000,20000] [--rounds 9]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import trio

from tether.gateway._store import GatewayStore

NOW = 1_000_000.0
ROOMS = 40
LIMIT = 100


async def poll_times(backlog: int, rounds: int) -> list[float]:
    with tempfile.TemporaryDirectory() as tmp:
        store = await GatewayStore.open(Path(tmp) / "gateway.db")
        try:
            with store._db:
                store._db.executemany(
                    "INSERT INTO tasks (id, room, sender, body, created_at, state, lease_until)"
                    " VALUES (?, ?, 'user', 'hello', ?, ?, ?)",
                    [
                        (
                            f"m{i}",
                            f"room-{i % ROOMS}",
                            float(i),
                            "leased" if i % 10 == 0 else "queued",
                            NOW + 3600 if i % 10 == 0 else None,
                        )
                        for i in range(backlog)
                    ],
                )
            times = []
            for _ in range(rounds):
                began = time.perf_counter()
                claim = await store.claim(LIMIT, 30.0, NOW)
                times.append(time.perf_counter() - began)
                await store.ack_many([task.id for task in claim.tasks], NOW)
            return times
        finally:
            store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backlogs", default="2000,6000,20000")
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    backlogs = [int(x) for x in args.backlogs.split(",")]
    medians: dict[int, float] = {}
    for backlog in backlogs:
        times = trio.run(poll_times, backlog, args.rounds)
        medians[backlog] = statistics.median(times)
        first = backlogs[0]
        print(
            f"backlog {backlog:>7,}: poll of {LIMIT} median {1000 * medians[backlog]:7.1f} ms "
            f"[{1000 * min(times):.1f}-{1000 * max(times):.1f}]; x{backlog / first:.0f} backlog, "
            f"x{medians[backlog] / medians[first]:.1f} time",
            flush=True,
        )


if __name__ == "__main__":
    main()
