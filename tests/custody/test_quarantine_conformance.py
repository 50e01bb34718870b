"""Conformance: quarantine (issue #37, items 1 and 2), on every backend.

A worker that runs suspects in quarantine children claims them with ``quarantine=n``: up to
``n`` suspects (most crashed first), marked ``Claim.suspect``, beside ordinary work (no more
"one run in the whole pool"). The death of a quarantine child while it ran the task is
recorded by its live parent (``quarantine_death``, fenced on the run): a crash, not a failed
attempt, and the task dead at ``max_deaths`` with a reason naming the signal. The worker's own
process dying while a suspect ran in quarantine blames nobody: it stays a suspect, no proof
counted. Time is the store's ``FakeClock``; nothing sleeps.
"""

from __future__ import annotations

import pytest

from support.clock import FakeClock
from support.custody import LEASE_S
from tether.bridge import CustodyState, Task
from tether.bridge.custody import StaleLease, Store

S = CustodyState
SIGKILL = "its quarantine process was killed by SIGKILL"


async def _suspects(store: Store, clock: FakeClock, *ids: str) -> None:
    """``ids`` in flight together in a process that dies: suspects, each one crash."""
    await store.ingest_many([Task(id, f"body of {id}") for id in ids])
    await store.beat("gone-w1", "worker", 10)
    claims = await store.claim_many("gone-w1", len(ids), leaderless=True)
    assert sorted(c.task.id for c in claims) == sorted(ids)
    clock.advance(LEASE_S + 1)
    assert len(await store.expire_leases()) == len(ids)


async def test_a_quarantining_worker_claims_suspects_beside_ordinary_work(
    store: Store, fake_clock: FakeClock
) -> None:
    await _suspects(store, fake_clock, "s1", "s2", "s3")
    await store.ingest_many([Task(f"n{i}", "ordinary") for i in range(3)])
    await store.beat("q-w1", "worker", 10)
    claims = await store.claim_many("q-w1", 4, leaderless=True, quarantine=2)
    suspects = [c.task.id for c in claims if c.suspect]
    ordinary = [c.task.id for c in claims if not c.suspect]
    assert len(suspects) == 2
    assert set(suspects) <= {"s1", "s2", "s3"}
    assert ordinary == ["n0", "n1"]
    # another quarantining worker takes the last suspect while those run (not alone any more)
    await store.beat("r-w1", "worker", 10)
    more = await store.claim_many("r-w1", 10, leaderless=True, quarantine=2)
    assert [(c.task.id, c.suspect) for c in more][:1] == [
        ({"s1", "s2", "s3"}.difference(suspects).pop(), True)
    ]
    assert [c.task.id for c in more if not c.suspect] == ["n2"]


async def test_a_quarantine_death_is_a_crash_and_the_second_one_is_the_proof(
    store: Store, fake_clock: FakeClock
) -> None:
    await _suspects(store, fake_clock, "p")
    for death in (1, 2):
        await store.beat("q-w1", "worker", 10)
        [claim] = await store.claim_many("q-w1", 1, leaderless=True, quarantine=1)
        assert claim.suspect
        state = await store.quarantine_death(claim, SIGKILL, max_deaths=2)
        record = await store.get("p")
        assert record is not None
        assert record.quarantine_deaths == death
        assert record.crash_count == 1 + death
        if death == 1:
            assert state is S.PENDING
            assert (record.state, record.suspect, record.attempt) == (S.PENDING, True, 3)
            assert record.reason == (
                f"quarantine: {SIGKILL} in run 2: death 1 of 2, not a failed attempt; it "
                "runs in quarantine again"
            )
        else:
            assert state is S.DEAD
            assert record.state is S.DEAD
            assert record.reason == (
                f"quarantine: killed its quarantine process 2 times (last: {SIGKILL}); "
                "max_quarantine_deaths 2 reached"
            )
    last = (await store.journal("p"))[-1]
    assert (last.src, last.dst, last.actor) == (S.CLAIMED, S.DEAD, "worker")
    assert "SIGKILL" in (last.reason or "")


async def test_a_quarantine_death_is_fenced_on_the_run(store: Store, fake_clock: FakeClock) -> None:
    await _suspects(store, fake_clock, "p")
    await store.beat("q-w1", "worker", 10)
    [claim] = await store.claim_many("q-w1", 1, leaderless=True, quarantine=1)
    await store.release(claim)
    with pytest.raises(StaleLease):
        await store.quarantine_death(claim, SIGKILL)
    record = await store.get("p")
    assert record is not None
    assert (record.state, record.quarantine_deaths) == (S.PENDING, 0)
    with pytest.raises(ValueError, match="max_quarantine_deaths"):
        await store.quarantine_death(claim, SIGKILL, max_deaths=0)


async def test_the_worker_process_dying_while_a_suspect_runs_in_quarantine_blames_nobody(
    store: Store, fake_clock: FakeClock
) -> None:
    await _suspects(store, fake_clock, "s")
    for n in range(1, 5):  # far past max_crashes_alone: no proof, ever
        await store.beat(f"q{n}-w1", "worker", 10)
        [claim] = await store.claim_many(f"q{n}-w1", 1, leaderless=True, quarantine=1)
        assert (claim.task.id, claim.suspect) == ("s", True)
        fake_clock.advance(LEASE_S + 1)  # the worker's process died: its beats stopped
        [e] = await store.expire_leases()
        assert (e.outcome, e.crash) == (S.PENDING, True)
        assert "blames nobody" in e.reason
        record = await store.get("s")
        assert record is not None
        assert (record.suspect, record.crashes_alone, record.quarantine_deaths) == (True, 0, 0)
    assert (await store.counts())[S.DEAD] == 0


async def test_a_redrive_forgets_quarantine_deaths(store: Store, fake_clock: FakeClock) -> None:
    await _suspects(store, fake_clock, "p")
    for _ in range(2):
        await store.beat("q-w1", "worker", 10)
        [claim] = await store.claim_many("q-w1", 1, leaderless=True, quarantine=1)
        await store.quarantine_death(claim, SIGKILL, max_deaths=2)
    await store.redrive(["p"])
    record = await store.get("p")
    assert record is not None
    assert (record.state, record.quarantine_deaths, record.suspect) == (S.PENDING, 0, False)
