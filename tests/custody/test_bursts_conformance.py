"""Conformance: bursts (issue #52), on every backend.

With a room's debounce, messages of a room within that time of each other are one burst: the
newest waits out the debounce before it may be claimed, and the room's older messages still
waiting out theirs end, in the ingest's transaction, as no-send results "answered with
<newest>"; the newest's conversation shows them as turns. A message claimed already, one past
its window, one waiting a retry, and other rooms are left alone. Time is the store's clock.
"""

from __future__ import annotations

import pytest

from support.clock import FakeClock
from tether.bridge import CustodyState, Task
from tether.bridge.custody import Store

S = CustodyState
WINDOW = 1.5


async def _send(store: Store, id: str, room: str | None = "r", policy: str = "serial") -> None:
    assert await store.ingest(
        Task(id, f"part {id}", room=room),
        room_policy=policy,  # type: ignore[arg-type]
        debounce_s=WINDOW,
    )


async def test_a_burst_is_one_run_of_its_last_message_which_sees_the_others(
    store: Store, fake_clock: FakeClock
) -> None:
    await _send(store, "m1")
    fake_clock.advance(1)
    await _send(store, "m2")
    fake_clock.advance(1)  # 2 s after m1, 1 s after m2: each within the window of the last
    await _send(store, "m3")
    await _send(store, "other", room="elsewhere")
    # each names the message that took its place as it came: the chain ends at the run's
    for id, by in (("m1", "m2"), ("m2", "m3")):
        record = await store.get(id)
        assert record is not None
        assert (record.state, record.result, record.reason) == (S.RESULT, "", f"answered with {by}")
    assert await store.claim("w1", leaderless=True) is None  # all wait out their window
    fake_clock.advance(WINDOW)
    claims = [await store.claim("w1", leaderless=True) for _ in range(2)]
    assert sorted(c.task.id for c in claims if c is not None) == ["m3", "other"]
    talk = await store.conversation("m3")
    assert [(t.role, t.text) for t in talk.history] == [("user", "part m1"), ("user", "part m2")]
    journal = await store.journal("m1")
    assert (journal[-1].src, journal[-1].dst) == (S.PENDING, S.RESULT)


async def test_a_message_past_the_window_or_running_is_not_taken(
    store: Store, fake_clock: FakeClock
) -> None:
    await _send(store, "m1")
    fake_clock.advance(WINDOW + 0.5)
    await _send(store, "m2")  # m1's window had passed: m1 runs, m2 waits its turn (serial)
    assert await store.state("m1") is S.PENDING
    claim = await store.claim("w1", leaderless=True)
    assert claim is not None
    assert claim.task.id == "m1"
    await _send(store, "m3")  # m1 runs now; m2 still waits out its window: m3 answers it
    assert await store.state("m1") is S.CLAIMED
    m2 = await store.get("m2")
    assert m2 is not None
    assert (m2.state, m2.reason) == (S.RESULT, "answered with m3")
    await store.fail(claim, "try again", retry_after=60)  # m1 waits a retry now
    fake_clock.advance(0.5)
    await _send(store, "m4")  # a retry is not a message waiting out its window
    assert await store.state("m1") is S.PENDING
    assert await store.state("m3") is S.RESULT


async def test_one_batch_is_one_burst_and_a_roomless_task_never_waits(
    store: Store, fake_clock: FakeClock
) -> None:
    batch = [Task("a", "one", room="r"), Task("b", "two", room="r"), Task("c", "solo")]
    assert await store.ingest_many(batch, debounce_s=WINDOW) == [True, True, True]
    assert await store.state("a") is S.RESULT
    claim = await store.claim("w1", leaderless=True)
    assert claim is not None
    assert claim.task.id == "c"  # no room, no burst: at once
    assert await store.claim("w1", leaderless=True) is None
    fake_clock.advance(WINDOW)
    claim = await store.claim("w1", leaderless=True)
    assert claim is not None
    assert claim.task.id == "b"


async def test_a_bad_debounce_is_refused_and_changes_nothing(store: Store) -> None:
    for bad in (-1, 61, float("nan"), True):
        with pytest.raises(ValueError, match="debounce"):
            await store.ingest(Task("x", "y", room="r"), debounce_s=bad)
    assert await store.get("x") is None
