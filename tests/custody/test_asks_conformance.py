"""Conformance: questions to the person (issue #36), on every backend.

An ask is recorded with its park under the lease fence; the room's next message is its answer
whatever the room policy (the asking task pending again with no attempt spent, the message a
no-send result that starts no run); past its deadline the reconciler's wake-up times it out;
the gateway's 404 ends it unsupported; an operator's cancel frees the room. The conversation
reads question, answer, reply in that order. Time is the store's ``FakeClock``.
"""

from __future__ import annotations

import pytest

from support.clock import FakeClock
from tether.bridge import CustodyState, Task
from tether.bridge.custody import Claim, StaleLease, Store
from tether.bridge.custody._asks import AskRecord, Question

S = CustodyState
POLICIES = ["serial", "replace", "concurrent"]


async def _asking(
    store: Store, fake_clock: FakeClock, policy: str = "serial", id: str = "t1"
) -> tuple[Claim, AskRecord]:
    await store.ingest(Task(id, "book a table for 4", room="r"), room_policy=policy)  # type: ignore[arg-type]
    claim = await store.claim("w1", leaderless=True)
    assert claim is not None
    assert claim.task.id == id
    record = await store.ask(claim, "~ask:1", "8 pm, confirm?", fake_clock.now + 600, "asked")
    return claim, record


def said(turns: object) -> list[tuple[str, str, str, str]]:
    return [(t.role, t.text, t.outcome, t.task_id) for t in turns]  # type: ignore[attr-defined]


async def test_an_ask_records_its_question_and_parks_the_task_without_a_lease(
    store: Store, fake_clock: FakeClock
) -> None:
    claim, record = await _asking(store, fake_clock)
    assert (record.name, record.seq, record.question, record.status) == (
        "~ask:1",
        1,
        "8 pm, confirm?",
        "open",
    )
    assert (record.deadline, record.at, record.answer, record.posted) == (
        fake_clock.now + 600,
        fake_clock.now,
        None,
        False,
    )
    rec = await store.get("t1")
    assert rec is not None
    assert (rec.state, rec.owner, rec.attempt, rec.not_before) == (
        S.WAITING,
        None,
        1,
        fake_clock.now + 600,
    )
    assert await store.asks("t1") == [record]
    assert await store.unposted_questions() == [Question("t1", "~ask:1", 1, "8 pm, confirm?")]
    assert await store.question_posted("t1", "~ask:1")
    assert await store.unposted_questions() == []
    assert (await store.asks("t1"))[0].posted
    view = await store.room("r")
    assert view is not None
    assert said(view.turns) == [
        ("user", "book a table for 4", "received", "t1"),
        ("assistant", "8 pm, confirm?", "asked", "t1"),
    ]
    with pytest.raises(StaleLease):
        await store.renew(claim)  # the lease was released with the park


@pytest.mark.parametrize("policy", POLICIES)
async def test_the_rooms_next_message_is_the_answer_whatever_the_policy(
    store: Store, fake_clock: FakeClock, policy: str
) -> None:
    await _asking(store, fake_clock, policy)
    fake_clock.advance(5)
    await store.ingest(Task("a1", "yes please", room="r"), room_policy=policy)  # type: ignore[arg-type]
    asker, answer = await store.get("t1"), await store.get("a1")
    assert asker is not None
    assert answer is not None
    assert (asker.state, asker.attempt, asker.not_before) == (S.PENDING, 1, None)
    assert (answer.state, answer.result, answer.reason) == (
        S.RESULT,
        "",
        "answers the question of t1",
    )
    [ready] = [r for r in await store.ready_results() if r.task.id == "a1"]
    assert ready.no_send  # closed at the gateway with nothing sent
    [record] = await store.asks("t1")
    assert (record.status, record.answer, record.answer_id) == ("answered", "yes please", "a1")
    claim = await store.claim("w2", leaderless=True)
    assert claim is not None
    assert (claim.task.id, claim.attempt) == ("t1", 1)  # the answer starts no run of its own
    await store.complete(claim, "booked: yes please")
    await store.ingest(Task("m3", "and a cake", room="r"), room_policy=policy)  # type: ignore[arg-type]
    later = await store.get("m3")
    assert later is not None
    assert later.state is S.PENDING  # after the answer, messages queue as usual
    [later_ask] = await store.asks("t1")
    assert later_ask.answer_id == "a1"
    view = await store.room("r")
    assert view is not None
    assert said(view.turns) == [
        ("user", "book a table for 4", "received", "t1"),
        ("assistant", "8 pm, confirm?", "asked", "t1"),
        ("user", "yes please", "received", "a1"),
        ("assistant", "booked: yes please", "result", "t1"),
        ("user", "and a cake", "received", "m3"),
    ]
    history = (await store.conversation("m3")).history
    assert [t.outcome for t in history] == ["received", "asked", "received", "result"]


