"""PostgreSQL schema, versioned in a ``schema_version`` table (one row per applied migration).

``MIGRATIONS[n]`` takes a schema from version ``n`` to ``n + 1``; never edit a released one,
append. The whole upgrade runs in one transaction (PostgreSQL's DDL is transactional) under an
advisory lock named after the schema, so several bridges starting at once migrate exactly once
and a crash mid-migration leaves the previous version intact. The layout follows the SQLite
schema: the state CHECK lists the states literally, the same cross-column CHECKs, one partial
index per queue a query walks. Bodies and results are ``bytea`` (UTF-8) because PostgreSQL
``text`` cannot hold NUL and a chat message may.

Every statement names its tables through ``{s}``, the quoted schema, so one database can hold
several independent stores (and each test its own).
"""

from __future__ import annotations

from typing import Final

import psycopg

from ..sqlite._schema import SchemaTooNew
from ._dsn import SCHEMA_RULE as SCHEMA_RULE
from ._dsn import check_schema as check_schema

MIGRATIONS: Final[tuple[str, ...]] = (
    # 0 -> 1: the tasks table
    """
    CREATE TABLE {s}.tasks (
        seq         bigint GENERATED ALWAYS AS IDENTITY,
        id          text PRIMARY KEY CHECK (length(id) BETWEEN 1 AND 128),
        body        bytea NOT NULL,
        room        text,
        priority    smallint NOT NULL CHECK (priority IN (0, 1, 2)),
        headers     text NOT NULL,
        state       text NOT NULL CHECK (state IN
                        ('pending', 'assigned', 'claimed', 'result', 'delivered', 'dead')),
        owner       text,
        attempt     integer NOT NULL CHECK (attempt >= 1),
        lease_until double precision,
        result      bytea,
        reason      text,
        created_at  double precision NOT NULL,
        updated_at  double precision NOT NULL,
        CHECK (state NOT IN ('assigned', 'claimed', 'result') OR owner IS NOT NULL),
        CHECK (state != 'pending' OR owner IS NULL),
        CHECK ((state = 'claimed') = (lease_until IS NOT NULL)),
        CHECK (state NOT IN ('result', 'delivered') OR result IS NOT NULL),
        CHECK (state != 'dead' OR reason IS NOT NULL)
    );
    CREATE UNIQUE INDEX tasks_seq ON {s}.tasks (seq);
    CREATE INDEX tasks_pending ON {s}.tasks (priority, seq) WHERE state = 'pending';
    CREATE INDEX tasks_assigned ON {s}.tasks (owner, priority, seq) WHERE state = 'assigned';
    CREATE INDEX tasks_leases ON {s}.tasks (lease_until) WHERE state = 'claimed';
    CREATE INDEX tasks_results ON {s}.tasks (priority, seq) WHERE state = 'result';
    CREATE INDEX tasks_delivered ON {s}.tasks (updated_at) WHERE state = 'delivered';
    """,
    # 1 -> 2: the worker pool (beats, room affinity, stall notices, replies that are not sent)
    """
    CREATE TABLE {s}.workers (
        name        text PRIMARY KEY,
        role        text NOT NULL CHECK (role IN ('lead', 'worker')),
        capacity    integer NOT NULL CHECK (capacity >= 0),
        last_beat   double precision NOT NULL,
        started_at  double precision NOT NULL
    );
    CREATE TABLE {s}.rooms (
        room        text PRIMARY KEY,
        worker      text NOT NULL,
        at          double precision NOT NULL
    );
    CREATE TABLE {s}.stall_notices (
        id          text PRIMARY KEY,
        notified_at double precision NOT NULL
    );
    ALTER TABLE {s}.tasks ADD COLUMN no_send boolean NOT NULL DEFAULT false;
    CREATE INDEX tasks_claimed_age ON {s}.tasks (created_at) WHERE state = 'claimed';
    """,
    # 2 -> 3: ids of delivered tasks whose rows were pruned (a replay stays a replay)
    """
    CREATE TABLE {s}.tombstones (
        id           text PRIMARY KEY,
        delivered_at double precision NOT NULL
    );
    CREATE INDEX tombstones_age ON {s}.tombstones (delivered_at);
    """,
    # 3 -> 4: when the gateway confirmed it was told about a dead task (NULL: not yet); the
    # partial index holds only the dead tasks still to report, so finding them stays cheap
    """
    ALTER TABLE {s}.tasks ADD COLUMN dead_reported_at double precision;
    CREATE INDEX tasks_dead_unreported ON {s}.tasks (updated_at, seq)
        WHERE state = 'dead' AND dead_reported_at IS NULL;
    """,
    # 4 -> 5: the delivery lease: which delivery loop is posting a result, until when (NULL:
    # nobody). Not a custody state: the task stays 'result' while it is posted; every
    # transition out of 'result' clears the lease
    """
    ALTER TABLE {s}.tasks
        ADD COLUMN delivery_holder text,
        ADD COLUMN delivery_until double precision,
        ADD CONSTRAINT tasks_delivery_lease_whole
            CHECK ((delivery_holder IS NULL) = (delivery_until IS NULL)),
        ADD CONSTRAINT tasks_delivery_lease_on_results
            CHECK (state = 'result' OR delivery_holder IS NULL);
    """,
    # 5 -> 6 (rooms, issue #17): the room policy each task was ingested under; the partial
    # indexes find a room's head, its claims and its replies (the claim's room gate)
    """
    ALTER TABLE {s}.tasks ADD COLUMN room_policy text NOT NULL DEFAULT 'concurrent'
        CHECK (room_policy IN ('concurrent', 'serial', 'replace'));
    CREATE INDEX tasks_room_custody ON {s}.tasks (room, seq)
        WHERE room IS NOT NULL AND state IN ('assigned', 'claimed', 'pending', 'result');
    CREATE INDEX tasks_room_queue ON {s}.tasks (room, seq)
        WHERE room IS NOT NULL AND state IN ('assigned', 'pending');
    CREATE INDEX tasks_room_claimed ON {s}.tasks (room)
        WHERE room IS NOT NULL AND state = 'claimed';
    """,
    # 6 -> 7 (retry backoff, issue #16): a failed attempt goes back to pending with a
    # not-before time; nobody claims or assigns it earlier. Only a pending task has one (the
    # CHECK); the partial index finds the earliest one due without scanning the queue
    """
    ALTER TABLE {s}.tasks
        ADD COLUMN not_before double precision,
        ADD CONSTRAINT tasks_not_before_pending CHECK (not_before IS NULL OR state = 'pending');
    CREATE INDEX tasks_waiting ON {s}.tasks (not_before)
        WHERE state = 'pending' AND not_before IS NOT NULL;
    """,
    # 7 -> 8 (custody journal, issue #16): every state change of a task is appended to its
    # history by a trigger, in the same transaction as the change, from every statement that
    # moves a task; deleting a task (retention) deletes its history. The actor is read off
    # the move, as in SQLite
    """
    CREATE TABLE {s}.journal (
        seq         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        id          text NOT NULL,
        at          double precision NOT NULL,
        src         text,
        dst         text NOT NULL,
        worker      text,
        attempt     integer NOT NULL,
        reason      text,
        actor       text NOT NULL
    );
    CREATE INDEX journal_task ON {s}.journal (id, seq);
    CREATE FUNCTION {s}.journal_note() RETURNS trigger LANGUAGE plpgsql AS $body$
    BEGIN
        IF TG_OP = 'INSERT' THEN
            INSERT INTO {s}.journal (id, at, src, dst, worker, attempt, reason, actor)
            VALUES (NEW.id, NEW.created_at, NULL, NEW.state, NULL, NEW.attempt, NULL, 'bridge');
        ELSIF TG_OP = 'UPDATE' THEN
            INSERT INTO {s}.journal (id, at, src, dst, worker, attempt, reason, actor)
            VALUES (
                NEW.id, NEW.updated_at, OLD.state, NEW.state, coalesce(NEW.owner, OLD.owner),
                OLD.attempt,
                CASE WHEN NEW.reason IS DISTINCT FROM OLD.reason THEN NEW.reason END,
                CASE
                    WHEN NEW.reason IS DISTINCT FROM OLD.reason
                        AND NEW.reason LIKE 'operator:%' THEN 'operator'
                    WHEN NEW.state = 'assigned'
                        OR (OLD.state = 'assigned' AND NEW.state = 'pending') THEN 'lead'
                    WHEN OLD.state = 'claimed' AND NEW.reason IS DISTINCT FROM OLD.reason
                        AND NEW.reason LIKE 'lease of worker %' THEN 'reconciler'
                    WHEN NEW.state = 'claimed' OR OLD.state = 'claimed' THEN 'worker'
                    ELSE 'bridge'
                END
            );
        ELSE
            DELETE FROM {s}.journal WHERE id = OLD.id;
        END IF;
        RETURN NULL;
    END
    $body$;
    CREATE TRIGGER journal_ingest AFTER INSERT ON {s}.tasks
        FOR EACH ROW EXECUTE FUNCTION {s}.journal_note();
    CREATE TRIGGER journal_move AFTER UPDATE OF state ON {s}.tasks
        FOR EACH ROW WHEN (NEW.state IS DISTINCT FROM OLD.state)
        EXECUTE FUNCTION {s}.journal_note();
    CREATE TRIGGER journal_prune AFTER DELETE ON {s}.tasks
        FOR EACH ROW EXECUTE FUNCTION {s}.journal_note();
    """,
    # 8 -> 9 (crash accounting, issue #16): leases lost because their holder's process died
    # are counted apart from failed attempts; a task in flight at a crash is a suspect (it runs
    # alone) until it finishes; crashes_alone proves a poison task (custody._crashes). The
    # partial index finds the few suspects without scanning the queue
    """
    ALTER TABLE {s}.tasks
        ADD COLUMN crash_count integer NOT NULL DEFAULT 0,
        ADD COLUMN crashes_alone integer NOT NULL DEFAULT 0,
        ADD COLUMN suspect boolean NOT NULL DEFAULT false,
        ADD CONSTRAINT tasks_crash_counts
            CHECK (crash_count >= 0 AND crashes_alone >= 0 AND crashes_alone <= crash_count);
    CREATE INDEX tasks_suspects ON {s}.tasks (state, priority, seq) WHERE suspect;
    """,
    # 9 -> 10 (issue #37, the re-drive fence) a claim's fence is the task's run number, bumped by
    # every claim and reset by nothing: a re-drive resets ``attempt`` (the failure budget),
    # so (owner, attempt) could repeat and let a cancelled run complete through the fence
    # (issue #37, quarantine): a suspect claimed to run in a quarantine child is marked so (its
    # worker's process dying then blames nobody); the deaths of that child while it ran the
    # task are the proof that counts against it
    """
    ALTER TABLE {s}.tasks
        ADD COLUMN run_no integer NOT NULL DEFAULT 0 CHECK (run_no >= 0),
        ADD COLUMN quarantined boolean NOT NULL DEFAULT false,
        ADD COLUMN quarantine_deaths integer NOT NULL DEFAULT 0 CHECK (quarantine_deaths >= 0),
        ADD COLUMN last_quarantine_death text;
    """,
    # 10 -> 11 (conversations, issue #34): each room's turns and its agent's state, as in
    # SQLite (see its migration 11 -> 12): triggers write the turns in the transaction of the
    # custody move they follow. The room's row is the lock that numbers its messages (two
    # bridges ingesting into one room take turns on it)
    """
    CREATE TABLE {s}.conversations (
        room        text PRIMARY KEY,
        next_seq    bigint NOT NULL DEFAULT 0 CHECK (next_seq >= 0),
        turns       integer NOT NULL DEFAULT 0 CHECK (turns >= 0),
        state       text,
        version     bigint NOT NULL DEFAULT 0 CHECK (version >= 0),
        state_bytes integer NOT NULL DEFAULT 0 CHECK (state_bytes >= 0)
    );
    CREATE TABLE {s}.turns (
        room        text NOT NULL,
        seq         bigint NOT NULL CHECK (seq >= 1),
        role        text NOT NULL CHECK (role IN ('user', 'assistant')),
        task_id     text NOT NULL,
        text        bytea NOT NULL,
        at          double precision NOT NULL,
        outcome     text NOT NULL CHECK (outcome IN
                        ('received', 'shown', 'result', 'delivered', 'interrupted')),
        PRIMARY KEY (room, seq, role)
    );
    CREATE INDEX turns_task ON {s}.turns (task_id);
    CREATE FUNCTION {s}.turns_count() RETURNS trigger LANGUAGE plpgsql AS $body$
    BEGIN
        IF TG_OP = 'INSERT' THEN
            UPDATE {s}.conversations SET turns = turns + 1 WHERE room = NEW.room;
        ELSE
            UPDATE {s}.conversations SET turns = greatest(turns - 1, 0) WHERE room = OLD.room;
        END IF;
        RETURN NULL;
    END
    $body$;
    CREATE TRIGGER turns_count_in AFTER INSERT ON {s}.turns
        FOR EACH ROW EXECUTE FUNCTION {s}.turns_count();
    CREATE TRIGGER turns_count_out AFTER DELETE ON {s}.turns
        FOR EACH ROW EXECUTE FUNCTION {s}.turns_count();
    CREATE FUNCTION {s}.turns_note() RETURNS trigger LANGUAGE plpgsql AS $body$
    DECLARE
        n bigint;
    BEGIN
        IF TG_OP = 'INSERT' THEN
            INSERT INTO {s}.conversations AS c (room, next_seq) VALUES (NEW.room, 1)
                ON CONFLICT (room) DO UPDATE SET next_seq = c.next_seq + 1
                RETURNING c.next_seq INTO n;
            INSERT INTO {s}.turns (room, seq, role, task_id, text, at, outcome)
                VALUES (NEW.room, n, 'user', NEW.id, NEW.body, NEW.created_at, 'received');
        ELSIF NEW.state = 'result' THEN
            IF NOT NEW.no_send THEN
                INSERT INTO {s}.turns AS u (room, seq, role, task_id, text, at, outcome)
                    SELECT room, seq, 'assistant', NEW.id, NEW.result, NEW.updated_at, 'result'
                    FROM {s}.turns WHERE task_id = NEW.id AND room = NEW.room AND role = 'user'
                    ORDER BY seq DESC LIMIT 1
                    ON CONFLICT (room, seq, role) DO UPDATE SET
                        text = excluded.text, at = excluded.at, outcome = 'result';
            ELSIF NEW.reason IS DISTINCT FROM OLD.reason
                    AND NEW.reason LIKE 'superseded by %' THEN
                UPDATE {s}.turns SET outcome = 'interrupted', at = NEW.updated_at
                    WHERE task_id = NEW.id AND room = NEW.room AND role = 'assistant'
                        AND outcome = 'shown';
            ELSE
                DELETE FROM {s}.turns
                    WHERE task_id = NEW.id AND room = NEW.room AND role = 'assistant'
                        AND outcome = 'shown';
            END IF;
        ELSIF NEW.state = 'delivered' AND NOT NEW.no_send THEN
            UPDATE {s}.turns SET outcome = 'delivered', at = NEW.updated_at
                WHERE task_id = NEW.id AND room = NEW.room AND role = 'assistant'
                    AND outcome = 'result';
        END IF;
        RETURN NULL;
    END
    $body$;
    CREATE TRIGGER turns_message AFTER INSERT ON {s}.tasks
        FOR EACH ROW WHEN (NEW.room IS NOT NULL) EXECUTE FUNCTION {s}.turns_note();
    CREATE TRIGGER turns_move AFTER UPDATE OF state ON {s}.tasks
        FOR EACH ROW WHEN (NEW.room IS NOT NULL AND NEW.state IS DISTINCT FROM OLD.state
            AND NEW.state IN ('result', 'delivered'))
        EXECUTE FUNCTION {s}.turns_note();
    """,
    # 11 -> 12 (durable runs, issue #35): the state 'waiting' (a parked run, due at its
    # not_before) and the steps a run recorded, deleted with their task (retention)
    """
    ALTER TABLE {s}.tasks
        DROP CONSTRAINT tasks_state_check,
        ADD CONSTRAINT tasks_state_check CHECK (state IN
            ('pending', 'assigned', 'claimed', 'result', 'delivered', 'dead', 'waiting')),
        DROP CONSTRAINT tasks_not_before_pending,
        ADD CONSTRAINT tasks_not_before_pending
            CHECK (not_before IS NULL OR state IN ('pending', 'waiting'));
    CREATE INDEX tasks_sleeping ON {s}.tasks (not_before) WHERE state = 'waiting';
    CREATE TABLE {s}.steps (
        task_id     text NOT NULL REFERENCES {s}.tasks (id) ON DELETE CASCADE,
        name        text NOT NULL CHECK (length(name) BETWEEN 1 AND 128),
        seq         integer NOT NULL CHECK (seq >= 1),
        value       text NOT NULL,
        at          double precision NOT NULL,
        attempt     integer NOT NULL CHECK (attempt >= 1),
        size        integer NOT NULL CHECK (size >= 0),
        PRIMARY KEY (task_id, name)
    );
    """,
    # issue #36 (questions to the person): the asks a run made, as in SQLite (see its step
    # for issue #36): open while the task waits on it, then answered, timed out or
    # unsupported; the turn outcome 'asked'; a reply stored after an answer sits under the
    # answer (the newest user turn of the task or of a message that answered it)
    """
    ALTER TABLE {s}.turns
        DROP CONSTRAINT turns_outcome_check,
        ADD CONSTRAINT turns_outcome_check CHECK (outcome IN
            ('received', 'shown', 'result', 'delivered', 'interrupted', 'asked'));
    CREATE TABLE {s}.asks (
        task_id     text NOT NULL REFERENCES {s}.tasks (id) ON DELETE CASCADE,
        name        text NOT NULL CHECK (length(name) BETWEEN 1 AND 128),
        seq         integer NOT NULL CHECK (seq >= 1),
        room        text,
        question    bytea NOT NULL,
        status      text NOT NULL
                    CHECK (status IN ('open', 'answered', 'timeout', 'unsupported')),
        deadline    double precision NOT NULL,
        at          double precision NOT NULL,
        answer      bytea,
        answer_id   text,
        posted      boolean NOT NULL DEFAULT false,
        PRIMARY KEY (task_id, name),
        CHECK ((status = 'answered') = (answer_id IS NOT NULL))
    );
    CREATE INDEX asks_open ON {s}.asks (room, at) WHERE status = 'open';
    CREATE INDEX asks_unposted ON {s}.asks (at) WHERE NOT posted;
    CREATE OR REPLACE FUNCTION {s}.turns_note() RETURNS trigger LANGUAGE plpgsql AS $body$
    DECLARE
        n bigint;
    BEGIN
        IF TG_OP = 'INSERT' THEN
            INSERT INTO {s}.conversations AS c (room, next_seq) VALUES (NEW.room, 1)
                ON CONFLICT (room) DO UPDATE SET next_seq = c.next_seq + 1
                RETURNING c.next_seq INTO n;
            INSERT INTO {s}.turns (room, seq, role, task_id, text, at, outcome)
                VALUES (NEW.room, n, 'user', NEW.id, NEW.body, NEW.created_at, 'received');
        ELSIF NEW.state = 'result' THEN
            IF NOT NEW.no_send THEN
                INSERT INTO {s}.turns AS u (room, seq, role, task_id, text, at, outcome)
                    SELECT room, seq, 'assistant', NEW.id, NEW.result, NEW.updated_at, 'result'
                    FROM {s}.turns WHERE room = NEW.room AND role = 'user'
                        AND (task_id = NEW.id OR task_id IN
                            (SELECT answer_id FROM {s}.asks WHERE task_id = NEW.id
                                AND answer_id IS NOT NULL))
                    ORDER BY seq DESC LIMIT 1
                    ON CONFLICT (room, seq, role) DO UPDATE SET
                        text = excluded.text, at = excluded.at, outcome = 'result';
            ELSIF NEW.reason IS DISTINCT FROM OLD.reason
                    AND NEW.reason LIKE 'superseded by %' THEN
                UPDATE {s}.turns SET outcome = 'interrupted', at = NEW.updated_at
                    WHERE task_id = NEW.id AND room = NEW.room AND role = 'assistant'
                        AND outcome = 'shown';
            ELSE
                DELETE FROM {s}.turns
                    WHERE task_id = NEW.id AND room = NEW.room AND role = 'assistant'
                        AND outcome = 'shown';
            END IF;
        ELSIF NEW.state = 'delivered' AND NOT NEW.no_send THEN
            UPDATE {s}.turns SET outcome = 'delivered', at = NEW.updated_at
                WHERE task_id = NEW.id AND room = NEW.room AND role = 'assistant'
                    AND outcome = 'result';
        END IF;
        RETURN NULL;
    END
    $body$;
    """,
    # (flow control, issue #38): a token bucket and a concurrency cap per key, the permits in
    # flight (each a lease of its task's claim: a trigger frees them when the task leaves
    # 'claimed', whatever moved it) and the runs waiting for one (until their wait is over)
    """
    CREATE TABLE {s}.limits (
        key          text PRIMARY KEY CHECK (length(key) BETWEEN 1 AND 128),
        rate         double precision CHECK (rate IS NULL OR rate > 0),
        burst        double precision NOT NULL CHECK (burst >= 0),
        concurrency  integer CHECK (concurrency IS NULL OR concurrency >= 1),
        tokens       double precision NOT NULL,
        at           double precision NOT NULL,
        in_flight    integer NOT NULL DEFAULT 0 CHECK (in_flight >= 0),
        paused_until double precision
    );
    CREATE TABLE {s}.permits (
        id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        key         text NOT NULL,
        task_id     text NOT NULL,
        weight      double precision NOT NULL,
        at          double precision NOT NULL
    );
    CREATE INDEX permits_task ON {s}.permits (task_id);
    CREATE TABLE {s}.limit_waiters (
        key         text NOT NULL,
        task_id     text NOT NULL,
        until       double precision NOT NULL,
        PRIMARY KEY (key, task_id)
    );
    CREATE FUNCTION {s}.permits_free() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        WITH gone AS (DELETE FROM {s}.permits WHERE task_id = OLD.id RETURNING key),
        n AS (SELECT key, count(*) AS n FROM gone GROUP BY key)
        UPDATE {s}.limits l SET in_flight = greatest(l.in_flight - n.n, 0)
            FROM n WHERE l.key = n.key;
        RETURN NULL;
    END $$;
    CREATE TRIGGER permits_free AFTER UPDATE OF state ON {s}.tasks FOR EACH ROW
        WHEN (OLD.state = 'claimed' AND NEW.state <> 'claimed')
        EXECUTE FUNCTION {s}.permits_free();
    """,
    # 14 -> 15 (issue #38, fair shares): a task's tenant and its turn among the tenants
    # (``custody._tenants``), fixed at ingest; the queue is ordered by priority, turn, age;
    # the tenants' own pending turns are read through their index at ingest
    """
    ALTER TABLE {s}.tasks ADD COLUMN tenant text,
        ADD COLUMN fair double precision NOT NULL DEFAULT 0;
    CREATE TABLE {s}.tenants (
        tenant      text PRIMARY KEY,
        weight      double precision NOT NULL CHECK (weight > 0)
    );
    DROP INDEX {s}.tasks_pending;
    CREATE INDEX tasks_pending ON {s}.tasks (priority, fair, seq) WHERE state = 'pending';
    CREATE INDEX tasks_tenant_turns ON {s}.tasks (tenant, priority, fair)
        WHERE state = 'pending' AND tenant IS NOT NULL;
    """,
    # 15 -> 16 (issue 39, the cost of a batch): the moves of a statement are journaled, and
    # the permits of the runs it ended freed, once per statement from its transition tables
    # instead of once per row (a claim or completion of 100 tasks made 100 calls of each
    # trigger: 15-30 us a task); the permits only while some are held. The journal's rows
    # and the permits' rule are those of migrations 7 and 13, unchanged
    """
    CREATE FUNCTION {s}.journal_moves() RETURNS trigger LANGUAGE plpgsql AS $body$
    BEGIN
        INSERT INTO {s}.journal (id, at, src, dst, worker, attempt, reason, actor)
        SELECT n.id, n.updated_at, o.state, n.state, coalesce(n.owner, o.owner), o.attempt,
            CASE WHEN n.reason IS DISTINCT FROM o.reason THEN n.reason END,
            CASE
                WHEN n.reason IS DISTINCT FROM o.reason
                    AND n.reason LIKE 'operator:%' THEN 'operator'
                WHEN n.state = 'assigned'
                    OR (o.state = 'assigned' AND n.state = 'pending') THEN 'lead'
                WHEN o.state = 'claimed' AND n.reason IS DISTINCT FROM o.reason
                    AND n.reason LIKE 'lease of worker %' THEN 'reconciler'
                WHEN n.state = 'claimed' OR o.state = 'claimed' THEN 'worker'
                ELSE 'bridge'
            END
        FROM moved_new n JOIN moved_old o ON o.id = n.id
        WHERE n.state IS DISTINCT FROM o.state
        ORDER BY n.seq;
        RETURN NULL;
    END
    $body$;
    DROP TRIGGER journal_move ON {s}.tasks;
    CREATE TRIGGER journal_move AFTER UPDATE ON {s}.tasks
        REFERENCING OLD TABLE AS moved_old NEW TABLE AS moved_new
        FOR EACH STATEMENT EXECUTE FUNCTION {s}.journal_moves();
    DROP TRIGGER permits_free ON {s}.tasks;
    CREATE OR REPLACE FUNCTION {s}.permits_free() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF EXISTS (SELECT FROM {s}.permits) THEN
            WITH gone AS (
                DELETE FROM {s}.permits p USING ended_old o, ended_new n
                WHERE n.id = o.id AND o.state = 'claimed' AND n.state <> 'claimed'
                    AND p.task_id = o.id
                RETURNING p.key),
            n AS (SELECT key, count(*) AS n FROM gone GROUP BY key)
            UPDATE {s}.limits l SET in_flight = greatest(l.in_flight - n.n, 0)
                FROM n WHERE l.key = n.key;
        END IF;
        RETURN NULL;
    END $$;
    CREATE TRIGGER permits_free AFTER UPDATE ON {s}.tasks
        REFERENCING OLD TABLE AS ended_old NEW TABLE AS ended_new
        FOR EACH STATEMENT EXECUTE FUNCTION {s}.permits_free();
    """,
    # 16 -> 17 (issue #56): counts that cost the same at any size. The admin endpoint read
    # ``count(*) ... GROUP BY state`` every second, a walk of every row kept. A counter row
    # per state would serialize every bridge's transactions on it, so each statement that
    # moves tasks appends its net moves per state (insert only: nobody waits) and a writable
    # reader folds them into ``task_counts`` as it reads; a count is the base plus the
    # moves not yet folded. The update's are written by ``journal_moves`` (the trigger each
    # update of tasks already runs once), its text that of migration 15 plus that insert
    """
    CREATE TABLE {s}.task_counts (
        state       text PRIMARY KEY,
        n           bigint NOT NULL
    );
    CREATE TABLE {s}.task_count_moves (
        state       text NOT NULL,
        n           bigint NOT NULL
    );
    INSERT INTO {s}.task_counts (state, n)
        SELECT v.state, (SELECT count(*) FROM {s}.tasks t WHERE t.state = v.state)
        FROM unnest(ARRAY['pending', 'assigned', 'claimed', 'result', 'delivered', 'waiting',
            'dead']) AS v(state);
    CREATE FUNCTION {s}.task_counts_in() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO {s}.task_count_moves (state, n)
            SELECT state, count(*) FROM counted_new GROUP BY state;
        RETURN NULL;
    END $$;
    CREATE FUNCTION {s}.task_counts_out() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO {s}.task_count_moves (state, n)
            SELECT state, -count(*) FROM counted_old GROUP BY state;
        RETURN NULL;
    END $$;
    CREATE TRIGGER task_counts_in AFTER INSERT ON {s}.tasks
        REFERENCING NEW TABLE AS counted_new
        FOR EACH STATEMENT EXECUTE FUNCTION {s}.task_counts_in();
    CREATE TRIGGER task_counts_out AFTER DELETE ON {s}.tasks
        REFERENCING OLD TABLE AS counted_old
        FOR EACH STATEMENT EXECUTE FUNCTION {s}.task_counts_out();
    CREATE OR REPLACE FUNCTION {s}.journal_moves() RETURNS trigger LANGUAGE plpgsql AS $body$
    BEGIN
        INSERT INTO {s}.journal (id, at, src, dst, worker, attempt, reason, actor)
        SELECT n.id, n.updated_at, o.state, n.state, coalesce(n.owner, o.owner), o.attempt,
            CASE WHEN n.reason IS DISTINCT FROM o.reason THEN n.reason END,
            CASE
                WHEN n.reason IS DISTINCT FROM o.reason
                    AND n.reason LIKE 'operator:%' THEN 'operator'
                WHEN n.state = 'assigned'
                    OR (o.state = 'assigned' AND n.state = 'pending') THEN 'lead'
                WHEN o.state = 'claimed' AND n.reason IS DISTINCT FROM o.reason
                    AND n.reason LIKE 'lease of worker %' THEN 'reconciler'
                WHEN n.state = 'claimed' OR o.state = 'claimed' THEN 'worker'
                ELSE 'bridge'
            END
        FROM moved_new n JOIN moved_old o ON o.id = n.id
        WHERE n.state IS DISTINCT FROM o.state
        ORDER BY n.seq;
        INSERT INTO {s}.task_count_moves (state, n)
        SELECT state, sum(n) FROM (
            SELECT n.state, 1 AS n FROM moved_new n JOIN moved_old o ON o.id = n.id
                WHERE n.state IS DISTINCT FROM o.state
            UNION ALL
            SELECT o.state, -1 FROM moved_new n JOIN moved_old o ON o.id = n.id
                WHERE n.state IS DISTINCT FROM o.state) m
        GROUP BY state HAVING sum(n) <> 0;
        RETURN NULL;
    END
    $body$;
    """,
    # 17 -> 18 (issue #48, who may answer): the senders whose message answers an ask (the
    # ``sender`` header's values), NULL for anyone's (every ask before this one)
    """
    ALTER TABLE {s}.asks ADD COLUMN answer_from text[];
    """,
    # 18 -> 19 (issue #47, quarantine start-up): a lease expired by a crash reads whether its
    # run was waiting for a permit (a waiter is no suspect), by task
    """
    CREATE INDEX limit_waiters_task ON {s}.limit_waiters (task_id);
    """,
    # 19 -> 20 (issue #56, item 6: a tenant's cost): a tenant's new turn reads the queue's
    # clock and the tenant's last turn over the tasks still waiting for theirs, pending or
    # assigned ahead of a worker's free slots; the assigned ones were read through
    # ``tasks_assigned`` (by owner: every assigned row, twice, per tenant and priority of an
    # ingest). Both reads are now one index seek over the waiting turns, which a task keeps
    # while the lead assigns it (and gives back), and leaves when claimed
    """
    DROP INDEX {s}.tasks_tenant_turns;
    CREATE INDEX tasks_tenant_queued ON {s}.tasks (tenant, priority, fair)
        WHERE state IN ('pending', 'assigned') AND tenant IS NOT NULL;
    CREATE INDEX tasks_queued_turns ON {s}.tasks (priority, fair)
        WHERE state IN ('pending', 'assigned') AND fair > 0;
    """,
    # 20 -> 21 (issue #56, item 5: the reply turn found by task) a result's turn goes under its
    # message's user turn; the read that found it could walk the room's key backwards from the
    # newest turn (its ORDER BY ... LIMIT 1 matches the key), past every message queued after
    # it in the room (SQLite's did: a backlog made each completion cost more). The task's
    # user turns are read by task first (turns_task), the newest of them taken: the same turn
    """
    CREATE OR REPLACE FUNCTION {s}.turns_note() RETURNS trigger LANGUAGE plpgsql AS $body$
    DECLARE
        n bigint;
    BEGIN
        IF TG_OP = 'INSERT' THEN
            INSERT INTO {s}.conversations AS c (room, next_seq) VALUES (NEW.room, 1)
                ON CONFLICT (room) DO UPDATE SET next_seq = c.next_seq + 1
                RETURNING c.next_seq INTO n;
            INSERT INTO {s}.turns (room, seq, role, task_id, text, at, outcome)
                VALUES (NEW.room, n, 'user', NEW.id, NEW.body, NEW.created_at, 'received');
        ELSIF NEW.state = 'result' THEN
            IF NOT NEW.no_send THEN
                WITH mine AS MATERIALIZED (
                    SELECT room, seq FROM {s}.turns
                    WHERE task_id = ANY (ARRAY(SELECT NEW.id UNION ALL
                        SELECT answer_id FROM {s}.asks WHERE task_id = NEW.id
                            AND answer_id IS NOT NULL))
                        AND role = 'user'
                )
                INSERT INTO {s}.turns AS u (room, seq, role, task_id, text, at, outcome)
                    SELECT room, seq, 'assistant', NEW.id, NEW.result, NEW.updated_at, 'result'
                    FROM mine WHERE room = NEW.room
                    ORDER BY seq DESC LIMIT 1
                    ON CONFLICT (room, seq, role) DO UPDATE SET
                        text = excluded.text, at = excluded.at, outcome = 'result';
            ELSIF NEW.reason IS DISTINCT FROM OLD.reason
                    AND NEW.reason LIKE 'superseded by %' THEN
                UPDATE {s}.turns SET outcome = 'interrupted', at = NEW.updated_at
                    WHERE task_id = NEW.id AND room = NEW.room AND role = 'assistant'
                        AND outcome = 'shown';
            ELSE
                DELETE FROM {s}.turns
                    WHERE task_id = NEW.id AND room = NEW.room AND role = 'assistant'
                        AND outcome = 'shown';
            END IF;
        ELSIF NEW.state = 'delivered' AND NOT NEW.no_send THEN
            UPDATE {s}.turns SET outcome = 'delivered', at = NEW.updated_at
                WHERE task_id = NEW.id AND room = NEW.room AND role = 'assistant'
                    AND outcome = 'result';
        END IF;
        RETURN NULL;
    END
    $body$;
    """,
    # 21 -> 22 (issue #49, decision 2: live turns come from the task rows) a message and its
    # reply were each copied into ``turns`` at ingest and at result (and the reply's row
    # rewritten at delivery): the body's text written again, an index entry and a count update
    # per message and per reply, on the hot path. While a task is kept its turns are now read
    # from its own row: ``turn_seq`` is its message's number in the room (NULL: no room, or
    # its user turn pruned or forgotten), ``reply_seq`` where its reply sits when not at
    # ``turn_seq`` (under the newest answer to its asks, or kept by a prune that took the
    # message but not the reply). The reply is a turn while it is stored and sent (``NOT
    # no_send``) and the task is a result, delivered or dead; its outcome is read off the
    # state. ``turns`` keeps the asked, shown and interrupted turns and the copies of deleted
    # tasks' turns, made by ``turns_copy`` as they are deleted. ``conversations.turns`` still
    # counts every turn: ingest counts its messages (``Sql.ingest``, which numbers them),
    # ``turns_note`` a reply as it is stored and as a re-drive drops it. The live tasks' turns
    # are moved onto their rows here, and the counts taken again
    """
    ALTER TABLE {s}.tasks ADD COLUMN turn_seq bigint, ADD COLUMN reply_seq bigint;
    DROP TRIGGER turns_message ON {s}.tasks;
    DROP TRIGGER turns_move ON {s}.tasks;
    UPDATE {s}.tasks t SET turn_seq = u.seq
        FROM (SELECT DISTINCT ON (task_id, room) task_id, room, seq FROM {s}.turns
            WHERE role = 'user' ORDER BY task_id, room, seq DESC) u
        WHERE t.room IS NOT NULL AND u.task_id = t.id AND u.room = t.room;
    UPDATE {s}.tasks t SET reply_seq = r.seq
        FROM (SELECT t.id, coalesce(
                CASE WHEN NOT t.no_send AND t.result IS NOT NULL
                    AND t.state IN ('result', 'delivered', 'dead') THEN
                    (SELECT max(a.seq) FROM {s}.turns a WHERE a.task_id = t.id
                        AND a.room = t.room AND a.role = 'assistant'
                        AND a.outcome IN ('result', 'delivered'))
                END,
                greatest(t.turn_seq, (SELECT max(u.seq) FROM {s}.asks k
                    JOIN {s}.turns u ON u.task_id = k.answer_id AND u.room = t.room
                        AND u.role = 'user'
                    WHERE k.task_id = t.id AND k.answer_id IS NOT NULL))) AS seq
            FROM {s}.tasks t WHERE t.room IS NOT NULL) r
        WHERE t.id = r.id AND r.seq IS NOT NULL AND r.seq IS DISTINCT FROM t.turn_seq;
    ALTER TABLE {s}.turns DISABLE TRIGGER turns_count_out;
    DELETE FROM {s}.turns x USING {s}.tasks t
        WHERE t.room IS NOT NULL AND x.room = t.room AND x.task_id = t.id AND (
            (x.role = 'user' AND x.seq = t.turn_seq)
            OR (x.role = 'assistant' AND x.outcome IN ('result', 'delivered')
                AND x.seq = coalesce(t.reply_seq, t.turn_seq)));
    ALTER TABLE {s}.turns ENABLE TRIGGER turns_count_out;
    UPDATE {s}.conversations c SET turns = coalesce(k.n, 0)
        FROM (SELECT c.room, (SELECT count(*) FROM {s}.turns x WHERE x.room = c.room)
                + (SELECT count(*) FILTER (WHERE t.turn_seq IS NOT NULL)
                    + count(*) FILTER (WHERE coalesce(t.reply_seq, t.turn_seq) IS NOT NULL
                        AND NOT t.no_send AND t.result IS NOT NULL
                        AND t.state IN ('result', 'delivered', 'dead'))
                    FROM {s}.tasks t WHERE t.room = c.room
                        AND (t.turn_seq IS NOT NULL OR t.reply_seq IS NOT NULL)) AS n
            FROM {s}.conversations c) k
        WHERE c.room = k.room AND c.turns IS DISTINCT FROM coalesce(k.n, 0);
    CREATE INDEX tasks_room_turns ON {s}.tasks (room, turn_seq) WHERE turn_seq IS NOT NULL;
    CREATE INDEX tasks_room_replies ON {s}.tasks (room, reply_seq) WHERE reply_seq IS NOT NULL;
    CREATE OR REPLACE FUNCTION {s}.turns_note() RETURNS trigger LANGUAGE plpgsql AS $body$
    BEGIN
        IF NEW.state = 'result' THEN
            IF NOT NEW.no_send THEN
                IF coalesce(NEW.reply_seq, NEW.turn_seq) IS NOT NULL THEN
                    -- the reply replaces the text its run showed (its delete counts -1)
                    DELETE FROM {s}.turns
                        WHERE task_id = NEW.id AND room = NEW.room AND role = 'assistant'
                            AND outcome = 'shown';
                    UPDATE {s}.conversations SET turns = turns + 1 WHERE room = NEW.room;
                END IF;
            ELSIF NEW.reason IS DISTINCT FROM OLD.reason
                    AND NEW.reason LIKE 'superseded by %' THEN
                UPDATE {s}.turns SET outcome = 'interrupted', at = NEW.updated_at
                    WHERE task_id = NEW.id AND room = NEW.room AND role = 'assistant'
                        AND outcome = 'shown';
            ELSE
                DELETE FROM {s}.turns
                    WHERE task_id = NEW.id AND room = NEW.room AND role = 'assistant'
                        AND outcome = 'shown';
            END IF;
        ELSIF NOT OLD.no_send AND OLD.state IN ('result', 'delivered', 'dead')
                AND coalesce(OLD.reply_seq, OLD.turn_seq) IS NOT NULL THEN
            -- a re-drive: the reply counted when it was stored is gone with its result
            UPDATE {s}.conversations SET turns = greatest(turns - 1, 0) WHERE room = OLD.room;
        END IF;
        RETURN NULL;
    END
    $body$;
    CREATE TRIGGER turns_move AFTER UPDATE OF state ON {s}.tasks
        FOR EACH ROW WHEN (NEW.room IS NOT NULL AND (
            (NEW.state = 'result' AND OLD.state <> 'result')
            OR (NEW.result IS NULL AND OLD.result IS NOT NULL)))
        EXECUTE FUNCTION {s}.turns_note();
    CREATE FUNCTION {s}.turns_copy() RETURNS trigger LANGUAGE plpgsql AS $body$
    BEGIN
        WITH live AS (
            SELECT room, turn_seq AS seq, 'user' AS role, id, body AS text, created_at AS at,
                'received' AS outcome
            FROM deleted_old WHERE room IS NOT NULL AND turn_seq IS NOT NULL
            UNION ALL
            SELECT room, coalesce(reply_seq, turn_seq), 'assistant', id, result, updated_at,
                CASE WHEN state = 'delivered' THEN 'delivered' ELSE 'result' END
            FROM deleted_old WHERE room IS NOT NULL
                AND coalesce(reply_seq, turn_seq) IS NOT NULL AND NOT no_send
                AND result IS NOT NULL AND state IN ('result', 'delivered', 'dead')
        ),
        kept AS (
            INSERT INTO {s}.turns (room, seq, role, task_id, text, at, outcome)
            SELECT room, seq, role, id, text, at, outcome FROM live
            ON CONFLICT (room, seq, role) DO NOTHING
        )
        -- each copy counts +1 as it is inserted: the live turns leaving take theirs back
        UPDATE {s}.conversations c SET turns = greatest(c.turns - n.n, 0)
            FROM (SELECT room, count(*) AS n FROM live GROUP BY room) n WHERE c.room = n.room;
        RETURN NULL;
    END
    $body$;
    CREATE TRIGGER turns_copy AFTER DELETE ON {s}.tasks
        REFERENCING OLD TABLE AS deleted_old
        FOR EACH STATEMENT EXECUTE FUNCTION {s}.turns_copy();
    """,
    # 22 -> 23 (issue #51, child runs and queues): a task's queue and its parent, copied from
    # its headers by the ingest (never changed after), and the queues a worker serves (NULL:
    # the default one), kept by its beat; ``awaited`` marks the children a parked
    # join waits for. The statement that makes an awaited child done wakes its joining parent
    # once no awaited sibling is live (waiting -> pending at once, with a notice to idle
    # workers). Two siblings done at once in two transactions may each see the other live:
    # the reconciler's pass wakes such a joiner (``custody._children``); no lock is taken
    # here, so no completion waits on another's
    """
    ALTER TABLE {s}.tasks ADD COLUMN queue text NOT NULL DEFAULT 'default';
    ALTER TABLE {s}.tasks ADD COLUMN parent text;
    ALTER TABLE {s}.tasks ADD COLUMN awaited boolean NOT NULL DEFAULT false;
    ALTER TABLE {s}.workers ADD COLUMN queues text;
    UPDATE {s}.tasks SET queue = coalesce(headers::jsonb ->> 'queue', 'default'),
        parent = headers::jsonb ->> 'parent'
        WHERE headers <> '{{}}' AND (headers::jsonb ? 'queue' OR headers::jsonb ? 'parent');
    CREATE INDEX tasks_children ON {s}.tasks (parent) WHERE parent IS NOT NULL;
    CREATE INDEX tasks_live_children ON {s}.tasks (parent)
        WHERE parent IS NOT NULL AND state IN ('pending', 'assigned', 'claimed', 'waiting');
    CREATE FUNCTION {s}.children_done() RETURNS trigger LANGUAGE plpgsql AS $body$
    BEGIN
        UPDATE {s}.tasks p SET state = 'pending', not_before = NULL,
            updated_at = NEW.updated_at
            WHERE p.id = NEW.parent AND p.state = 'waiting' AND p.reason LIKE 'joining %'
                AND NOT EXISTS (SELECT FROM {s}.tasks c WHERE c.parent = NEW.parent
                    AND c.state IN ('pending', 'assigned', 'claimed', 'waiting')
                    AND c.awaited);
        IF FOUND THEN
            PERFORM pg_notify('tether_' || TG_TABLE_SCHEMA, 'pending');
        END IF;
        RETURN NULL;
    END
    $body$;
    CREATE TRIGGER children_done AFTER UPDATE OF state ON {s}.tasks
        FOR EACH ROW WHEN (NEW.parent IS NOT NULL AND NEW.awaited
            AND NEW.state IN ('result', 'delivered', 'dead')
            AND OLD.state NOT IN ('result', 'delivered', 'dead'))
        EXECUTE FUNCTION {s}.children_done();
    """,
    # 23 -> 24 (issue #52, schedules and events): a schedule's spec (a versioned JSON
    # document), its next due time and the due time it last fired; kept events, by key in
    # arrival order, until their TTL ends; ``wait_key`` names the key a run parked on (its
    # reason says it still waits: ``awaiting event ...``)
    """
    CREATE TABLE {s}.schedules (
        name text PRIMARY KEY,
        spec text NOT NULL,
        paused boolean NOT NULL DEFAULT false,
        next_due double precision NOT NULL,
        last_due double precision,
        fired bigint NOT NULL DEFAULT 0,
        created_at double precision NOT NULL
    );
    CREATE INDEX schedules_due ON {s}.schedules (next_due) WHERE NOT paused;
    CREATE TABLE {s}.events (
        id text PRIMARY KEY,
        key text NOT NULL,
        body text NOT NULL,
        at double precision NOT NULL,
        until double precision NOT NULL
    );
    CREATE INDEX events_key ON {s}.events (key, at);
    CREATE INDEX events_until ON {s}.events (until);
    ALTER TABLE {s}.tasks ADD COLUMN wait_key text;
    CREATE INDEX tasks_wait_key ON {s}.tasks (wait_key) WHERE wait_key IS NOT NULL;
    """,
    # 24 -> 25 (issue #53, versions): the agent version whose run recorded a step, the
    # function it called and the fingerprint of the arguments it was asked with (NULL on
    # records made before: never compared); the versions in flight are read off the oldest
    # record of each live task (a run counts under the version it began with)
    """
    ALTER TABLE {s}.steps ADD COLUMN version text;
    ALTER TABLE {s}.steps ADD COLUMN fingerprint text;
    ALTER TABLE {s}.steps ADD COLUMN call text;
    """,
)

