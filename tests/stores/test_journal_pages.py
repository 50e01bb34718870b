"""SQLite migration 23 (issue #49): the journal in the order its tasks were born.

Keyed by (task, seq), a commit of many tasks' moves put each task's entry in its own leaf of
the journal (its id's place among every id kept), so a group commit of 16 lanes' transitions
wrote a journal page per task; keyed by (born, task, seq) the entries of tasks born together
share the journal's last leaves. These tests hold a group commit's pages to it, and check that
a file written by version 22 keeps every journal entry, in order, goes on appending after them,
and still deletes a task's journal with the task.
"""

from __future__ import annotations

import itertools
import sqlite3
import struct
from pathlib import Path

from support.migrations import sqlite_from, sqlite_step
from tether.bridge import SqliteStore, Task
from tether.bridge.stores.sqlite._schema import SCHEMA_VERSION

_FRAME_HEADER = 24
_WAL_HEADER = 32
LANES = 16


async def test_a_group_commit_of_16_new_tasks_writes_few_journal_pages(tmp_path: Path) -> None:
    # 16 lanes' ids spread over the id order (as a gateway's are): keyed by id, each new
    # task's journal entry went to a leaf of its own among the 3,200 entries before (19
    # journal pages of the commit's 45 measured); in birth order they share the last leaf
    db = tmp_path / "c.db"
    wal = tmp_path / "c.db-wal"
    tick = itertools.count(1)
    async with await SqliteStore.open(
        db, synchronous="OFF", clock=lambda: float(next(tick))
    ) as store:
        page = int(await store.db.writer.run(lambda c: c.execute("PRAGMA page_size").fetchone()[0]))
        await store.db.writer.run(lambda c: c.execute("PRAGMA wal_autocheckpoint = 0"))

        def frames() -> int:
            return (wal.stat().st_size - _WAL_HEADER) // (page + _FRAME_HEADER)

        for n in range(200):
            await store.ingest_many([Task(f"lane{k:02d}-{n:04d}", "x") for k in range(LANES)])
        start = frames()
        await store.ingest_many([Task(f"lane{k:02d}-new", "x") for k in range(LANES)])
        end = frames()
        trees = dict(
            await store.db.read(lambda c: c.execute("SELECT pageno, name FROM dbstat").fetchall())
        )
        data = wal.read_bytes()  # (closing the store checkpoints and removes it)
    written = [  # each frame's header starts with the number of the page it holds
        struct.unpack_from(">I", data, _WAL_HEADER + n * (page + _FRAME_HEADER))[0]
        for n in range(start, end)
    ]
    journal = [p for p in written if trees.get(p) == "journal"]
    assert len(journal) <= 4, (len(journal), len(written))


async def test_a_version_22_file_keeps_its_journal_in_order(tmp_path: Path) -> None:
    ticks = iter(float(t) for t in range(10, 100))
    async with sqlite_from(
        tmp_path / "v22.db",
        sqlite_step("journal_born"),  # found by its content: later issues append theirs
        *(
            "INSERT INTO {s}tasks (id, body, priority, headers, state, attempt, created_at, "
            f"updated_at) VALUES ('{id}', 'x', 1, '{{{{}}}}', 'pending', 1, {born}, {born})"
            for id, born in (("b", 1.0), ("a", 2.0), ("c", 3.0))
        ),
        "UPDATE {s}tasks SET state = 'claimed', owner = 'w1', lease_until = 99.0, "
        "updated_at = 4.0 WHERE id = 'b'",
        "UPDATE {s}tasks SET state = 'claimed', owner = 'w1', lease_until = 99.0, "
        "updated_at = 5.0 WHERE id = 'a'",
        "UPDATE {s}tasks SET state = 'pending', owner = NULL, lease_until = NULL, "
        "attempt = 2, reason = 'boom', updated_at = 6.0 WHERE id = 'b'",
    ) as store:
        store.clock = lambda: next(ticks)
        a = [(e.at, e.src, e.dst) for e in await store.journal("a")]
        b = [(e.at, e.src, e.dst, e.attempt, e.reason) for e in await store.journal("b")]
        assert a == [(2.0, None, "pending"), (5.0, "pending", "claimed")]
        assert b == [
            (1.0, None, "pending", 1, None),
            (4.0, "pending", "claimed", 1, None),
            (6.0, "claimed", "pending", 1, "boom"),
        ]
        claim = await store.claim("w2", leaderless=True)  # b, born first, then c
        assert claim is not None
        assert claim.task.id == "b"
        await store.complete(claim, "done")
        moves = [(e.src, e.dst, e.worker) for e in await store.journal("b")][3:]
        assert moves == [("pending", "claimed", "w2"), ("claimed", "result", "w2")]
        assert [e.dst for e in await store.journal("c")] == ["pending"]
        assert await store.journal("nobody") == []

        def drop_c(conn: sqlite3.Connection) -> list[tuple[str, int]]:
            conn.execute("DELETE FROM tasks WHERE id = 'c'")  # as retention prunes a task
            return conn.execute("SELECT id, count(*) FROM journal GROUP BY id").fetchall()

        assert sorted(await store.db.writer.run(drop_c)) == [("a", 2), ("b", 5)]
        version = await store.db.writer.run(lambda c: c.execute("PRAGMA user_version").fetchone())
        assert version == (SCHEMA_VERSION,)
