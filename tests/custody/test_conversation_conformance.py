"""Conformance for conversations (issue #34), against every backend: the turns written by the
custody moves themselves, the state written with a result under the lease's fence and a
version, the bounded history window, retention and an operator's erasure."""

from __future__ import annotations

import pytest

from support.clock import FakeClock
from tether.bridge import CustodyState, Task
from tether.bridge.custody import (
    MAX_STATE_BYTES,
    Claim,
    InvalidTask,
    StaleLease,
    StateConflict,
    StateTooLarge,
    Store,
    Superseded,
)


def said(store_turns: object) -> list[tuple[str, str, str]]:
    return [(t.role, t.text, t.outcome) for t in store_turns]  # type: ignore[attr-defined]


async def run(store: Store, worker: str = "w1") -> Claim:
    claim = await store.claim(worker, leaderless=True)
    assert claim is not None
    return claim


async def test_turns_follow_custody_and_a_run_sees_the_turns_before_its_message(
    store: Store,
) -> None:
    await store.ingest(Task("m1", "weather in Paris?", room="r"), room_policy="serial")
    first = await store.claim("w1", leaderless=True)
    assert first is not None
    assert said((await store.conversation("m1")).history) == []
    await store.complete(first, "sunny")
    await store.ingest(Task("m2", "and in Rome?", room="r"), room_policy="serial")
    view = await store.room("r")
    assert view is not None
    assert said(view.turns) == [
        ("user", "weather in Paris?", "received"),
        ("assistant", "sunny", "result"),
        ("user", "and in Rome?", "received"),
    ]
    await store.mark_delivered("m1")
    second = await store.claim("w1", leaderless=True)
    assert second is not None
    assert second.task.id == "m2"
    conversation = await store.conversation("m2")
    assert said(conversation.history) == [
        ("user", "weather in Paris?", "received"),
        ("assistant", "sunny", "delivered"),
    ]
    assert [t.task_id for t in conversation.history] == ["m1", "m1"]
    assert conversation.state == {}
    assert conversation.version == 0


async def test_a_reply_stored_after_a_newer_message_sits_under_its_own_message(
    store: Store,
) -> None:
    await store.ingest_many(
        [Task("a", "one", room="r"), Task("b", "two", room="r")], room_policy="concurrent"
    )
    claims = {c.task.id: c for c in await store.claim_many("w1", 2, leaderless=True)}
    await store.complete(claims["b"], "re two")
    await store.complete(claims["a"], "re one")
    await store.ingest(Task("c", "three", room="r"), room_policy="concurrent")
    history = (await store.conversation("c")).history
    assert said(history) == [
        ("user", "one", "received"),
        ("assistant", "re one", "result"),
        ("user", "two", "received"),
        ("assistant", "re two", "result"),
    ]


async def test_a_no_send_result_a_failure_and_a_dead_task_write_no_reply(store: Store) -> None:
    await store.ingest_many(
        [Task(f"m{i}", f"q{i}", room="r") for i in range(3)], room_policy="concurrent"
    )
    claims = {c.task.id: c for c in await store.claim_many("w1", 3, leaderless=True)}
    await store.complete(claims["m0"], "", no_send=True)
    await store.fail(claims["m1"], "boom", permanent=True)
    await store.record_shown(claims["m2"], "half a")
    await store.fail(claims["m2"], "boom")
    await store.ingest(Task("m3", "q3", room="r"), room_policy="concurrent")
    assert said((await store.conversation("m3")).history) == [
        ("user", "q0", "received"),
        ("user", "q1", "received"),
        ("user", "q2", "received"),
    ]


async def test_a_barge_in_records_the_text_shown_as_interrupted(store: Store) -> None:
    await store.ingest(Task("m1", "tell me a story", room="r"), room_policy="replace")
    first = await store.claim("w1", leaderless=True)
    assert first is not None
    assert await store.record_shown(first, "Once upon")
    assert await store.record_shown(first, "Once upon a time")
    await store.ingest(Task("m2", "stop, a joke instead", room="r"), room_policy="replace")
    with pytest.raises(Superseded):
        await store.complete(first, "Once upon a time, the end")
    assert not await store.record_shown(first, "too late")
    second = await store.claim("w2", leaderless=True)
    assert second is not None
    assert second.task.id == "m2"
    assert said((await store.conversation("m2")).history) == [
        ("user", "tell me a story", "received"),
        ("assistant", "Once upon a time", "interrupted"),
    ]


