"""Delivery against the real reference gateway: delivered only once the gateway confirmed."""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import attrs
import httpx
import pytest
import trio

from support.clock import StoreAwareClock
from support.gateway import RunningGateway
from support.service import gateway_client
from support.waiting import wait_until
from tether.bridge import CustodyState, GatewayClient, SqliteStore, Task
from tether.bridge.custody import Result, Store
from tether.bridge.service._delivery import Delivery
from tether.bridge.service._ingest import Ingest


async def _take(
    gateway: RunningGateway, store: SqliteStore, client: GatewayClient, n: int
) -> list[str]:
    """Submit ``n`` messages and ingest them (the bridge now holds them, acked)."""
    ids = [await gateway.submit(f"question {i}") for i in range(n)]
    with trio.fail_after(10):
        taken: list[str] = []
        while len(taken) < n:
            # rooms run concurrently here: the tests claim a room's tasks side by side
            ingest = Ingest(store, client, room_policy="concurrent")
            taken.extend((await ingest.run_once(wait=1)).ingested)
    return ids


async def _answer(store: SqliteStore, body: str | None = None, *, no_send: bool = False) -> str:
    claim = await store.claim("w1", leaderless=True)
    assert claim is not None
    reply = f"answer to {claim.task.body}" if body is None else body
    await store.complete(claim, reply, no_send=no_send)
    return claim.task.id


async def test_replies_are_posted_then_marked_delivered(
    gateway: RunningGateway, store: SqliteStore, client: GatewayClient
) -> None:
    ids = await _take(gateway, store, client, 3)
    for _ in ids:
        await _answer(store)
    delivery = Delivery(store, client)
    assert await delivery.run_once() == 3
    for i, task_id in enumerate(ids):
        message = await gateway.message(task_id)
        assert (message["status"], message["reply"]) == ("answered", f"answer to question {i}")
        assert message["worker"] == "w1"
        assert await store.state(task_id) is CustodyState.DELIVERED
    assert (delivery.stats.delivered, delivery.stats.duplicates) == (3, 0)
    assert await delivery.run_once() == 0


async def test_a_duplicate_receipt_counts_as_confirmed(
    gateway: RunningGateway, store: SqliteStore, client: GatewayClient
) -> None:
    [task_id] = await _take(gateway, store, client, 1)
    await _answer(store)
    # the reply reached the gateway, then the bridge died before marking it delivered
    await client.post_result(task_id, "answer to question 0", worker="w1")
    delivery = Delivery(store, client)
    await delivery.run_once()
    assert await store.state(task_id) is CustodyState.DELIVERED
    assert (delivery.stats.delivered, delivery.stats.duplicates) == (1, 1)
    assert (await gateway.stats())["duplicate_results"] == 1


async def test_a_no_send_reply_closes_the_task_without_a_message(
    gateway: RunningGateway, store: SqliteStore, client: GatewayClient
) -> None:
    [task_id] = await _take(gateway, store, client, 1)
    await _answer(store, body="internal note, not for the user", no_send=True)
    delivery = Delivery(store, client)
    await delivery.run_once()
    message = await gateway.message(task_id)
    assert (message["status"], message["reply"]) == ("closed", None)
    assert await store.state(task_id) is CustodyState.DELIVERED
    assert delivery.stats.no_send == 1


async def test_a_permanent_refusal_dead_letters_with_the_gateways_reason(
    gateway: RunningGateway, store: SqliteStore, client: GatewayClient
) -> None:
    # a task this gateway never heard of (e.g. its database was reset): 404, forever
    await store.ingest(Task(id="lost-123", body="hi", room="lobby"))
    await _answer(store)
    delivery = Delivery(store, client)
    await delivery.run_once()
    record = await store.get("lost-123")
    assert record is not None
    assert record.state is CustodyState.DEAD
    assert record.reason is not None
    assert "404" in record.reason
    assert "unknown task id" in record.reason
    assert delivery.stats.dead_lettered == 1


async def test_a_down_gateway_is_waited_out_and_nothing_is_marked_early(
    gateway: RunningGateway, store: SqliteStore, token_file: Path
) -> None:
    async with gateway_client(gateway.url, token_file) as client:
        [task_id] = await _take(gateway, store, client, 1)
        await _answer(store)
        await gateway.stop()
        delivery = Delivery(store, client)
        async with trio.open_nursery() as nursery:
            await nursery.start(delivery.run)
            await trio.sleep(0.5)  # several failed attempts, backing off
            assert await store.state(task_id) is CustodyState.RESULT
            assert client.status.connected is False
            await gateway.start()

            async def delivered() -> bool:
                return await store.state(task_id) is CustodyState.DELIVERED

            await wait_until(delivered)
            nursery.cancel_scope.cancel()
    assert (await gateway.message(task_id))["status"] == "answered"


async def test_a_reply_stored_while_the_bridge_was_down_is_delivered_after_restart(
    gateway: RunningGateway, tmp_path: Path, client: GatewayClient
) -> None:
    path = tmp_path / "restart.db"
    async with await SqliteStore.open(path) as store:
        [task_id] = await _take(gateway, store, client, 1)
        await _answer(store)
    async with await SqliteStore.open(path) as store:
        await Delivery(store, client).run_once()
        assert await store.state(task_id) is CustodyState.DELIVERED
    assert (await gateway.message(task_id))["status"] == "answered"