async def test_only_a_message_after_the_question_answers_it(
    store: Store, fake_clock: FakeClock
) -> None:
    """A message queued before the question was recorded is an ordinary one (a waiting task
    holds no room): it runs; the first message after the question is the answer."""
    await store.ingest(Task("t1", "book a table", room="r"), room_policy="serial")
    claim = await store.claim("w1", leaderless=True)
    assert claim is not None
    await store.ingest(Task("m1", "also, hello", room="r"), room_policy="serial")
    await store.ask(claim, "~ask:1", "8 pm?", fake_clock.now + 60, "asked")
    await store.ingest(Task("a2", "yes", room="r"), room_policy="serial")
    [record] = await store.asks("t1")
    assert record.answer_id == "a2"
    m1 = await store.get("m1")
    assert m1 is not None
    assert m1.state is S.PENDING


async def test_an_unanswered_ask_times_out_when_its_task_wakes(
    store: Store, fake_clock: FakeClock
) -> None:
    await _asking(store, fake_clock)
    fake_clock.advance(599)
    assert await store.wake_due() == []
    fake_clock.advance(1)
    assert await store.wake_due() == ["t1"]
    [record] = await store.asks("t1")
    assert record.status == "timeout"
    rec = await store.get("t1")
    assert rec is not None
    assert (rec.state, rec.attempt) == (S.PENDING, 1)
    await store.ingest(Task("m2", "yes", room="r"), room_policy="serial")
    late = await store.get("m2")
    assert late is not None
    assert late.state is S.PENDING  # too late: an ordinary message
    assert (await store.asks("t1"))[0].status == "timeout"


async def test_a_cancelled_asking_task_frees_its_room(store: Store, fake_clock: FakeClock) -> None:
    await _asking(store, fake_clock)
    [outcome] = await store.cancel(["t1"], "nobody home")
    assert outcome.state is S.DEAD
    await store.ingest(Task("m2", "hello again", room="r"), room_policy="serial")
    rec = await store.get("m2")
    assert rec is not None
    assert rec.state is S.PENDING
    claim = await store.claim("w1", leaderless=True)
    assert claim is not None
    assert claim.task.id == "m2"  # the room runs its next message


async def test_an_ask_left_open_by_a_cancel_takes_no_message_while_its_task_sleeps(
    store: Store, fake_clock: FakeClock
) -> None:
    """Cancelled while it asked, re-driven, then parked by a durable sleep: the task waits, but
    not on that ask, so the room's next message is an ordinary one."""
    await _asking(store, fake_clock)
    await store.cancel(["t1"], "oops")
    await store.redrive(["t1"])
    claim = await store.claim("w2", leaderless=True)
    assert claim is not None
    await store.park(claim, fake_clock.now + 30, "sleeping")
    await store.ingest(Task("m2", "hello", room="r"), room_policy="concurrent")
    rec = await store.get("m2")
    assert rec is not None
    assert rec.state is S.PENDING
    assert (await store.asks("t1"))[0].status == "open"


