"""A live task's turns are its own row (issue #49, decision 2): SQLite writes no turn for a
message, a reply or a delivery, and a file of the version before moves its live turns onto
their tasks, keeping what every conversation reads and counts."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from support.migrations import sqlite_from, sqlite_step
from tether.bridge import SqliteStore, Task

STEP = sqlite_step("tasks_room_replies")
"""The migration's place in the list (found by its content: other issues append theirs)."""


def turn_rows(db: Path) -> list[tuple[str, int, str, str]]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return conn.execute(
            "SELECT room, seq, role, task_id FROM turns ORDER BY room, seq"
        ).fetchall()
    finally:
        conn.close()


async def test_a_message_its_reply_and_its_delivery_write_no_turn_row(tmp_path: Path) -> None:
    db = tmp_path / "custody.db"
    store = await SqliteStore.open(db)
    try:
        await store.ingest(Task("m0", "hello", room="r"), room_policy="concurrent")
        claim = await store.claim("w1", leaderless=True)
        assert claim is not None
        await store.complete(claim, "hi")
        await store.mark_delivered_many(["m0"])
        await store.ingest(Task("m1", "more", room="r"), room_policy="concurrent")
        history = (await store.conversation("m1")).history
        assert [(t.role, t.text, t.outcome) for t in history] == [
            ("user", "hello", "received"),
            ("assistant", "hi", "delivered"),
        ]
        assert turn_rows(db) == []  # the version before wrote three: two rows, one update
    finally:
        await store.aclose()


_TASK = (
    "INSERT INTO tasks (id, body, room, priority, headers, state, attempt, owner, run_no, "
    "lease_until, created_at, updated_at, room_policy, result, no_send) VALUES "
)
OLD_ROWS = (
    # room r: d delivered then deleted by retention (its turns stay rows), a delivered, b a
    # stored reply, c waiting for its run
    _TASK + "('d', 'qd', 'r', 1, '{{}}', 'claimed', 1, 'w1', 1, 1e12, 1, 1, 'concurrent', NULL, 0)",
    _TASK + "('a', 'qa', 'r', 1, '{{}}', 'claimed', 1, 'w1', 1, 1e12, 2, 2, 'concurrent', NULL, 0)",
    _TASK + "('b', 'qb', 'r', 1, '{{}}', 'claimed', 1, 'w1', 1, 1e12, 3, 3, 'concurrent', NULL, 0)",
    _TASK + "('c', 'qc', 'r', 1, '{{}}', 'pending', 1, NULL, 0, NULL, 4, 4, 'concurrent', NULL, 0)",
    "UPDATE tasks SET state = 'result', result = 'rd', lease_until = NULL, updated_at = 5 "
    "WHERE id = 'd'",
    "UPDATE tasks SET state = 'delivered', updated_at = 6 WHERE id = 'd'",
    "DELETE FROM tasks WHERE id = 'd'",
    "UPDATE tasks SET state = 'result', result = 'ra', lease_until = NULL, updated_at = 7 "
    "WHERE id = 'a'",
    "UPDATE tasks SET state = 'delivered', updated_at = 8 WHERE id = 'a'",
    "UPDATE tasks SET state = 'result', result = 'rb', lease_until = NULL, updated_at = 9 "
    "WHERE id = 'b'",
    # room s: e asked, f's message answered it (closed, no reply of its own); e's reply sits
    # under the answer
    _TASK + "('e', 'qe', 's', 1, '{{}}', 'claimed', 1, 'w1', 1, 1e12, 10, 10, 'concurrent', "
    "NULL, 0)",
    _TASK + "('f', 'qf', 's', 1, '{{}}', 'result', 1, 'w1', 1, NULL, 11, 11, 'concurrent', '', 1)",
    "INSERT INTO asks (task_id, name, seq, room, question, status, deadline, at, answer, "
    "answer_id) VALUES ('e', 'ask', 1, 's', 'which?', 'answered', 1e12, 10, 'qf', 'f')",
    "UPDATE tasks SET state = 'result', result = 're', lease_until = NULL, updated_at = 12 "
    "WHERE id = 'e'",
    # h asked too, i answered it: h waits to run again, its reply to go under i's message
    _TASK + "('h', 'qh', 's', 1, '{{}}', 'pending', 1, NULL, 1, NULL, 13, 13, 'concurrent', "
    "NULL, 0)",
    _TASK + "('i', 'qi', 's', 1, '{{}}', 'result', 1, 'w1', 1, NULL, 14, 14, 'concurrent', '', 1)",
    "INSERT INTO asks (task_id, name, seq, room, question, status, deadline, at, answer, "
    "answer_id) VALUES ('h', 'ask', 1, 's', 'when?', 'answered', 1e12, 13, 'qi', 'i')",
)


