"""Conformance for a room's erasure and bounds (issue #53), on every backend.

``forget_room`` erases every copy of a room's text the store holds, in one transaction: its
turns and state, and of its tasks and the child runs they spawned the message, reply, reason,
headers and room, their steps, asks and journal text. A task still in custody is cancelled
first (a claimed run fenced out), so nothing is half-erased; the rows stay as ids and states,
journaled. ``prune_turns`` (``--room-keep``) takes a finished task's text with its turns, and
retention takes a delivered task's steps, asks and journal with it. Time is ``FakeClock``.
"""

from __future__ import annotations

import json

import attrs
import pytest

from support.clock import FakeClock
from tether.bridge import CustodyState, Task
from tether.bridge.custody import Claim, ForgottenRoom, StaleLease, Store
from tether.bridge.custody._children import child_id, child_task
from tether.bridge.stores._conversations import KEPT_HEADERS, PRUNED_REASON
from tether.bridge.stores._operator import FORGOTTEN_REASON

S = CustodyState
SECRET = "my pin is 4321"
TRACE = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


async def _claimed(store: Store, n: int) -> dict[str, Claim]:
    claims = await store.claim_many("w1", n, leaderless=True)
    return {c.task.id: c for c in claims}


async def _room_in_every_state(store: Store, fake_clock: FakeClock) -> Claim:
    """Room ``r``: ``a`` delivered (a step, a state, two child runs it spawned, pending, one
    in room ``q``), ``b``
    dead with a reason quoting the text, ``c`` claimed with a step and shown text, ``d``
    waiting on a question, ``e`` with a reply stored not delivered, ``f`` pending; room ``q``
    one delivered message that must survive. Returns ``c``'s claim (still running)."""
    said = {"sender": "alice", "traceparent": TRACE, "tenant": "acme"}
    texts = [Task(id, f"{SECRET} ({id})", room="r", headers=said) for id in "abcde"]
    await store.ingest_many([*texts, Task("o", "other room", room="q")], room_policy="concurrent")
    claims = await _claimed(store, 6)
    a, b, c, d, e = (claims[id] for id in "abcde")
    await store.record_step(a, "lookup", json.dumps(SECRET))
    await store.spawn(
        a, "sum", child_task(a.task, "sum", f"sum up: {SECRET}", queue=None, room=None)
    )
    await store.spawn(  # a child in another room: it goes too, and leaves that room's count
        a, "tell", child_task(a.task, "tell", f"tell q: {SECRET}", queue=None, room="q")
    )
    await store.complete_with_state(a, f"noted: {SECRET}", {"pin": SECRET}, 0)
    await store.fail(b, f"ValueError: cannot read {SECRET!r}", permanent=True)
    await store.record_step(c, "draft", json.dumps(f"draft of {SECRET}"))
    assert await store.record_shown(c, f"typing {SECRET}")
    await store.ask(d, "~ask:1", f"is {SECRET} right?", fake_clock.now + 600, "asked")
    await store.complete(e, f"reply to {SECRET}")
    await store.complete(claims["o"], "other reply")
    await store.mark_delivered_many(["a", "o"])
    await store.ingest(Task("f", f"{SECRET} (f)", room="r"), room_policy="concurrent")
    return c


