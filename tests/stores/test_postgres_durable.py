"""PostgreSQL durable at promises: what runs without waiting for the flush, and which calls
wait for it (the barrier: a synchronous commit of a transaction that wrote a WAL record).
``test_postgres_promises.py`` proves that the barrier waits for the synchronous standbys."""

from __future__ import annotations

import secrets

import pytest

from tether.bridge import PostgresStore, Task


def _schema() -> str:
    return f"s_{secrets.token_hex(5)}"


async def _setting(store: PostgresStore) -> str:
    return str(
        await store.db.run(lambda conn: conn.execute("SHOW synchronous_commit").fetchone()[0])  # type: ignore[index]
    )


async def test_only_promises_wait_for_the_flush(postgres_dsn: str) -> None:
    async with await PostgresStore.open(postgres_dsn, schema=_schema(), pool_size=2) as store:
        assert await _setting(store) == "off"  # what promises nothing does not wait
        barriers = store.durability
        await store.ingest_many([Task("t1", "a"), Task("t2", "b")])  # its ack follows
        assert barriers.barriers == 1
        assert await store.ready_results() == []  # nothing found: nothing promised
        claim = await store.claim("w0", leaderless=True)
        assert claim is not None
        claim = await store.renew(claim)
        await store.complete(claim, "done")
        assert barriers.barriers == 1
        [result] = await store.ready_results()  # its post follows
        assert barriers.barriers == 2
        await store.mark_delivered(result.task.id)
        await store.cancel(["t2"], "an operator's move")  # the operator is answered
        assert barriers.barriers == 3
        await store.ingest(Task("t3", "c"))
        claim = await store.claim("w0", leaderless=True)
        assert claim is not None
        await store.record_step(claim, "book", '"ref-1"')  # its effect has left already
        assert barriers.barriers == 5
        assert await _setting(store) == "off"  # the barrier's SET LOCAL ended with it


async def test_full_waits_at_every_commit(postgres_dsn: str) -> None:
    store = await PostgresStore.open(postgres_dsn, schema=_schema(), synchronous="FULL")
    async with store:
        assert await _setting(store) == "on"
        await store.ingest(Task("t1", "a"))
        assert store.durability.barriers == 0


async def test_an_unknown_setting_is_refused(postgres_dsn: str) -> None:
    with pytest.raises(ValueError, match="synchronous must be"):
        await PostgresStore.open(postgres_dsn, schema=_schema(), synchronous="SOMETIMES")  # type: ignore[arg-type]
