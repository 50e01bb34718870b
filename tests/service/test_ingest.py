"""Ingest against the real reference gateway: commit first, then ack; failures ack nothing."""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from support.gateway import RunningGateway
from support.waiting import wait_until
from tether.bridge import CustodyState, GatewayClient, SqliteStore, Task
from tether.bridge.custody import RoomPolicy
from tether.bridge.pool._wakeup import PoolWakeups
from tether.bridge.service._ingest import Ingest, IngestCommitFailed


async def test_a_round_commits_then_acks_every_task(
    gateway: RunningGateway, store: SqliteStore, client: GatewayClient
) -> None:
    ids = [await gateway.submit(f"hello {i}") for i in range(5)]
    ingest = Ingest(store, client)
    done = await ingest.run_once(wait=1)
    assert sorted(done.ingested) == sorted(ids)
    for task_id in ids:
        assert await store.state(task_id) is CustodyState.PENDING
        assert (await gateway.message(task_id))["status"] == "acked"
    record = await store.get(ids[0])
    assert record is not None
    assert record.task.body == "hello 0"
    assert record.task.room == "lobby"
    assert record.task.headers == {"sender": "user", "delivery": "1"}


@attrs.define(eq=False)
class CommitFailsOnce:
    """A real store whose next ``ingest_many`` fails like a full disk would."""

    inner: SqliteStore
    failures: int = 1

    async def ingest_many(
        self,
        tasks: Sequence[Task],
        *,
        room_policy: RoomPolicy = "concurrent",
        debounce_s: float = 0.0,
    ) -> list[bool]:
        if self.failures:
            self.failures -= 1
            raise OSError(28, "No space left on device")
        return await self.inner.ingest_many(tasks, room_policy=room_policy, debounce_s=debounce_s)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


async def test_a_failed_commit_withholds_every_ack_and_the_gateway_redelivers(
    gateway: RunningGateway, store: SqliteStore, client: GatewayClient
) -> None:
    ids = [await gateway.submit(f"m{i}") for i in range(3)]
    ingest = Ingest(CommitFailsOnce(store), client)
    with pytest.raises(IngestCommitFailed, match="none acked"):
        await ingest.run_once(wait=1)
    for task_id in ids:
        assert (await gateway.message(task_id))["status"] == "leased"
        assert await store.state(task_id) is None
    # the gateway hands them out again once the 1 s lease runs out; this time they land
    landed: list[str] = []
    with trio.fail_after(10):
        while len(landed) < 3:
            landed.extend((await ingest.run_once(wait=2)).ingested)
    assert sorted(landed) == sorted(ids)
    for task_id in ids:
        message = await gateway.message(task_id)
        assert (message["status"], message["deliveries"]) == ("acked", 2)
    assert ingest.stats.failed_commits == 1


async def test_a_task_the_store_refuses_is_rejected_and_reported_while_the_rest_lands(
    gateway: RunningGateway, tmp_path: Path, client: GatewayClient
) -> None:
    async with await SqliteStore.open(tmp_path / "small.db", max_body_bytes=64) as store:
        good = [await gateway.submit(f"short {i}") for i in range(3)]
        bad = await gateway.submit("x" * 200)
        done = await Ingest(store, client).run_once(wait=1)
        assert sorted(done.ingested) == sorted(good)
        [(rejected_id, reason)] = done.rejected
        assert rejected_id == bad
        assert "200 bytes" in reason
        assert "limit is 64" in reason
        assert await store.state(bad) is None
        for task_id in good:
            assert await store.state(task_id) is CustodyState.PENDING
            assert (await gateway.message(task_id))["status"] == "acked"
        assert (await gateway.message(bad))["status"] == "closed"
        assert (await gateway.stats())["rejected"] == 1


async def test_a_replayed_task_is_acked_again_and_changes_nothing(
    gateway: RunningGateway, store: SqliteStore, client: GatewayClient
) -> None:
    task_id = await gateway.submit("once")
    await store.ingest(Task(id=task_id, body="once", room="lobby"))
    claim = await store.claim("w1", leaderless=True)
    assert claim is not None
    done = await Ingest(store, client).run_once(wait=1)
    assert done.replays == (task_id,)
    assert done.ingested == ()
    assert await store.state(task_id) is CustodyState.CLAIMED
    assert (await gateway.message(task_id))["status"] == "acked"