async def test_forget_room_erases_every_copy_of_the_rooms_text(
    store: Store, fake_clock: FakeClock
) -> None:
    running = await _room_in_every_state(store, fake_clock)
    before = await store.room("r")
    assert before is not None
    kids = [child_id("a", "sum"), child_id("a", "tell")]
    forgotten = await store.forget_room("r")
    assert forgotten == ForgottenRoom(
        "r",
        turns=before.turn_count,
        state=True,
        tasks=8,  # a-f and a's children
        cancelled=6,  # c, d, e, f and the children: nothing of the room runs or is sent after
        steps=4,  # a's lookup and spawns, c's draft
        asks=1,
        scrubbed=forgotten.scrubbed,
    )
    assert await store.room("r") is None
    for id in ["a", "b", "c", "d", "e", "f", *kids]:
        record = await store.get(id)
        assert record is not None, id
        assert (record.task.body, record.task.room) == ("", None), id
        assert set(record.task.headers) <= set(KEPT_HEADERS), id  # no sender, no trace
        assert record.result in (None, ""), id
        assert record.state in (S.DEAD, S.DELIVERED), id
        assert record.reason == (FORGOTTEN_REASON if record.state is S.DEAD else None), id
        assert await store.steps(id) == [], id
        assert await store.asks(id) == [], id
        assert (await store.conversation(id)).history == (), id
        journal = await store.journal(id)
        assert not [j for j in journal if j.reason is not None and SECRET in j.reason], id
        assert (journal[-1].actor, journal[-1].dst, journal[-1].reason) == (
            "operator",
            S.DEAD if id != "a" else S.DELIVERED,
            FORGOTTEN_REASON,
        ), id
    erased = await store.get("a")
    assert erased is not None
    assert erased.task.headers == {"tenant": "acme"}  # what custody reads of them stays
    child = await store.get(kids[0])
    assert child is not None
    assert child.task.parent == "a"  # a join and the dead notices still read it
    with pytest.raises(StaleLease):  # the run still going is fenced out: it writes nothing
        await store.complete(running, f"late {SECRET}")
    with pytest.raises(StaleLease):
        await store.record_step(running, "late", json.dumps(SECRET))
    other = await store.room("q")
    assert other is not None
    assert [t.text for t in other.turns] == ["other room", "other reply"]
    assert other.turn_count == 2  # the child's message in q is no longer counted there
    kept = await store.get("o")
    assert kept is not None
    assert (kept.task.body, kept.task.room, kept.result) == ("other room", "q", "other reply")


async def test_forgotten_tasks_are_not_redriven_and_forgetting_again_changes_nothing(
    store: Store, fake_clock: FakeClock
) -> None:
    await _room_in_every_state(store, fake_clock)
    await store.forget_room("r")
    assert await store.redrive_dead() == []  # read as an operator's cancel: their text is gone
    assert await store.redrive_dead(include_cancelled=True) == []  # not even when asked
    dead = await store.records(S.DEAD, limit=100)
    assert dead
    named = await store.redrive([r.task.id for r in dead])  # nor by id: nothing left to run
    assert not any(o.done for o in named)
    assert all("its room was forgotten" in o.detail for o in named)
    for room in ("r", "never-seen"):
        again = await store.forget_room(room)
        assert attrs.evolve(again, scrubbed=False) == ForgottenRoom(room)
    # the room starts over: a new message has a history of its own
    await store.ingest(Task("g", "hello again", room="r"), room_policy="concurrent")
    assert (await store.conversation("g")).history == ()


async def test_a_parent_joining_a_child_in_a_forgotten_room_learns_it_is_dead(
    store: Store, fake_clock: FakeClock
) -> None:
    await store.ingest(Task("p", "plan"))
    (parent,) = (await _claimed(store, 1)).values()
    kid = child_task(parent.task, "ask-r", f"tell r: {SECRET}", queue=None, room="r")
    await store.spawn(parent, "ask-r", kid)
    assert await store.park_join(parent, [kid.id], fake_clock.now + 600, "the child") is S.WAITING
    forgotten = await store.forget_room("r")
    assert (forgotten.tasks, forgotten.cancelled) == (1, 1)
    assert await store.state("p") is S.PENDING  # woken: its join reads the child's death
    (view,) = await store.children("p", [kid.id])
    assert view is not None
    assert (view.state, view.reason) == (S.DEAD, FORGOTTEN_REASON)


