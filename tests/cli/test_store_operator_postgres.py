"""``tether store retry / cancel / list`` as a process on a PostgreSQL store (issue #16, item 4).

The ``tether`` command itself (``python -m tether``) against the session's test database,
with the same store options as ``tether store show``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import trio
from psycopg.conninfo import conninfo_to_dict

from tether.bridge import CustodyState, PostgresStore, Task

from .test_store_operator import fill_store

S = CustodyState


async def test_the_tether_process_operates_a_postgres_store(postgres_dsn: str) -> None:
    schema = "opcli"
    async with await PostgresStore.open(postgres_dsn, schema=schema) as store:
        await fill_store(store)
    # as a user would: the URL carries no password, PGPASSWORD does
    parts = conninfo_to_dict(postgres_dsn)
    url = f"postgresql://{parts['user']}@{parts['host']}:{parts['port']}/{parts['dbname']}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    env["PGPASSWORD"] = str(parts.get("password", ""))
    base = [sys.executable, "-m", "tether", "store"]
    where = ["--store", url, "--store-schema", schema]

    async def tether(*argv: str) -> subprocess.CompletedProcess[bytes]:
        return await trio.run_process(
            [*base, *argv, *where], capture_stdout=True, capture_stderr=True, check=False, env=env
        )

    done = await tether("retry", "--dead", "--reason-contains", "bad input")
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode().splitlines() == ["re-drove 1 task(s)"]
    done = await tether("cancel", "c1", "r1", "--reason", "operator test")
    assert done.returncode == 1
    assert done.stdout.decode().splitlines()[0] == "task 'c1' cancelled: claimed -> dead"
    assert done.stderr.decode().splitlines() == [
        "tether: task 'r1' not cancelled: it is result: its reply is stored and waits for delivery"
    ]
    listed = await tether("list", "--state", "dead", "--json")
    assert listed.returncode == 0
    doc = json.loads(listed.stdout)
    assert sorted(t["task"]["id"] for t in doc["tasks"]) == ["c1", "d1"]
    async with await PostgresStore.open(postgres_dsn, schema=schema) as store:
        assert await store.state("d2") is S.PENDING
        record = await store.get("c1")
        assert record is not None
        assert record.reason == "operator: cancelled: operator test"
        assert [e.actor for e in await store.journal("c1")][-1] == "operator"


async def test_a_redrive_wakes_idle_workers_on_other_hosts(postgres_dsn: str) -> None:
    """The re-drive's ``NOTIFY`` goes out in its own statement: an idle worker elsewhere (here
    another store object, as on another host) wakes at once instead of after its poll."""
    schema = "opwake"
    idle = await PostgresStore.open(postgres_dsn, schema=schema)
    operator = await PostgresStore.open(postgres_dsn, schema=schema)
    try:
        await operator.ingest(Task("d1", "hi"))
        await operator.dead_letter("d1", "gave up")
        with trio.fail_after(10):
            while not idle.listening:
                await idle.wait_for_work(0.01)  # starts the listener
        woken: list[float] = []

        async def wait() -> None:
            start = trio.current_time()
            if await idle.wait_for_work(10.0):
                woken.append(trio.current_time() - start)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait)
            await trio.sleep(0.05)
            await operator.cancel(["d1"], "no wake-up for a cancel")  # refused: already dead
            [done] = await operator.redrive(["d1"])
            assert done.done
        assert woken
        assert woken[0] < 5.0  # not the 10 s timeout
        claim = await idle.claim("w1", leaderless=True)
        assert claim is not None
        assert (claim.task.id, claim.attempt) == ("d1", 1)
    finally:
        await idle.aclose()
        await operator.aclose()


async def test_forget_room_on_a_postgres_store_erases_the_rows_and_says_what_the_server_keeps(
    postgres_dsn: str,
) -> None:
    """Issue #53: the same erasure as on SQLite, in one transaction, then a ``VACUUM`` of the
    tables it wrote; the verb says plainly that PostgreSQL keeps old row versions and WAL."""
    schema = "forgetcli"
    async with await PostgresStore.open(postgres_dsn, schema=schema) as store:
        await store.ingest(Task("m1", "my pin is 1234", room="r"), room_policy="concurrent")
        await store.ingest(Task("m2", "other", room="q"), room_policy="concurrent")
    parts = conninfo_to_dict(postgres_dsn)
    url = f"postgresql://{parts['user']}@{parts['host']}:{parts['port']}/{parts['dbname']}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    env["PGPASSWORD"] = str(parts.get("password", ""))
    done = await trio.run_process(
        [
            *(sys.executable, "-m", "tether", "store", "forget-room", "r", "--no-gateway"),
            *("--store", url, "--store-schema", schema),
        ],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
        env=env,
    )
    out = done.stdout.decode()
    assert done.returncode == 0, done.stderr
    assert "the text of 1 task(s) (1 still in custody: cancelled first)" in out
    assert "PostgreSQL keeps the old row versions" in out
    async with await PostgresStore.open(postgres_dsn, schema=schema) as store:
        record = await store.get("m1")
        assert record is not None
        assert (record.task.body, record.state) == ("", S.DEAD)
        kept = await store.get("m2")
        assert kept is not None
        assert kept.task.body == "other"