async def test_a_barge_in_on_a_run_that_showed_nothing_records_no_reply(store: Store) -> None:
    await store.ingest(Task("m1", "hi", room="r"), room_policy="replace")
    await run(store)
    await store.ingest(Task("m2", "hello?", room="r"), room_policy="replace")
    assert said((await store.conversation("m2")).history) == [("user", "hi", "received")]


async def test_a_streaming_reply_is_not_history_until_it_is_stored(store: Store) -> None:
    await store.ingest_many(
        [Task("a", "one", room="r"), Task("b", "two", room="r")], room_policy="concurrent"
    )
    claims = {c.task.id: c for c in await store.claim_many("w1", 2, leaderless=True)}
    await store.record_shown(claims["a"], "re o")
    assert said((await store.conversation("b")).history) == [("user", "one", "received")]
    view = await store.room("r")
    assert view is not None
    assert ("assistant", "re o", "shown") in said(view.turns)
    await store.complete(claims["a"], "re one")
    assert said((await store.conversation("b")).history)[-1] == ("assistant", "re one", "result")


async def test_state_is_stored_with_the_result_and_versioned(store: Store) -> None:
    await store.ingest_many([Task("a", "one", room="r")], room_policy="serial")
    claim = await run(store)
    assert await store.complete_with_state(claim, "ok", {"count": 1}, 0) == 1
    await store.mark_delivered("a")
    await store.ingest(Task("b", "two", room="r"), room_policy="serial")
    conversation = await store.conversation("b")
    assert (conversation.state, conversation.version) == ({"count": 1}, 1)
    claim = await run(store)
    assert await store.complete_with_state(claim, "", {"count": 2}, 1, no_send=True) == 2
    view = await store.room("r")
    assert view is not None
    assert (view.state, view.version, view.turn_count) == ({"count": 2}, 2, 3)
    assert view.state_bytes == len(b'{"count":2}')


async def test_a_stale_state_is_refused_and_nothing_is_written(store: Store) -> None:
    await store.ingest_many(
        [Task("a", "one", room="r"), Task("b", "two", room="r")], room_policy="concurrent"
    )
    claims = {c.task.id: c for c in await store.claim_many("w1", 2, leaderless=True)}
    assert await store.complete_with_state(claims["a"], "A", {"n": 1}, 0) == 1
    with pytest.raises(StateConflict):
        await store.complete_with_state(claims["b"], "B", {"n": 1}, 0)
    record = await store.get("b")
    assert record is not None
    assert record.state.value == "claimed"
    assert await store.complete_with_state(claims["b"], "B", {"n": 2}, 1) == 2
    view = await store.room("r")
    assert view is not None
    assert view.state == {"n": 2}


async def test_a_fenced_out_run_changes_no_state(store: Store, fake_clock: FakeClock) -> None:
    await store.ingest(Task("a", "one", room="r"), room_policy="concurrent")
    claim = await run(store)
    fake_clock.advance(store.lease_s + 1)
    await store.expire_leases()
    with pytest.raises(StaleLease):
        await store.complete_with_state(claim, "late", {"n": 1}, 0)
    view = await store.room("r")
    assert view is not None
    assert (view.state, view.version) == ({}, 0)
    assert said(view.turns) == [("user", "one", "received")]


async def test_a_state_must_be_a_json_object_within_the_limit(store: Store) -> None:
    await store.ingest_many(
        [Task("a", "one", room="r"), Task("n", "no room")], room_policy="concurrent"
    )
    claims = {c.task.id: c for c in await store.claim_many("w1", 2, leaderless=True)}
    with pytest.raises(StateTooLarge, match="over the"):
        await store.complete_with_state(claims["a"], "x", {"b": "x" * MAX_STATE_BYTES}, 0)
    with pytest.raises(StateTooLarge, match="JSON object"):
        await store.complete_with_state(claims["a"], "x", [1], 0)  # type: ignore[arg-type]
    with pytest.raises(StateTooLarge, match="not JSON"):
        await store.complete_with_state(claims["a"], "x", {"f": float("nan")}, 0)
    with pytest.raises(InvalidTask, match="no room"):
        await store.complete_with_state(claims["n"], "x", {"f": 1}, 0)
    record = await store.get("n")
    assert record is not None
    assert record.state.value == "claimed"


