"""Conformance for room policies (``custody._rooms``), against every backend.

The rules live in the store's claim, view and ingest paths, so they bind every worker and bridge
sharing the store and survive restarts; these tests hold both backends to them.
"""

from __future__ import annotations

from typing import Any

import pytest

from support.clock import FakeClock
from support.custody import Backend
from tether.bridge import CustodyState, Task
from tether.bridge.custody import StaleLease, Store, Superseded

S = CustodyState


async def pending_ids(store: Store) -> list[str]:
    return [t.id for t in (await store.pool_view()).pending]


async def test_a_serial_room_offers_one_task_at_a_time_in_arrival_order(store: Store) -> None:
    tasks = [Task(f"m{i}", "x", room="r", priority="low" if i == 0 else "urgent") for i in range(3)]
    await store.ingest_many(tasks, room_policy="serial")
    await store.ingest(Task("other", "x", room="q"), room_policy="serial")
    await store.ingest(Task("loose", "x"), room_policy="serial")
    # arrival beats priority within a room: only m0 of room r may run
    assert sorted(await pending_ids(store)) == ["loose", "m0", "other"]
    claims = await store.claim_many("w1", 10, leaderless=True)
    assert sorted(c.task.id for c in claims) == ["loose", "m0", "other"]
    by_id = {c.task.id: c for c in claims}
    # m1 waits while m0 runs, on any worker
    assert await store.claim_many("w2", 10, leaderless=True) == []
    await store.complete(by_id["m0"], "reply 0")
    # ... and while m0's reply is not yet delivered (replies reach the gateway in order)
    assert await store.claim("w2", leaderless=True) is None
    assert await pending_ids(store) == []
    await store.mark_delivered("m0")
    assert await pending_ids(store) == ["m1"]
    second = await store.claim("w2", leaderless=True)
    assert second is not None
    assert second.task.id == "m1"


async def test_a_failed_run_keeps_its_place_at_the_head_of_the_room(store: Store) -> None:
    await store.ingest_many([Task(f"m{i}", "x", room="r") for i in range(2)], room_policy="serial")
    first = await store.claim("w1", leaderless=True)
    assert first is not None
    assert first.task.id == "m0"
    assert await store.fail(first, "boom") is S.PENDING
    again = await store.claim("w2", leaderless=True)
    assert again is not None
    assert (again.task.id, again.attempt) == ("m0", 2)
    await store.dead_letter("m0", "gave up")  # a dead task no longer holds the room
    nxt = await store.claim("w2", leaderless=True)
    assert nxt is not None
    assert nxt.task.id == "m1"


async def test_a_no_send_reply_does_not_hold_the_room(store: Store) -> None:
    await store.ingest_many([Task(f"m{i}", "x", room="r") for i in range(2)], room_policy="serial")
    first = await store.claim("w1", leaderless=True)
    assert first is not None
    await store.complete(first, "", no_send=True)
    nxt = await store.claim("w1", leaderless=True)
    assert nxt is not None
    assert nxt.task.id == "m1"


async def test_an_assignment_of_a_room_still_running_is_not_claimed(store: Store) -> None:
    """The gate is in the claim itself, not only in the lead's view: an assignment made
    while the room was free is not claimed once an earlier task of the room runs again."""
    await store.ingest_many([Task(f"m{i}", "x", room="r") for i in range(2)], room_policy="serial")
    first = await store.claim("w1", leaderless=True)
    assert first is not None
    await store.assign("m1", "w2")  # (a lead would not: m1 is not in its view)
    assert await store.claim("w2") is None
    await store.complete(first, "done")
    await store.mark_delivered("m0")
    nxt = await store.claim("w2")
    assert nxt is not None
    assert nxt.task.id == "m1"


async def test_a_concurrent_room_runs_its_tasks_at_once(store: Store) -> None:
    tasks = [Task(f"m{i}", "x", room="r") for i in range(3)]
    await store.ingest_many(tasks, room_policy="concurrent")
    claims = await store.claim_many("w1", 10, leaderless=True)
    assert [c.task.id for c in claims] == ["m0", "m1", "m2"]
    assert (await store.pool_view()).busy_rooms == frozenset({"r"})


