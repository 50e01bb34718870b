"""A live worker picks up an operator's cancel and re-drive (issue #16, item 4), on Trio's mock
clock: a cancelled claim's run is cancelled within one heartbeat and stores nothing; a
re-driven task is claimed again without restarting anything."""

from __future__ import annotations

import trio

from support.agents.handler import agent
from support.pool_fixtures import LEASE_S, StoreAwareClock
from support.waiting import wait_until
from tether.bridge import CustodyState, SqliteStore, Task
from tether.bridge.pool import PoolWorker

from .test_worker import running, state_is

S = CustodyState
BEAT = min(2.0, LEASE_S / 3)
"""The worker's default heartbeat interval (renewals)."""


async def test_a_cancelled_claim_has_its_run_cancelled_within_one_heartbeat(
    timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    started, gate = trio.Event(), trio.Event()
    cancelled_at: list[float] = []
    runs = 0

    async def waits(task: Task) -> str:
        nonlocal runs
        runs += 1
        if runs == 1:
            started.set()
            try:
                await trio.sleep_forever()
            except trio.Cancelled:
                cancelled_at.append(trio.current_time())
                raise
        await gate.wait()
        return f"reply to {task.body}"

    await timed_store.ingest(Task("t", "x"))
    worker = PoolWorker(timed_store, "w1", agent(waits), run_timeout=None)
    async with running(worker):
        with trio.fail_after(LEASE_S):
            await started.wait()
        await trio.sleep(0.3)  # mid-way between two beats
        [outcome] = await timed_store.cancel(["t"], "the user withdrew it")
        assert outcome.done
        at = trio.current_time()
        await wait_until(lambda: _true(bool(cancelled_at)), within=BEAT + 0.5)
        assert cancelled_at[0] - at <= BEAT + 0.01
        assert worker.counts.lost == 1
        assert worker.counts.completed == 0
        record = await timed_store.get("t")
        assert record is not None
        assert (record.state, record.reason) == (
            S.DEAD,
            "operator: cancelled: the user withdrew it",
        )
        # re-driven: the same worker, still running, claims it again (leaderless, by its poll)
        gate.set()
        [again] = await timed_store.redrive(["t"])
        assert again.done
        await wait_until(lambda: state_is(timed_store, "t", S.RESULT), within=LEASE_S)
    assert worker.counts.completed == 1
    [result] = await timed_store.ready_results()
    assert (result.body, result.attempt) == ("reply to x", 1)
    steps = [(e.src, e.dst, e.actor) for e in await timed_store.journal("t")][-4:]
    assert steps == [
        (S.CLAIMED, S.DEAD, "operator"),
        (S.DEAD, S.PENDING, "operator"),
        (S.PENDING, S.CLAIMED, "worker"),
        (S.CLAIMED, S.RESULT, "worker"),
    ]


async def _true(value: bool) -> bool:
    return value
