"""Conformance: versions, rewind and fork (issue #53), on every backend.

A step record keeps the agent version of the run that made it and a fingerprint of its
arguments; a resumed run asking the step with other arguments, or a new step where another
version's run went on to another, fails with ``StepMismatch`` (nothing runs twice, nothing
stale is returned); ``run.patched`` is decided once and recorded. An operator rewinds a dead
run to a step (exactly the later records dropped) or forks a run at a step (exactly the
earlier records copied into a new task). Time is the store's ``FakeClock``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import attrs
import pytest

from support.clock import FakeClock
from tether.bridge import CustodyState, Task
from tether.bridge.custody import Claim, Store, _versions
from tether.bridge.custody._versions import FORK_HEADER, fingerprint
from tether.bridge.runs import Run
from tether.bridge.runs._journal import Fence, Journal
from tether.bridge.runs._versions import StepMismatch

S = CustodyState


async def _claimed(store: Store, id: str, body: str = "hi", room: str | None = None) -> Claim:
    await store.ingest(Task(id, body, room=room))
    claim = await store.claim("w1", leaderless=True)
    assert claim is not None
    assert claim.task.id == id
    return claim


def _run(store: Store, claim: Claim, version: str | None) -> tuple[Run, Journal]:
    journal = Journal(claim.task, store, Fence(lambda: claim), clock=store.clock, version=version)
    return Run(claim.task, journal), journal


async def _again(store: Store, claim: Claim, fake_clock: FakeClock) -> Claim:
    """The task's next run: its lease taken back, claimed again (a crash and a resume)."""
    fake_clock.advance(store.lease_s * 3)
    await store.expire_leases()
    again = await store.claim("w2", leaderless=True)
    assert again is not None
    assert again.task.id == claim.task.id
    return again


def _calls() -> tuple[list[str], Callable[..., str]]:
    ran: list[str] = []

    def effect(*args: Any, **kwargs: Any) -> str:
        ran.append(repr((args, kwargs)))
        return f"done {args} {kwargs}"

    return ran, effect


async def test_a_record_keeps_the_version_and_the_fingerprint_of_its_arguments(
    store: Store,
) -> None:
    claim = await _claimed(store, "t1")
    run, _ = _run(store, claim, "1.0")
    _, effect = _calls()
    await run.step("search", effect, "flights", to="LIS")
    await run.sleep(0)
    [search, sleep] = await store.steps("t1")
    assert (search.version, search.fingerprint) == ("1.0", fingerprint(("flights",), {"to": "LIS"}))
    assert sleep.version == "1.0"
    assert sleep.fingerprint is None  # the run's own records are never compared
    # the same arguments make the same fingerprint; others, another
    assert fingerprint(("flights",), {"to": "LIS"}) != fingerprint(("flights",), {"to": "OPO"})
    assert len(search.fingerprint or "") == 16


async def test_a_resumed_run_asking_a_step_with_other_arguments_fails_naming_it(
    store: Store, fake_clock: FakeClock
) -> None:
    claim = await _claimed(store, "t1")
    run, _ = _run(store, claim, "1")
    ran, effect = _calls()
    await run.step("book", effect, "T-17")
    again = await _again(store, claim, fake_clock)
    resumed, journal = _run(store, again, "2")
    with pytest.raises(StepMismatch) as caught:
        await resumed.step("book", effect, "T-18")
    assert len(ran) == 1  # nothing ran twice, and no stale value came back
    reason = caught.value.reason
    assert "step 'book'" in reason
    assert "version '1'" in reason
    assert "version '2'" in reason
    assert "other arguments" in reason
    assert journal.mismatch is caught.value  # kept: the run fails even if it is caught
    # the same arguments replay under any version
    replay, _ = _run(store, again, "2")
    assert await replay.step("book", effect, "T-17") == "done ('T-17',) {}"
    assert len(ran) == 1


