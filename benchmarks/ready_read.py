"""What reading the ready tasks costs the SQLite store as the backlog of ordered rooms grows.

The lead's view (a window of 16) and a leaderless claim (4 slots) ask which pending tasks may
run now. Under a ``serial`` room only the room's head may run, so a deep backlog holds few
ready tasks among many. Two ways to answer, on the same rows:

- **walk**: the store before migration 10: one walk of the pending queue in order through the
  room gate until the window fills (on a file at schema version 9, with its ``tasks_pending``
  index): it reads the whole backlog when fewer tasks than the window are ready;
- **ready**: ``_ready.ready_pending`` at the current schema: the free tasks in order, the
  head of the ordered rooms' queue, then room by room.

Backlogs: ``N`` pending messages in 40 rooms with 32 of them running one (8 ready heads), and
a shallow one, ``N`` rooms of one message each (every head is ready: the walk's best case).
Printed per backlog: the median and spread of each read, and walk / ready.

    uv run python benchmarks/ready_read.py [--backlogs 2000,6000,20000] [--rounds 41]
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from tether.bridge.stores.sqlite._ready import ready_pending
from tether.bridge.stores.sqlite._schema import MIGRATIONS, _statements, migrate
from tether.bridge.stores.sqlite._sql import ROOM_GATE

NOW = 1_000.0
ROOMS = 40
RUNNING = 32

WALK = (
    "SELECT t.rowid FROM tasks t WHERE t.state = 'pending' "
    "AND (t.not_before IS NULL OR t.not_before <= ?) AND t.suspect = 0 "
    f"AND {ROOM_GATE} ORDER BY t.priority, t.rowid LIMIT ?"
)


def schema_9(db: sqlite3.Connection) -> None:
    for version in range(9):
        for statement in _statements(MIGRATIONS[version]):
            db.execute(statement)


def fill(db: sqlite3.Connection, rows: list[tuple[str, str]]) -> None:
    """Tasks (room, state) of the ``serial`` policy, in this order."""
    with db:
        db.executemany(
            "INSERT INTO tasks (id, body, room, priority, headers, state, owner, attempt, "
            "lease_until, created_at, updated_at, room_policy) "
            "VALUES (?, 'x', ?, 1, '{}', ?, ?, 1, ?, 1.0, 1.0, 'serial')",
            [
                (
                    f"t{n}",
                    room,
                    state,
                    "w1" if state == "claimed" else None,
                    NOW + 60 if state == "claimed" else None,
                )
                for n, (room, state) in enumerate(rows)
            ],
        )


def deep(backlog: int) -> list[tuple[str, str]]:
    rooms = [f"room-{k:02}" for k in range(ROOMS)]
    running = [(room, "claimed") for room in rooms[:RUNNING]]
    return running + [(rooms[n % ROOMS], "pending") for n in range(backlog)]


def shallow(backlog: int) -> list[tuple[str, str]]:
    return [(f"room-{n:06}", "pending") for n in range(backlog)]


def timed(read: Callable[[], object], rounds: int) -> list[float]:
    times = []
    for _ in range(rounds):
        began = time.perf_counter()
        read()
        times.append(time.perf_counter() - began)
    return times


def compare(rows: list[tuple[str, str]], limit: int, rounds: int) -> tuple[list[float], ...]:
    with tempfile.TemporaryDirectory() as tmp:
        old = sqlite3.connect(Path(tmp, "v9.db"), isolation_level=None)
        new = sqlite3.connect(Path(tmp, "now.db"), isolation_level=None)
        try:
            schema_9(old)
            migrate(new)
            fill(old, rows)
            fill(new, rows)
            walked = [r for (r,) in old.execute(WALK, (NOW, limit))]
            assert ready_pending(new, NOW, limit) == walked  # the same answer, both ways
            walk = timed(lambda: old.execute(WALK, (NOW, limit)).fetchall(), rounds)
            ready = timed(lambda: ready_pending(new, NOW, limit), rounds)
            return walk, ready
        finally:
            old.close()
            new.close()


def ms(times: list[float]) -> str:
    return (
        f"{1000 * statistics.median(times):7.3f} ms "
        f"[{1000 * min(times):.3f}-{1000 * max(times):.3f}]"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backlogs", default="2000,6000,20000")
    parser.add_argument("--rounds", type=int, default=41)
    args = parser.parse_args()
    for backlog in (int(x) for x in args.backlogs.split(",")):
        shapes = (("40 rooms, 32 running", deep(backlog)), ("1 per room", shallow(backlog)))
        for shape, rows in shapes:
            for who, limit in (("lead's view", 16), ("leaderless claim", 4)):
                walk, ready = compare(rows, limit, args.rounds)
                print(
                    f"backlog {backlog:>6,} ({shape:>20}), {who:>16}: walk {ms(walk)}, "
                    f"ready {ms(ready)}; walk / ready "
                    f"{statistics.median(walk) / statistics.median(ready):6.1f}x",
                    flush=True,
                )


if __name__ == "__main__":
    main()