async def test_replace_supersedes_what_waits_and_what_runs(store: Store) -> None:
    await store.ingest_many([Task(f"m{i}", "x", room="r") for i in range(3)], room_policy="serial")
    running = await store.claim("w1", leaderless=True)
    assert running is not None
    assert running.task.id == "m0"
    await store.ingest(Task("m3", "actually...", room="r"), room_policy="replace")
    for id in ("m0", "m1", "m2"):
        rec = await store.get(id)
        assert rec is not None
        assert (rec.state, rec.result, rec.reason) == (S.RESULT, "", "superseded by m3")
    [r0, *_] = [r for r in await store.ready_results() if r.task.id == "m0"]
    assert r0.no_send
    assert r0.worker == "w1"
    # the running worker is fenced out, and told why
    with pytest.raises(Superseded, match="superseded by m3"):
        await store.renew(running)
    with pytest.raises(StaleLease):
        await store.complete(running, "a stale answer")
    assert (await store.get("m0")).result == ""  # type: ignore[union-attr]
    # the newer task runs at once: a superseded (no-send) result does not hold the room
    nxt = await store.claim("w2", leaderless=True)
    assert nxt is not None
    assert nxt.task.id == "m3"


async def test_a_replace_batch_keeps_only_its_newest_message_per_room(store: Store) -> None:
    tasks = [Task(f"m{i}", "x", room="r" if i < 3 else "q") for i in range(5)]
    await store.ingest_many(tasks, room_policy="replace")
    claims = await store.claim_many("w1", 10, leaderless=True)
    assert sorted(c.task.id for c in claims) == ["m2", "m4"]
    reasons = {id: (await store.get(id)).reason for id in ("m0", "m1", "m3")}  # type: ignore[union-attr]
    assert reasons == {"m0": "superseded by m2", "m1": "superseded by m2", "m3": "superseded by m4"}


async def test_replace_spares_other_rooms_replies_and_replays(store: Store) -> None:
    await store.ingest(Task("a", "x", room="r"), room_policy="replace")
    await store.ingest(Task("b", "x", room="q"), room_policy="replace")
    done = await store.claim("w1", leaderless=True)
    assert done is not None
    await store.complete(done, "already answered")
    await store.ingest(Task("c", "x", room=done.task.room), room_policy="replace")
    assert (await store.get(done.task.id)).result == "already answered"  # type: ignore[union-attr]
    assert not await store.ingest(Task("a", "x", room="r"), room_policy="replace")  # a replay
    states = {id: (await store.get(id)).state for id in "abc"}  # type: ignore[union-attr]
    assert list(states.values()).count(S.PENDING) == 2


async def test_room_policy_is_checked(store: Store) -> None:
    with pytest.raises(ValueError, match="room policy must be one of"):
        await store.ingest(Task("a", "x", room="r"), room_policy="fifo")  # type: ignore[arg-type]
    assert await store.get("a") is None


async def test_the_order_survives_a_reopen(
    backend: Backend, where: Any, fake_clock: FakeClock
) -> None:
    store = await backend.open(where, fake_clock)
    try:
        await store.ingest_many(
            [Task(f"m{i}", "x", room="r") for i in range(3)], room_policy="serial"
        )
        first = await store.claim("w1", leaderless=True)
        assert first is not None
        assert first.task.id == "m0"
    finally:
        await store.aclose()
    store = await backend.open(where, fake_clock)
    try:
        assert await store.claim("w2", leaderless=True) is None  # m0 is still claimed
        fake_clock.advance(3600)
        [expiry] = await store.expire_leases()
        assert expiry.id == "m0"
        again = await store.claim("w2", leaderless=True)
        assert again is not None
        assert again.task.id == "m0"
    finally:
        await store.aclose()


async def test_a_room_is_serial_unless_ingest_is_told_otherwise_as_in_the_bridge(
    store: Store,
) -> None:
    """``ingest`` and ``ingest_many`` default to the bridge's room policy (``serial``): a
    program that ingests by itself gets the order a bridge would give (issue #47, item 12)."""
    await store.ingest(Task("m0", "x", room="r"))
    await store.ingest_many([Task("m1", "x", room="r")])
    await store.ingest(Task("c0", "x", room="c"), room_policy="concurrent")
    await store.ingest(Task("c1", "x", room="c"), room_policy="concurrent")
    assert sorted(await pending_ids(store)) == ["c0", "c1", "m0"]
