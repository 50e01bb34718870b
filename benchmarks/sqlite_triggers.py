"""What each trigger and index of the SQLite store costs a job: the SQL of ingest -> claim ->
complete alone (one thread, no Trio, the store's own statements), in commits of ``--batch``
tasks (16: what 16 lanes of ``peers_sqlite.py`` share; 1: a lone lane), at
``synchronous=OFF`` (the SQL and the WAL writes, no sync), on a fresh store with the named
triggers or indexes dropped. Prints CPU per job (process time: steadier than the wall on a busy
machine) and WAL KiB per job (deterministic: the pages the commits wrote), medians of
interleaved rounds, each side's difference from the whole schema.

    uv run python benchmarks/sqlite_triggers.py [--jobs 4800] [--batch 16] [--rounds 5]

Issue #49 used it to find what took 16 lanes from ~6,100 to ~3,700 jobs/s since the second
wave: no one trigger; the journal's pages (a leaf per task in a group commit, migration 23),
then the third wave's count, turn and permit triggers, a few us a job each.
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

import trio

from tether.bridge import SqliteStore
from tether.bridge.stores.sqlite import _sql as sql
from tether.bridge.stores.sqlite._news import _TRIGGERS as NEWS_TRIGGERS

THIRD_WAVE = (
    "TRIGGER task_counts_in",
    "TRIGGER task_counts_move",
    "TRIGGER task_counts_out",
    "TRIGGER turns_message",
    "TRIGGER turns_reply",
    "INDEX tasks_room_turns",
    "TRIGGER permits_free",
    "INDEX tasks_tenant_queued",
    "INDEX tasks_queued_turns",
)
NEWS = tuple(f"TRIGGER temp.{t.split()[6]}" for t in NEWS_TRIGGERS)
SIDES: dict[str, tuple[str, ...]] = {
    "whole schema": (),
    "- task counts": ("TRIGGER task_counts_in", "TRIGGER task_counts_move"),
    "- turn triggers": THIRD_WAVE[3:6],
    "- permits_free": ("TRIGGER permits_free",),
    "- tenant indexes": THIRD_WAVE[7:],
    "- journal": ("TRIGGER journal_ingest", "TRIGGER journal_move"),
    "- news (temp)": NEWS,
    "- third wave": THIRD_WAVE,
    "- all of these": (*THIRD_WAVE, "TRIGGER journal_ingest", "TRIGGER journal_move", *NEWS),
}


def fresh_store(db: Path) -> None:
    async def create() -> None:
        await (await SqliteStore.open(db)).aclose()

    trio.run(create)


def jobs_through(db: Path, drop: tuple[str, ...], jobs: int, batch: int) -> tuple[float, float]:
    """CPU seconds and WAL bytes for ``jobs`` jobs in commits of ``batch``."""
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute("PRAGMA synchronous = OFF")
        conn.execute("PRAGMA cache_size = -32768")  # as the store's writer
        conn.execute("PRAGMA wal_autocheckpoint = 0")  # the WAL's growth is the pages written
        conn.create_function("tether_news", 1, lambda _kind: None, deterministic=False)
        for trigger in NEWS_TRIGGERS:
            conn.execute(trigger)
        for what in drop:
            conn.execute(f"DROP {what}")
        wal = db.with_name(db.name + "-wal")
        conn.execute("SELECT count(*) FROM tasks").fetchone()
        start_bytes = wal.stat().st_size if wal.exists() else 0
        start = time.process_time()
        for first in range(0, jobs, batch):
            now = time.time()
            ids = [f"lane{k:02d}-{first // batch}" for k in range(batch)]  # spread as lanes'
            conn.execute("BEGIN IMMEDIATE")
            for id in ids:
                row = (id, "job", None, 1, "{}", now, now, "serial", None, 0, id)
                conn.execute(sql.INGEST, row)
            conn.execute("COMMIT")
            conn.execute("BEGIN IMMEDIATE")
            claimed = []
            for k, id in enumerate(ids):
                (rowid,) = conn.execute("SELECT rowid FROM tasks WHERE id = ?", (id,)).fetchone()
                lease = (f"w{k}", now + 60, now, rowid)
                claimed += conn.execute(sql.claim_ready(1), lease).fetchall()
            conn.execute("COMMIT")
            conn.execute("BEGIN IMMEDIATE")
            for k, (id, *_, run, _fair) in enumerate(claimed):
                conn.execute(sql.COMPLETE, ("ok", 0, now, id, f"w{k}", run))
            conn.execute("COMMIT")
        return time.process_time() - start, wal.stat().st_size - start_bytes
    finally:
        conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=4800)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    jobs = args.jobs - args.jobs % args.batch
    cpu: dict[str, list[float]] = {name: [] for name in SIDES}
    wal: dict[str, list[float]] = {name: [] for name in SIDES}
    names = list(SIDES)
    for r in range(args.rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            with tempfile.TemporaryDirectory() as tmp:
                db = Path(tmp) / "t.db"
                fresh_store(db)
                seconds, written = jobs_through(db, SIDES[name], jobs, args.batch)
            cpu[name].append(seconds / jobs * 1e6)
            wal[name].append(written / jobs / 1024)
    print(f"{jobs} jobs in commits of {args.batch}, synchronous=OFF, medians of {args.rounds}:")
    whole = statistics.median(cpu["whole schema"])
    for name in SIDES:
        us = statistics.median(cpu[name])
        print(
            f"  {name:18s} {us:6.1f} us/job [{min(cpu[name]):.1f}-{max(cpu[name]):.1f}] "
            f"({us - whole:+6.1f})  WAL {statistics.median(wal[name]):5.1f} KiB/job"
        )


if __name__ == "__main__":
    main()