async def test_the_window_holds_the_newest_turns_and_reads_a_bounded_range(store: Store) -> None:
    for i in range(12):
        await store.ingest(Task(f"m{i:02}", f"q{i}", room="r"), room_policy="concurrent")
        claim = await run(store)
        await store.complete(claim, f"a{i}")
    await store.ingest(Task("last", "q", room="r"), room_policy="concurrent")
    history = (await store.conversation("last", limit=5)).history
    assert [t.text for t in history] == ["a9", "q10", "a10", "q11", "a11"]
    assert (await store.conversation("last", limit=0)).history == ()
    middle = (await store.conversation("m03", limit=50)).history
    assert [t.text for t in middle] == ["q0", "a0", "q1", "a1", "q2", "a2"]
    assert (await store.conversation("unknown")).history == ()
    with pytest.raises(ValueError, match="limit"):
        await store.conversation("last", limit=-1)


async def test_retention_keeps_the_newest_turns_of_each_room(store: Store) -> None:
    for room in ("r", "s"):
        for i in range(4):
            await store.ingest(Task(f"{room}{i}", f"q{i}", room=room), room_policy="concurrent")
            await store.complete(await run(store), f"a{i}")
    assert await store.prune_turns(keep=3) == 10
    view = await store.room("r")
    assert view is not None
    assert [t.text for t in view.turns] == ["a2", "q3", "a3"]
    assert view.turn_count == 3
    assert await store.prune_turns(keep=3) == 0
    counts = await store.conversation_counts()
    assert (counts.rooms, counts.turns) == (2, 6)


async def test_forget_room_erases_its_history_state_and_bodies(store: Store) -> None:
    # issue #53 (tests/custody/test_forget_conformance.py has the whole reach): a task
    # still in custody is cancelled first, so nothing of the room runs or is sent after it
    await store.ingest_many(
        [Task("a", "secret", room="r"), Task("o", "other", room="q")], room_policy="concurrent"
    )
    claims = {c.task.id: c for c in await store.claim_many("w1", 2, leaderless=True)}
    await store.complete_with_state(claims["a"], "noted", {"pin": "1234"}, 0)
    await store.complete(claims["o"], "fine")
    await store.mark_delivered_many(["a", "o"])
    await store.ingest(Task("b", "still going", room="r"), room_policy="concurrent")
    forgotten = await store.forget_room("r")
    assert (forgotten.turns, forgotten.state, forgotten.tasks, forgotten.cancelled) == (
        3,
        True,
        2,
        1,
    )
    assert await store.room("r") is None
    record = await store.get("a")
    assert record is not None
    assert (record.task.body, record.result) == ("", "")
    cancelled = await store.get("b")
    assert cancelled is not None
    assert (cancelled.task.body, cancelled.state) == ("", CustodyState.DEAD)
    last = (await store.journal("a"))[-1]
    assert (last.actor, last.src, last.dst) == ("operator", last.dst, last.dst)
    assert last.reason is not None
    assert "forgotten" in last.reason
    other = await store.room("q")
    assert other is not None
    assert len(other.turns) == 2
    await store.ingest(Task("c", "again", room="r"), room_policy="concurrent")
    assert said((await store.conversation("c")).history) == []  # b's turns went too


