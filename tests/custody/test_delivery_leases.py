"""Delivery leases: on a store shared by several bridges a ready result is posted by one bridge
at a time. The store cases run on a real PostgreSQL (two ``PostgresStore``s on one schema are
two bridges' hosts) with a ``FakeClock``; the end-to-end cases run two ``Delivery`` loops
against the real reference gateway and count what it received."""

from __future__ import annotations

import math
import secrets
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
import trio

from support.clock import FakeClock
from support.custody import LEASE_S, drive_to
from support.gateway import RunningGateway
from support.service import gateway_client
from support.waiting import wait_until
from tether.bridge import CustodyState, GatewayClient, PostgresStore, Task, write_token
from tether.bridge.custody import InvalidWorkerName, Store
from tether.bridge.service._delivery import Delivery
from tether.bridge.service._ingest import Ingest

S = CustodyState


async def _results(store: Store, ids: list[str]) -> None:
    for id in ids:
        await drive_to(store, id, S.RESULT)


def _ids(results: Any) -> list[str]:
    return [r.task.id for r in results]


@pytest.fixture
async def two_hosts(
    postgres_dsn: str, fake_clock: FakeClock
) -> AsyncIterator[tuple[PostgresStore, PostgresStore]]:
    """Two stores (own pools, as on two hosts) on one fresh schema, reading one fake clock."""
    schema = f"dl_{secrets.token_hex(5)}"
    a = await PostgresStore.open(
        postgres_dsn, schema=schema, clock=fake_clock, lease_s=LEASE_S, pool_size=4
    )
    try:
        b = await PostgresStore.open(
            postgres_dsn, schema=schema, clock=fake_clock, lease_s=LEASE_S, pool_size=4
        )
        try:
            yield a, b
        finally:
            await b.aclose()
    finally:
        await a.aclose()


# -- both backends: the arguments and the capability ------------------------------------------


async def test_ready_results_checks_its_lease_arguments(store: Store) -> None:
    await _results(store, ["r1"])
    with pytest.raises(ValueError, match="lease_s without a holder"):
        await store.ready_results(lease_s=5.0)
    for bad in (None, 0, -1.0, math.nan, math.inf, True, "5"):
        with pytest.raises(ValueError, match="lease_s > 0"):
            await store.ready_results(holder="b1", lease_s=bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidWorkerName):
        await store.ready_results(holder="no spaces", lease_s=5.0)
    assert await store.state("r1") is S.RESULT  # nothing was taken by a refused call


async def test_delivery_leases_says_whether_a_holder_excludes_the_others(store: Store) -> None:
    await _results(store, ["r1", "r2"])
    assert _ids(await store.ready_results(holder="b1", lease_s=5.0)) == ["r1", "r2"]
    # the holder itself gets them again (a restarted loop re-posts at once)
    assert _ids(await store.ready_results(holder="b1", lease_s=5.0)) == ["r1", "r2"]
    other = _ids(await store.ready_results(holder="b2", lease_s=5.0))
    if store.delivery_leases:
        assert other == []
    else:  # SQLite: a plain read; a second bridge on the file would post them too
        assert other == ["r1", "r2"]
    assert _ids(await store.ready_results()) == ["r1", "r2"]  # a plain read sees every one


# -- PostgreSQL: the lease itself ---------------------------------------------------------------


async def test_two_holders_never_receive_the_same_result_while_the_lease_lives(
    two_hosts: tuple[PostgresStore, PostgresStore], fake_clock: FakeClock
) -> None:
    a, b = two_hosts
    ids = [f"r{i:02}" for i in range(10)]
    await _results(a, ids)
    await a.ingest(Task("urgent", "now", priority="urgent"))
    await drive_to(a, "urgent-r", S.PENDING)  # never a result: never taken
    first = _ids(await a.ready_results(limit=4, holder="bridge-a", lease_s=5.0))
    assert first == [ids[0], ids[1], ids[2], ids[3]]  # by priority then age, like a plain read
    second = _ids(await b.ready_results(limit=100, holder="bridge-b", lease_s=5.0))
    assert second == ids[4:]
    fake_clock.advance(4.9)  # still live
    assert _ids(await b.ready_results(limit=100, holder="bridge-b", lease_s=5.0)) == ids[4:]
    assert _ids(await a.ready_results(limit=100, holder="bridge-a", lease_s=5.0)) == first
    assert await b.ready_results(limit=100, holder="bridge-c", lease_s=5.0) == []
    assert await a.state("urgent") is S.PENDING