async def test_a_resumed_run_asking_again_keeps_the_first_record_and_deadline(
    store: Store, fake_clock: FakeClock
) -> None:
    _, first = await _asking(store, fake_clock)
    await store.cancel(["t1"], "oops")
    await store.redrive(["t1"])
    fake_clock.advance(10)
    claim = await store.claim("w2", leaderless=True)
    assert claim is not None
    again = await store.ask(claim, "~ask:1", "8 pm, confirm?", fake_clock.now + 600, "asked")
    assert again == first
    rec = await store.get("t1")
    assert rec is not None
    assert (rec.state, rec.not_before) == (S.WAITING, first.deadline)
    view = await store.room("r")
    assert view is not None
    assert [t.outcome for t in view.turns].count("asked") == 1


async def test_an_ask_of_a_run_whose_lease_was_taken_back_records_nothing(
    store: Store, fake_clock: FakeClock
) -> None:
    await store.ingest(Task("t1", "hi", room="r"), room_policy="serial")
    claim = await store.claim("w1", leaderless=True)
    assert claim is not None
    await store.cancel(["t1"], "gone")
    with pytest.raises(StaleLease, match="ask for"):
        await store.ask(claim, "~ask:1", "really?", fake_clock.now + 60, "asked")
    assert await store.asks("t1") == []
    view = await store.room("r")
    assert view is not None
    assert [t.outcome for t in view.turns] == ["received"]


async def test_a_gateway_without_the_route_ends_the_ask_unsupported(
    store: Store, fake_clock: FakeClock
) -> None:
    await _asking(store, fake_clock)
    assert await store.ask_unsupported("t1", "~ask:1")
    assert not await store.ask_unsupported("t1", "~ask:1")  # once
    [record] = await store.asks("t1")
    assert record.status == "unsupported"
    assert await store.unposted_questions() == []
    rec = await store.get("t1")
    assert rec is not None
    assert (rec.state, rec.attempt) == (S.PENDING, 1)


async def test_several_asks_of_one_run_are_numbered_in_order(
    store: Store, fake_clock: FakeClock
) -> None:
    await _asking(store, fake_clock, "concurrent")
    await store.ingest(Task("a1", "yes", room="r"), room_policy="concurrent")
    claim = await store.claim("w1", leaderless=True)
    assert claim is not None
    second = await store.ask(claim, "dessert", "and dessert?", fake_clock.now + 60, "asked")
    assert (second.seq, second.status) == (2, "open")
    await store.ingest(Task("a2", "no", room="r"), room_policy="concurrent")
    asks = await store.asks("t1")
    assert [(a.name, a.seq, a.answer) for a in asks] == [("~ask:1", 1, "yes"), ("dessert", 2, "no")]


def _from(id: str, body: str, sender: str | None) -> Task:
    headers = {} if sender is None else {"sender": sender}
    return Task(id, body, room="r", headers=headers)


@pytest.mark.parametrize("policy", ["serial", "concurrent"])
async def test_an_ask_for_its_senders_takes_only_their_message_as_the_answer(
    store: Store, fake_clock: FakeClock, policy: str
) -> None:
    """Issue #48: another sender's message in the room (or one without a sender) is an
    ordinary message; the first from a sender the ask names is the answer."""
    await store.ingest(_from("t1", "book a table", "user"), room_policy=policy)  # type: ignore[arg-type]
    claim = await store.claim("w1", leaderless=True)
    assert claim is not None
    record = await store.ask(
        claim, "~ask:1", "8 pm?", fake_clock.now + 60, "asked", answer_from=["user"]
    )
    assert record.answer_from == ("user",)
    await store.ingest(_from("m1", "yes, book it", "mallory"), room_policy=policy)  # type: ignore[arg-type]
    await store.ingest(_from("m2", "yes", None), room_policy=policy)  # type: ignore[arg-type]
    for id in ("m1", "m2"):
        other = await store.get(id)
        assert other is not None
        assert other.state is S.PENDING  # queued as usual, a run of its own
    asker = await store.get("t1")
    assert asker is not None
    assert asker.state is S.WAITING
    assert (await store.asks("t1"))[0].status == "open"
    await store.ingest(_from("a1", "no, 9 pm", "user"), room_policy=policy)  # type: ignore[arg-type]
    [answered] = await store.asks("t1")
    assert (answered.status, answered.answer, answered.answer_id) == ("answered", "no, 9 pm", "a1")
    assert answered.answer_from == ("user",)
    asker = await store.get("t1")
    assert asker is not None
    assert asker.state is S.PENDING