async def test_a_renamed_step_across_versions_fails_instead_of_running_again(
    store: Store, fake_clock: FakeClock
) -> None:
    claim = await _claimed(store, "t1")
    run, _ = _run(store, claim, "1")
    ran, effect = _calls()
    await run.step("fetch", effect, "a")
    await run.step("summarize", effect, "b")
    [fetch, _] = await store.steps("t1")
    assert fetch.call is not None
    assert fetch.call.endswith("_calls.<locals>.effect")
    again = await _again(store, claim, fake_clock)
    renamed, journal = _run(store, again, "2")
    with pytest.raises(StepMismatch) as caught:
        await renamed.step("fetch_page", effect, "a")  # the same call, under a new name
    reason = caught.value.reason
    assert "step 'fetch_page' calls" in reason
    assert "step 'fetch' was recorded with by version '1'" in reason
    assert "version '2' has not asked" in reason
    assert len(ran) == 2
    # a run that caught it goes no further: no later step's effect happens
    with pytest.raises(StepMismatch):
        await renamed.step("summarize", effect, "b")
    assert journal.mismatch is not None
    # under the same version the records may be in any order (parallel steps): no mismatch
    same, _ = _run(store, again, "1")
    await same.step("fetch_again", effect, "a")
    assert len(ran) == 3


async def test_a_fallback_or_a_loops_next_try_is_not_a_rename(
    store: Store, fake_clock: FakeClock
) -> None:
    """What ran under the old version and failed was never recorded: a resumed run under a
    new version that runs it again is not a renamed step (another call, or a loop's try)."""
    claim = await _claimed(store, "t1")
    run, _ = _run(store, claim, "1")
    ran, effect = _calls()

    down = [True]

    def primary(x: str) -> str:
        if down[0]:
            raise RuntimeError("down")
        return effect(x)

    def backup(x: str) -> str:
        return effect(x)

    with pytest.raises(RuntimeError):
        await run.step("primary", primary, "q")
    await run.step("fallback", backup, "q")  # another function, the same arguments
    await run.step("try:2", effect, "q")  # a loop's second try, the first having failed
    again = await _again(store, claim, fake_clock)
    resumed, _ = _run(store, again, "2")
    down[0] = False
    assert await resumed.step("primary", primary, "q") == "done ('q',) {}"
    assert await resumed.step("try:1", effect, "q") == "done ('q',) {}"
    assert await resumed.step("also", lambda x: x, "q") == "q"  # a lambda is never compared
    assert len(ran) == 4


def test_a_fingerprint_is_the_same_for_equal_arguments_in_every_process() -> None:
    """Never a ``repr``: sets inside objects, mixed keys and memory addresses read alike."""

    @attrs.frozen
    class Query:
        words: frozenset[str]
        at: object = None

    assert fingerprint((Query(frozenset({"a", "b", "c"})),), {}) == fingerprint(
        (Query(frozenset({"c", "b", "a"})),), {}
    )
    assert fingerprint(({1: "x", "b": 2, (1, 2): 3},), {}) == fingerprint(
        ({"b": 2, (1, 2): 3, 1: "x"},), {}
    )
    assert fingerprint((object(),), {}) == fingerprint((object(),), {})
    # no arguments (most steps: a closure) is read once, as any other would be
    assert fingerprint((), {}) == _versions.fingerprint_of_canonical([[], {}])
    assert fingerprint(({"a": 1},), {}) != fingerprint(({"a": 2},), {})
    assert fingerprint((Query(frozenset({"a"})),), {}) != fingerprint((Query(frozenset()),), {})
    code = (
        "from tether.bridge.custody._versions import fingerprint\n"
        "print(fingerprint(({'x', 'y', 'z'}, {3: 1, 'k': {2, 1}}), {'q': frozenset('abc')}))"
    )
    seen = {
        subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in ("1", "2", "3")
    }
    assert len(seen) == 1


async def test_records_made_before_versions_are_never_compared(
    store: Store, fake_clock: FakeClock
) -> None:
    claim = await _claimed(store, "t1")
    await store.record_step(claim, "old", '"v"')  # no version, no fingerprint
    again = await _again(store, claim, fake_clock)
    run, _ = _run(store, again, "2")
    ran, effect = _calls()
    assert await run.step("old", effect, "anything") == "v"
    await run.step("new", effect)
    assert len(ran) == 1


