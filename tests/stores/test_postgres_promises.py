"""A promise on PostgreSQL waits for the synchronous standbys (issue #45).

The server of this module requires a synchronous standby (``synchronous_standby_names =
'*'``) and has none, so every commit that waits for the standbys waits until the store's
statement timeout gives it up. Every promise (the ingest before its ack, the read before a
reply's post, an operator's move, a step record) must then fail with ``PromiseUnconfirmed``,
and what promises nothing (a claim, a renewal, a completion) must return at once. The third
wave's barrier wrote no WAL, so PostgreSQL committed it without waiting: these promises
returned as if the standbys had them.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import AsyncIterator, Iterator

import psycopg
import pytest
import trio

from tether.bridge import PostgresStore, Task
from tether.bridge.custody import Claim, CustodyState
from tether.bridge.stores.postgres._durable import PromiseUnconfirmed, Synchronous
from tether.bridge.stores.postgres._throwaway import NoPostgres, throwaway_postgres

TIMEOUT_S = 0.5
"""The store's statement timeout: how long a commit waits for the missing standby."""


@pytest.fixture(scope="module")
def standbyless_dsn() -> Iterator[str]:
    """A server of its own that waits for a synchronous standby it does not have."""
    try:
        with throwaway_postgres(fsync=False) as server:
            with psycopg.connect(server.dsn, autocommit=True) as conn:
                conn.execute("ALTER SYSTEM SET synchronous_standby_names = '*'")
                conn.execute("SELECT pg_reload_conf()")
            while True:  # the reload is a signal: wait until new sessions see it
                with psycopg.connect(server.dsn, autocommit=True) as conn:
                    row = conn.execute("SHOW synchronous_standby_names").fetchone()
                if row is not None and row[0] == "*":
                    break
                time.sleep(0.05)
            yield server.dsn
    except NoPostgres as exc:
        pytest.skip(f"needs PostgreSQL server binaries: {exc}")


async def _open(dsn: str, synchronous: Synchronous = "NORMAL") -> PostgresStore:
    return await PostgresStore.open(
        dsn,
        schema=f"p_{secrets.token_hex(5)}",
        pool_size=2,
        statement_timeout_s=TIMEOUT_S,
        synchronous=synchronous,
    )


@pytest.fixture
async def store(standbyless_dsn: str) -> AsyncIterator[PostgresStore]:
    async with await _open(standbyless_dsn) as s:
        yield s


async def _promise_fails(call: object) -> None:
    with pytest.raises(PromiseUnconfirmed, match="synchronous standbys did not confirm"):
        with trio.fail_after(30):
            await call  # type: ignore[misc]


async def _returns_at_once(call: object) -> object:
    start = time.monotonic()
    with trio.fail_after(30):
        value = await call  # type: ignore[misc]
    assert time.monotonic() - start < TIMEOUT_S  # no wait for the standby
    return value


async def _claim(store: PostgresStore) -> Claim:
    claim = await _returns_at_once(store.claim("w0", leaderless=True))
    assert isinstance(claim, Claim)
    return claim


async def test_an_ingest_is_not_acked_until_the_standbys_have_it(store: PostgresStore) -> None:
    await _promise_fails(store.ingest(Task("t1", "hello")))
    # kept on the primary (a replay of the same id changes nothing), but never promised
    record = await store.get("t1")
    assert record is not None
    await _promise_fails(store.ingest(Task("t1", "hello")))  # the retry waits again


async def test_what_promises_nothing_does_not_wait(store: PostgresStore) -> None:
    await _promise_fails(store.ingest(Task("t1", "hello")))
    claim = await _claim(store)
    assert await _returns_at_once(store.ready_results()) == []  # found nothing: no post
    claim = await _returns_at_once(store.renew(claim))  # type: ignore[assignment]
    await _returns_at_once(store.complete(claim, "done"))
    assert await _returns_at_once(store.state("t1")) is CustodyState.RESULT


async def test_a_reply_is_not_posted_until_the_standbys_have_it(store: PostgresStore) -> None:
    await _promise_fails(store.ingest(Task("t1", "hello")))
    await store.complete(await _claim(store), "the reply")
    await _promise_fails(store.ready_results())  # the read whose post follows


async def test_a_step_record_is_durable_before_the_step_returns(store: PostgresStore) -> None:
    await _promise_fails(store.ingest(Task("t1", "hello")))
    claim = await _claim(store)
    await _promise_fails(store.record_step(claim, "book", '"ref-1"'))
    # the record is kept: the run's retry gets it back, and waits for the standbys again
    await _promise_fails(store.record_step(claim, "book", '"ref-2"'))
    [step] = await store.steps("t1")
    assert step.value == '"ref-1"'


async def test_an_operator_is_not_answered_until_the_standbys_have_it(
    store: PostgresStore,
) -> None:
    await _promise_fails(store.ingest(Task("t1", "hello")))
    await _promise_fails(store.cancel(["t1"], "not wanted"))


async def test_under_full_a_given_up_wait_makes_the_promise_wait_again(
    standbyless_dsn: str,
) -> None:
    async with await _open(standbyless_dsn, "FULL") as store:
        # every commit waits for the standby; one given up is kept and warned of, not raised
        await _promise_fails(store.ingest(Task("t1", "hello")))
        assert store.durability.barriers == 1
