"""A hypothesis stateful test: random custody operations against a plain-Python model.

Rules drive ingest / assign / unassign / claim / renew / complete / fail (with a retry delay
or permanent) / release / clock advance / reconcile / deliver / dead-letter / an operator's
cancel and re-drive / the lead's view / reopen on a real store, and the model predicts every
answer. After every step the whole store is compared with the model, so an acknowledged id is
never lost, is in exactly the state the model says (one state), and a fenced holder's complete,
renew, fail or release always raises ``StaleLease`` and changes nothing. ``release`` keeps the
attempt, so another worker's later claim differs from a released one only by its owner: the
model checks the owner half of the fence as well as the attempt half.

Conversations (issue #34): every task is of one room, so after every step the room's turns
(each message, then the reply stored for it, ``delivered`` with its delivery) and its state
are compared with the model too; ``complete_with_state`` reads the run's conversation (exactly
the turns before its message) and stores a state, refused when fenced out or based on a stale
version (``StateConflict``, nothing written).

Crashes (``custody._crashes``): workers may beat (``beat``), and a lease whose holder beat and
then fell silent expires as a crash (the next attempt, but no failure counted; a suspect); a
worker may start again
under its name (``restart``: its claims are crash expiries at once). Suspects are claimed only
alone (nothing else claimed by that worker, each worker its own process here, and no other
suspect claimed), never planned or assigned, and die after two crashes while alone.

Durable runs (issue #35): a claim may record steps (only a live one; the first record of a
name wins, whatever attempt comes later) and park its task in ``waiting`` (no lease, no
owner, no attempt spent) until a wake-up time; the reconciler makes a due one pending; an
operator may cancel it; a re-drive keeps the steps, a fresh one forgets them.

Child runs (issue #51): a live claim may spawn a child (a task of no room, recorded as its
step ``~spawn:<name>``; a second spawn of the name makes nothing) and park in a join of its
children: ``waiting`` while one of its awaited children is live, else pending at once. The
outcome that makes its last awaited child done wakes it, in the same transaction; the
reconciler cancels the live children of a parent that ended.

How it runs under pytest-trio: hypothesis rules are synchronous, and a pytest-trio test owns
its Trio run, so the test function is a plain ``def`` (pytest-trio leaves those alone) and every
rule runs its store calls in a fresh ``trio.run``. One store object lives across those runs: the
SQLite writer thread wakes each caller through the Trio token captured with the call. The
backend comes from the same parametrised fixture as the conformance suite, and each example
opens a fresh store location.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, TypeVar

import attrs
import hypothesis.strategies as st
import pytest
import trio
from hypothesis import HealthCheck, settings
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from support.clock import FakeClock
from support.custody import LEASE_S, MAX_ATTEMPTS, Backend
from tether.bridge import CustodyState, Task, in_custody
from tether.bridge.custody import (
    Claim,
    CustodyConflict,
    StaleLease,
    StateConflict,
    Store,
    UnknownTask,
)
from tether.bridge.custody._children import CHILD_DONE, child_task, orphan_reason
from tether.bridge.custody._crashes import DEFAULT_MAX_CRASHES_ALONE
from tether.bridge.pool import Reconciler

T = TypeVar("T")
S = CustodyState
IDS = ["task-1", "task-12", "a", "a.b", "Z~9", "task-1_"]
WORKERS = ["w1", "w2", "w3"]
RANK = {"urgent": 0, "normal": 1, "low": 2}
ROOM = "r"
"""Every task is of one room (policy ``concurrent``: no room rule), so its conversation is
checked against the model too (issue #34)."""


@attrs.define
class Model:
    seq: int
    priority: str
    state: CustodyState = S.PENDING
    owner: str | None = None
    attempt: int = 1
    lease_until: float | None = None
    result: str | None = None
    not_before: float | None = None
    """A pending task waiting out a retry backoff; nobody takes it before then."""
    cancelled: bool = False
    """Dead by an operator's cancel: ``redrive_dead`` leaves it dead (issue 33)."""
    crash_count: int = 0
    crashes_alone: int = 0
    suspect: bool = False
    reply_turn: tuple[str, str] | None = None
    """The conversation's reply turn of this task (text, outcome): written when a result is
    stored, ``delivered`` with its delivery; a later dead letter leaves it (issue #34), a
    re-drive takes it back: the reply was never said, the run answers again (issue #49)."""
    steps: dict[str, tuple[str, int]] = attrs.field(factory=dict)
    """Recorded steps: name -> (value, the attempt that recorded it)."""
    run: int | None = None
    """The run number of the task's latest claim: the fence (a re-drive resets the attempt,
    so an old claim's owner and attempt may come back; its run never does)."""
    parent: str | None = None
    """The task that spawned it (a child has no room: no turns of its own)."""
    awaited: bool = False
    """A join of its parent waits for it (it stays so)."""
    joining: bool = False
    """Waiting because its last park was a join (its reason says so)."""

    def due(self, now: float) -> bool:
        return self.state is S.PENDING and (self.not_before is None or self.not_before <= now)

    def plannable(self, now: float) -> bool:
        """Due and not a suspect: the lead may plan and assign it."""
        return self.due(now) and not self.suspect


def _run(fn: Callable[..., Awaitable[T]], *args: Any) -> T:
    return trio.run(fn, *args)


class CustodyMachine(RuleBasedStateMachine):
    def __init__(self, backend: Backend) -> None:
        super().__init__()
        self.backend = backend
        self.clock = FakeClock()
        self.where = backend.fresh()
        self.store: Store = _run(self._open)
        self.model: dict[str, Model] = {}
        self.claims: list[Claim] = []  # every claim handed out, stale copies included
        self.beats: dict[str, float] = {}  # each worker's last beat (crashes)
        self.room_state: dict[str, Any] = {}  # the room's state and version (issue #34)
        self.reasons: dict[str, str] = {}  # the reasons the model predicts (orphans')
        self.version = 0

    async def _open(self) -> Store:
        return await self.backend.open(self.where, self.clock)

    def teardown(self) -> None:
        _run(self.store.aclose)

    # -- predictions ------------------------------------------------------------------------

    def _live(self, claim: Claim) -> bool:
        m = self.model[claim.task.id]
        return (
            m.state is S.CLAIMED
            and m.owner == claim.worker
            and m.attempt == claim.attempt
            and m.run == claim.run
        )  # held until the reconciler takes it back, whatever the time (custody._outage)

    def _next_for(self, worker: str, leaderless: bool) -> str | None:
        def key(id: str) -> tuple[int, int]:
            return (RANK[self.model[id].priority], self.model[id].seq)

        isolated, suspect = self._suspect_for(worker)
        if isolated:
            return suspect
        mine = [i for i, m in self.model.items() if m.state is S.ASSIGNED and m.owner == worker]
        if mine:
            return min(mine, key=key)
        pending = [i for i, m in self.model.items() if m.plannable(self.clock.now)]
        if leaderless and pending:
            return min(pending, key=key)
        return None

    # -- rules ------------------------------------------------------------------------------

    @rule(id=st.sampled_from(IDS), priority=st.sampled_from(sorted(RANK)))
    def ingest(self, id: str, priority: str) -> None:
        task = Task(id, f"body {id}", priority=priority, room=ROOM)
        new = _run(partial(self.store.ingest, room_policy="concurrent"), task)
        assert new == (id not in self.model)
        if new:
            self.model[id] = Model(seq=len(self.model), priority=priority)

    @rule(id=st.sampled_from(IDS), worker=st.sampled_from(WORKERS))
    def assign(self, id: str, worker: str) -> None:
        m = self.model.get(id)
        if m is None:
            with pytest.raises(UnknownTask):
                _run(self.store.assign, id, worker)
        elif not m.plannable(self.clock.now):  # not pending, waiting out its backoff, suspect
            with pytest.raises(CustodyConflict):
                _run(self.store.assign, id, worker)
        else:
            _run(self.store.assign, id, worker)
            m.state, m.owner, m.not_before = S.ASSIGNED, worker, None

    @rule(id=st.sampled_from(IDS), worker=st.sampled_from(WORKERS))
    def unassign(self, id: str, worker: str) -> None:
        m = self.model.get(id)
        if m is None:
            with pytest.raises(UnknownTask):
                _run(self.store.unassign, id, worker)
            return
        expected = m.state is S.ASSIGNED and m.owner == worker
        assert _run(self.store.unassign, id, worker) == expected
        if expected:
            m.state, m.owner = S.PENDING, None

    @rule(worker=st.sampled_from(WORKERS), leaderless=st.booleans())
    def claim(self, worker: str, leaderless: bool) -> None:
        expected = self._next_for(worker, leaderless)

        async def call() -> Claim | None:
            return await self.store.claim(worker, leaderless=leaderless)

        claim = _run(call)
        if expected is None:
            assert claim is None
            return
        assert claim is not None
        m = self.model[expected]
        assert (claim.task.id, claim.worker, claim.attempt) == (expected, worker, m.attempt)
        assert claim.lease_until == self.clock.now + LEASE_S
        m.state, m.owner, m.lease_until = S.CLAIMED, worker, claim.lease_until
        m.not_before, m.run = None, claim.run
        self.claims.append(claim)

    @precondition(lambda self: self.claims)
    @rule(pick=st.integers(min_value=0))
    def renew(self, pick: int) -> None:
        claim = self.claims[pick % len(self.claims)]
        if not self._live(claim):
            with pytest.raises(StaleLease):
                _run(self.store.renew, claim)
            return
        renewed = _run(self.store.renew, claim)
        m = self.model[claim.task.id]
        assert m.lease_until is not None
        m.lease_until = max(m.lease_until, self.clock.now + LEASE_S)
        assert renewed.lease_until == m.lease_until
        self.claims.append(renewed)

    @precondition(lambda self: self.claims)
    @rule(pick=st.integers(min_value=0))
    def complete(self, pick: int) -> None:
        claim = self.claims[pick % len(self.claims)]
        body = f"reply {claim.task.id} by {claim.worker}#{claim.attempt}"
        if not self._live(claim):
            with pytest.raises(StaleLease):
                _run(self.store.complete, claim, body)
            return
        _run(self.store.complete, claim, body)
        m = self.model[claim.task.id]
        m.state, m.lease_until, m.result, m.suspect = S.RESULT, None, body, False
        m.reply_turn = None if m.parent else (body, "result")
        self._wake_joiners()

    @precondition(lambda self: self.claims)
    @rule(pick=st.integers(min_value=0), stale_state=st.booleans())
    def complete_with_state(self, pick: int, stale_state: bool) -> None:
        """A run reads its conversation (exactly the turns before its message) and stores a
        state with its reply: fenced by the lease, refused on a stale version (issue #34)."""
        claim = self.claims[pick % len(self.claims)]
        if claim.task.room is None:  # a child: no room, no state
            return
        body = f"stateful reply {claim.task.id} by {claim.worker}#{claim.attempt}"
        base = self.version - 1 if stale_state and self.version else self.version
        state = {"n": self.version + 1, "by": claim.task.id}
        if not self._live(claim):
            with pytest.raises(StaleLease):
                _run(self.store.complete_with_state, claim, body, state, base)
            return
        talk = _run(self.store.conversation, claim.task.id)
        assert [(t.role, t.text) for t in talk.history] == [
            (role, text) for role, text, _ in self._turns(before=claim.task.id)
        ]
        assert (dict(talk.state), talk.version) == (self.room_state, self.version)
        if base != self.version:
            with pytest.raises(StateConflict):
                _run(self.store.complete_with_state, claim, body, state, base)
            return
        assert _run(self.store.complete_with_state, claim, body, state, base) == base + 1
        self.room_state, self.version = state, base + 1
        m = self.model[claim.task.id]
        m.state, m.lease_until, m.result, m.suspect = S.RESULT, None, body, False
        m.reply_turn = (body, "result")

    @precondition(lambda self: self.claims)
    @rule(
        pick=st.integers(min_value=0),
        retry_after=st.sampled_from([0.0, 1.0, LEASE_S, LEASE_S * 2]),
        permanent=st.booleans(),
    )
    def fail(self, pick: int, retry_after: float, permanent: bool) -> None:
        self._fail(self.claims[pick % len(self.claims)], retry_after, permanent)

    @precondition(lambda self: any(self._live(c) for c in self.claims))
    @rule(retry_after=st.sampled_from([1.0, LEASE_S, LEASE_S * 2]))
    def fail_newest_for_a_retry(self, retry_after: float) -> None:
        """A live claim fails with a delay: what the not-before guards are about (``fail``
        above mostly picks stale copies, so a waiting task is rare without this rule)."""
        live = [c for c in self.claims if self._live(c)]
        self._fail(live[-1], retry_after, permanent=False)

    def _fail(self, claim: Claim, retry_after: float, permanent: bool) -> None:
        async def call() -> CustodyState:
            return await self.store.fail(
                claim, "model failure", retry_after=retry_after, permanent=permanent
            )

        if not self._live(claim):
            with pytest.raises(StaleLease):
                _run(call)
            return
        m = self.model[claim.task.id]
        state = _run(call)
        m.suspect = False
        if permanent or m.attempt - m.crash_count >= MAX_ATTEMPTS:  # crashes are no failures
            assert state is S.DEAD
            m.state, m.lease_until = S.DEAD, None
            self._wake_joiners()
        else:
            assert state is S.PENDING
            m.state, m.owner, m.lease_until, m.attempt = S.PENDING, None, None, m.attempt + 1
            m.not_before = self.clock.now + retry_after if retry_after else None

    @precondition(lambda self: self.claims)
    @rule(pick=st.integers(min_value=0))
    def release(self, pick: int) -> None:
        claim = self.claims[pick % len(self.claims)]
        if not self._live(claim):
            with pytest.raises(StaleLease):
                _run(self.store.release, claim)
            return
        _run(self.store.release, claim)
        m = self.model[claim.task.id]
        m.state, m.owner, m.lease_until = S.PENDING, None, None  # the same attempt

    @rule(seconds=st.sampled_from([1.0, LEASE_S / 2, LEASE_S, LEASE_S * 3]))
    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)

    @rule()
    def reconcile(self) -> None:
        report = _run(Reconciler(self.store).run_once)
        expected = set()
        now = self.clock.now
        for id, m in self.model.items():
            if m.state is S.CLAIMED and m.lease_until is not None and m.lease_until <= now:
                expected.add(self._expire(id, m, restarted=False))
        got = {(e.id, e.worker, e.attempt, e.outcome, e.crash) for e in report.expired}
        assert got == expected
        self._wake_joiners()  # a child dead by its expiry woke its parent in that transaction
        due = sorted(
            (i for i, m in self.model.items() if m.state is S.WAITING),
            key=lambda i: (self.model[i].not_before, i),
        )
        due = [i for i in due if (self.model[i].not_before or 0) <= now]
        assert list(report.woken) == due
        for id in due:
            self.model[id].state = S.PENDING  # its not_before (now past) stays: due
        self._cancel_orphans()

    # -- child runs (issue #51) ----------------------------------------------------------------

    def _wake_joiners(self) -> None:
        """The store's ``children_done``: a joining parent none of whose awaited children is
        live any more is pending again, at once (woken in the transaction of the last one)."""
        for id, m in self.model.items():
            if m.state is S.WAITING and m.joining and not self._awaited_live(id):
                m.state, m.not_before, m.joining = S.PENDING, None, False

    def _awaited_live(self, parent: str) -> bool:
        return any(
            c.parent == parent and c.awaited and c.state not in CHILD_DONE
            for c in self.model.values()
        )

    def _cancel_orphans(self) -> None:
        """The reconciler's pass: a live child whose parent ended is cancelled (dead), and so
        on down the tree; a cancelled child of a joining parent cannot be (its parent ended)."""
        while True:
            orphans = [
                (id, m)
                for id, m in self.model.items()
                if m.parent is not None
                and m.state in (S.PENDING, S.ASSIGNED, S.CLAIMED, S.WAITING)
                and self.model[m.parent].state in CHILD_DONE
            ]
            if not orphans:
                return
            for id, m in orphans:
                m.state, m.lease_until, m.not_before, m.joining = S.DEAD, None, None, False
                self.reasons[id] = orphan_reason(
                    m.parent or "", self.model[m.parent or ""].state.value
                )

    @precondition(lambda self: self.claims)
    @rule(pick=st.integers(min_value=0), name=st.sampled_from(["x", "y"]))
    def spawn(self, pick: int, name: str) -> None:
        claim = self.claims[pick % len(self.claims)]
        child = child_task(claim.task, name, f"child {name}", queue=None, room=None)
        if not self._live(claim):
            with pytest.raises(StaleLease):
                _run(self.store.spawn, claim, name, child)
            return
        record = _run(self.store.spawn, claim, name, child)
        parent = self.model[claim.task.id]
        step = f"~spawn:{name}"
        if step not in parent.steps:
            parent.steps[step] = (f'"{child.id}"', claim.attempt)
            self.model[child.id] = Model(
                seq=len(self.model), priority=parent.priority, parent=claim.task.id
            )
        assert (record.value, record.attempt) == parent.steps[step]  # spawned once

    @rule(
        worker=st.sampled_from(WORKERS),
        leaderless=st.booleans(),
        then_join=st.booleans(),
        then_run=st.booleans(),
    )
    def claim_and_spawn(
        self, worker: str, leaderless: bool, then_join: bool, then_run: bool
    ) -> None:
        """A claim whose run spawns a child at once, maybe parks in a join of its children,
        and maybe the next pending task (its child, often) is claimed and completed: the
        wake of a joining parent (live claims are rare otherwise: most rules pick stale
        copies)."""
        before = len(self.claims)
        self.claim(worker, leaderless)
        if len(self.claims) == before:
            return
        self.spawn(before, "x")
        if not then_join:
            return
        self._join(self.claims[before], LEASE_S)
        if then_run:
            ran = len(self.claims)
            self.claim("w3", leaderless=True)
            if len(self.claims) > ran:
                self.complete(ran)

    @precondition(lambda self: any(self._live(c) for c in self.claims))
    @rule(name=st.sampled_from(["x", "y"]))
    def spawn_newest(self, name: str) -> None:
        """A live claim spawns (``spawn`` above mostly picks stale copies)."""
        live = [c for c in self.claims if self._live(c)]
        self.spawn(self.claims.index(live[-1]), name)

    @precondition(lambda self: any(self._live(c) for c in self.claims))
    @rule(seconds=st.sampled_from([1.0, LEASE_S * 2]))
    def join_newest(self, seconds: float) -> None:
        """A live claim parks in a join of every child it spawned."""
        claim = [c for c in self.claims if self._live(c)][-1]
        self._join(claim, seconds)

    @precondition(lambda self: self.claims)
    @rule(pick=st.integers(min_value=0))
    def join(self, pick: int) -> None:
        self._join(self.claims[pick % len(self.claims)], LEASE_S)

    def _join(self, claim: Claim, seconds: float) -> None:
        id = claim.task.id
        kids = [i for i, m in self.model.items() if m.parent == id]
        until = self.clock.now + seconds
        if not self._live(claim):
            with pytest.raises(StaleLease):
                _run(self.store.park_join, claim, kids, until, "model joins")
            return
        state = _run(self.store.park_join, claim, kids, until, "model joins")
        for kid in kids:
            self.model[kid].awaited = True
        m = self.model[id]
        m.owner, m.lease_until = None, None
        if self._awaited_live(id):
            assert state is S.WAITING
            m.state, m.not_before, m.joining = S.WAITING, until, True
        else:
            assert state is S.PENDING  # its children were done: its join returns next run
            m.state, m.not_before = S.PENDING, None

    # -- durable runs (issue #35) ------------------------------------------------------------

    @precondition(lambda self: self.claims)
    @rule(pick=st.integers(min_value=0), name=st.sampled_from(["a", "b", "~sleep:1"]))
    def record_step(self, pick: int, name: str) -> None:
        claim = self.claims[pick % len(self.claims)]
        value = f'"{name} by {claim.worker}#{claim.attempt}"'
        if not self._live(claim):
            with pytest.raises(StaleLease):
                _run(self.store.record_step, claim, name, value)
            return
        record = _run(self.store.record_step, claim, name, value)
        m = self.model[claim.task.id]
        m.steps.setdefault(name, (value, claim.attempt))
        assert (record.value, record.attempt) == m.steps[name]  # the first record wins

    @precondition(lambda self: self.claims)
    @rule(pick=st.integers(min_value=0), seconds=st.sampled_from([1.0, LEASE_S, LEASE_S * 3]))
    def park(self, pick: int, seconds: float) -> None:
        self._park(self.claims[pick % len(self.claims)], seconds)

    @precondition(lambda self: any(self._live(c) for c in self.claims))
    @rule(seconds=st.sampled_from([1.0, LEASE_S * 2]))
    def park_newest(self, seconds: float) -> None:
        """A live claim parks (``park`` above mostly picks stale copies)."""
        self._park([c for c in self.claims if self._live(c)][-1], seconds)

    def _park(self, claim: Claim, seconds: float) -> None:
        until = self.clock.now + seconds
        if not self._live(claim):
            with pytest.raises(StaleLease):
                _run(self.store.park, claim, until, "model sleeps")
            return
        _run(self.store.park, claim, until, "model sleeps")
        m = self.model[claim.task.id]
        m.state, m.owner, m.lease_until, m.not_before = S.WAITING, None, None, until
        m.joining = False

    @rule()
    def deliver(self) -> None:
        async def call() -> list[tuple[str, str]]:
            ready = await self.store.ready_results()
            if ready:
                await self.store.mark_delivered(ready[0].task.id)
            return [(r.task.id, r.body) for r in ready]

        ready = _run(call)
        expected = sorted(
            ((i, m.result) for i, m in self.model.items() if m.state is S.RESULT),
            key=lambda p: (RANK[self.model[p[0]].priority], self.model[p[0]].seq),
        )
        assert ready == expected
        if ready:
            m = self.model[ready[0][0]]
            m.state = S.DELIVERED
            if m.reply_turn is not None:
                m.reply_turn = (m.reply_turn[0], "delivered")

    @rule(id=st.sampled_from(IDS))
    def dead_letter(self, id: str) -> None:
        m = self.model.get(id)
        if m is None:
            with pytest.raises(UnknownTask):
                _run(self.store.dead_letter, id, "model gave up")
        elif m.state is S.DELIVERED:
            with pytest.raises(CustodyConflict):
                _run(self.store.dead_letter, id, "model gave up")
        else:
            _run(self.store.dead_letter, id, "model gave up")
            m.state, m.lease_until, m.not_before = S.DEAD, None, None
            self._wake_joiners()

    @rule(ids=st.lists(st.sampled_from(IDS), min_size=1, max_size=3, unique=True))
    def cancel(self, ids: list[str]) -> None:
        """An operator cancels: pending, assigned or claimed -> dead; anything else refused,
        unchanged. A cancelled claim's holder is fenced out (its copies are no longer live)."""
        outcomes = _run(self.store.cancel, ids, "model cancelled")
        assert [o.id for o in outcomes] == ids
        for o in outcomes:
            m = self.model.get(o.id)
            expected = m is not None and m.state in (S.PENDING, S.ASSIGNED, S.CLAIMED, S.WAITING)
            assert o.done == expected, o
            assert o.state == (S.DEAD if expected else (m.state if m else None))
            if expected:
                assert m is not None
                m.state, m.lease_until, m.not_before = S.DEAD, None, None
                m.cancelled = True
        self._wake_joiners()

    @rule(ids=st.permutations(IDS), every_dead=st.booleans(), fresh=st.booleans())
    def redrive(self, ids: list[str], every_dead: bool, fresh: bool) -> None:
        """An operator re-drives: dead -> pending with fresh attempts, due now; any other state
        (delivered above all) is refused and unchanged. Every id is named (in a random order,
        unknown ones too), so the guard meets whatever states the run has reached; only dead
        tasks move. ``every_dead``: ``redrive_dead``, which picks the dead ones itself."""
        if every_dead:
            outcomes = _run(partial(self.store.redrive_dead, fresh=fresh))
            ids = [i for i, m in self.model.items() if m.state is S.DEAD and not m.cancelled]
            assert sorted(o.id for o in outcomes) == sorted(ids)
        else:
            outcomes = _run(partial(self.store.redrive, ids, fresh=fresh))
            assert [o.id for o in outcomes] == ids
        for o in sorted(outcomes, key=lambda o: o.id):
            m = self.model.get(o.id)
            expected = m is not None and m.state is S.DEAD
            assert o.done == expected, o
            assert o.state == (S.PENDING if expected else (m.state if m else None))
            if expected:
                assert m is not None
                m.state, m.owner, m.attempt, m.lease_until = S.PENDING, None, 1, None
                m.not_before, m.result, m.reply_turn = None, None, None
                # the operator vouches for it: its crash record and suspect mark are cleared
                m.crash_count, m.crashes_alone, m.suspect = 0, 0, False
                # it queues behind fresh work (issue 33), at its age among low tasks
                m.priority, m.cancelled = "low", False
                self.reasons.pop(o.id, None)
                if fresh:
                    m.steps.clear()

    @precondition(lambda self: any(self._live(c) for c in self.claims))
    @rule()
    def complete_newest(self) -> None:
        """A live claim completes (``complete`` above mostly picks stale copies, so without
        this replies, and then delivered tasks for the operator's guards, are rare)."""
        live = [c for c in self.claims if self._live(c)]
        self.complete(self.claims.index(live[-1]))

    @precondition(lambda self: any(self._live(c) for c in self.claims))
    @rule()
    def fail_newest_for_good(self) -> None:
        """A live claim fails permanently: dead on whatever attempt it reached."""
        live = [c for c in self.claims if self._live(c)]
        self._fail(live[-1], 0.0, permanent=True)

    @rule()
    def lead_view(self) -> None:
        """The lead's view and the pending queue hold exactly the due tasks, and name the
        earliest waiting one; an operator counts the waiting ones."""

        async def call() -> tuple[Any, Any, Any]:
            view = await self.store.pool_view()
            return view, await self.store.pending(), await self.store.waiting_retries()

        view, pending, waiting = _run(call)
        now = self.clock.now
        due = sorted(
            (i for i, m in self.model.items() if m.plannable(now)),
            key=lambda i: (RANK[self.model[i].priority], self.model[i].seq),
        )
        assert [q.id for q in view.pending] == due
        assert [t.id for t in pending] == due
        ahead = [
            m.not_before
            for m in self.model.values()
            if m.state is S.PENDING and m.not_before is not None and m.not_before > now
        ]
        assert view.next_due == (min(ahead) if ahead else None)
        assert (waiting.count, waiting.next_due) == (len(ahead), view.next_due)

    # -- crashes (custody._crashes) ----------------------------------------------------------

    def _suspect_for(self, worker: str) -> tuple[bool, str | None]:
        """The isolation rule: (does it decide this claim, the suspect it hands out or None)."""
        claimed = [m for m in self.model.values() if m.state is S.CLAIMED]
        if any(m.suspect and m.owner == worker for m in claimed):
            return True, None  # a suspect runs here: nothing else does
        ready = [i for i, m in self.model.items() if m.suspect and m.due(self.clock.now)]
        if not ready or any(m.suspect for m in claimed):
            return False, None
        if any(m.owner == worker for m in claimed):
            return True, None  # drains
        return True, min(
            ready,
            key=lambda i: (
                -self.model[i].crashes_alone,
                -self.model[i].crash_count,
                RANK[self.model[i].priority],
                self.model[i].seq,
            ),
        )

    def _expire(self, id: str, m: Model, *, restarted: bool) -> tuple[Any, ...]:
        """Predict one expired lease; returns (id, worker, attempt, outcome, crash)."""
        owner, attempt = m.owner, m.attempt
        beat = self.beats.get(owner or "")
        crash = restarted or (beat is not None and beat < self.clock.now - LEASE_S / 2)
        if crash:
            m.crash_count += 1
            if m.suspect:
                m.crashes_alone += 1
            dead = m.crashes_alone >= DEFAULT_MAX_CRASHES_ALONE
            m.suspect = not dead
        else:
            dead = m.attempt - m.crash_count >= MAX_ATTEMPTS
            m.suspect = False
        outcome = S.DEAD if dead else S.PENDING
        m.state, m.lease_until = outcome, None
        if not dead:  # the next run has the next attempt (the fence), crash or not
            m.owner, m.attempt = None, m.attempt + 1
        return (id, owner, attempt, outcome, crash)

    @rule(worker=st.sampled_from(WORKERS))
    def beat(self, worker: str) -> None:
        _run(self.store.beat, worker, "worker", 10)
        self.beats[worker] = self.clock.now

    @rule(worker=st.sampled_from(WORKERS))
    def restart(self, worker: str) -> None:
        """``worker`` starts in a new process: whatever its name holds is a crash expiry."""
        got = _run(self.store.recover_claims, worker)
        expected = {
            self._expire(id, m, restarted=True)
            for id, m in self.model.items()
            if m.state is S.CLAIMED and m.owner == worker
        }
        assert {(e.id, e.worker, e.attempt, e.outcome, e.crash) for e in got} == expected
        self._wake_joiners()

    @rule()
    def suspects(self) -> None:
        got = _run(self.store.suspects)
        expected = {i for i, m in self.model.items() if m.suspect and in_custody(m.state)}
        assert got.count == len(expected)
        assert {r.task.id for r in got.records} == expected

    @rule()
    def reopen(self) -> None:
        _run(self.store.aclose)
        self.store = _run(self._open)

    # -- the whole store equals the model -------------------------------------------------

    def _turns(self, before: str | None = None) -> list[tuple[str, str, str]]:
        """The room's turns the model predicts, in order: each message, then its reply."""
        turns: list[tuple[str, str, str]] = []
        for id, m in sorted(self.model.items(), key=lambda p: p[1].seq):
            if id == before:
                break
            if m.parent is not None:  # a child: no room
                continue
            turns.append(("user", f"body {id}", "received"))
            if m.reply_turn is not None:
                turns.append(("assistant", *m.reply_turn))
        return turns

    @invariant()
    def conversation_matches_model(self) -> None:
        view = _run(self.store.room, ROOM)
        if not self.model:
            assert view is None
            return
        assert view is not None
        assert [(t.role, t.text, t.outcome) for t in view.turns] == self._turns()
        assert (dict(view.state), view.version) == (self.room_state, self.version)

    @invariant()
    def store_matches_model(self) -> None:
        async def snapshot() -> tuple[dict[str, Any], dict[str, Any], Any, Any]:
            every = [*IDS, *(i for i in self.model if i not in IDS)]
            records = {id: await self.store.get(id) for id in every}
            steps = {id: await self.store.steps(id) for id in every if id in self.model}
            return records, steps, await self.store.counts(), await self.store.in_flight()

        records, steps, counts, in_flight = _run(snapshot)
        for id in records:
            rec, m = records[id], self.model.get(id)
            if m is None:
                assert rec is None
                continue
            assert rec is not None, f"{id} was acknowledged and is lost"
            assert (rec.state, rec.attempt, rec.lease_until) == (m.state, m.attempt, m.lease_until)
            assert rec.not_before == m.not_before  # only pending tasks have one
            assert (rec.crash_count, rec.crashes_alone) == (m.crash_count, m.crashes_alone)
            if in_custody(m.state):
                assert rec.suspect == m.suspect
            if m.state in (S.ASSIGNED, S.CLAIMED, S.PENDING, S.WAITING):
                assert rec.owner == m.owner
            assert {s.name: (s.value, s.attempt) for s in steps[id]} == m.steps
            if m.state in (S.RESULT, S.DELIVERED):
                assert rec.result == m.result
            if m.state is S.DEAD and id in self.reasons:
                assert rec.reason == self.reasons[id]
        assert sum(counts.values()) == len(self.model)
        for state in CustodyState:
            assert counts[state] == sum(1 for m in self.model.values() if m.state is state)
        assert sorted(in_flight) == sorted(i for i, m in self.model.items() if in_custody(m.state))


# 50 runs of 50 steps take ~30 s per backend on a quiet machine and four times that under
# heavy load; a timeout firing inside a run would leave hypothesis and the store mid-step, so
# this test gets room beyond the suite's 300 s rather than fewer examples
@pytest.mark.timeout(900)
def test_custody_store_matches_its_model(backend: Backend) -> None:
    class OnThisBackend(CustodyMachine):
        def __init__(self) -> None:
            super().__init__(backend)

    run_state_machine_as_test(
        OnThisBackend,
        settings=settings(
            max_examples=50,
            stateful_step_count=50,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )
