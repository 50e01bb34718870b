"""Stall notices: once per task at the threshold, persisted across restarts, retried on failure."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from support.clock import FakeClock
from support.pool_fixtures import LEASE_S, StoreAwareClock
from tether.bridge import CustodyState, SqliteStore, Task
from tether.bridge.custody import Claim
from tether.bridge.pool import StallWatcher

S = CustodyState
STALL_AFTER = 20.0


class Outbox:
    """The notify callback: records notices; can be told to fail the next sends."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, float]] = []
        self.fail_next = 0

    async def __call__(self, task_id: str, age: float) -> None:
        await trio.lowlevel.checkpoint()
        if self.fail_next:
            self.fail_next -= 1
            raise ConnectionError("gateway unreachable")
        self.sent.append((task_id, age))


async def _claimed(store: SqliteStore, id: str) -> Claim:
    await store.ingest(Task(id, "x"))
    claim = await store.claim("w1", leaderless=True)
    assert claim is not None
    return claim


async def test_the_notice_fires_once_at_the_threshold_and_not_before(
    store: SqliteStore, fake_clock: FakeClock
) -> None:
    outbox = Outbox()
    watcher = StallWatcher(store, stall_after=STALL_AFTER, notify=outbox)
    await _claimed(store, "t")
    await store.ingest(Task("waiting", "x"))  # pending: never a stall notice
    fake_clock.advance(STALL_AFTER - 0.001)
    assert (await watcher.run_once()).sent == ()
    fake_clock.advance(0.001)
    assert (await watcher.run_once()).sent == ("t",)
    assert [id for id, _ in outbox.sent] == ["t"]
    assert outbox.sent[0][1] == pytest.approx(STALL_AFTER)
    for _ in range(5):
        fake_clock.advance(STALL_AFTER)
        assert (await watcher.run_once()).sent == ()
    assert len(outbox.sent) == 1


async def test_no_second_notice_after_a_restart_or_a_repool(
    tmp_path: Path, store: SqliteStore, fake_clock: FakeClock
) -> None:
    outbox = Outbox()
    await _claimed(store, "t")
    fake_clock.advance(STALL_AFTER)
    first = StallWatcher(store, stall_after=STALL_AFTER, notify=outbox)
    assert (await first.run_once()).sent == ("t",)
    # a repool: the lease expires, another worker claims the next attempt
    fake_clock.advance(LEASE_S + 1)
    await store.expire_leases()
    assert await store.claim("w2", leaderless=True) is not None
    # a restart: a new store and a new watcher on the same file
    again = await SqliteStore.open(store.path, clock=fake_clock)
    try:
        assert (
            await StallWatcher(again, stall_after=STALL_AFTER, notify=outbox).run_once()
        ).sent == ()
    finally:
        await again.aclose()
    assert [id for id, _ in outbox.sent] == ["t"]


async def test_a_failed_send_is_retried_next_pass(
    store: SqliteStore, fake_clock: FakeClock
) -> None:
    outbox = Outbox()
    outbox.fail_next = 2
    watcher = StallWatcher(store, stall_after=STALL_AFTER, notify=outbox)
    await _claimed(store, "t")
    fake_clock.advance(STALL_AFTER)
    assert (await watcher.run_once()).failed == ("t",)
    assert (await watcher.run_once()).failed == ("t",)
    fake_clock.advance(1)
    report = await watcher.run_once()
    assert (report.sent, report.failed) == (("t",), ())
    assert [id for id, _ in outbox.sent] == ["t"]
    assert outbox.sent[0][1] == pytest.approx(STALL_AFTER + 1)
    assert (await watcher.run_once()).sent == ()


async def test_two_watchers_send_one_notice(store: SqliteStore, fake_clock: FakeClock) -> None:
    outbox = Outbox()
    watchers = [StallWatcher(store, stall_after=STALL_AFTER, notify=outbox) for _ in range(2)]
    for i in range(10):
        await _claimed(store, f"t{i}")
    fake_clock.advance(STALL_AFTER)
    async with trio.open_nursery() as nursery:
        for w in watchers:
            nursery.start_soon(w.run_once)
    assert sorted(id for id, _ in outbox.sent) == sorted(f"t{i}" for i in range(10))


async def test_records_are_pruned_once_the_task_is_terminal(
    store: SqliteStore, fake_clock: FakeClock
) -> None:
    outbox = Outbox()
    watcher = StallWatcher(store, stall_after=STALL_AFTER, notify=outbox)
    claim = await _claimed(store, "t")
    for _ in range(4):  # the worker renews its lease while the task runs long
        fake_clock.advance(STALL_AFTER / 4)
        claim = await store.renew(claim)
    assert (await watcher.run_once()).sent == ("t",)
    await store.complete(claim, "done")
    assert (await watcher.run_once()).pruned == 0  # a result is still in custody
    await store.mark_delivered("t")
    assert (await watcher.run_once()).pruned == 1


async def test_the_watcher_service_notices_on_time(
    timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    outbox = Outbox()
    watcher = StallWatcher(timed_store, stall_after=STALL_AFTER, notify=outbox, interval=1.0)
    await _claimed(timed_store, "t")
    async with trio.open_nursery() as nursery:
        await nursery.start(watcher.run)
        await trio.sleep(STALL_AFTER - 1.5)
        assert outbox.sent == []
        await trio.sleep(2)
        assert [id for id, _ in outbox.sent] == ["t"]
        assert outbox.sent[0][1] == pytest.approx(STALL_AFTER, abs=1.0)
        watcher.request_stop()
    assert watcher.passes >= STALL_AFTER


@pytest.mark.parametrize(
    ("option", "value"), [("stall_after", 0), ("interval", -1), ("batch", 0), ("notify", 3)]
)
async def test_bad_watcher_options_are_refused(
    store: SqliteStore, option: str, value: object
) -> None:
    options: dict[str, object] = {"stall_after": 1.0, "notify": Outbox(), option: value}
    with pytest.raises((ValueError, TypeError), match=option):
        StallWatcher(store, **options)  # type: ignore[arg-type]
