"""SQLite schema, versioned with ``PRAGMA user_version``.

``MIGRATIONS[n]`` takes a database from version ``n`` to ``n + 1``. Never edit a released
migration: append one (later issues add e.g. a ``workers`` table for beats and a stall-notice
record this way). Indexes are partial, one per queue a query walks, so a transition touches
only the indexes of the states it leaves and enters. The state CHECK lists the states
literally, as released; a test asserts it accepts exactly ``CustodyState``.
"""

from __future__ import annotations

import sqlite3
from typing import Final

MIGRATIONS: Final[tuple[str, ...]] = (
    # 0 -> 1: the tasks table
    """
    CREATE TABLE tasks (
        id          TEXT PRIMARY KEY NOT NULL CHECK (length(id) BETWEEN 1 AND 128),
        body        TEXT NOT NULL,
        room        TEXT,
        priority    INTEGER NOT NULL CHECK (priority IN (0, 1, 2)),
        headers     TEXT NOT NULL,
        state       TEXT NOT NULL CHECK (state IN
                        ('pending', 'assigned', 'claimed', 'result', 'delivered', 'dead')),
        owner       TEXT,
        attempt     INTEGER NOT NULL CHECK (attempt >= 1),
        lease_until REAL,
        result      TEXT,
        reason      TEXT,
        created_at  REAL NOT NULL,
        updated_at  REAL NOT NULL,
        CHECK (state NOT IN ('assigned', 'claimed', 'result') OR owner IS NOT NULL),
        CHECK (state != 'pending' OR owner IS NULL),
        CHECK ((state = 'claimed') = (lease_until IS NOT NULL)),
        CHECK (state NOT IN ('result', 'delivered') OR result IS NOT NULL),
        CHECK (state != 'dead' OR reason IS NOT NULL)
    );
    CREATE INDEX tasks_pending ON tasks (priority) WHERE state = 'pending';
    CREATE INDEX tasks_assigned ON tasks (owner, priority) WHERE state = 'assigned';
    CREATE INDEX tasks_leases ON tasks (lease_until) WHERE state = 'claimed';
    CREATE INDEX tasks_results ON tasks (priority) WHERE state = 'result';
    """,
    # 1 -> 2: the worker pool (beats, room affinity, stall notices, replies that are not sent)
    """
    CREATE TABLE workers (
        name        TEXT PRIMARY KEY NOT NULL,
        role        TEXT NOT NULL CHECK (role IN ('lead', 'worker')),
        capacity    INTEGER NOT NULL CHECK (capacity >= 0),
        last_beat   REAL NOT NULL,
        started_at  REAL NOT NULL
    );
    CREATE TABLE rooms (
        room        TEXT PRIMARY KEY NOT NULL,
        worker      TEXT NOT NULL,
        at          REAL NOT NULL
    );
    CREATE TABLE stall_notices (
        id          TEXT PRIMARY KEY NOT NULL,
        notified_at REAL NOT NULL
    );
    ALTER TABLE tasks ADD COLUMN no_send INTEGER NOT NULL DEFAULT 0 CHECK (no_send IN (0, 1));
    CREATE INDEX tasks_claimed_age ON tasks (created_at) WHERE state = 'claimed'
    """,
    # 2 -> 3: ids of delivered tasks whose rows were pruned (a replay stays a replay)
    """
    CREATE TABLE tombstones (
        id           TEXT PRIMARY KEY NOT NULL,
        delivered_at REAL NOT NULL
    );
    CREATE INDEX tombstones_age ON tombstones (delivered_at)
    """,
    # 3 -> 4: when the gateway confirmed it was told about a dead task (NULL: not yet); the
    # partial index holds only the dead tasks still to report, so finding them stays cheap
    """
    ALTER TABLE tasks ADD COLUMN dead_reported_at REAL;
    CREATE INDEX tasks_dead_unreported ON tasks (updated_at)
        WHERE state = 'dead' AND dead_reported_at IS NULL
    """,
    # 4 -> 5 (rooms, issue #17): the room policy each task was ingested under; the partial
    # indexes find a room's head, its claims and its replies (the claim's room gate)
    """
    ALTER TABLE tasks ADD COLUMN room_policy TEXT NOT NULL DEFAULT 'concurrent'
        CHECK (room_policy IN ('concurrent', 'serial', 'replace'));
    CREATE INDEX tasks_room_custody ON tasks (room)
        WHERE room IS NOT NULL AND state IN ('assigned', 'claimed', 'pending', 'result');
    CREATE INDEX tasks_room_queue ON tasks (room)
        WHERE room IS NOT NULL AND state IN ('assigned', 'pending');
    CREATE INDEX tasks_room_claimed ON tasks (room) WHERE room IS NOT NULL AND state = 'claimed'
    """,
    # 5 -> 6 (retry backoff, issue #16): a failed attempt goes back to pending with a
    # not-before time; nobody claims or assigns it earlier. Only a pending task has one (the
    # CHECK); the partial index finds the earliest one due without scanning the queue
    """
    ALTER TABLE tasks ADD COLUMN not_before REAL
        CHECK (not_before IS NULL OR state = 'pending');
    CREATE INDEX tasks_waiting ON tasks (not_before)
        WHERE state = 'pending' AND not_before IS NOT NULL
    """,
    # 6 -> 7 (custody journal, issue #16): every state change of a task is appended to its
    # history by triggers, so it commits in the same transaction as the change itself, from
    # every statement that moves a task (no code path can forget it); deleting a task (the
    # retention of delivered tasks) deletes its history. The actor is read off the move
    """
    CREATE TABLE journal (
        id          TEXT NOT NULL,
        at          REAL NOT NULL,
        src         TEXT,
        dst         TEXT NOT NULL,
        worker      TEXT,
        attempt     INTEGER NOT NULL,
        reason      TEXT,
        actor       TEXT NOT NULL
    );
    CREATE INDEX journal_task ON journal (id);
    CREATE TRIGGER journal_ingest AFTER INSERT ON tasks BEGIN
        INSERT INTO journal (id, at, src, dst, worker, attempt, reason, actor)
        VALUES (NEW.id, NEW.created_at, NULL, NEW.state, NULL, NEW.attempt, NULL, 'bridge');
    END;
    CREATE TRIGGER journal_move AFTER UPDATE OF state ON tasks
    WHEN NEW.state IS NOT OLD.state BEGIN
        INSERT INTO journal (id, at, src, dst, worker, attempt, reason, actor)
        VALUES (
            NEW.id, NEW.updated_at, OLD.state, NEW.state, coalesce(NEW.owner, OLD.owner),
            OLD.attempt, CASE WHEN NEW.reason IS NOT OLD.reason THEN NEW.reason END,
            CASE
                WHEN NEW.reason IS NOT OLD.reason AND NEW.reason LIKE 'operator:%'
                    THEN 'operator'
                WHEN NEW.state = 'assigned' OR OLD.state = 'assigned' AND NEW.state = 'pending'
                    THEN 'lead'
                WHEN OLD.state = 'claimed' AND NEW.reason IS NOT OLD.reason
                    AND NEW.reason LIKE 'lease of worker %' THEN 'reconciler'
                WHEN NEW.state = 'claimed' OR OLD.state = 'claimed' THEN 'worker'
                ELSE 'bridge'
            END
        );
    END;
    CREATE TRIGGER journal_prune AFTER DELETE ON tasks BEGIN
        DELETE FROM journal WHERE id = OLD.id;
    END
    """,
    # 7 -> 8 (crash accounting, issue #16): leases lost because their holder's process died
    # are counted apart from failed attempts; a task in flight at a crash is a suspect (it runs
    # alone) until it finishes; crashes_alone proves a poison task (custody._crashes). The
    # partial index finds the few suspects without scanning the queue
    """
    ALTER TABLE tasks ADD COLUMN crash_count INTEGER NOT NULL DEFAULT 0
        CHECK (crash_count >= 0);
    ALTER TABLE tasks ADD COLUMN crashes_alone INTEGER NOT NULL DEFAULT 0
        CHECK (crashes_alone >= 0 AND crashes_alone <= crash_count);
    ALTER TABLE tasks ADD COLUMN suspect INTEGER NOT NULL DEFAULT 0 CHECK (suspect IN (0, 1));
    CREATE INDEX tasks_suspects ON tasks (state, priority) WHERE suspect = 1
    """,
    # 8 -> 9 (issue #19, pages per commit): a commit's cost grows with the pages it writes to
    # the WAL. The journal becomes one b-tree keyed by (task, sequence number) instead of a
    # table plus an index on the task (one page per entry, not two; the entries of a task stay
    # in order, read by seq); the entries are copied in their order. tasks_claimed_age goes:
    # a claim and a completion each wrote it, for the stall scan's sort alone, and the claimed
    # tasks it sorted are at most the pool's capacity, found by tasks_leases
    """
    CREATE TABLE journal_by_task (
        id          TEXT NOT NULL,
        seq         INTEGER NOT NULL CHECK (seq >= 1),
        at          REAL NOT NULL,
        src         TEXT,
        dst         TEXT NOT NULL,
        worker      TEXT,
        attempt     INTEGER NOT NULL,
        reason      TEXT,
        actor       TEXT NOT NULL,
        PRIMARY KEY (id, seq)
    ) WITHOUT ROWID;
    INSERT INTO journal_by_task (id, seq, at, src, dst, worker, attempt, reason, actor)
        SELECT id, row_number() OVER (PARTITION BY id ORDER BY rowid), at, src, dst, worker,
            attempt, reason, actor
        FROM journal;
    DROP TRIGGER journal_ingest;
    DROP TRIGGER journal_move;
    DROP TRIGGER journal_prune;
    DROP TABLE journal;
    ALTER TABLE journal_by_task RENAME TO journal;
    CREATE TRIGGER journal_ingest AFTER INSERT ON tasks BEGIN
        INSERT INTO journal (id, seq, at, src, dst, worker, attempt, reason, actor)
        VALUES (
            NEW.id, coalesce((SELECT max(seq) FROM journal WHERE id = NEW.id), 0) + 1,
            NEW.created_at, NULL, NEW.state, NULL, NEW.attempt, NULL, 'bridge'
        );
    END;
    CREATE TRIGGER journal_move AFTER UPDATE OF state ON tasks
    WHEN NEW.state IS NOT OLD.state BEGIN
        INSERT INTO journal (id, seq, at, src, dst, worker, attempt, reason, actor)
        VALUES (
            NEW.id, coalesce((SELECT max(seq) FROM journal WHERE id = NEW.id), 0) + 1,
            NEW.updated_at, OLD.state, NEW.state, coalesce(NEW.owner, OLD.owner),
            OLD.attempt, CASE WHEN NEW.reason IS NOT OLD.reason THEN NEW.reason END,
            CASE
                WHEN NEW.reason IS NOT OLD.reason AND NEW.reason LIKE 'operator:%'
                    THEN 'operator'
                WHEN NEW.state = 'assigned' OR OLD.state = 'assigned' AND NEW.state = 'pending'
                    THEN 'lead'
                WHEN OLD.state = 'claimed' AND NEW.reason IS NOT OLD.reason
                    AND NEW.reason LIKE 'lease of worker %' THEN 'reconciler'
                WHEN NEW.state = 'claimed' OR OLD.state = 'claimed' THEN 'worker'
                ELSE 'bridge'
            END
        );
    END;
    CREATE TRIGGER journal_prune AFTER DELETE ON tasks BEGIN
        DELETE FROM journal WHERE id = OLD.id;
    END;
    DROP INDEX tasks_claimed_age
    """,
    # 9 -> 10 (issue #19, ready reads): an ordered room lets only its head run, so a deep
    # backlog holds few ready tasks among many. The lead's view and a leaderless claim read
    # them room by room (tasks_room_queue) plus the pending tasks no room holds back, in
    # queue order (``_ready.ready_pending``). So the pending queue becomes two: the free
    # tasks and those of ordered rooms (a pending task is in one of them, as it was in
    # tasks_pending; a read of the whole queue in order merges the two)
    """
    CREATE INDEX tasks_pending_free ON tasks (priority)
        WHERE state = 'pending' AND (room IS NULL OR room_policy = 'concurrent');
    CREATE INDEX tasks_pending_ordered ON tasks (priority)
        WHERE state = 'pending' AND room IS NOT NULL AND room_policy <> 'concurrent';
    DROP INDEX tasks_pending
    """,
    # 10 -> 11 (issue #37, the re-drive fence) a claim's fence is the task's run number, bumped by
    # every claim and reset by nothing: a re-drive resets ``attempt`` (the failure budget),
    # so (owner, attempt) could repeat and let a cancelled run complete through the fence
    # (issue #37, quarantine): a suspect claimed to run in a quarantine child is marked so (its
    # worker's process dying then blames nobody); the deaths of that child while it ran the
    # task are the proof that counts against it
    """
    ALTER TABLE tasks ADD COLUMN run_no INTEGER NOT NULL DEFAULT 0 CHECK (run_no >= 0);
    ALTER TABLE tasks ADD COLUMN quarantined INTEGER NOT NULL DEFAULT 0
        CHECK (quarantined IN (0, 1));
    ALTER TABLE tasks ADD COLUMN quarantine_deaths INTEGER NOT NULL DEFAULT 0
        CHECK (quarantine_deaths >= 0);
    ALTER TABLE tasks ADD COLUMN last_quarantine_death TEXT
    """,
    # 11 -> 12 (conversations, issue #34): each room's turns and its agent's state. Triggers
    # write the turns in the transaction of the custody move they follow (as the journal's
    # do): ingest writes the person's message, a stored result the reply, delivery marks it
    # delivered, a ``replace`` supersession turns the text a run had shown (``shown``, written
    # by the worker after the gateway took it) into ``interrupted``; a no-send result writes
    # nothing. A turn's ``seq`` is its message's number in the room, shared by the reply, so a
    # reply stored after a newer message still sits under the message it answers. The state
    # is written with a result (``_conversations``); ``turns`` counts a room's rows for the
    # retention of ``--history-keep``. Pruning a task keeps its turns (the conversation)
    """
    CREATE TABLE conversations (
        room        TEXT PRIMARY KEY NOT NULL,
        next_seq    INTEGER NOT NULL DEFAULT 0 CHECK (next_seq >= 0),
        turns       INTEGER NOT NULL DEFAULT 0 CHECK (turns >= 0),
        state       TEXT,
        version     INTEGER NOT NULL DEFAULT 0 CHECK (version >= 0),
        state_bytes INTEGER NOT NULL DEFAULT 0 CHECK (state_bytes >= 0)
    ) WITHOUT ROWID;
    CREATE TABLE turns (
        room        TEXT NOT NULL,
        seq         INTEGER NOT NULL CHECK (seq >= 1),
        role        TEXT NOT NULL CHECK (role IN ('user', 'assistant')),
        task_id     TEXT NOT NULL,
        text        TEXT NOT NULL,
        at          REAL NOT NULL,
        outcome     TEXT NOT NULL CHECK (outcome IN
                        ('received', 'shown', 'result', 'delivered', 'interrupted')),
        PRIMARY KEY (room, seq, role)
    ) WITHOUT ROWID;
    CREATE INDEX turns_task ON turns (task_id);
    CREATE TRIGGER turns_count_in AFTER INSERT ON turns BEGIN
        UPDATE conversations SET turns = turns + 1 WHERE room = NEW.room;
    END;
    CREATE TRIGGER turns_count_out AFTER DELETE ON turns BEGIN
        UPDATE conversations SET turns = max(turns - 1, 0) WHERE room = OLD.room;
    END;
    CREATE TRIGGER turns_message AFTER INSERT ON tasks WHEN NEW.room IS NOT NULL BEGIN
        INSERT INTO conversations (room, next_seq) VALUES (NEW.room, 1)
            ON CONFLICT (room) DO UPDATE SET next_seq = next_seq + 1;
        INSERT INTO turns (room, seq, role, task_id, text, at, outcome)
            SELECT NEW.room, next_seq, 'user', NEW.id, NEW.body, NEW.created_at, 'received'
            FROM conversations WHERE room = NEW.room;
    END;
    CREATE TRIGGER turns_reply AFTER UPDATE OF state ON tasks
    WHEN NEW.state = 'result' AND OLD.state IS NOT 'result' AND NEW.room IS NOT NULL BEGIN
        INSERT INTO turns (room, seq, role, task_id, text, at, outcome)
            SELECT room, seq, 'assistant', NEW.id, NEW.result, NEW.updated_at, 'result'
            FROM turns WHERE NEW.no_send = 0 AND task_id = NEW.id AND room = NEW.room
                AND role = 'user'
            ORDER BY seq DESC LIMIT 1
            ON CONFLICT (room, seq, role) DO UPDATE SET
                text = excluded.text, at = excluded.at, outcome = 'result';
        UPDATE turns SET outcome = 'interrupted', at = NEW.updated_at
            WHERE NEW.no_send = 1 AND NEW.reason IS NOT OLD.reason
                AND NEW.reason LIKE 'superseded by %'
                AND task_id = NEW.id AND room = NEW.room AND role = 'assistant'
                AND outcome = 'shown';
        DELETE FROM turns
            WHERE NEW.no_send = 1 AND task_id = NEW.id AND room = NEW.room
                AND role = 'assistant' AND outcome = 'shown';
    END;
    CREATE TRIGGER turns_delivered AFTER UPDATE OF state ON tasks
    WHEN NEW.state = 'delivered' AND NEW.room IS NOT NULL AND NEW.no_send = 0 BEGIN
        UPDATE turns SET outcome = 'delivered', at = NEW.updated_at
            WHERE task_id = NEW.id AND room = NEW.room AND role = 'assistant'
                AND outcome = 'result';
    END
    """,
    # 12 -> 13 (durable runs, issue #35): the state 'waiting' (a parked run, due at its
    # not_before) and the steps a run recorded. SQLite cannot alter a CHECK; loosening one
    # (every stored row still passes) is the edit of the stored table text SQLite documents
    # for it (lang_altertable, "otherwise"), with the schema cookie bumped so every
    # connection reads it again: no table rebuild, whatever columns other steps added (the
    # SELECT fails the step, an integer overflow, should the text not read as expected).
    # Steps are deleted with their task (retention), like its journal
    """
    PRAGMA writable_schema = ON;
    UPDATE sqlite_schema SET sql = replace(replace(sql,
        '''result'', ''delivered'', ''dead'')',
        '''result'', ''delivered'', ''dead'', ''waiting'')'),
        'CHECK (not_before IS NULL OR state = ''pending'')',
        'CHECK (not_before IS NULL OR state IN (''pending'', ''waiting''))')
        WHERE type = 'table' AND name = 'tasks';
    SELECT CASE WHEN sql LIKE '%''dead'', ''waiting'')%'
        AND sql LIKE '%state IN (''pending'', ''waiting''))%' THEN 1
        ELSE abs(-9223372036854775807 - 1) END FROM sqlite_schema WHERE name = 'tasks';
    PRAGMA schema_version = {next_schema_cookie};
    PRAGMA writable_schema = OFF;
    CREATE TABLE steps (
        task_id     TEXT NOT NULL,
        name        TEXT NOT NULL CHECK (length(name) BETWEEN 1 AND 128),
        seq         INTEGER NOT NULL CHECK (seq >= 1),
        value       TEXT NOT NULL,
        at          REAL NOT NULL,
        attempt     INTEGER NOT NULL CHECK (attempt >= 1),
        size        INTEGER NOT NULL CHECK (size >= 0),
        PRIMARY KEY (task_id, name)
    ) WITHOUT ROWID;
    CREATE TRIGGER steps_prune AFTER DELETE ON tasks BEGIN
        DELETE FROM steps WHERE task_id = OLD.id;
    END;
    CREATE INDEX tasks_sleeping ON tasks (not_before) WHERE state = 'waiting'
    """,
    # issue #36 (questions to the person): the asks a run made, each open while its task
    # waits on it, then answered (the room's next message, taken at ingest), timed out or
    # unsupported; the turn outcome 'asked' (the question, an assistant turn of its own seq:
    # loosened in the stored table text as the durable-runs step does), and a reply stored
    # after an answer sits under the answer (the newest user turn of the task or of a message
    # that answered it). Asks are deleted with their task (retention)
    """
    PRAGMA writable_schema = ON;
    UPDATE sqlite_schema SET sql = replace(sql,
        '''delivered'', ''interrupted'')',
        '''delivered'', ''interrupted'', ''asked'')')
        WHERE type = 'table' AND name = 'turns';
    SELECT CASE WHEN sql LIKE '%''interrupted'', ''asked'')%' THEN 1
        ELSE abs(-9223372036854775807 - 1) END FROM sqlite_schema WHERE name = 'turns';
    PRAGMA schema_version = {next_schema_cookie};
    PRAGMA writable_schema = OFF;
    CREATE TABLE asks (
        task_id     TEXT NOT NULL,
        name        TEXT NOT NULL CHECK (length(name) BETWEEN 1 AND 128),
        seq         INTEGER NOT NULL CHECK (seq >= 1),
        room        TEXT,
        question    TEXT NOT NULL,
        status      TEXT NOT NULL
                    CHECK (status IN ('open', 'answered', 'timeout', 'unsupported')),
        deadline    REAL NOT NULL,
        at          REAL NOT NULL,
        answer      TEXT,
        answer_id   TEXT,
        posted      INTEGER NOT NULL DEFAULT 0 CHECK (posted IN (0, 1)),
        PRIMARY KEY (task_id, name),
        CHECK ((status = 'answered') = (answer_id IS NOT NULL))
    ) WITHOUT ROWID;
    CREATE INDEX asks_open ON asks (room, at) WHERE status = 'open';
    CREATE INDEX asks_unposted ON asks (at) WHERE posted = 0;
    CREATE TRIGGER asks_prune AFTER DELETE ON tasks BEGIN
        DELETE FROM asks WHERE task_id = OLD.id;
    END;
    DROP TRIGGER turns_reply;
    CREATE TRIGGER turns_reply AFTER UPDATE OF state ON tasks
    WHEN NEW.state = 'result' AND OLD.state IS NOT 'result' AND NEW.room IS NOT NULL BEGIN
        INSERT INTO turns (room, seq, role, task_id, text, at, outcome)
            SELECT room, seq, 'assistant', NEW.id, NEW.result, NEW.updated_at, 'result'
            FROM turns WHERE NEW.no_send = 0 AND room = NEW.room AND role = 'user'
                AND (task_id = NEW.id OR task_id IN
                    (SELECT answer_id FROM asks WHERE task_id = NEW.id
                        AND answer_id IS NOT NULL))
            ORDER BY seq DESC LIMIT 1
            ON CONFLICT (room, seq, role) DO UPDATE SET
                text = excluded.text, at = excluded.at, outcome = 'result';
        UPDATE turns SET outcome = 'interrupted', at = NEW.updated_at
            WHERE NEW.no_send = 1 AND NEW.reason IS NOT OLD.reason
                AND NEW.reason LIKE 'superseded by %'
                AND task_id = NEW.id AND room = NEW.room AND role = 'assistant'
                AND outcome = 'shown';
        DELETE FROM turns
            WHERE NEW.no_send = 1 AND task_id = NEW.id AND room = NEW.room
                AND role = 'assistant' AND outcome = 'shown';
    END
    """,
    # (flow control, issue #38): a token bucket and a concurrency cap per key, the permits in
    # flight (each a lease of its task's claim: a trigger frees them when the task leaves
    # 'claimed', whatever moved it) and the runs waiting for one (until their wait is over)
    """
    CREATE TABLE limits (
        key          TEXT PRIMARY KEY NOT NULL CHECK (length(key) BETWEEN 1 AND 128),
        rate         REAL CHECK (rate IS NULL OR rate > 0),
        burst        REAL NOT NULL CHECK (burst >= 0),
        concurrency  INTEGER CHECK (concurrency IS NULL OR concurrency >= 1),
        tokens       REAL NOT NULL,
        at           REAL NOT NULL,
        in_flight    INTEGER NOT NULL DEFAULT 0 CHECK (in_flight >= 0),
        paused_until REAL
    ) WITHOUT ROWID;
    CREATE TABLE permits (
        id          INTEGER PRIMARY KEY,
        key         TEXT NOT NULL,
        task_id     TEXT NOT NULL,
        weight      REAL NOT NULL,
        at          REAL NOT NULL
    );
    CREATE INDEX permits_task ON permits (task_id);
    CREATE TABLE limit_waiters (
        key         TEXT NOT NULL,
        task_id     TEXT NOT NULL,
        until       REAL NOT NULL,
        PRIMARY KEY (key, task_id)
    ) WITHOUT ROWID;
    CREATE TRIGGER permits_free AFTER UPDATE OF state ON tasks
    WHEN OLD.state = 'claimed' AND NEW.state != 'claimed' BEGIN
        UPDATE limits SET in_flight = max(in_flight - (SELECT count(*) FROM permits p
            WHERE p.task_id = OLD.id AND p.key = limits.key), 0)
            WHERE key IN (SELECT key FROM permits WHERE task_id = OLD.id);
        DELETE FROM permits WHERE task_id = OLD.id;
    END
    """,
    # issue #34 perf: the turns in time order. Kept by room (WITHOUT ROWID, keyed by room),
    # every message of a commit dirtied its own room's pages (twice the WAL bytes per message
    # of the tasks alone, measured with 16 rooms); as a rowid table new turns append to the
    # same last page whatever their room, and the room's order is a narrow unique index
    # (room, seq, role) that the window reads backwards and the upserts name. The copy goes
    # through a scratch table in the file (no rename: that would rewrite the triggers of
    # ``tasks``, which name ``turns``); the count triggers go with the old table and return
    """
    CREATE TABLE turns_copy AS SELECT room, seq, role, task_id, text, at, outcome FROM turns;
    DROP TABLE turns;
    CREATE TABLE turns (
        room        TEXT NOT NULL,
        seq         INTEGER NOT NULL CHECK (seq >= 1),
        role        TEXT NOT NULL CHECK (role IN ('user', 'assistant')),
        task_id     TEXT NOT NULL,
        text        TEXT NOT NULL,
        at          REAL NOT NULL,
        outcome     TEXT NOT NULL CHECK (outcome IN
                        ('received', 'shown', 'result', 'delivered', 'interrupted', 'asked'))
    );
    INSERT INTO turns (room, seq, role, task_id, text, at, outcome)
        SELECT room, seq, role, task_id, text, at, outcome FROM turns_copy
        ORDER BY at, seq, role;
    DROP TABLE turns_copy;
    CREATE UNIQUE INDEX turns_key ON turns (room, seq, role);
    CREATE INDEX turns_task ON turns (task_id);
    CREATE TRIGGER turns_count_in AFTER INSERT ON turns BEGIN
        UPDATE conversations SET turns = turns + 1 WHERE room = NEW.room;
    END;
    CREATE TRIGGER turns_count_out AFTER DELETE ON turns BEGIN
        UPDATE conversations SET turns = max(turns - 1, 0) WHERE room = OLD.room;
    END
    """,
    # 16 -> 17 (issue #38, fair shares): a task's tenant and its turn among the tenants
    # (``custody._tenants``), fixed at ingest; the queue is ordered by priority, turn, age, so
    # the two pending queues' indexes gain the turn; the tenants' own pending turns are read
    # through their index at ingest; tenants' weights are kept beside the limits
    """
    ALTER TABLE tasks ADD COLUMN tenant TEXT;
    ALTER TABLE tasks ADD COLUMN fair REAL NOT NULL DEFAULT 0;
    CREATE TABLE tenants (
        tenant      TEXT PRIMARY KEY,
        weight      REAL NOT NULL CHECK (weight > 0)
    ) WITHOUT ROWID;
    DROP INDEX tasks_pending_free;
    DROP INDEX tasks_pending_ordered;
    CREATE INDEX tasks_pending_free ON tasks (priority, fair)
        WHERE state = 'pending' AND (room IS NULL OR room_policy = 'concurrent');
    CREATE INDEX tasks_pending_ordered ON tasks (priority, fair)
        WHERE state = 'pending' AND room IS NOT NULL AND room_policy <> 'concurrent';
    CREATE INDEX tasks_tenant_turns ON tasks (tenant, priority, fair)
        WHERE state = 'pending' AND tenant IS NOT NULL
    """,
    # 17 -> 18 (issue #48, who may answer): the senders whose message answers an ask (a JSON
    # list of the ``sender`` header's values), NULL for anyone's (every ask before this one)
    """
    ALTER TABLE asks ADD COLUMN answer_from TEXT
    """,
    # 18 -> 19 (issue #56): counts that cost the same at any size. The admin endpoint read
    # ``count(*) ... GROUP BY state`` every second, a walk of every row kept (3.3% of a core
    # idle at 50,000 rows); the tasks per state and the conversations' totals are now kept by
    # triggers in the transactions that move them (one writer: no row is contended), seeded
    # from the rows once. No CHECK on them: a count must never refuse a custody move
    """
    CREATE TABLE task_counts (
        state       TEXT PRIMARY KEY NOT NULL,
        n           INTEGER NOT NULL
    ) WITHOUT ROWID;
    INSERT INTO task_counts (state, n)
        SELECT s.column1, (SELECT count(*) FROM tasks t WHERE t.state = s.column1)
        FROM (VALUES ('pending'), ('assigned'), ('claimed'), ('result'), ('delivered'),
            ('waiting'), ('dead')) s;
    CREATE TRIGGER task_counts_in AFTER INSERT ON tasks BEGIN
        UPDATE task_counts SET n = n + 1 WHERE state = NEW.state;
    END;
    CREATE TRIGGER task_counts_move AFTER UPDATE OF state ON tasks
    WHEN OLD.state IS NOT NEW.state BEGIN
        UPDATE task_counts SET n = n + (state = NEW.state) - (state = OLD.state)
            WHERE state IN (OLD.state, NEW.state);
    END;
    CREATE TRIGGER task_counts_out AFTER DELETE ON tasks BEGIN
        UPDATE task_counts SET n = n - 1 WHERE state = OLD.state;
    END;
    CREATE TABLE conversation_totals (
        one         INTEGER PRIMARY KEY CHECK (one = 1),
        rooms       INTEGER NOT NULL,
        turns       INTEGER NOT NULL,
        state_bytes INTEGER NOT NULL
    );
    INSERT INTO conversation_totals (one, rooms, turns, state_bytes)
        SELECT 1, count(*), coalesce(sum(turns), 0), coalesce(sum(state_bytes), 0)
        FROM conversations;
    CREATE TRIGGER conversation_totals_in AFTER INSERT ON conversations BEGIN
        UPDATE conversation_totals SET rooms = rooms + 1, turns = turns + NEW.turns,
            state_bytes = state_bytes + NEW.state_bytes;
    END;
    CREATE TRIGGER conversation_totals_change AFTER UPDATE OF turns, state_bytes
    ON conversations BEGIN
        UPDATE conversation_totals SET turns = turns + NEW.turns - OLD.turns,
            state_bytes = state_bytes + NEW.state_bytes - OLD.state_bytes;
    END;
    CREATE TRIGGER conversation_totals_out AFTER DELETE ON conversations BEGIN
        UPDATE conversation_totals SET rooms = rooms - 1, turns = turns - OLD.turns,
            state_bytes = state_bytes - OLD.state_bytes;
    END
    """,
    # 19 -> 20 (issue #47, quarantine start-up): a lease expired by a crash reads whether its
    # run was waiting for a permit (a waiter is no suspect), by task
    """
    CREATE INDEX limit_waiters_task ON limit_waiters (task_id)
    """,
    # 20 -> 21 (issue #56, item 6: a tenant's cost): a tenant's new turn reads the queue's
    # clock and the tenant's last turn over the tasks still waiting for theirs, pending or
    # assigned ahead of a worker's free slots; the assigned ones were walked through
    # ``tasks_assigned`` (by owner: every assigned row, twice, per message). Both reads are now
    # one seek in an index of the waiting turns, which a task keeps while the lead assigns it
    # (and gives back), and leaves when claimed. Tasks without a tenant (turn 0) are in neither
    """
    DROP INDEX tasks_tenant_turns;
    CREATE INDEX tasks_tenant_queued ON tasks (tenant, priority, fair)
        WHERE state IN ('pending', 'assigned') AND tenant IS NOT NULL;
    CREATE INDEX tasks_queued_turns ON tasks (priority, fair)
        WHERE state IN ('pending', 'assigned') AND fair > 0
    """,
    # 21 -> 22 (issue #56, item 5: the reply turn found by task) a result's turn goes under its
    # message's user turn, which the trigger found by walking the room's turns back from the
    # newest (turns_key) until one was the task's: every message queued after it in its
    # room, so a backlog made each completion cost more (63 -> 134 us a message from 3,000 to
    # 15,000 queued in 20 rooms). Found by task (turns_task) now: the same turn, whatever
    # the room holds
    """
    DROP TRIGGER turns_reply;
    CREATE TRIGGER turns_reply AFTER UPDATE OF state ON tasks
    WHEN NEW.state = 'result' AND OLD.state IS NOT 'result' AND NEW.room IS NOT NULL BEGIN
        INSERT INTO turns (room, seq, role, task_id, text, at, outcome)
            SELECT room, seq, 'assistant', NEW.id, NEW.result, NEW.updated_at, 'result'
            FROM turns INDEXED BY turns_task
            WHERE NEW.no_send = 0 AND room = NEW.room AND role = 'user'
                AND task_id IN (SELECT NEW.id UNION ALL SELECT answer_id FROM asks
                    WHERE task_id = NEW.id AND answer_id IS NOT NULL)
            ORDER BY seq DESC LIMIT 1
            ON CONFLICT (room, seq, role) DO UPDATE SET
                text = excluded.text, at = excluded.at, outcome = 'result';
        UPDATE turns SET outcome = 'interrupted', at = NEW.updated_at
            WHERE NEW.no_send = 1 AND NEW.reason IS NOT OLD.reason
                AND NEW.reason LIKE 'superseded by %'
                AND task_id = NEW.id AND room = NEW.room AND role = 'assistant'
                AND outcome = 'shown';
        DELETE FROM turns
            WHERE NEW.no_send = 1 AND task_id = NEW.id AND room = NEW.room
                AND role = 'assistant' AND outcome = 'shown';
    END
    """,
    # 22 -> 23 (issue #49, 16 lanes): the journal in the order its tasks were born. Keyed by
    # (task, seq), each task's entry went to its id's own leaf, so a group commit of 16 tasks'
    # moves dirtied a journal page per task (26 pages more for 16 new tasks); keyed by
    # (born, task, seq), where born is the task's created_at (set at ingest, never changed),
    # the entries of tasks born together share the last leaves. A task's entries stay
    # together and in order, read and deleted by (born, id). Entries are copied in their order
    """
    CREATE TABLE journal_born (
        born        REAL NOT NULL,
        id          TEXT NOT NULL,
        seq         INTEGER NOT NULL CHECK (seq >= 1),
        at          REAL NOT NULL,
        src         TEXT,
        dst         TEXT NOT NULL,
        worker      TEXT,
        attempt     INTEGER NOT NULL,
        reason      TEXT,
        actor       TEXT NOT NULL,
        PRIMARY KEY (born, id, seq)
    ) WITHOUT ROWID;
    INSERT INTO journal_born (born, id, seq, at, src, dst, worker, attempt, reason, actor)
        SELECT coalesce(t.created_at, 0), j.id, j.seq, j.at, j.src, j.dst, j.worker,
            j.attempt, j.reason, j.actor
        FROM journal j LEFT JOIN tasks t ON t.id = j.id;
    DROP TRIGGER journal_ingest;
    DROP TRIGGER journal_move;
    DROP TRIGGER journal_prune;
    DROP TABLE journal;
    ALTER TABLE journal_born RENAME TO journal;
    CREATE TRIGGER journal_ingest AFTER INSERT ON tasks BEGIN
        INSERT INTO journal (born, id, seq, at, src, dst, worker, attempt, reason, actor)
        VALUES (
            NEW.created_at, NEW.id, coalesce((SELECT max(seq) FROM journal
                WHERE born = NEW.created_at AND id = NEW.id), 0) + 1,
            NEW.created_at, NULL, NEW.state, NULL, NEW.attempt, NULL, 'bridge'
        );
    END;
    CREATE TRIGGER journal_move AFTER UPDATE OF state ON tasks
    WHEN NEW.state IS NOT OLD.state BEGIN
        INSERT INTO journal (born, id, seq, at, src, dst, worker, attempt, reason, actor)
        VALUES (
            NEW.created_at, NEW.id, coalesce((SELECT max(seq) FROM journal
                WHERE born = NEW.created_at AND id = NEW.id), 0) + 1,
            NEW.updated_at, OLD.state, NEW.state, coalesce(NEW.owner, OLD.owner),
            OLD.attempt, CASE WHEN NEW.reason IS NOT OLD.reason THEN NEW.reason END,
            CASE
                WHEN NEW.reason IS NOT OLD.reason AND NEW.reason LIKE 'operator:%'
                    THEN 'operator'
                WHEN NEW.state = 'assigned' OR OLD.state = 'assigned' AND NEW.state = 'pending'
                    THEN 'lead'
                WHEN OLD.state = 'claimed' AND NEW.reason IS NOT OLD.reason
                    AND NEW.reason LIKE 'lease of worker %' THEN 'reconciler'
                WHEN NEW.state = 'claimed' OR OLD.state = 'claimed' THEN 'worker'
                ELSE 'bridge'
            END
        );
    END;
    CREATE TRIGGER journal_prune AFTER DELETE ON tasks BEGIN
        DELETE FROM journal WHERE born = OLD.created_at AND id = OLD.id;
    END
    """,
    # 23 -> 24 (issue #49, decision 2: live turns from the task rows). A message's turn was a
    # copy of its body in ``turns`` (with an index entry and a count update) written at
    # ingest, its reply another at the result, updated at delivery: three writes per message
    # for the conversation alone, paid by agents that never read it. A live task's turns are
    # now read from its own row: ``turn_seq`` (its message's number in the room; NULL: no
    # room, or its message pruned or forgotten) and ``reply_seq`` (where its reply sits when
    # not at ``turn_seq``: under the answer to its ask, or kept when retention took only its
    # message). Its reply is a turn while its result is stored to be said (``REPLY_SAID``
    # in ``_live_turns``); an asker answered but not yet replied keeps its answer's place.
    # ``turns`` keeps the asked and shown turns and the copies a task's deletion leaves.
    # ``conversations.turns`` still counts every turn a room shows: the ingest's seq bump
    # counts the message, a stored reply counts itself, a re-drive that clears a counted
    # reply uncounts it. Live tasks' rows move onto their tasks here (each row's delete
    # uncounts it, each live turn counts again)
    """
    ALTER TABLE tasks ADD COLUMN turn_seq INTEGER CHECK (turn_seq IS NULL OR turn_seq >= 1);
    ALTER TABLE tasks ADD COLUMN reply_seq INTEGER CHECK (reply_seq IS NULL OR reply_seq >= 1);
    UPDATE tasks SET turn_seq = (SELECT max(u.seq) FROM turns u INDEXED BY turns_task
        WHERE u.task_id = tasks.id AND u.room = tasks.room AND u.role = 'user')
        WHERE room IS NOT NULL;
    UPDATE tasks SET reply_seq = (SELECT max(a.seq) FROM turns a INDEXED BY turns_task
        WHERE a.task_id = tasks.id AND a.room = tasks.room AND a.role = 'assistant'
            AND a.outcome IN ('result', 'delivered'))
        WHERE room IS NOT NULL;
    UPDATE tasks SET reply_seq = (SELECT max(u.seq) FROM asks k
        JOIN turns u INDEXED BY turns_task ON u.task_id = k.answer_id AND u.room = tasks.room
            AND u.role = 'user'
        WHERE k.task_id = tasks.id AND k.answer_id IS NOT NULL)
        WHERE room IS NOT NULL AND reply_seq IS NULL;
    UPDATE tasks SET reply_seq = NULL WHERE reply_seq = turn_seq;
    DELETE FROM turns WHERE outcome IN ('received', 'result', 'delivered')
        AND EXISTS (SELECT 1 FROM tasks t WHERE t.id = turns.task_id AND t.room = turns.room);
    CREATE INDEX tasks_room_turns ON tasks (room, turn_seq) WHERE turn_seq IS NOT NULL;
    CREATE INDEX tasks_room_replies ON tasks (room, reply_seq) WHERE reply_seq IS NOT NULL;
    UPDATE conversations SET turns = turns
        + (SELECT count(*) FROM tasks t INDEXED BY tasks_room_turns
            WHERE t.room = conversations.room AND t.turn_seq IS NOT NULL)
        + (SELECT count(*) FROM tasks t WHERE t.room = conversations.room
            AND coalesce(t.reply_seq, t.turn_seq) IS NOT NULL AND t.no_send = 0
            AND t.result IS NOT NULL AND t.state IN ('result', 'delivered', 'dead'));
    DROP TRIGGER turns_message;
    DROP TRIGGER turns_reply;
    DROP TRIGGER turns_delivered;
    CREATE TRIGGER turns_message AFTER INSERT ON tasks WHEN NEW.room IS NOT NULL BEGIN
        INSERT INTO conversations (room, next_seq, turns) VALUES (NEW.room, 1, 1)
            ON CONFLICT (room) DO UPDATE SET next_seq = next_seq + 1, turns = turns + 1;
    END;
    CREATE TRIGGER turns_reply AFTER UPDATE OF state ON tasks
    WHEN NEW.state = 'result' AND OLD.state IS NOT 'result' AND NEW.room IS NOT NULL BEGIN
        UPDATE turns SET outcome = 'interrupted', at = NEW.updated_at
            WHERE NEW.no_send = 1 AND NEW.reason IS NOT OLD.reason
                AND NEW.reason LIKE 'superseded by %'
                AND task_id = NEW.id AND room = NEW.room AND role = 'assistant'
                AND outcome = 'shown';
        DELETE FROM turns
            WHERE task_id = NEW.id AND room = NEW.room AND role = 'assistant'
                AND outcome = 'shown';
        UPDATE conversations SET turns = turns + 1
            WHERE NEW.no_send = 0 AND NEW.result IS NOT NULL
                AND coalesce(NEW.reply_seq, NEW.turn_seq) IS NOT NULL AND room = NEW.room;
    END;
    CREATE TRIGGER turns_unsaid AFTER UPDATE OF result ON tasks
    WHEN OLD.result IS NOT NULL AND NEW.result IS NULL AND OLD.no_send = 0
        AND OLD.room IS NOT NULL AND coalesce(OLD.reply_seq, OLD.turn_seq) IS NOT NULL
        AND OLD.state IN ('result', 'delivered', 'dead') BEGIN
        UPDATE conversations SET turns = max(turns - 1, 0) WHERE room = OLD.room;
    END;
    CREATE TRIGGER turns_kept BEFORE DELETE ON tasks
    WHEN OLD.room IS NOT NULL AND coalesce(OLD.reply_seq, OLD.turn_seq) IS NOT NULL BEGIN
        INSERT INTO turns (room, seq, role, task_id, text, at, outcome)
            SELECT OLD.room, OLD.turn_seq, 'user', OLD.id, OLD.body, OLD.created_at, 'received'
            WHERE OLD.turn_seq IS NOT NULL
            ON CONFLICT (room, seq, role) DO NOTHING;
        INSERT INTO turns (room, seq, role, task_id, text, at, outcome)
            SELECT OLD.room, coalesce(OLD.reply_seq, OLD.turn_seq), 'assistant', OLD.id,
                OLD.result, OLD.updated_at,
                CASE WHEN OLD.state = 'delivered' THEN 'delivered' ELSE 'result' END
            WHERE OLD.no_send = 0 AND OLD.result IS NOT NULL
                AND OLD.state IN ('result', 'delivered', 'dead')
            ON CONFLICT (room, seq, role) DO NOTHING;
        UPDATE conversations SET turns = max(turns - (OLD.turn_seq IS NOT NULL)
            - (OLD.no_send = 0 AND OLD.result IS NOT NULL
                AND OLD.state IN ('result', 'delivered', 'dead')), 0)
            WHERE room = OLD.room;
    END
    """,
    # 24 -> 25 (issue #51, child runs and queues): a task's queue and its parent, copied from
    # its headers by the ingest (never changed after: plain columns, so no move reads its
    # headers again; a virtual column's JSON was read by every state move, to decide the
    # partial indexes); a worker's queues are kept by its beat (NULL: the default one); ``awaited``
    # marks the children a parked join waits for. The transaction that makes the last awaited
    # child of a joining parent done wakes the parent (waiting -> pending, at once: its
    # deadline no longer holds it); the reconciler's pass wakes any joiner this missed
    # (``custody._children``)
    """
    ALTER TABLE tasks ADD COLUMN queue TEXT NOT NULL DEFAULT 'default';
    ALTER TABLE tasks ADD COLUMN parent TEXT;
    UPDATE tasks SET queue = coalesce(json_extract(headers, '$.queue'), 'default'),
        parent = json_extract(headers, '$.parent')
        WHERE headers LIKE '%"queue"%' OR headers LIKE '%"parent"%';
    ALTER TABLE tasks ADD COLUMN awaited INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE workers ADD COLUMN queues TEXT;
    CREATE INDEX tasks_children ON tasks (parent) WHERE parent IS NOT NULL;
    CREATE INDEX tasks_live_children ON tasks (parent)
        WHERE parent IS NOT NULL AND state IN ('pending', 'assigned', 'claimed', 'waiting');
    CREATE TRIGGER children_done AFTER UPDATE OF state ON tasks
    WHEN NEW.parent IS NOT NULL AND NEW.awaited = 1
        AND NEW.state IN ('result', 'delivered', 'dead')
        AND OLD.state NOT IN ('result', 'delivered', 'dead') BEGIN
        UPDATE tasks SET state = 'pending', not_before = NULL, updated_at = NEW.updated_at
            WHERE id = NEW.parent AND state = 'waiting' AND reason LIKE 'joining %'
                AND NOT EXISTS (SELECT 1 FROM tasks c INDEXED BY tasks_live_children
                    WHERE c.parent = NEW.parent AND c.parent IS NOT NULL
                        AND c.state IN ('pending', 'assigned', 'claimed', 'waiting')
                        AND c.awaited = 1);
    END
    """,
    # 25 -> 26 (issue #52, schedules and events): a schedule's spec (a versioned JSON
    # document), its next due time and the due time it last fired; kept events, by key in
    # arrival order, until their TTL ends; ``wait_key`` names the key a run parked on (its
    # reason says it still waits: ``awaiting event ...``)
    """
    CREATE TABLE schedules (
        name TEXT PRIMARY KEY,
        spec TEXT NOT NULL,
        paused INTEGER NOT NULL DEFAULT 0,
        next_due REAL NOT NULL,
        last_due REAL,
        fired INTEGER NOT NULL DEFAULT 0,
        created_at REAL NOT NULL
    ) WITHOUT ROWID;
    CREATE INDEX schedules_due ON schedules (next_due) WHERE paused = 0;
    CREATE TABLE events (
        id TEXT PRIMARY KEY,
        key TEXT NOT NULL,
        body TEXT NOT NULL,
        at REAL NOT NULL,
        until REAL NOT NULL
    );
    CREATE INDEX events_key ON events (key, at);
    CREATE INDEX events_until ON events (until);
    ALTER TABLE tasks ADD COLUMN wait_key TEXT;
    CREATE INDEX tasks_wait_key ON tasks (wait_key) WHERE wait_key IS NOT NULL;
    """,
    # 26 -> 27 (issue #53, versions): the agent version whose run recorded a step, the
    # function it called and the fingerprint of the arguments it was asked with (NULL on
    # records made before: never compared); the versions in flight are read off the oldest
    # record of each live task (a run counts under the version it began with)
    """
    ALTER TABLE steps ADD COLUMN version TEXT;
    ALTER TABLE steps ADD COLUMN fingerprint TEXT;
    ALTER TABLE steps ADD COLUMN call TEXT;
    """,
)