async def test_concurrent_takes_from_two_hosts_split_the_results(
    two_hosts: tuple[PostgresStore, PostgresStore],
) -> None:
    ids = [f"c{i:03}" for i in range(120)]
    await _results(two_hosts[0], ids)
    received: list[tuple[str, str]] = []

    async def deliver(store: PostgresStore, holder: str) -> None:
        # what a delivery loop does: take a batch, "post" it, mark it delivered
        while got := _ids(await store.ready_results(limit=7, holder=holder, lease_s=60.0)):
            received.extend((holder, id) for id in got)
            await trio.lowlevel.checkpoint()
            assert await store.mark_delivered_many(got) == [True] * len(got)

    async with trio.open_nursery() as nursery:
        for n in range(6):
            nursery.start_soon(deliver, two_hosts[n % 2], f"h{n}")
    assert sorted(id for _, id in received) == ids  # each result went to one holder, once
    assert len({holder for holder, _ in received}) >= 2  # and they really competed


async def test_after_the_lease_lapses_another_holder_takes_the_result(
    two_hosts: tuple[PostgresStore, PostgresStore], fake_clock: FakeClock
) -> None:
    a, b = two_hosts
    await _results(a, ["r1"])
    assert _ids(await a.ready_results(holder="crashed", lease_s=5.0)) == ["r1"]
    fake_clock.advance(4.999)
    assert await b.ready_results(holder="survivor", lease_s=5.0) == []
    fake_clock.advance(0.001)  # the lease ends at now + lease_s exactly
    assert _ids(await b.ready_results(holder="survivor", lease_s=5.0)) == ["r1"]
    # the holder that lost its lease does not get it back while the new lease lives
    assert await a.ready_results(holder="crashed", lease_s=5.0) == []
    assert await a.state("r1") is S.RESULT  # a lease is no custody state


async def test_a_lease_never_blocks_a_mark_or_a_dead_letter_and_they_clear_it(
    two_hosts: tuple[PostgresStore, PostgresStore], fake_clock: FakeClock, postgres_dsn: str
) -> None:
    a, b = two_hosts
    await _results(a, ["m1", "m2", "m3", "m4"])
    assert len(await a.ready_results(holder="bridge-a", lease_s=60.0)) == 4
    # another host, not the holder, marks and dead-letters while the lease lives
    assert await b.mark_delivered_many(["m1", "m2"]) == [True, True]
    await b.mark_delivered("m3")
    await b.dead_letter("m4", "test: refused")
    assert [await a.state(id) for id in ("m1", "m2", "m3", "m4")] == [S.DELIVERED] * 3 + [S.DEAD]
    fake_clock.advance(120)
    for store, holder in ((a, "bridge-a"), (b, "bridge-b")):
        assert await store.ready_results(holder=holder, lease_s=5.0) == []
    assert await a.ready_results() == []
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        rows = conn.execute(
            f'SELECT count(*) FROM "{a.schema}".tasks '
            "WHERE delivery_holder IS NOT NULL OR delivery_until IS NOT NULL"
        ).fetchone()
        assert rows == (0,)
        with pytest.raises(psycopg.errors.CheckViolation):  # a lease only on a result
            conn.execute(
                f"UPDATE \"{a.schema}\".tasks SET delivery_holder = 'x', delivery_until = 1 "
                "WHERE id = 'm1'"
            )


async def test_a_plain_read_behaves_as_before_and_takes_nothing(
    two_hosts: tuple[PostgresStore, PostgresStore],
) -> None:
    a, b = two_hosts
    await _results(a, ["p1", "p2", "p3"])
    await a.ingest(Task("hot", "urgent", priority="urgent"))
    claim = await a.claim("w-hot", leaderless=True)
    assert claim is not None
    await a.complete(claim, "fast")
    assert _ids(await a.ready_results(limit=2, holder="bridge-a", lease_s=60.0)) == ["hot", "p1"]
    assert _ids(await b.ready_results()) == ["hot", "p1", "p2", "p3"]  # leased or not
    assert _ids(await b.ready_results(limit=2)) == ["hot", "p1"]
    # the plain reads leased nothing: another holder still gets every unleased result
    assert _ids(await b.ready_results(holder="bridge-b", lease_s=60.0)) == ["p2", "p3"]