@attrs.define(eq=False)
class _MarkCommitsDuringTheRead:
    """The store, with one interleaving forced: the first delivered-mark waits until delivery
    has started reading its next batch, and that read (which ran before the mark committed)
    returns only after the mark committed and delivery forgot it was marking those ids."""

    inner: SqliteStore
    read_started: trio.Event = attrs.field(factory=trio.Event)
    marked: trio.Event = attrs.field(factory=trio.Event)
    marks: int = 0

    async def ready_results(self, *, limit: int = 100) -> Sequence[Result]:
        results = await self.inner.ready_results(limit=limit)
        if self.marks == 1 and not self.read_started.is_set():
            self.read_started.set()
            await self.marked.wait()
        return results

    async def mark_delivered_many(self, ids: Sequence[str]) -> list[bool]:
        self.marks += 1
        if self.marks == 1:
            await self.read_started.wait()
        try:
            return await self.inner.mark_delivered_many(ids)
        finally:
            if self.marks == 1:
                self.marked.set()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


async def test_a_reply_is_never_posted_twice_while_its_mark_commits(
    gateway: RunningGateway, store: SqliteStore, client: GatewayClient
) -> None:
    ids = await _take(gateway, store, client, 3)
    for _ in ids:
        await _answer(store)
    racy = _MarkCommitsDuringTheRead(store)
    delivery = Delivery(cast(Store, racy), client)
    async with trio.open_nursery() as nursery:
        await nursery.start(delivery.run)

        async def delivered() -> bool:
            counts = await store.counts()
            return counts[CustodyState.DELIVERED] == 3 and racy.marked.is_set()

        await wait_until(delivered)
        await trio.sleep(0.2)  # a few more idle looks: nothing is posted again
        delivery.request_stop()
    assert racy.read_started.is_set()  # the interleaving happened
    assert (delivery.stats.delivered, delivery.stats.duplicates) == (3, 0)
    assert (await gateway.stats())["duplicate_results"] == 0


@pytest.fixture
def mock_clock() -> StoreAwareClock:
    return StoreAwareClock()


async def test_under_load_partial_batches_go_out_linger_apart_and_an_idle_reply_at_once(
    mock_clock: StoreAwareClock, tmp_path: Path, token_file: Path
) -> None:
    posts: list[tuple[float, int]] = []

    def gateway(request: httpx.Request) -> httpx.Response:
        items = json.loads(request.content)["results"]
        posts.append((trio.current_time(), len(items)))
        return httpx.Response(200, json={"items": [{"id": i["id"], "status": 200} for i in items]})

    async with (
        await SqliteStore.open(tmp_path / "linger.db", clock=trio.current_time) as store,
        gateway_client(
            "http://gateway.test", token_file, transport=httpx.MockTransport(gateway)
        ) as client,
    ):
        delivery = Delivery(store, client, linger=0.01)

        async def answer(n: int) -> None:
            await store.ingest(Task(f"t{n}", "question"))
            await _answer(store)
            delivery.nudge()  # what a worker's stored result does

        async with trio.open_nursery() as nursery:
            await nursery.start(delivery.run)
            await trio.sleep(1.0)  # idle
            idle = trio.current_time()
            await answer(0)
            await trio.sleep(0.001)
            assert posts == [(idle, 1)]  # a reply after a quiet spell goes out at once
            for n in range(1, 101):  # then a result every millisecond for 0.1 s
                await answer(n)
                await trio.sleep(0.001)
            await trio.sleep(0.1)
            delivery.request_stop()
    times = [t for t, _ in posts]
    assert min(b - a for a, b in itertools.pairwise(times)) >= 0.01 - 1e-9
    assert sum(n for _, n in posts) == 101  # every reply posted, each once
    assert len(posts) <= 12  # about one request per 10 ms, not one per reply


async def test_a_reply_stored_just_after_an_idle_look_goes_out_without_the_linger(
    mock_clock: StoreAwareClock, tmp_path: Path, token_file: Path
) -> None:
    posts: list[float] = []

    def gateway(request: httpx.Request) -> httpx.Response:
        items = json.loads(request.content)["results"]
        posts.append(trio.current_time())
        return httpx.Response(200, json={"items": [{"id": i["id"], "status": 200} for i in items]})

    async with (
        await SqliteStore.open(tmp_path / "idle.db", clock=trio.current_time) as store,
        gateway_client(
            "http://gateway.test", token_file, transport=httpx.MockTransport(gateway)
        ) as client,
    ):
        delivery = Delivery(store, client, idle_interval=0.05, linger=0.01)
        async with trio.open_nursery() as nursery:
            await nursery.start(delivery.run)  # its first (idle) look is now, at 0
            await trio.sleep(1.002)  # 2 ms after an idle look found nothing
            await store.ingest(Task("t1", "question"))
            await _answer(store)
            stored = trio.current_time()
            delivery.nudge()
            await trio.sleep(0.05)
            delivery.request_stop()
    assert posts == [stored]  # not at the idle look's start + linger (8 ms later)