async def test_an_id_polled_again_with_another_body_is_warned_counted_and_rejected(
    gateway: RunningGateway,
    store: SqliteStore,
    client: GatewayClient,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Issue 21.10: it was acked as a plain replay and nothing was said. The first body stays;
    the gateway sees a rejection with the reason (as its own 409 says for a conflicting
    submit), and the ordinary replay beside it is still acked."""
    conflicting = await gateway.submit("the gateway's body")
    replayed = await gateway.submit("the same body")
    await store.ingest(Task(id=conflicting, body="the body in custody", room="lobby"))
    await store.ingest(Task(id=replayed, body="the same body", room="lobby"))
    ingest = Ingest(store, client)
    with caplog.at_level(logging.WARNING, logger="tether.bridge.ingest"):
        done = await ingest.run_once(wait=1)
    assert done.conflicts == (conflicting,)
    assert done.replays == (replayed,)
    assert (ingest.stats.conflicts, ingest.stats.replays) == (1, 1)
    record = await store.get(conflicting)
    assert record is not None
    assert record.task.body == "the body in custody"  # the first body is kept
    [warning] = [r.getMessage() for r in caplog.records if r.name == "tether.bridge.ingest"]
    assert conflicting in warning
    assert "different body" in warning
    message = await gateway.message(conflicting)
    assert message["status"] == "closed"
    assert "different body" in message["reason"]
    assert (await gateway.message(replayed))["status"] == "acked"


async def test_run_keeps_polling_until_cancelled(
    gateway: RunningGateway, store: SqliteStore, client: GatewayClient
) -> None:
    ingest = Ingest(store, client, poll_wait=0.5)
    async with trio.open_nursery() as nursery:
        await nursery.start(ingest.run)
        first = await gateway.submit("first")
        second = await gateway.submit("second")

        async def both() -> bool:
            return ingest.stats.ingested >= 2

        await wait_until(both)
        nursery.cancel_scope.cancel()
    assert await store.state(first) is CustodyState.PENDING
    assert await store.state(second) is CustodyState.PENDING


async def test_a_commit_with_new_tasks_rings_the_pool_and_a_replay_round_does_not(
    gateway: RunningGateway, store: SqliteStore, client: GatewayClient
) -> None:
    wakeups = PoolWakeups()
    ingest = Ingest(store, client, wakeups=wakeups)
    await gateway.submit("hello")
    done = await ingest.run_once(wait=1)
    assert len(done.ingested) == 1
    assert wakeups.lead.is_set()  # the lead sweeps now, not at its next interval
    wakeups.lead.clear()
    task_id = await gateway.submit("again")
    await store.ingest(Task(task_id, "again"))  # so the round is only a replay
    again = await ingest.run_once(wait=1)
    assert (again.ingested, again.replays) == ((), (task_id,))
    assert not wakeups.lead.is_set()  # nothing new: no sweep needed


@attrs.define(eq=False)
class CallOrder:
    """A real gateway client that notes when each poll begins and each ack batch returns."""

    inner: GatewayClient
    events: list[str] = attrs.field(factory=list)

    async def poll_tasks(self, wait: float | None = None) -> Any:
        self.events.append("poll")
        tasks = await self.inner.poll_tasks(wait)
        if tasks:
            self.events.append("got")
        return tasks

    async def ack_many(self, task_ids: Sequence[str]) -> Any:
        self.events.append("ack")
        refused = await self.inner.ack_many(task_ids)
        self.events.append("acked")
        return refused

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


async def test_the_next_poll_waits_for_the_rounds_acks(
    gateway: RunningGateway, store: SqliteStore, client: GatewayClient
) -> None:
    """A gateway hands out a room's next message only once the one before is acked, and need
    not wake a waiting long poll when an ack arrives: a poll sent before the ack is answered
    could sit out its whole wait while the room's next message is ready. (Overlapping the
    next poll with the acks stalled a queued burst of 40 rooms for the poll's 30 s.)"""
    order = CallOrder(client)
    ingest = Ingest(store, order, poll_wait=5.0)  # type: ignore[arg-type]
    async with trio.open_nursery() as nursery:
        await nursery.start(ingest.run)
        for i in range(3):
            await gateway.submit(f"m{i}")

            async def landed(n: int = i + 1) -> bool:
                return ingest.stats.ingested >= n and order.events[-1] == "poll"

            await wait_until(landed)
        nursery.cancel_scope.cancel()
    rounds = "".join({"poll": "p", "got": "g", "ack": "a", "acked": "d"}[e] for e in order.events)
    # each poll that got tasks: its ack and the ack's answer, and only then the next poll
    assert re.fullmatch("(pgad|p)+", rounds), rounds
    assert rounds.count("pgad") == 3