SCHEMA_VERSION: Final = len(MIGRATIONS)


class SchemaTooNew(RuntimeError):
    """The database was written by a newer tether; refuse rather than misread it."""


def migrate(conn: sqlite3.Connection) -> int:
    """Bring ``conn``'s database to ``SCHEMA_VERSION``; return the version it started at.

    Each step runs in its own immediate transaction together with its ``user_version`` bump,
    so a crash mid-migration leaves the previous version intact.
    """
    (start,) = conn.execute("PRAGMA user_version").fetchone()
    if start > SCHEMA_VERSION:
        raise SchemaTooNew(
            f"database schema version {start} is newer than this tether supports "
            f"({SCHEMA_VERSION}); upgrade tether"
        )
    for version in range(start, SCHEMA_VERSION):
        conn.execute("BEGIN IMMEDIATE")
        try:
            (current,) = conn.execute("PRAGMA user_version").fetchone()
            if current == version:  # another process may have migrated meanwhile
                for statement in _statements(MIGRATIONS[version]):
                    conn.execute(_with_cookie(conn, statement))
                conn.execute(f"PRAGMA user_version = {version + 1}")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
    return int(start)


COOKIE: Final = "{next_schema_cookie}"
"""Stands in a migration for the schema cookie + 1: a step that edits the stored schema text
sets ``PRAGMA schema_version`` to it, so every connection (this one too) reads it again."""


def _with_cookie(conn: sqlite3.Connection, statement: str) -> str:
    if COOKIE not in statement:
        return statement
    (cookie,) = conn.execute("PRAGMA schema_version").fetchone()
    return statement.replace(COOKIE, str(int(cookie) + 1))


def _statements(script: str) -> list[str]:
    # executescript() would COMMIT our transaction first; split on ';' instead (no ';' in
    # text), joining pieces until SQLite calls the statement complete (a trigger's body holds
    # several statements of its own)
    statements: list[str] = []
    pending = ""
    for piece in script.split(";"):
        pending += piece + ";"
        if sqlite3.complete_statement(pending):
            if pending.strip(" \n;"):
                statements.append(pending.strip())
            pending = ""
    if pending.strip(" \n;"):
        statements.append(pending.strip())
    return statements