async def test_patched_is_true_for_a_run_that_had_not_passed_the_point_and_recorded(
    store: Store, fake_clock: FakeClock
) -> None:
    # a run that had gone past the patch's point under the old code takes the old path
    claim = await _claimed(store, "old")
    old, _ = _run(store, claim, "1")
    _, effect = _calls()
    await old.step("a", effect)
    await old.step("b", effect)
    again = await _again(store, claim, fake_clock)
    resumed, _ = _run(store, again, "2")
    await resumed.step("a", effect)
    assert await resumed.patched("new-b") is False
    await resumed.step("b", effect)  # replays along the old path
    await store.complete(again, "done")
    # a run that had not got there takes the new one; both decisions are recorded
    fresh_claim = await _claimed(store, "new")
    fresh, _ = _run(store, fresh_claim, "2")
    await fresh.step("a", effect)
    assert await fresh.patched("new-b") is True
    records = {s.name: s.value for s in await store.steps("new")}
    assert records["~patch:new-b"] == "true"
    assert {s.name: s.value for s in await store.steps("old")}["~patch:new-b"] == "false"
    # every later run of the task agrees, whatever it has recorded since
    await fresh.step("b2", effect)
    later_claim = await _again(store, fresh_claim, fake_clock)
    later, _ = _run(store, later_claim, "3")
    await later.step("a", effect)
    assert await later.patched("new-b") is True
    # a detached run (no store) is always new
    assert await Run(Task("x", "hi")).patched("new-b") is True


async def test_a_rewind_drops_exactly_the_records_from_the_step_on_and_redrives(
    store: Store, fake_clock: FakeClock
) -> None:
    claim = await _claimed(store, "t1")
    for name in ("a", "b", "c", "d"):
        await store.record_step(claim, name, f'"{name}"', version="1")
        fake_clock.advance(1)
    refused = await store.rewind("t1", "c")
    assert not refused.done
    assert "only a dead task is rewound" in refused.detail
    await store.fail(claim, "boom", permanent=True)
    missing = await store.rewind("t1", "zz")
    assert not missing.done
    assert "no recorded step 'zz'" in missing.detail
    assert "'a', 'b', 'c', 'd'" in missing.detail
    assert [s.name for s in await store.steps("t1")] == ["a", "b", "c", "d"]
    assert not (await store.rewind("nope", "a")).done

    outcome = await store.rewind("t1", "c", reason="the booking changed")
    assert outcome.done
    assert outcome.state is S.PENDING
    assert [s.name for s in await store.steps("t1")] == ["a", "b"]
    record = await store.get("t1")
    assert record is not None
    assert record.state is S.PENDING
    [*_, last] = await store.journal("t1")
    assert last.actor == "operator"
    assert last.reason is not None
    assert "rewound to step 'c', 2 record(s) dropped: the booking changed" in last.reason


async def test_a_fork_copies_exactly_the_records_before_the_step_into_a_new_task(
    store: Store, fake_clock: FakeClock
) -> None:
    claim = await _claimed(store, "t1", body="plan my trip", room="r1")
    for name in ("a", "b", "c"):
        await store.record_step(claim, name, f'"{name}"', version="1", fingerprint="0" * 16)
        fake_clock.advance(1)
    await store.complete(claim, "the plan")
    first = await store.fork("t1", "b", reason="try again")
    assert first.done, first.detail
    assert first.id == "t1~fork1"
    assert "1 record(s) copied" in first.detail
    copied = await store.steps("t1~fork1")
    # copied without their fingerprints: a fork's arguments may name its own id (run.key)
    assert [(s.name, s.value, s.version, s.fingerprint) for s in copied] == [
        ("a", '"a"', "1", None)
    ]
    forked = await store.get("t1~fork1")
    assert forked is not None
    assert forked.state is S.PENDING
    assert (forked.task.body, forked.task.room) == ("plan my trip", "r1")
    assert forked.task.headers[FORK_HEADER] == "t1@b"
    journal = await store.journal("t1~fork1")
    assert any(
        e.actor == "operator" and "forked from t1 at step 'b': try again" in (e.reason or "")
        for e in journal
    )
    # the source is unchanged; a second fork takes the next id, in another room
    assert [s.name for s in await store.steps("t1")] == ["a", "b", "c"]
    second = await store.fork("t1", "a", room="r2")
    assert second.done
    assert second.id == "t1~fork2"
    assert await store.steps("t1~fork2") == []
    other = await store.get("t1~fork2")
    assert other is not None
    assert other.task.room == "r2"
    # refused: no such step, no such task
    assert not (await store.fork("t1", "zz")).done
    assert not (await store.fork("nope", "a")).done