async def test_a_file_of_the_version_before_keeps_every_turn_and_count(tmp_path: Path) -> None:
    db = tmp_path / "custody.db"
    async with sqlite_from(db, STEP, *OLD_ROWS) as store:
        assert turn_rows(db) == [("r", 1, "assistant", "d"), ("r", 1, "user", "d")]
        r = await store.room("r")
        assert r is not None
        assert [(t.role, t.text, t.outcome) for t in r.turns] == [
            ("user", "qd", "received"),
            ("assistant", "rd", "delivered"),
            ("user", "qa", "received"),
            ("assistant", "ra", "delivered"),
            ("user", "qb", "received"),
            ("assistant", "rb", "result"),
            ("user", "qc", "received"),
        ]
        assert r.turn_count == 7
        s = await store.room("s")
        assert s is not None
        assert [(t.role, t.text) for t in s.turns] == [
            ("user", "qe"),
            ("user", "qf"),
            ("assistant", "re"),
            ("user", "qh"),
            ("user", "qi"),
        ]
        assert s.turn_count == 5
        assert (await store.conversation_counts()).turns == 12
        claim = await store.claim("w1", leaderless=True)  # c, the one left to run
        assert claim is not None
        assert [t.text for t in (await store.conversation("c")).history] == [
            "qd",
            "rd",
            "qa",
            "ra",
            "qb",
            "rb",
        ]
        await store.complete(claim, "rc")
        await store.ingest(Task("g", "qg", room="r"), room_policy="concurrent")
        history = (await store.conversation("g")).history
        assert [t.text for t in history][-2:] == ["qc", "rc"]
        assert (await store.room("r")).turn_count == 9  # type: ignore[union-attr]
        asker = await store.claim("w1", leaderless=True)
        assert asker is not None
        assert asker.task.id == "h"
        await store.complete(asker, "rh")
        s = await store.room("s")
        assert s is not None
        assert [t.text for t in s.turns][-3:] == ["qh", "qi", "rh"]  # under its answer
        assert s.turn_count == 6
        assert len(turn_rows(db)) == 2


async def test_every_window_is_the_tail_of_the_whole_room(tmp_path: Path) -> None:
    """The window reads half its size in tasks first (a message and its reply each) and more
    only when they do not hold it: every window, whatever the room's mix of answered and
    unanswered messages, is the newest turns of the whole room."""
    db = tmp_path / "custody.db"
    store = await SqliteStore.open(db)
    try:
        for i in range(30):
            await store.ingest(Task(f"m{i}", f"q{i}", room="r"), room_policy="concurrent")
            claim = await store.claim("w1", leaderless=True)
            assert claim is not None
            if i % 7 in (2, 3, 4):  # runs of unanswered messages
                await store.fail(claim, "boom", permanent=True)
            elif i % 5 == 0:
                await store.complete(claim, "", no_send=True)
            else:
                await store.complete(claim, f"a{i}")
        await store.ingest(Task("last", "q", room="r"), room_policy="concurrent")
        whole = (await store.conversation("last", limit=200)).history
        assert len(whole) == 30 + sum(1 for i in range(30) if i % 7 not in (2, 3, 4) and i % 5)
        for limit in range(len(whole) + 2):
            window = (await store.conversation("last", limit=limit)).history
            assert window == whole[len(whole) - min(limit, len(whole)) :], limit
    finally:
        await store.aclose()
