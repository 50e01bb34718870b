"""The pool lead: assigns pending tasks to live workers and takes back what cannot move.

Each sweep plans as a pure function of one view (``plan_sweep``, in ``_plan``); every move is
a compare-and-set, and a returned task waits for a later sweep. See docs/guide/design.md,
"The lead".
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final

import attrs
import trio

from ..._backoff import Backoff
from ..._plumbing._converter import structure_versioned, unstructure
from ..._plumbing._grid import on_grid
from ..custody._records import PoolView, WorkerInfo
from ..custody._roles import LeadStore
from ..custody._rules import check_worker
from ..runs._timings import Timings
from ._idle import idle_backoff
from ._liveness import DEFAULT_DEAD_AFTER, DEFAULT_MAX_SKEW, check_seconds, is_alive
from ._plan import Assigned, Deferred, Returned, SweepPlan, plan_sweep
from ._stop import StopSignal
from ._wakeup import PoolWakeups, Wakeup

log = logging.getLogger("tether.bridge.pool.lead")

SWEEP_SCHEMA_VERSION: Final = 1
MAX_PAGES: Final = 8
"""Pending pages one sweep reads at most while rooms with a full keeper fill them."""
MIN_WINDOW: Final = 16
"""Pending tasks a sweep reads at least (see ``PoolLead._next_window``)."""


@attrs.frozen
class SweepReport:
    """What one sweep did (a versioned document: ``to_document`` / ``from_document``)."""

    at: float
    lead: str
    live_workers: tuple[str, ...]
    assigned: tuple[Assigned, ...] = ()
    returned: tuple[Returned, ...] = ()
    deferred: tuple[Deferred, ...] = ()
    lost: tuple[str, ...] = ()
    """Planned assignments whose task had moved on meanwhile (a leaderless claim won)."""
    waiting: int = 0
    unserved: dict[str, int] = attrs.field(factory=dict)
    """Pending tasks (of those read) per queue no live worker serves: they wait (issue #51)."""
    schema_version: int = SWEEP_SCHEMA_VERSION

    def to_document(self) -> dict[str, Any]:
        return unstructure(self)  # type: ignore[no-any-return]

    @classmethod
    def from_document(cls, doc: Any) -> SweepReport:
        return structure_versioned(doc, cls, version=SWEEP_SCHEMA_VERSION, what="sweep report")


def _merge_pages(earlier: PoolView, page: PoolView) -> PoolView:
    """``page``'s fresh worker, assignment and claim state, with the pending tasks of every
    page read so far, in queue order (a later page re-reads still-pending tasks of the rooms
    it does not skip: they are counted once)."""
    seen = {t.id for t in earlier.pending}
    pending = (*earlier.pending, *(t for t in page.pending if t.id not in seen))
    return attrs.evolve(page, pending=pending, rooms={**earlier.rooms, **page.rooms})


BEATS_PER_LEASE: Final = 3
"""A lead candidate's beats per ``PoolLead.lease``: a leader's beat may come two beats late
before a standby takes over. The beat rate buys only that slack; the failover time is the lease
(issue 39: an idle process beats once a second, not four times)."""
_JUST_AFTER: Final = 0.001
"""Seconds past a leader's deadline a standby looks again: past it, the leader counts as gone."""


@attrs.define(eq=False)
class PoolLead:
    """The lead as a service: ``await nursery.start(lead.run)``; or ``await sweep_once()``."""

    store: LeadStore
    name: str = "lead"
    sweep_interval: float = 0.5
    """Seconds between sweeps unless rung; doubling while sweeps find the pool idle, up to
    ``pool._idle.IDLE_MAXIMUM``."""
    dead_after: float = DEFAULT_DEAD_AFTER
    stuck_after: float = 30.0
    stuck_cap: float | None = None
    """Seconds after which a stuck assignment goes back even while its worker is busy
    (default ``3 * stuck_after``)."""
    capacity: int | None = None
    """An upper bound on each worker's load, over the capacity the worker beats (None: none)."""
    max_skew: float = DEFAULT_MAX_SKEW
    pending_limit: int = 1000
    min_sweep_gap: float = 0.01
    """Seconds from one sweep's start to the next at least, under load: every stored outcome
    rings the lead then; each sweep assigns a batch rather than a task or two, and the
    workers' waiting assignments (their capacity over their concurrency) cover the gap. A pool
    with room for more (see ``_has_room``) sweeps at once: a lone message never waits."""
    clock: Callable[[], float] | None = None
    wakeups: PoolWakeups | None = None
    """The pool's switchboard: the lead sweeps when it rings and rings the workers it assigns
    to. ``None``: a sweep every ``sweep_interval`` only."""
    timings: Timings | None = None
    """Where each sweep's time goes (``Timings.lead_sweep``: ``/metrics`` and the status)."""
    sweeps: int = attrs.field(init=False, default=0)
    last_report: SweepReport | None = attrs.field(init=False, default=None)
    _last_pick: str | None = attrs.field(init=False, default=None)
    _window: int = attrs.field(init=False, default=0)
    _drained: bool = attrs.field(init=False, default=False)
    """Did the last full sweep read every ready pending task and assign them all?"""
    _spare: int = attrs.field(init=False, default=0)
    _handed: Counter[str] = attrs.field(init=False, factory=Counter)
    _unserved: set[str] = attrs.field(init=False, factory=set)
    """The queues whose tasks waited for a worker at the last sweep (said once)."""
    """Claims the last sweep handed to each worker of this process (``pool._hands``)."""
    """Free capacity the last sweep left on the live workers (``SweepPlan.spare``)."""
    _asked_outranked: str | None = attrs.field(init=False, default=None)
    """The waiting task the last sweep gave assignments back for (``_return_outranked``)."""
    looks: int = attrs.field(init=False, default=0)
    """Sweeps that ended after a read that found nothing to do (``_look``; in ``sweeps`` too)."""
    lease: float = 3.0
    """Seconds a leader's beat holds the lead: a leader silent this long counts as gone, and
    the oldest standby takes over then and sweeps at once, so a new leader assigns within a
    lease of a crash (the goal of the pool guide). Every candidate beats ``BEATS_PER_LEASE``
    times a lease while ``run`` runs (a beat loop of its own, so a slow sweep never delays it);
    a standby reads the beats besides only as the leader's lease runs out. Safety never depends
    on it: two leads sweeping at once (a leader that was only slow) is correct, every move
    being a compare-and-set; and a slow leader that beats again leads again (it has beaten the
    longest), the standby stands by."""
    leading: bool = attrs.field(init=False, default=False)
    """Is this candidate the pool's leader now (as of its last beat)? ``run`` sweeps only then."""
    leading_since: float | None = attrs.field(init=False, default=None)
    """Store-clock time this candidate became the leader (None while standing by)."""
    leader: WorkerInfo | None = attrs.field(init=False, default=None)
    """The leader as this candidate last saw it (itself, another candidate, or None)."""
    takeovers: int = attrs.field(init=False, default=0)
    first_assigned_at: float | None = attrs.field(init=False, default=None)
    """Store-clock time of this leadership's first assignment (None until it assigned)."""
    workers_seen: tuple[str, ...] = attrs.field(init=False, default=())
    """The live workers (by ``dead_after``) in the beats this candidate read last."""
    _stop: StopSignal = attrs.field(init=False, factory=StopSignal)
    _doorbell: Wakeup = attrs.field(init=False, factory=Wakeup)
    _idle: Backoff = attrs.field(init=False)
    _beat_at: float = attrs.field(init=False, default=-math.inf)
    _next_due: float | None = attrs.field(init=False, default=None)
    _beats_in_loop: bool = attrs.field(init=False, default=False)
    _took_over_from: str | None = attrs.field(init=False, default=None)
    _work_seen_at: float | None = attrs.field(init=False, default=None)
    """When this leader's sweeps first saw work to assign (store clock)."""
    _first_sweep_at: float | None = attrs.field(init=False, default=None)
    """When this leader first swept (store clock): work seen then was waiting for it."""
    _own_beat_at: float | None = attrs.field(init=False, default=None)
    """When this candidate's last beat landed (store clock; kept across runs)."""
    _hold_until: float = attrs.field(init=False, default=-math.inf)
    """A candidate back from a silence of its own (a store outage cut it off) does not take
    the lead before this, so others cut off with it can beat again first (see ``_beat``)."""

    @property
    def _beat_every(self) -> float:
        """Seconds between the lead's beats: as often as an idle lead sweeps, and well inside
        ``dead_after``. Sweeps rung back to back under load read without beating, so they cost
        no durable commit of their own."""
        return min(self.sweep_interval, self.dead_after / 4)

    def __attrs_post_init__(self) -> None:
        check_worker(self.name)
        check_seconds("sweep_interval", self.sweep_interval)
        self._idle = idle_backoff(self.sweep_interval)
        check_seconds("min_sweep_gap", self.min_sweep_gap, allow_zero=True)
        if self.wakeups is not None:
            self._doorbell = self.wakeups.lead
        check_seconds("dead_after", self.dead_after)
        check_seconds("lease", self.lease)
        check_seconds("stuck_after", self.stuck_after)
        check_seconds("max_skew", self.max_skew, allow_zero=True)
        if self.stuck_cap is None:
            self.stuck_cap = 3 * self.stuck_after
        elif check_seconds("stuck_cap", self.stuck_cap) < self.stuck_after:
            raise ValueError(
                f"stuck_cap ({self.stuck_cap!r}) must be >= stuck_after ({self.stuck_after!r})"
            )
        if self.capacity is not None and (
            isinstance(self.capacity, bool)
            or not isinstance(self.capacity, int)
            or self.capacity < 1
        ):
            raise ValueError(f"capacity must be None or an int >= 1, got {self.capacity!r}")

    def now(self) -> float:
        return (self.clock or self.store.clock)()

    def request_stop(self) -> None:
        """Soft stop: finish the sweep in hand, then leave (and drop the lead's beat)."""
        self._stop.set()

    async def _timed_sweep(self) -> None:
        began = trio.current_time()
        await self.sweep_once()
        if self.timings is not None:
            self.timings.lead_sweep.observe(trio.current_time() - began)

    async def sweep_once(self) -> SweepReport:
        """Beat (when due), read the pool, return dead and stuck assignments, assign pending tasks.

        If the page of pending tasks read ends with tasks waiting for a full keeper while
        workers have capacity to spare, the lead reads again without those rooms (up to
        ``MAX_PAGES`` reads), so a busy room at the head of the queue never starves the rest.
        Every plan covers all the pages read so far: a room is paged past because its keeper
        is full, possibly with tasks this sweep assigns from an earlier page.
        """
        self._doorbell.clear()  # this sweep reads everything rung for so far
        news = self.wakeups is not None and self.wakeups.take_pending_news()
        limit = self._window or self.pending_limit
        now = self.now()
        beat_due = not (self._beats_in_loop or 0 <= now - self._beat_at < self._beat_every)
        if self._drained and not beat_due and not news:
            looked = await self._look(now)
            if looked is not None:
                return looked
        view, plan, done, returned = await self._plan_and_assign(now, limit, beat_due)
        if await self._return_outranked(view, plan):
            self._doorbell.set()  # the tasks given back are assigned in queue order now
        self._remember(view, plan, now, limit)
        lost: tuple[str, ...] = ()
        if done:
            lost = tuple(a.id for a, ok in zip(plan.assign, done, strict=True) if not ok)
        assigned = tuple(a for a in plan.assign if a.id not in lost)
        self._note_leading(view, assigned, now)
        if self.wakeups is not None:  # a worker handed all it was assigned has nothing to claim
            self.wakeups.tasks_assigned(_beyond(assigned, self._handed))
            if returned:
                self.wakeups.tasks_pending()  # leaderless claimers may take them; sweep again
        report = SweepReport(
            at=now,
            lead=self.name,
            live_workers=self._live_workers(view, now),
            assigned=assigned,
            returned=returned,
            deferred=plan.deferred,
            lost=lost,
            waiting=plan.waiting,
            unserved=dict(plan.unserved),
        )
        self._say_unserved(plan.unserved)
        for r in returned:
            log.warning(
                "lead %s: returned task %s of worker %s to pending (%s, assigned %.1fs ago)",
                self.name,
                r.id,
                r.worker,
                r.why,
                r.age,
            )
        self.sweeps += 1
        self.last_report = report
        return report

    async def _plan_and_assign(
        self, now: float, limit: int, beat_due: bool
    ) -> tuple[PoolView, SweepPlan, list[bool] | None, tuple[Returned, ...]]:
        """The sweep's store work: plan from the first page and assign in that transaction
        when nothing else is to do, else read on past full rooms, return dead and stuck
        assignments and assign. The view and plan it ended with, which assignments took
        (None: none were made), and what it returned."""
        planned: list[SweepPlan] = []  # decide() runs in the store's thread; it leaves its plan

        def decide(view: PoolView) -> list[tuple[str, str]] | None:
            """Plan from the first page; assign at once unless the plan also returns
            assignments or must read past rooms (then the sweep goes on below)."""
            plan = self._plan(view, max(now, view.at))  # judged when the view was read
            planned[:] = [plan]
            if (
                plan.dead_workers
                or plan.stuck
                or any(self._more_pages(plan, view, limit, set(), set()))
            ):
                return None
            return [(a.id, a.worker) for a in plan.assign]

        answers: list[tuple[PoolView, list[bool] | None]] = []
        handed: Counter[str] = Counter()

        async def plan_and_assign() -> None:
            if self.wakeups is None or not self.wakeups.hands:
                answers.append(await self.store.plan_and_assign(decide, pending_limit=limit))
                return
            with self.wakeups.hands.reserved() as reserved:
                swept = await self.store.plan_assign_and_claim(
                    decide, pending_limit=limit, hands=reserved.hands
                )
                reserved.deliver(swept.claims)  # the runs start as the block ends
            handed.update({w: len(c) for w, c in swept.claims.items()})
            answers.append((swept.view, swept.done))

        if not beat_due:
            # ``run`` beats in a loop of its own; else a clock stepped back beats now
            await plan_and_assign()  # under load: no beat, one transaction for the sweep
        else:
            self._beat_at = now
            async with trio.open_nursery() as nursery:  # one writer batch for both
                nursery.start_soon(self._beat)
                nursery.start_soon(plan_and_assign)
        [(view, done)] = answers
        [plan] = planned
        returned: tuple[Returned, ...] = ()
        if done is None:
            view, plan = await self._read_past_full_rooms(view, plan, now, limit)
            returned = await self._return(view, plan, now)
            if plan.assign:
                done = await self.store.assign_many([(a.id, a.worker) for a in plan.assign])
        self._handed = handed
        return view, plan, done, returned

    def _remember(self, view: PoolView, plan: SweepPlan, now: float, limit: int) -> None:
        """What the next sweep starts from: the last pick, the next due wake-up, the workers
        seen, the window to read, whether the queue drained, whether a free slot matters."""
        self._last_pick = plan.last_pick
        self._next_due = view.next_due
        self._see_workers(view.workers, view.at)
        self._window, widened = self._next_window(view, plan, now, limit)
        # every ready pending task was read (a short page) and assigned: until a commit makes
        # another one ready, the next sweep has nothing to assign (see ``_look``)
        self._drained = not plan.waiting and len(view.pending) < limit and not widened
        self._spare = plan.spare
        if widened:  # workers had room for more than this sweep read: look again soon
            self._doorbell.set()
        if self.wakeups is not None:  # a freed slot matters only while tasks wait for one
            self.wakeups.capacity_wanted = bool(
                plan.waiting or plan.deferred or len(view.pending) >= limit
            )

    def _note_leading(self, view: PoolView, assigned: tuple[Assigned, ...], now: float) -> None:
        """A new leader's first sweep, first work seen and first assignment; the first
        assignment is logged with how long it took after the takeover, and why."""
        if not self.leading:
            return
        if self._first_sweep_at is None:
            self._first_sweep_at = now
        if self._work_seen_at is None and view.pending:
            self._work_seen_at = now
        if not assigned or self.first_assigned_at is not None:
            return
        self.first_assigned_at = now
        took_over = self.leading_since if self.leading_since is not None else now
        # a slow takeover and a quiet queue read alike in the delay: say which it was
        work_at = self._work_seen_at if self._work_seen_at is not None else now
        idle = (
            "(work was waiting)"
            if self._first_sweep_at is None or work_at <= self._first_sweep_at
            else f"(no work to assign before {work_at - took_over:.3f}s)"
        )
        log.log(
            logging.INFO if self._took_over_from is None else logging.WARNING,
            "lead %s: first assignment as leader %.3fs after taking over %s (store clock %.3f)",
            self.name,
            now - took_over,
            idle,
            now,
        )

    async def _look(self, now: float) -> SweepReport | None:
        """The sweep after one that drained the queue: a read of the pool (no writer job, no
        commit) with at most one pending task. With no ready pending task and nothing to
        return, the sweep ends there and reports so; else (``None``) it runs in full.

        Under load most rings come from completions (a slot freed) while ingest is what
        refills the queue: a full sweep then costs a writer transaction (SQLite: a job in
        the writer's batch, where every transition waits behind it) to assign nothing. The
        look is safe to act on: a task that becomes ready after it was read was committed
        after the read began, and that commit rings the lead (or the periodic sweep finds it).
        """
        view = await self.store.pool_view(pending_limit=1)
        plan = self._plan(view, now)
        if view.pending or plan.dead_workers or plan.stuck:
            return None
        self._next_due = view.next_due
        self._see_workers(view.workers, view.at)
        self.sweeps += 1
        self.looks += 1
        self.last_report = SweepReport(
            at=now,
            lead=self.name,
            live_workers=self._live_workers(view, now),
            deferred=plan.deferred,
        )
        return self.last_report

    def _say_unserved(self, unserved: Mapping[str, int]) -> None:
        """Log once when a queue's tasks start waiting for a worker that serves it (and once
        when one does again), not every sweep."""
        for queue in sorted(unserved.keys() - self._unserved):
            log.warning(
                "lead %s: %d task(s) of queue %r wait: no live worker serves it (start one "
                "with --queues %s)",
                self.name,
                unserved[queue],
                queue,
                queue,
            )
        for queue in sorted(self._unserved - unserved.keys()):
            log.info("lead %s: queue %r is served again", self.name, queue)
        self._unserved = set(unserved)

    def _live_workers(self, view: PoolView, now: float) -> tuple[str, ...]:
        """The workers whose beats say they live, by name: what a sweep report lists."""
        return tuple(
            sorted(
                w.name
                for w in view.workers
                if w.role == "worker" and is_alive(w, now, self.dead_after, self.max_skew)
            )
        )

    def _plan(self, view: PoolView, now: float) -> SweepPlan:
        assert self.stuck_cap is not None
        return plan_sweep(
            view,
            now=now,
            dead_after=self.dead_after,
            stuck_after=self.stuck_after,
            stuck_cap=self.stuck_cap,
            capacity=self.capacity,
            max_skew=self.max_skew,
            last_pick=self._last_pick,
        )

    @staticmethod
    def _more_pages(
        plan: SweepPlan, page: PoolView, limit: int, skip: set[str], skip_queues: set[str]
    ) -> tuple[set[str], set[str]]:
        """Rooms and queues to read past next: the page was full and rooms with a full
        keeper, or queues whose workers are full (issue #51), held up tasks while workers
        have room (both empty: the plan stands)."""
        rooms, queues = set(plan.blocked_rooms) - skip, set(plan.full_queues) - skip_queues
        if (rooms or queues) and plan.spare and len(page.pending) >= limit:
            return rooms, queues
        return set(), set()

    async def _read_past_full_rooms(
        self, view: PoolView, plan: SweepPlan, now: float, limit: int
    ) -> tuple[PoolView, SweepPlan]:
        """Read further pages without the rooms whose keeper is full and the queues whose
        workers are (up to ``MAX_PAGES`` reads), re-planning over every page read so far."""
        skip: set[str] = set()
        skip_queues: set[str] = set()
        page_view = view
        for _ in range(1, MAX_PAGES):
            rooms, queues = self._more_pages(plan, page_view, limit, skip, skip_queues)
            if not rooms and not queues:
                break
            skip |= rooms
            skip_queues |= queues
            page_view = await self.store.pool_view(
                pending_limit=limit, skip_rooms=skip, skip_queues=skip_queues
            )
            view = _merge_pages(view, page_view)
            plan = self._plan(view, now)
        return view, plan

    async def _ring_on_stop(self) -> None:
        """A stop ends the wait between sweeps at once (the doorbell is the only wait)."""
        await self._stop.wait()
        self._doorbell.set()

    def _next_window(
        self, view: PoolView, plan: SweepPlan, now: float, limit: int
    ) -> tuple[int, bool]:
        """How many pending tasks the next sweep reads, and whether this sweep read too few.

        About twice what the live workers will take then: the capacity this plan left free
        plus as much as it assigned (what they free until the next sweep, at the pace of this
        one), at least ``MIN_WINDOW``. Under load a sweep assigns a few tasks as slots free,
        and reading the whole backlog's head each time would cost the store's writer far more
        than the assigning. At most twice the workers' total capacity (at least 64) and
        ``pending_limit``: the surplus leaves room for room tasks that must wait; past that the
        sweep pages on (``_read_past_full_rooms``). A full page that left workers with room
        while the window was below that bound says the window was too small: the next sweep
        (rung at once) reads the larger one."""
        total = sum(
            w.capacity
            for w in view.workers
            if w.role == "worker" and is_alive(w, now, self.dead_after, self.max_skew)
        )
        bound = max(1, min(self.pending_limit, max(64, 2 * total)))
        wanted = max(MIN_WINDOW, 2 * (plan.spare + len(plan.assign)))
        widened = limit < bound and plan.spare > 0 and len(view.pending) >= limit
        return min(bound, wanted), widened

    async def _return(self, view: PoolView, plan: SweepPlan, now: float) -> tuple[Returned, ...]:
        since = {a.id: a.since for a in view.assigned}
        returned: list[Returned] = []

        async def dead(worker: str) -> None:
            for id in await self.store.return_assignments(worker):
                # measured now, after the store answered (the sweep's ``now`` is from before
                # its reads, which may have waited), and never negative (see ``plan``)
                at = max(now, self.now())
                age = max(0.0, at - since.get(id, at))
                returned.append(Returned(id, worker, "dead_worker", age))

        async def stuck(r: Returned) -> None:
            if await self.store.unassign(r.id, r.worker):
                returned.append(r)

        async with trio.open_nursery() as nursery:  # concurrent calls share one commit
            for worker in plan.dead_workers:
                nursery.start_soon(dead, worker)
            for r in plan.stuck:
                nursery.start_soon(stuck, r)
        return tuple(sorted(returned, key=lambda r: r.id))

    async def _return_outranked(self, view: PoolView, plan: SweepPlan) -> bool:
        """Give back assignments made ahead of free slots that the first task left waiting
        outranks (a later tenant's turn, a higher priority), so they keep no place ahead of
        it; asked once per task at the head of the waiting (nothing new to ask otherwise)."""
        first, asked = plan.first_waiting, self._asked_outranked
        self._asked_outranked = first
        if first is None or first == asked or not view.assigned:
            return False
        return bool(await self.store.return_outranked(first, limit=plan.waiting))

    async def _beat(self) -> list[WorkerInfo]:
        """Beat (claiming the lead while leading: capacity 1) and return the members.

        This candidate's own beat just committed, so it counts as beaten now, however long the
        store's writer kept it waiting: a busy writer must not make a lone leader's own beat
        look dead ("standing by (leader is nobody)", then "now leading"). A beat landing more
        than ``lease`` after the last one means this candidate was cut off (the
        store was out of reach): it holds back from taking the lead for ``lease``,
        so others cut off with it beat again first, and the one that leads after an outage is
        not replaced tens of milliseconds later."""
        members = await self.store.beat(self.name, "lead", 1 if self.leading else 0)
        now = self.now()
        last, self._own_beat_at = self._own_beat_at, now
        if last is not None and now - last > self.lease and not self.leading:
            self._hold_until = now + self.lease
        return [
            attrs.evolve(m, last_beat=max(m.last_beat, now)) if m.name == self.name else m
            for m in members
        ]

    def judge(self, members: Sequence[WorkerInfo], now: float) -> WorkerInfo | None:
        """Who leads, from the candidates' beats: the live lead candidate (beat within
        ``lease``) that has beaten the longest (earliest ``started_at``, then name).

        Every candidate reads the same rows, so they agree; a newcomer never unseats a live
        leader, and a leader that stopped beating is replaced by the oldest standby. Sets
        ``leading`` (and ``leading_since``, ``takeovers``) for this candidate."""
        leader = elect(members, now, self.lease, self.max_skew)
        if (
            leader is not None
            and leader.name == self.name
            and not self.leading
            and now < self._hold_until
            and any(m.role == "lead" and m.name != self.name for m in members)
        ):
            leader = None  # back from an outage: others get ``lease`` to beat first
        leading = leader is not None and leader.name == self.name
        if leading and not self.leading:
            self.leading_since = now
            self.first_assigned_at = None
            self._work_seen_at = self._first_sweep_at = None
            self.takeovers += 1
            before = self.leader
            self._took_over_from = None
            if before is not None and before.name != self.name:
                self._took_over_from = before.name
                log.warning(
                    "lead %s: now leading (leader %s silent for %.2fs)",
                    self.name,
                    before.name,
                    now - before.last_beat,
                )
            else:
                log.info("lead %s: now leading", self.name)
            self._doorbell.set()
        elif self.leading and not leading:
            log.warning(
                "lead %s: standing by (leader is %s)",
                self.name,
                "nobody" if leader is None else leader.name,
            )
            self.leading_since = None
        self.leading = leading
        self.leader = leader
        self._see_workers(members, now)
        return leader

    def _see_workers(self, members: Sequence[WorkerInfo], now: float) -> None:
        """Note the live workers among ``members``: from every beat read, and from every sweep's
        view (a leader beats only every third of its ``lease``, its sweeps are more recent)."""
        self.workers_seen = tuple(
            sorted(
                m.name
                for m in members
                if m.role == "worker" and is_alive(m, now, self.dead_after, self.max_skew)
            )
        )

    async def _beat_loop(self) -> None:
        """Beat ``BEATS_PER_LEASE`` times a ``lease``; each beat reads every candidate's back
        (a soft-stopped leader removed its beat: a standby leads from its next beat on). A
        standby reads the beats besides only at the moment the leader's last beat turns a
        ``lease`` old, so a crashed leader is replaced then; a live leader has beaten again
        meanwhile and the standby's own beats keep finding it (no polling in between)."""
        period = self.lease / BEATS_PER_LEASE
        next_beat = -math.inf
        while True:
            now = trio.current_time()
            if now >= next_beat:
                next_beat = now + on_grid(period)
                members = await self._beat()
            else:  # the leader's lease ran out, or this candidate's hold did: judge again
                members = list(await self.store.workers())
            leader = self.judge(members, self.now())
            now = trio.current_time()
            wake = next_beat
            if self._hold_until > self.now():  # judge again as the hold ends
                wake = min(wake, now + (self._hold_until - self.now()) + _JUST_AFTER)
            if leader is not None and not self.leading:
                silent = leader.last_beat + self.lease - self.now()  # store clock
                wake = min(wake, now + max(silent, 0.0) + _JUST_AFTER)
            await trio.sleep_until(wake)

    def _found_pool_idle(self) -> bool:
        """Did the last sweep find nothing to assign, return, hold back or leave waiting?

        After such a sweep on the clock (not rung), the next ring is the first news of work (a
        message after a quiet spell) and is swept at once: ``min_sweep_gap`` gathers the rings
        of a busy pool, and the periodic sweep that ran just before a message came must not
        hold it up. Rung sweeps keep the gap even when they found nothing, so a storm of rings
        with nothing behind them still costs one sweep per gap."""
        report = self.last_report
        return report is not None and not (
            report.assigned or report.returned or report.deferred or report.waiting
        )

    def _has_room(self) -> bool:
        """Did the last sweep assign every ready task and leave the workers room for more?

        Then the next ring (new pending tasks) is swept at once, whatever the sweep before it
        found: ``min_sweep_gap`` gathers the rings of a pool whose work outruns its workers,
        and a pool with room has nothing to gather for. Without the gap such sweeps are still
        bounded: the rings that come then are commits that made tasks pending (a freed slot
        rings only while tasks wait for one, ``PoolWakeups.capacity_wanted``), and each sweep
        reads everything rung for so far."""
        return self._drained and self._spare > 0

    def _idle_wait(self, quiet: bool) -> float:
        """Seconds until the next sweep unless rung: the interval, doubling while sweeps on the
        clock keep finding the pool idle (``_idle``), or less when a task waiting out its retry
        backoff falls due sooner (store clock)."""
        if quiet:
            wait = on_grid(self._idle.next_delay())
        else:
            self._idle.reset()
            wait = self.sweep_interval
        if self._next_due is None:
            return wait
        return max(0.0, min(wait, self._next_due - self.now()))

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Stand as a lead candidate until stopped (ready after the first beat, and the first
        sweep if this candidate leads): beat every third of the ``lease``; while the leader (see
        ``judge``), sweep every ``sweep_interval`` seconds, or sooner when rung.

        On a soft stop the lead removes its beat, so a standby takes over (or workers go
        leaderless) at its next beat instead of after a ``lease``.
        """
        self._stop = StopSignal()  # a new run (a supervisor restart) starts unstopped
        self._beat_at = -math.inf
        self._beats_in_loop = True
        self.leading = False
        self.leading_since = None
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(
                    self._stop.forward_supervisor_stop, name=f"pool-lead:{self.name}::stop"
                )
                nursery.start_soon(self._ring_on_stop, name=f"pool-lead:{self.name}::stop-ring")
                self.judge(await self._beat(), self.now())
                nursery.start_soon(self._beat_loop, name=f"pool-lead:{self.name}::beat")
                started = trio.current_time()
                quiet = False  # did the last sweep run on the clock and find the pool idle?
                if self.leading:
                    await self._timed_sweep()
                    quiet = self._found_pool_idle()
                task_status.started()
                while not self._stop.is_set():
                    # a standby sleeps until rung: ``judge`` rings as it takes the lead
                    wait = self._idle_wait(quiet) if self.leading else math.inf
                    rung = await self._doorbell.wait(wait)
                    if not quiet and not self._has_room():
                        # rung again soon after a sweep began: let more rings gather into one
                        with trio.move_on_at(started + self.min_sweep_gap):
                            await self._stop.wait()
                    if self._stop.is_set():
                        break
                    if not self.leading:
                        continue
                    started = trio.current_time()
                    await self._timed_sweep()
                    quiet = not rung and self._found_pool_idle()
                nursery.cancel_scope.cancel()
        finally:
            self._beats_in_loop = False
            self.leading = False
            self.leading_since = None
        await self.store.remove_worker(self.name)


def _beyond(assigned: Iterable[Assigned], handed: Counter[str]) -> list[str]:
    """The workers assigned more than the sweep claimed for them: they claim the rest."""
    left = Counter(a.worker for a in assigned)
    left.subtract(handed)
    return [worker for worker, n in left.items() if n > 0]


def elect(
    members: Iterable[WorkerInfo],
    now: float,
    lead_dead_after: float,
    max_skew: float = DEFAULT_MAX_SKEW,
) -> WorkerInfo | None:
    """The pool's leader among ``members``: the live lead candidate that claims the lead
    (it beats with capacity 1 while leading) with the earliest ``started_at`` (then name);
    with no live claimant, the live candidate with the earliest ``started_at``; None when no
    candidate lives (workers go leaderless). A claimant keeps the lead against an older
    candidate that comes back (after an outage): leadership does not swap back and forth."""
    live = [m for m in members if m.role == "lead" and is_alive(m, now, lead_dead_after, max_skew)]
    return min(live, key=lambda m: (m.capacity < 1, m.started_at, m.name), default=None)
