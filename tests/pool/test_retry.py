"""Retry backoff in the pool (issue #16, item 1), on virtual time.

A failing agent's attempts are spaced by the worker's ``RetryBackoff`` (full jitter, doubling,
capped), an agent's ``Retry(after=)`` replaces the draw, ``Permanent`` dead-letters at once, and
the lead wakes when a waiting retry falls due instead of at its (long) sweep interval.
"""

from __future__ import annotations

import itertools
import random

import pytest
import trio

from support.agents.handler import agent
from support.pool_fixtures import MAX_ATTEMPTS, StoreAwareClock
from support.waiting import state_is as _is
from support.waiting import wait_until
from tether.bridge import CustodyState, Permanent, Retry, SqliteStore, Task
from tether.bridge.pool import PoolLead, PoolWorker, RetryBackoff
from tether.bridge.pool._wakeup import PoolWakeups

S = CustodyState
POLL = 0.2


def test_the_backoff_doubles_from_first_to_its_cap_with_full_jitter() -> None:
    backoff = RetryBackoff(2.0, 10.0)
    assert [backoff.ceiling(n) for n in range(1, 6)] == [2.0, 4.0, 8.0, 10.0, 10.0]
    assert backoff.ceiling(10_000) == 10.0  # no overflow on absurd attempts
    draws = [backoff.delay(3, random.Random(seed)) for seed in range(200)]
    assert all(0.0 <= d <= 8.0 for d in draws)
    assert min(draws) < 1.0 < 7.0 < max(draws)  # spread over the whole range: full jitter
    assert RetryBackoff(0, 0).delay(4, random.Random(1)) == 0.0
    assert RetryBackoff.parse("2:300") == RetryBackoff() == RetryBackoff.parse(" 2 ")
    assert RetryBackoff.parse("0.5:4") == RetryBackoff(0.5, 4.0)
    assert RetryBackoff.parse("off") == RetryBackoff.parse("0") == RetryBackoff(0.0, 0.0)
    assert str(RetryBackoff()) == "2:300"


@pytest.mark.parametrize("bad", ["", "x", "2:", "-1", "5:2", "1:100000", "1:2:3"])
def test_a_bad_backoff_spec_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="must"):
        RetryBackoff.parse(bad)


def test_retry_and_permanent_check_what_they_are_given() -> None:
    assert Retry(after=3).after == 3.0
    assert Retry().after is None
    assert str(Retry("provider said 503", after=1.5)) == "provider said 503"
    for after in (-1, float("inf"), float("nan"), True):
        with pytest.raises(ValueError, match="after"):
            Retry(after=after)
    with pytest.raises(TypeError, match="reason"):
        Permanent("")


async def test_failed_attempts_are_spaced_by_the_backoff_draws(
    timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    runs: list[float] = []

    async def flaky(task: Task) -> str:
        runs.append(trio.current_time())
        raise ConnectionError("503 from the model provider")

    backoff = RetryBackoff(2.0, 300.0)
    expected = random.Random(7)
    delays = [backoff.delay(n, expected) for n in range(1, MAX_ATTEMPTS)]
    worker = PoolWorker(
        timed_store,
        "w1",
        agent(flaky),
        poll_interval=POLL,
        retry_backoff=backoff,
        rng=random.Random(7),
    )
    await timed_store.ingest(Task("t", "x"))
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        await wait_until(lambda: _is(timed_store, "t", S.DEAD))
        worker.request_stop()
    assert len(runs) == MAX_ATTEMPTS
    gaps = [b - a for a, b in itertools.pairwise(runs)]
    for gap, delay in zip(gaps, delays, strict=True):
        assert delay <= gap <= delay + POLL + 0.05, (gaps, delays)
    record = await timed_store.get("t")
    assert record is not None
    assert record.reason == (
        f"failed on attempt {MAX_ATTEMPTS} of {MAX_ATTEMPTS}: "
        "ConnectionError: 503 from the model provider"
    )


async def test_an_agents_retry_after_replaces_the_backoff(
    timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    runs: list[float] = []

    async def rate_limited(task: Task) -> str:
        runs.append(trio.current_time())
        if len(runs) == 1:
            raise Retry("429 Too Many Requests", after=45.0)
        return "fine now"

    worker = PoolWorker(timed_store, "w1", agent(rate_limited), poll_interval=POLL)
    await timed_store.ingest(Task("t", "x"))
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        await trio.sleep(44.0)
        waiting = await timed_store.waiting_retries()
        assert (waiting.count, waiting.next_due) == (1, runs[0] + 45.0)
        record = await timed_store.get("t")
        assert record is not None
        assert (record.state, record.attempt) == (S.PENDING, 2)
        assert record.reason == "Retry: 429 Too Many Requests"
        await wait_until(lambda: _is(timed_store, "t", S.RESULT))
        worker.request_stop()
    assert 45.0 <= runs[1] - runs[0] <= 45.0 + POLL + 0.05


async def test_permanent_dead_letters_on_the_first_attempt(
    timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    calls = 0

    async def strict(task: Task) -> str:
        nonlocal calls
        calls += 1
        raise Permanent("no such city: Atlantis")

    worker = PoolWorker(timed_store, "w1", agent(strict), poll_interval=POLL)
    await timed_store.ingest(Task("t", "x"))
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        await wait_until(lambda: _is(timed_store, "t", S.DEAD))
        worker.request_stop()
    record = await timed_store.get("t")
    assert record is not None
    assert (calls, record.attempt) == (1, 1)
    assert record.reason == "permanent failure on attempt 1: no such city: Atlantis"


async def test_the_lead_sweeps_when_a_retry_falls_due_not_at_its_interval(
    timed_store: SqliteStore, mock_clock: StoreAwareClock
) -> None:
    runs: list[float] = []

    async def once_late(task: Task) -> str:
        runs.append(trio.current_time())
        if len(runs) == 1:
            raise Retry("busy", after=5.0)
        return "ok"

    wakeups = PoolWakeups()
    slow = 60.0  # without the due-time wake-up the retry would wait for this
    lead = PoolLead(timed_store, sweep_interval=slow, wakeups=wakeups)
    worker = PoolWorker(
        timed_store,
        "w1",
        agent(once_late),
        poll_interval=slow,
        heartbeat_interval=1.0,
        wakeups=wakeups,
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(lead.run)
        await nursery.start(worker.run)
        await timed_store.ingest(Task("t", "x"))
        wakeups.tasks_pending()
        await wait_until(lambda: _is(timed_store, "t", S.RESULT), within=30.0)
        lead.request_stop()
        worker.request_stop()
    assert len(runs) == 2
    assert 5.0 <= runs[1] - runs[0] <= 5.5