SCHEMA_VERSION: Final = len(MIGRATIONS)


class NoSuchStore(LookupError):
    """The schema was never created and the caller asked not to create it."""


def _refuse_without_store(conn: psycopg.Connection[tuple[object, ...]], schema: str) -> None:
    made = conn.execute(
        "SELECT 1 FROM pg_tables WHERE schemaname = %s AND tablename = 'schema_version'", (schema,)
    ).fetchone()
    if made is None:
        raise NoSuchStore(f"no tether store in schema {schema!r} (is the schema right?)")


def _stored_version(conn: psycopg.Connection[tuple[object, ...]], schema: str) -> int:
    """The version ``schema``'s store is at; ``SchemaTooNew`` past this tether's."""
    row = conn.execute(
        f'SELECT coalesce(max(version), 0) FROM "{schema}".schema_version'
    ).fetchone()
    version = int(row[0]) if row is not None else 0  # type: ignore[call-overload]
    if version > SCHEMA_VERSION:
        raise SchemaTooNew(
            f"schema {schema!r} is at version {version}, newer than this tether supports "
            f"({SCHEMA_VERSION}); upgrade tether"
        )
    return version


def migrate(
    conn: psycopg.Connection[tuple[object, ...]], schema: str, *, create: bool = True
) -> int:
    """Create ``schema`` if needed and bring it to ``SCHEMA_VERSION``; return the start version.

    With ``create=False`` a schema without tether's tables raises ``NoSuchStore``.
    """
    s = f'"{check_schema(schema)}"'
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"tether-schema:{schema}",))
        exists = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)).fetchone()
        if not create:
            _refuse_without_store(conn, schema)
        if exists is None:
            conn.execute(f"CREATE SCHEMA {s}")
        conn.execute(
            f"CREATE TABLE IF NOT EXISTS {s}.schema_version ("
            "version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        start = _stored_version(conn, schema)
        for version in range(start, SCHEMA_VERSION):
            conn.execute(MIGRATIONS[version].format(s=s).encode())
            conn.execute(f"INSERT INTO {s}.schema_version (version) VALUES (%s)", (version + 1,))
    return start


class OlderStore(NoSuchStore):
    """The schema holds a tether store of an older version, and the caller only reads."""


def check_current(conn: psycopg.Connection[tuple[object, ...]], schema: str) -> None:
    """Refuse a schema that holds no tether store (``NoSuchStore``) or one of another version
    (``OlderStore``, ``SchemaTooNew``), reading only: what a read-only open does instead of
    ``migrate``."""
    check_schema(schema)
    _refuse_without_store(conn, schema)
    version = _stored_version(conn, schema)
    if version < SCHEMA_VERSION:
        raise OlderStore(
            f"schema {schema!r} holds a tether custody store of schema version {version}; this "
            f"tether reads version {SCHEMA_VERSION} and inspects without migrating: start a "
            "bridge on it once to upgrade it"
        )