async def test_each_open_ask_of_a_room_takes_the_answer_of_its_own_senders(
    store: Store, fake_clock: FakeClock
) -> None:
    """Two people wait on questions in one concurrent room: each one's message answers their
    own, not the older ask."""
    for id, sender in (("t1", "ann"), ("t2", "bob")):
        await store.ingest(_from(id, "a table", sender), room_policy="concurrent")
    for sender in ("ann", "bob"):
        claim = await store.claim("w1", leaderless=True)
        assert claim is not None
        fake_clock.advance(1)
        await store.ask(
            claim, "~ask:1", "when?", fake_clock.now + 60, "asked", answer_from=[sender]
        )
    await store.ingest(_from("b1", "at 9", "bob"), room_policy="concurrent")
    assert [(a.status, a.answer_id) for a in await store.asks("t1")] == [("open", None)]
    assert [(a.status, a.answer_id) for a in await store.asks("t2")] == [("answered", "b1")]


async def test_an_ask_for_anyone_or_for_named_senders_is_answered_by_them(
    store: Store, fake_clock: FakeClock
) -> None:
    await store.ingest(_from("t1", "a table", "user"), room_policy="concurrent")
    claim = await store.claim("w1", leaderless=True)
    assert claim is not None
    first = await store.ask(claim, "~ask:1", "ok?", fake_clock.now + 60, "asked")
    assert first.answer_from is None  # the store's default: anyone
    await store.ingest(_from("a1", "ok", "mallory"), room_policy="concurrent")
    assert (await store.asks("t1"))[0].answer_id == "a1"
    claim = await store.claim("w1", leaderless=True)
    assert claim is not None
    await store.ask(
        claim, "boss", "approve?", fake_clock.now + 60, "asked", answer_from=["carol", "dave"]
    )
    await store.ingest(_from("a2", "sure", "user"), room_policy="concurrent")
    await store.ingest(_from("a3", "approved", "dave"), room_policy="concurrent")
    second = (await store.asks("t1"))[1]
    assert (second.answer_id, second.answer_from) == ("a3", ("carol", "dave"))
    ordinary = await store.get("a2")
    assert ordinary is not None
    assert ordinary.state is S.PENDING


async def test_an_ask_refuses_a_bad_list_of_senders(store: Store, fake_clock: FakeClock) -> None:
    await store.ingest(_from("t1", "a table", "user"), room_policy="serial")
    claim = await store.claim("w1", leaderless=True)
    assert claim is not None
    for bad in ([], [""], ["a\x00b"], ["x" * 5000]):
        with pytest.raises(ValueError, match="sender"):
            await store.ask(claim, "~ask:1", "ok?", fake_clock.now + 60, "asked", answer_from=bad)
    with pytest.raises(TypeError, match="list of senders"):
        await store.ask(claim, "~ask:1", "ok?", fake_clock.now + 60, "asked", answer_from="user")
    assert await store.asks("t1") == []


async def test_an_answered_asker_whose_message_retention_took_still_replies_under_the_answer(
    store: Store, fake_clock: FakeClock
) -> None:
    # issue #49: a live task's turns are its row; retention hiding its message keeps the place
    # its ask's answer gave its reply (as the turn rows did: the reply went under the answer)
    await _asking(store, fake_clock)
    await store.ingest(Task("a1", "yes", room="r"), room_policy="serial")
    assert await store.prune_turns(keep=2) == 1  # the asking message goes; question, answer stay
    claim = await store.claim("w1", leaderless=True)
    assert claim is not None
    assert claim.task.id == "t1"
    await store.complete(claim, "booked")
    view = await store.room("r")
    assert view is not None
    assert said(view.turns) == [
        ("assistant", "8 pm, confirm?", "asked", "t1"),
        ("user", "yes", "received", "a1"),
        ("assistant", "booked", "result", "t1"),
    ]
    assert view.turn_count == 3