async def test_a_child_run_is_not_forked(store: Store) -> None:
    parent = await _claimed(store, "p1")
    await store.spawn(parent, "kid", Task("p1~kid", "sub", headers={"parent": "p1"}))
    child_claim = await store.claim("w1", leaderless=True)
    assert child_claim is not None
    await store.record_step(child_claim, "x", "1")
    refused = await store.fork(child_claim.task.id, "x")
    assert not refused.done
    assert "child run" in refused.detail


async def test_versions_in_flight_count_tasks_by_their_newest_record(
    store: Store, fake_clock: FakeClock
) -> None:
    for id, versions in (("t1", ["1"]), ("t2", ["1", "2"]), ("t3", ["3"]), ("t4", [])):
        claim = await _claimed(store, id)
        for n, version in enumerate(versions):
            await store.record_step(claim, f"s{n}", "1", version=version)
            fake_clock.advance(1)
        if id == "t3":
            await store.complete(claim, "done")  # its run is over: a stored reply
    # a run counts under the version it began with, until it is over (a stored reply is)
    flights = {f.version: f.tasks for f in await store.versions_in_flight()}
    assert flights == {"1": 2, None: 1}
    assert [r.task.id for r in await store.records_of_version("1")] == ["t1", "t2"]
    assert [r.task.id for r in await store.records_of_version("2")] == []
    assert [r.task.id for r in await store.records_of_version(None)] == ["t4"]


async def test_a_fork_spawns_its_own_children_and_skips_a_pruned_forks_id(
    store: Store, fake_clock: FakeClock
) -> None:
    parent = await _claimed(store, "p1", room="r1")
    run, _ = _run(store, parent, "1")
    _, effect = _calls()
    await run.step("plan", effect)
    child = await run.spawn("kid", "sub-question")
    await run.step("after", effect)
    await store.complete(parent, "done")
    fork = await store.fork("p1", "after", room="r2")
    assert fork.done
    # the plan is copied; the spawn is not: a fork spawns and joins children of its own
    assert [s.name for s in await store.steps(fork.id)] == ["plan"]
    assert await store.get(child.id) is not None
    # a fork whose id a pruned task held takes the next one (p1 keeps its stored reply)
    claim = await store.claim("w1", leaderless=True)
    while claim is not None and claim.task.id != fork.id:
        await store.complete(claim, "x")
        await store.mark_delivered(claim.task.id)
        claim = await store.claim("w1", leaderless=True)
    assert claim is not None
    await store.complete(claim, "x")
    await store.mark_delivered(fork.id)
    fake_clock.advance(10)
    assert await store.prune_delivered(fake_clock.now, limit=100) >= 1
    assert await store.get(fork.id) is None
    again = await store.fork("p1", "plan")
    assert again.done, again.detail
    assert again.id == "p1~fork2"
    assert await store.get("p1~fork2") is not None


async def test_patched_counts_a_question_asked_and_never_a_patch_gone_from_the_code(
    store: Store, fake_clock: FakeClock
) -> None:
    claim = await _claimed(store, "t1", room="r1")
    await store.record_step(claim, "~patch:removed-long-ago", "true", version="1")
    await store.ask(claim, "~ask:1", "which seat?", fake_clock.now + 60, "asking")
    fake_clock.advance(61)
    await store.wake_due()  # the question timed out: the run goes on from the top
    again = await store.claim("w2", leaderless=True)
    assert again is not None
    resumed, _ = _run(store, again, "2")
    # it had asked a question it has not reached again: it was past this point
    assert await resumed.patched("before-the-question") is False
    fresh_claim = await _claimed(store, "t2")
    await store.record_step(fresh_claim, "~patch:removed-long-ago", "true", version="1")
    fresh, _ = _run(store, fresh_claim, "2")
    assert await fresh.patched("new") is True  # an unreached patch record is no path