async def test_room_keep_prunes_the_oldest_turns_and_the_finished_tasks_text(
    store: Store,
) -> None:
    for i in range(3):
        await store.ingest(Task(f"m{i}", f"q{i}", room="r"), room_policy="concurrent")
        (claim,) = (await _claimed(store, 1)).values()
        await store.complete(claim, f"a{i}")
        await store.mark_delivered(f"m{i}")
    await store.ingest(Task("m3", "q3", room="r"), room_policy="concurrent")  # pending
    assert await store.prune_turns(keep=4) == 3  # q0 a0 q1 go; a1 q2 a2 q3 stay
    view = await store.room("r")
    assert view is not None
    assert [t.text for t in view.turns] == ["a1", "q2", "a2", "q3"]
    gone, half, whole = [await store.get(id) for id in ("m0", "m1", "m2")]
    assert gone is not None
    assert half is not None
    assert whole is not None
    assert (gone.task.body, gone.result) == ("", "")  # both its turns pruned
    assert (half.task.body, half.result) == ("", "a1")  # its reply is still a turn
    assert (whole.task.body, whole.result) == ("q2", "a2")
    for id in ("m0", "m1"):
        last = (await store.journal(id))[-1]
        assert (last.actor, last.src, last.dst, last.reason) == (
            "bridge",
            S.DELIVERED,
            S.DELIVERED,
            PRUNED_REASON,
        )
    assert (await store.journal("m2"))[-1].reason != PRUNED_REASON
    # a task still in custody keeps its text: it has yet to run
    assert await store.prune_turns(keep=0) == 4
    waiting = await store.get("m3")
    assert waiting is not None
    assert waiting.task.body == "q3"
    half = await store.get("m1")
    assert half is not None
    assert (half.task.body, half.result) == ("", "")  # its reply went now
    assert [j.reason for j in await store.journal("m1")].count(PRUNED_REASON) == 2


async def test_room_keep_leaves_a_dead_tasks_text_an_operator_may_run_again(
    store: Store,
) -> None:
    await store.ingest(Task("d0", "q0", room="r"), room_policy="concurrent")
    (claim,) = (await _claimed(store, 1)).values()
    await store.fail(claim, "boom", permanent=True)
    for i in range(1, 4):
        await store.ingest(Task(f"m{i}", f"q{i}", room="r"), room_policy="concurrent")
    assert await store.prune_turns(keep=2) >= 1
    dead = await store.get("d0")
    assert dead is not None
    assert dead.task.body == "q0"
    [redriven] = await store.redrive(["d0"])
    assert redriven.done
    claimed = await _claimed(store, 4)
    assert claimed["d0"].task.body == "q0"  # not an empty message


async def test_the_window_a_run_reads_stays_bounded_whatever_the_room_keeps(
    store: Store,
) -> None:
    for i in range(6):
        await store.ingest(Task(f"m{i}", f"q{i}", room="r"), room_policy="concurrent")
        (claim,) = (await _claimed(store, 1)).values()
        await store.complete(claim, f"a{i}")
    await store.ingest(Task("last", "now", room="r"), room_policy="concurrent")
    assert [t.text for t in (await store.conversation("last", limit=3)).history] == [
        "a4",
        "q5",
        "a5",
    ]
    await store.prune_turns(keep=2)
    assert [t.text for t in (await store.conversation("last", limit=3)).history] == ["a5"]


async def test_retention_takes_a_delivered_tasks_steps_asks_and_journal_with_it(
    store: Store, fake_clock: FakeClock
) -> None:
    await store.ingest(Task("t", SECRET, room="r"), room_policy="concurrent")
    (claim,) = (await _claimed(store, 1)).values()
    await store.record_step(claim, "lookup", json.dumps(SECRET))
    await store.ask(claim, "~ask:1", f"is {SECRET} right?", fake_clock.now + 600, "asked")
    await store.ingest(Task("answer", "yes", room="r"), room_policy="concurrent")  # answers
    (again,) = (await _claimed(store, 1)).values()
    assert again.task.id == "t"
    await store.complete(again, f"done: {SECRET}")
    await store.mark_delivered_many(["t", "answer"])
    assert [a.status for a in await store.asks("t")] == ["answered"]
    fake_clock.now += 100
    assert await store.prune_delivered(fake_clock.now - 10) == 2
    assert await store.get("t") is None
    assert (await store.steps("t"), await store.asks("t"), await store.journal("t")) == (
        [],
        [],
        [],
    )
    # its turns stay in the conversation, bounded by room-keep, and go with it
    view = await store.room("r")
    assert view is not None
    assert SECRET in " ".join(t.text for t in view.turns)
    await store.prune_turns(keep=0)
    view = await store.room("r")
    assert view is not None
    assert view.turns == ()