async def test_retention_removes_a_bounded_slice_per_call_the_oldest_first(store: Store) -> None:
    # issue #56: one call is one writer job; it removes at most ``limit`` turns, and calls
    # until one removes fewer leave each room its ``keep`` newest
    await store.ingest_many(
        [Task(f"{room}{i}", f"q{i}", room=room) for room in "rst" for i in range(8)]
    )
    assert await store.prune_turns(keep=3, limit=4) == 4
    views = [await store.room(room) for room in "rst"]
    held = sorted([t.text for t in v.turns] for v in views if v is not None)
    assert held == [
        [f"q{i}" for i in range(8)],
        [f"q{i}" for i in range(8)],
        ["q4", "q5", "q6", "q7"],
    ]
    slices = [await store.prune_turns(keep=3, limit=4) for _ in range(4)]
    assert slices == [4, 4, 3, 0]
    for room in "rst":
        view = await store.room(room)
        assert view is not None
        assert [t.text for t in view.turns] == ["q5", "q6", "q7"]
    counts = await store.conversation_counts()
    assert (counts.rooms, counts.turns) == (3, 9)


async def test_retention_with_keep_0_empties_rooms_a_slice_at_a_time(store: Store) -> None:
    await store.ingest_many([Task(f"r{i}", f"q{i}", room="r") for i in range(5)])
    assert await store.prune_turns(keep=0, limit=2) == 2
    assert await store.prune_turns(keep=0, limit=2) == 2
    assert await store.prune_turns(keep=0, limit=2) == 1
    view = await store.room("r")
    assert view is not None
    assert view.turns == ()


# Issue #49 (decision 2): a live task's turns are read from its own row; they are copied into
# the turns only when retention deletes the task. What a run reads must not change with it.


async def test_a_deleted_task_leaves_its_turns_to_its_room(
    store: Store, fake_clock: FakeClock
) -> None:
    await store.ingest(Task("m0", "q0", room="r"), room_policy="concurrent")
    await store.complete(await run(store), "a0")
    await store.mark_delivered_many(["m0"])
    fake_clock.advance(10)
    assert await store.prune_delivered(fake_clock.now) == 1
    assert await store.get("m0") is None
    await store.ingest(Task("m1", "q1", room="r"), room_policy="concurrent")
    assert said((await store.conversation("m1")).history) == [
        ("user", "q0", "received"),
        ("assistant", "a0", "delivered"),
    ]
    view = await store.room("r")
    assert view is not None
    assert (said(view.turns), view.turn_count) == (
        [("user", "q0", "received"), ("assistant", "a0", "delivered"), ("user", "q1", "received")],
        3,
    )
    assert (await store.conversation_counts()).turns == 3


async def test_an_undeliverable_reply_stays_a_turn_until_a_redrive_takes_it_back(
    store: Store,
) -> None:
    await store.ingest(Task("m0", "q0", room="r"), room_policy="concurrent")
    await store.complete(await run(store), "a0")
    await store.dead_letter("m0", "the gateway refused it")
    await store.ingest(Task("m1", "q1", room="r"), room_policy="concurrent")
    assert said((await store.conversation("m1")).history) == [
        ("user", "q0", "received"),
        ("assistant", "a0", "result"),
    ]
    await store.redrive(["m0"])  # it runs again: the reply it gave was never said
    view = await store.room("r")
    assert view is not None
    assert (said(view.turns), view.turn_count) == (
        [("user", "q0", "received"), ("user", "q1", "received")],
        2,
    )


async def test_retention_of_a_message_keeps_its_reply_and_a_pruned_message_gets_none(
    store: Store, fake_clock: FakeClock
) -> None:
    await store.ingest_many(
        [Task(f"m{i}", f"q{i}", room="r") for i in range(2)], room_policy="concurrent"
    )
    first = await run(store)
    assert first.task.id == "m0"
    await store.complete(first, "a0")
    assert await store.prune_turns(keep=2) == 1  # q0 goes; a0 and q1 stay
    view = await store.room("r")
    assert view is not None
    assert said(view.turns) == [("assistant", "a0", "result"), ("user", "q1", "received")]
    assert await store.prune_turns(keep=0, limit=2) == 2
    second = await run(store)
    await store.complete(second, "a1")  # its message went: the old trigger found none either
    await store.mark_delivered_many(["m0", "m1"])
    fake_clock.advance(10)
    assert await store.prune_delivered(fake_clock.now) == 2
    view = await store.room("r")
    assert view is not None
    assert (view.turns, view.turn_count) == ((), 0)
    await store.ingest(Task("m2", "q2", room="r"), room_policy="concurrent")
    assert said((await store.conversation("m2")).history) == []
