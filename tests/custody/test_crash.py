"""Process-crash safety: a real process ingesting and completing tasks is SIGKILLed at random.

Every ingest that returned before the kill (the moment the bridge would ack the gateway) must
be in the store after reopening, every completion that returned must be a stored result, and the
database must pass SQLite's integrity check. Many rounds share one database file, so a kill can
also land during the open/recovery of the previous round's leftovers.

What this proves, precisely: a commit that returned is in the database file or its WAL *as the
kernel sees them* (the transaction reached ``write()``, and recovery of a half-written WAL is
sound). It cannot prove durability against power loss or an OS crash: SIGKILL leaves the page
cache intact, so this test passes even with ``synchronous=OFF`` (no fsync at all). Power-loss
durability of what was promised comes from the WAL sync before each promise (durable at
promises, the default ``synchronous=NORMAL``; ``FULL`` syncs every commit): SQLite's guarantee
for a synced WAL; ``tests/stores/test_sqlite.py`` pins the settings and
``tests/service/test_durable_at_promises.py`` cuts the WAL back to the last sync.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from support.migrations import assert_sqlite_intact
from tether.bridge import CustodyState, SqliteStore

CHILD = Path(__file__).with_name("crash_child.py")
ROUNDS = 12


async def _one_round(db: Path, round: int, rng: random.Random) -> tuple[list[str], list[str]]:
    """Run the child, kill it at a random point, return (ingested, completed) ids it reported."""
    process = await trio.lowlevel.open_process(
        [sys.executable, str(CHILD), str(db), str(round)],
        stdout=subprocess.PIPE,
    )
    assert process.stdout is not None
    output = b""
    try:
        if rng.random() < 0.25:
            # some kills land anywhere from start-up on: import, open, WAL recovery, migration
            with trio.move_on_after(rng.uniform(0.05, 0.6)):
                while chunk := await process.stdout.receive_some():
                    output += chunk
        else:
            with trio.fail_after(30):
                while b"ready\n" not in output:
                    chunk = await process.stdout.receive_some()
                    assert chunk, f"child exited early: {output!r}"
                    output += chunk
        with trio.move_on_after(rng.uniform(0.0, 0.4)):
            while chunk := await process.stdout.receive_some():
                output += chunk
        process.send_signal(signal.SIGKILL)
        with trio.fail_after(30):
            while chunk := await process.stdout.receive_some():
                output += chunk
            assert await process.wait() == -signal.SIGKILL
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        await process.stdout.aclose()
    lines = output.decode().split("\n")[:-1]  # a line cut by the kill has no newline: not a promise
    ingested = [line.split()[1] for line in lines if line.startswith("ingested ")]
    completed = [line.split()[1] for line in lines if line.startswith("completed ")]
    return ingested, completed


@pytest.mark.slow
async def test_every_returned_ingest_survives_sigkill(tmp_path: Path) -> None:
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    db = tmp_path / "crash" / "custody.db"
    all_ingested: list[str] = []
    all_completed: list[str] = []
    for round in range(ROUNDS):
        ingested, completed = await _one_round(db, round, rng)
        all_ingested += ingested
        all_completed += completed
        store = await SqliteStore.open(db)
        try:
            for id in all_ingested:
                assert await store.state(id) is not None, f"seed {seed}: {id} lost"
            for id in all_completed:
                rec = await store.get(id)
                assert rec is not None
                assert (rec.state, rec.result) == (CustodyState.RESULT, f"reply to {id}"), seed
            counts = await store.counts()
            assert counts[CustodyState.DELIVERED] == counts[CustodyState.DEAD] == 0
        finally:
            await store.aclose()
        assert_sqlite_intact(db)
    assert len(all_ingested) > ROUNDS * 10, f"too little work to be a test: {len(all_ingested)}"
    assert all_completed, "no completion ever returned before a kill"