# -- end to end: two delivery loops, one store, one real gateway --------------------------------


@pytest.fixture
async def gateway(nursery: trio.Nursery, tmp_path: Path) -> AsyncIterator[RunningGateway]:
    token_file = tmp_path / "gateway" / "token"
    token_file.parent.mkdir(mode=0o700)
    write_token(token_file, "delivery-lease-token")
    async with httpx.AsyncClient(timeout=30) as http:
        db = tmp_path / "gateway" / "gateway.db"
        gateway = RunningGateway.on_free_port(nursery, http, token_file, db, lease=5.0)
        await gateway.start()
        yield gateway
        await gateway.stop()


@pytest.fixture
async def client(gateway: RunningGateway) -> AsyncIterator[GatewayClient]:
    async with gateway_client(gateway.url, gateway.token_file) as c:
        yield c


async def _ingest_all(gateway: RunningGateway, store: Store, client: GatewayClient, n: int) -> None:
    for i in range(n):
        await gateway.submit(f"question {i}", room=f"room-{i % 7}")
    with trio.fail_after(20):
        taken = 0
        while taken < n:
            taken += len((await Ingest(store, client).run_once(wait=1)).ingested)


async def test_two_deliveries_racing_for_every_result_post_each_reply_once(
    two_hosts: tuple[PostgresStore, PostgresStore], gateway: RunningGateway, client: GatewayClient
) -> None:
    a, b = two_hosts
    n = 120
    await _ingest_all(gateway, a, client, n)
    deliveries = [Delivery(a, client, batch=8), Delivery(b, client, batch=8)]
    async with trio.open_nursery() as nursery:
        for delivery in deliveries:
            await nursery.start(delivery.run)
        done = 0
        while done < n:  # results appear one by one; both loops are nudged for each
            claims = await a.claim_many("w1", 3, leaderless=True)
            for claim in claims:
                await a.complete(claim, f"answer to {claim.task.body}")
                for delivery in deliveries:
                    delivery.nudge()
            done += len(claims)
            await trio.sleep(0.005)

        async def all_delivered() -> bool:
            return (await a.counts())[S.DELIVERED] == n

        await wait_until(all_delivered, within=30)
        for delivery in deliveries:
            delivery.request_stop()
    stats = await gateway.stats()
    assert stats["tasks"]["answered"] == n
    assert stats["duplicate_results"] == 0
    assert [d.stats.duplicates for d in deliveries] == [0, 0]
    assert sum(d.stats.delivered for d in deliveries) == n
    assert all(d.stats.delivered > 0 for d in deliveries)  # both took part


async def test_a_dead_bridges_results_are_posted_once_by_another_after_its_lease(
    two_hosts: tuple[PostgresStore, PostgresStore],
    gateway: RunningGateway,
    client: GatewayClient,
    fake_clock: FakeClock,
) -> None:
    a, b = two_hosts
    await _ingest_all(gateway, a, client, 5)
    for claim in await a.claim_many("w1", 5, leaderless=True):
        await a.complete(claim, f"answer to {claim.task.body}")
    # bridge A took the batch for posting, then died before posting it
    assert len(await a.ready_results(holder="bridge-a-dead", lease_s=LEASE_S)) == 5
    survivor = Delivery(b, client, holder="bridge-b-alive")
    assert await survivor.run_once() == 0  # A's lease lives: B leaves them alone
    fake_clock.advance(LEASE_S)
    assert await survivor.run_once() == 5
    assert (await b.counts())[S.DELIVERED] == 5
    stats = await gateway.stats()
    assert (stats["tasks"]["answered"], stats["duplicate_results"]) == (5, 0)
    assert survivor.stats.delivered == 5
    assert await survivor.run_once() == 0


def test_a_delivery_refuses_a_bad_holder_or_lease() -> None:
    for bad in ({"holder": "has space"}, {"lease_s": 0.0}, {"lease_s": math.nan}):
        with pytest.raises(ValueError, match=r"worker name|lease_s > 0"):
            Delivery(None, None, **bad)  # type: ignore[arg-type]
