"""A pool worker: claims tasks, runs each through its agent session, stores the outcome.

Every lease in hand is renewed or its run cancelled; every run ends stored, failed or released,
never lost. See docs/guide/design.md, "Workers".
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Awaitable, Callable
from typing import Final

import attrs
import trio

from ..._backoff import Backoff
from ..._plumbing._grid import on_grid
from ..._session import Session, open_session
from ..._session_types import HandlerCancelled, HandlerDropped, QueueFull
from ..custody._conversation import DEFAULT_HISTORY_TURNS, check_window
from ..custody._roles import WorkerStore
from ..custody._rules import DEFAULT_QUEUES, Claim, StaleLease, Task, check_worker, queues_of
from ..custody._versions import check_version
from ..runs._bounds import Bounds, within_store
from ..runs._claimed import RELEASE_TIMEOUT, ClaimedRun, NotRun, Runner
from ..runs._completions import CompletionBatcher
from ..runs._current import entering
from ..runs._host import RunCounts, RunHost
from ..runs._journal import DEFAULT_PARK_AFTER, check_park_after
from ..runs._outage import STORE_UNREACHABLE
from ..runs._reply import Reply, reply_of
from ..runs._retry import RetryBackoff
from ..runs._timings import Timings
from ._agent import TASK_EVENT, AgentFactory, agent_run_timeout, agent_version, install_agent
from ._hands import WorkerHand
from ._idle import IDLE_MAXIMUM, idle_backoff
from ._liveness import DEFAULT_MAX_SKEW, check_seconds, live_lead, return_dead_assignments
from ._pace import Pace
from ._publish import OnProgress, ProgressPublisher
from ._quarantine import Quarantine, quarantined
from ._stall import Notify, StallWatcher
from ._stop import StopSignal, cut_after_grace
from ._wakeup import PoolWakeups, Wakeup

log = logging.getLogger("tether.bridge.pool.worker")
NOT_RUN: Final = (QueueFull, HandlerDropped, HandlerCancelled)
"""What ``session.call`` raises when the session refused or cancelled the run: not a failure
of the task, so its claim is released without burning an attempt."""
_JUST_AFTER: Final = 0.001
"""Seconds past a retry's due time to look (the store compares ``not_before <= now``)."""


@attrs.define(eq=False)
class PoolWorker:
    """One worker of the pool as a service: ``await nursery.start(worker.run)``."""

    store: WorkerStore
    name: str
    factory: AgentFactory
    concurrency: int = 4
    capacity: int | None = None
    """How many tasks (running + assigned and waiting) the worker asks the lead for. A number:
    that, always. ``None`` (default): adaptive, see ``asked_capacity``: ``4 * concurrency``
    while runs are quick, down to ``concurrency + 1`` as they get slow."""
    heartbeat_interval: float | None = None
    """Seconds between beats and lease renewals (default: a third of the lease, at most 2 s)."""
    poll_interval: float = 0.2
    """Seconds to wait after finding nothing to claim (the fallback when no wake-up comes);
    doubling while claims keep finding nothing, up to ``idle_maximum``."""
    idle_maximum: float = IDLE_MAXIMUM
    """The longest wait between claims that find nothing: how late news that rings no doorbell
    is seen. A process's workers after its first wait longer (``pool._idle``)."""
    wakeups: PoolWakeups | None = None
    """The pool's switchboard: rung when work is assigned to this worker; the worker rings it
    when it frees a slot (so the lead refills it). ``None``: polling only."""
    lead_dead_after: float = 10.0
    """The lead counts as dead (go leaderless) after this long without a beat; so does, while
    leaderless, another worker holding assignments (they go back to pending)."""
    max_skew: float = DEFAULT_MAX_SKEW
    stop_grace: float = 4.0
    """Seconds the runs in hand get after a soft stop before they are cancelled and released.
    Keep it under the supervisor child's ``shutdown_grace`` (5 s by default); if the supervisor
    cancels first, the claims are released all the same."""
    clock: Callable[[], float] | None = None
    after_complete: Callable[[Task], Awaitable[None]] | None = None
    """Called after a task's result is committed (the file exchange archives its files): it
    survives a process crash; under ``synchronous=NORMAL`` a power loss before the store's next
    durable promise (delivery's read of the results) may still lose it, and the task runs again."""
    on_start: Callable[[], Awaitable[None]] | None = None
    """Called as the worker starts, before its first claim: what a killed process left after
    a stored result and before ``after_complete`` is settled then (the file exchange archives
    the files of tasks that are done)."""
    on_stall: Notify | None = None
    """If given, the worker watches its own claims and calls ``on_stall(task_id, age)`` once
    per task older than ``stall_after`` (see ``StallWatcher``; a raise is retried)."""
    stall_after: float = 60.0
    retry_backoff: RetryBackoff = attrs.field(factory=RetryBackoff)
    """The delay before a failed task's next attempt (``RetryBackoff(0, 0)``: at once)."""
    rng: random.Random = attrs.field(factory=random.Random)
    """Draws the backoff's jitter (tests inject a seeded one)."""
    run_timeout: float | None = 600.0
    """Seconds one run may take before it is cancelled (a failed attempt, "timed out after N
    s"); None: no limit. Ten minutes suits LLM agents (a long generation with tool calls); an
    agent factory overrides it with its own ``run_timeout`` attribute."""
    let_go: int = attrs.field(init=False, default=0)
    """Leases no longer renewed because their run outlived its timeout plus ``stop_grace``."""
    on_progress: OnProgress | None = None
    """If given, each run gets a progress reporter and its updates are sent through this
    (coalesced, rate-bounded, best effort: see ``_publish``)."""
    progress_interval: float = 0.5
    """Seconds between two progress updates of one run (and before its first)."""
    quarantine: Quarantine | None = None
    """Its process's quarantine (shared by its workers): suspects are claimed beside ordinary
    work and run in quarantine children. ``None`` (an agent that cannot start in a child): a
    suspect runs alone in the process (see ``custody._crashes``)."""
    timings: Timings | None = None
    """If given, the worker records queue waits, run times and stored replies in it."""
    supersede_grace: float | None = None
    """Seconds a superseded run may still take before it is cancelled (its reply is discarded
    either way: the store already holds the task's no-send result). Default ``stop_grace``,
    the soft-stop grace; 0 cancels at once."""
    history_turns: int = DEFAULT_HISTORY_TURNS
    """Turns of its room's conversation a run reads at most (``conversation_of``)."""
    bounds: Bounds | None = None
    """The size limits of its runs' step results, room states and replies (``--max-step-bytes``,
    ``--max-state-bytes``, ``--max-reply-bytes``); None: the defaults, a reply at most the
    store's body limit. A reply limit over the store's is refused."""
    park_after: float = DEFAULT_PARK_AFTER
    """Seconds: a durable sleep (``run.sleep``) at most this long sleeps in place; a longer
    one parks the task in ``waiting`` and frees the slot (``--park-after``)."""
    on_asked: Callable[[], None] | None = None
    """Called after a run's question was recorded with its park (the bridge posts it)."""
    agent_version: str | None = None
    """The version its runs' step records keep (issue #53, ``--agent-version``); None: the
    agent's own (``pool._agent.agent_version``: its package's version, or a hash of its
    module)."""
    queues: tuple[str, ...] = attrs.field(default=DEFAULT_QUEUES, converter=queues_of)
    """The queues whose tasks it takes (issue #51): the lead assigns it only those, and it
    claims only those when leaderless. One agent serves them all (a process runs one set of
    workers per agent)."""
    leaderless: bool = attrs.field(init=False, default=False)
    _active: dict[ClaimedRun, None] = attrs.field(init=False, factory=dict)
    """The runs in hand, keyed by entry: the same task id may come back as a new attempt while
    its stale run is still unwinding."""
    _stop: StopSignal = attrs.field(init=False, factory=StopSignal)
    _interval: float = attrs.field(init=False, default=0.0)
    _stopping: bool = attrs.field(init=False, default=False)
    _doorbell: Wakeup = attrs.field(init=False, factory=Wakeup)
    _run_begun: Wakeup = attrs.field(init=False, factory=Wakeup)
    """Rung as a run begins: the progress publisher sleeps on it while no run is going."""
    _idle: Backoff = attrs.field(init=False)
    """The wait after a claim that found nothing: ``poll_interval`` doubling (``_idle``)."""
    _pace: Pace = attrs.field(init=False, factory=Pace)
    _timeout: float | None = attrs.field(init=False, default=None)
    _publisher: ProgressPublisher | None = attrs.field(init=False, default=None)
    _host: RunHost = attrs.field(init=False)
    """What the worker lends its runs (``runs._host``): the store, the outcome counts."""

    def __attrs_post_init__(self) -> None:
        check_worker(self.name)
        check_park_after(self.park_after)
        if not callable(self.factory):
            raise TypeError(f"factory must be callable, got {self.factory!r}")
        c = self.concurrency
        if isinstance(c, bool) or not isinstance(c, int) or c < 1:
            raise ValueError(f"concurrency must be an int >= 1, got {c!r}")
        if self.capacity is not None and (
            isinstance(self.capacity, bool)
            or not isinstance(self.capacity, int)
            or self.capacity < c
        ):
            raise ValueError(f"capacity must be an int >= concurrency ({c}), got {self.capacity!r}")
        check_seconds("poll_interval", self.poll_interval)
        check_seconds("idle_maximum", self.idle_maximum)
        self._idle = idle_backoff(self.poll_interval, self.idle_maximum)
        check_window(self.history_turns, "history_turns")
        if self.wakeups is not None:
            self._doorbell = self.wakeups.worker(self.name)
        check_seconds("stall_after", self.stall_after)
        check_seconds("progress_interval", self.progress_interval)
        check_seconds("lead_dead_after", self.lead_dead_after)
        check_seconds("max_skew", self.max_skew, allow_zero=True)
        check_seconds("stop_grace", self.stop_grace, allow_zero=True)
        self._timeout = agent_run_timeout(self.factory, self.run_timeout)
        if self.agent_version is None:
            self.agent_version = agent_version(self.factory)
        else:
            check_version(self.agent_version)
        if self.supersede_grace is not None:
            check_seconds("supersede_grace", self.supersede_grace, allow_zero=True)
        if self.heartbeat_interval is None:
            self._interval = min(2.0, self.store.lease_s / 3)
        else:
            self._interval = check_seconds("heartbeat_interval", self.heartbeat_interval)
            if self._interval >= self.store.lease_s:
                raise ValueError(
                    f"heartbeat_interval ({self._interval!r}) must be shorter than the store's "
                    f"lease ({self.store.lease_s!r}), or leases expire between renewals"
                )

        self._host = self._lent(RunHost(self.store, self.name, CompletionBatcher(self.store)))

    def _lent(self, host: RunHost) -> RunHost:
        """``host`` (its completions, counts and memory kept) with the worker's settings and
        hooks as they are now: read again as each ``run`` starts."""
        return attrs.evolve(
            host,
            store_retry=self._interval,
            park_after=self.park_after,
            agent_version=self.agent_version,
            history_turns=self.history_turns,
            bounds=within_store(self.bounds, self.store),
            stop_grace=self.stop_grace,
            supersede_grace=self.supersede_grace,
            retry_backoff=self.retry_backoff,
            rng=self.rng,
            timings=self.timings,
            rings=self.wakeups,
            after_complete=self.after_complete,
            on_asked=self.on_asked,
            on_answered=self._timed_run,
            clock=self.clock,
        )

    @property
    def counts(self) -> RunCounts:
        """How this worker's runs ended: completed, failed, released, lost (fenced out),
        superseded, parked, state conflicts, quarantine deaths."""
        return self._host.counts

    @property
    def completions(self) -> CompletionBatcher:
        """Stores the replies of runs that answer together with one ``complete_many``."""
        return self._host.completions

    def retry_delay(self, exc: BaseException, attempt: int) -> float:
        """Seconds before the next attempt after ``exc`` failed attempt ``attempt``."""
        return self._host.retry_delay(exc, attempt)

    @property
    def asked_capacity(self) -> int:
        """What the worker asks the lead for in its beats: ``capacity`` if set, else what the
        pace of its runs calls for (``pool._pace``)."""
        return self._pace.capacity(self.concurrency) if self.capacity is None else self.capacity

    def _timed_run(self, seconds: float) -> None:
        """One run's duration (claim to answer): its timing, and the worker's pace."""
        if self.timings is not None:
            self.timings.ran(seconds)
        self._pace.ran(seconds)

    @property
    def in_hand(self) -> list[Claim]:
        """The claims this worker is working on now."""
        return [a.claim for a in self._active if not a.lost]

    def now(self) -> float:
        return self._host.now()

    @property
    def _label(self) -> str:
        return f"pool-worker:{self.name}"

    def request_stop(self) -> None:
        """Soft stop: claim nothing more; finish or give back what is in hand."""
        self._stop.set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        self._host = self._lent(self._host)
        self._stop = StopSignal()  # a new run (a supervisor restart) starts unstopped
        self._stopping = False
        async with open_session(f"worker-{self.name}") as session:
            install_agent(session, self.factory)
            session.wrap_handlers(TASK_EVENT, entering)
            await self._recover_claims()  # before the first beat (custody._crashes)
            if self.on_start is not None:
                await self.on_start()
            await self._beat()
            try:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(
                        self._stop.forward_supervisor_stop, name=f"{self._label}::stop"
                    )
                    nursery.start_soon(self._heartbeat, name=f"{self._label}::heartbeat")
                    await nursery.start(self.completions.run, name=f"{self._label}::completions")
                    if self.on_stall is not None:
                        watcher = StallWatcher(
                            self.store,
                            stall_after=self.stall_after,
                            notify=self.on_stall,
                            interval=self._interval,
                            clock=self.clock,
                            worker=self.name,
                        )
                        nursery.start_soon(watcher.run, name=f"{self._label}::stall")
                    if self.on_progress is not None:
                        if self._publisher is None:  # one per worker: it remembers a refusal
                            self._publisher = ProgressPublisher(
                                self.name,
                                self.on_progress,
                                self.progress_interval,
                                self.runs_in_hand,
                                self._run_begun,
                            )
                        nursery.start_soon(self._publisher.run, name=f"{self._label}::progress")
                    async with trio.open_nursery() as work:
                        task_status.started()
                        await self._claim_until_stopped(session, work)
                        # tell the lead at once: capacity 0, and the waiting assignments back
                        self._stopping = True
                        await self._beat()
                        await self._give_back_assignments()
                        # the runs in hand get stop_grace; then they are cancelled and released
                        nursery.start_soon(
                            cut_after_grace,
                            self.name,
                            self.stop_grace,
                            self.now,
                            lambda: self.in_hand,
                            work,
                        )
                    nursery.cancel_scope.cancel()
            finally:
                with trio.CancelScope(shield=True), trio.move_on_after(RELEASE_TIMEOUT):
                    await self._leave()

    async def _recover_claims(self) -> None:
        """Claims under this name now are an earlier process's, which died with them: crash
        expiries (no attempt burnt; the tasks become suspects, but for permit waiters)."""
        for e in await self.store.recover_claims(self.name):
            log.warning("worker %s: task %s: %s", self.name, e.id, e.reason)

    async def _leave(self) -> None:
        """Give back unclaimed assignments and forget the beat (the lead need not wait out
        ``dead_after``). Best effort: a closed store leaves that to the lead."""
        if self.wakeups is not None:
            self.wakeups.set_leaderless(self.name, False)
        try:
            await self._give_back_assignments()
            await self.store.remove_worker(self.name)
        except (trio.ClosedResourceError, OSError) as exc:
            log.warning("worker %s: could not leave the pool cleanly: %r", self.name, exc)

    async def _give_back_assignments(self) -> None:
        returned = await self.store.return_assignments(self.name)
        if returned:
            log.info("worker %s: gave back %d assignment(s)", self.name, len(returned))

    async def _claim_until_stopped(self, session: Session, work: trio.Nursery) -> None:
        slots = trio.Semaphore(self.concurrency)
        if self.wakeups is None:
            await self._claim_in(session, work, slots)
            return
        hand = WorkerHand(
            slots,
            lambda claim: self._start_run(session, work, claim, slots),
            quarantines=self.quarantine is not None,
        )
        self.wakeups.hands.offer(self.name, hand)  # the lead claims for it in its sweeps
        try:
            await self._claim_in(session, work, slots)
        finally:
            self.wakeups.hands.withdraw(self.name)
            with trio.CancelScope(shield=True):  # a sweep in flight hands its claims here
                await hand.settled()

    def _start_run(
        self, session: Session, work: trio.Nursery, claim: Claim, slots: trio.Semaphore
    ) -> None:
        """Run ``claim`` in ``work``, on one of ``slots`` (freed as the run ends)."""
        work.start_soon(
            self._run_claim, session, claim, slots, name=f"{self._label}::task:{claim.task.id}"
        )

    async def _claim_in(self, session: Session, work: trio.Nursery, slots: trio.Semaphore) -> None:
        with trio.CancelScope() as claiming:

            async def cancel_on_stop() -> None:
                await self._stop.wait()
                claiming.cancel()

            work.start_soon(cancel_on_stop, name=f"{self._label}::stop")
            while True:
                await slots.acquire()
                wanted = 1
                while slots.value > 0:  # every free slot, in one claim_many
                    slots.acquire_nowait()
                    wanted += 1
                self._doorbell.clear()  # what it announced is in the store now: the claim sees it
                q = self.quarantine
                places = None if q is None else q.reserve(wanted)
                try:
                    claims = await self.store.claim_many(
                        self.name,
                        wanted,
                        leaderless=self.leaderless,
                        quarantine=places,
                        queues=self.queues,
                    )
                except BaseException as exc:
                    for _ in range(wanted):
                        slots.release()
                    if q is not None and places:
                        q.give_back(places)
                    if not isinstance(exc, STORE_UNREACHABLE):
                        raise
                    # the store waits out an outage; this call met its start: claim again
                    log.debug("worker %s: a claim missed the store: %s", self.name, exc)
                    await trio.sleep(self.poll_interval)
                    continue
                if q is not None and places:
                    q.give_back(places - sum(c.suspect for c in claims))
                for _ in range(wanted - len(claims)):
                    slots.release()
                for claim in claims:
                    self._start_run(session, work, claim, slots)
                if claims:
                    self._idle.reset()
                # the store had no more: wait for news (then look again at the busy pace)
                if len(claims) < wanted and await self._doorbell.wait(self._idle_wait()):
                    self._idle.reset()

    def _idle_wait(self) -> float:
        """Seconds until the next claim unless rung: the backed-off poll, or less when a task
        this worker failed falls due for its next attempt sooner."""
        wait = on_grid(self._idle.next_delay())
        now = trio.current_time()
        if self._host.retry_due <= now:
            self._host.retry_due = math.inf
            return wait
        return min(wait, self._host.retry_due - now + _JUST_AFTER)

    async def _run_claim(self, session: Session, claim: Claim, slots: trio.Semaphore) -> None:
        freed = False

        def free_slot() -> None:
            nonlocal freed
            if not freed:
                freed = True
                slots.release()

        try:
            if not await self._run_entry(session, claim, free_slot):
                await trio.sleep(self.poll_interval)  # the agent refused: don't hammer it
        finally:
            if claim.suspect and self.quarantine is not None:
                self.quarantine.give_back(1)  # its quarantine place, however the run went
                self._doorbell.set()  # suspects are claimed, never assigned: claim again now
            free_slot()
            if self.wakeups is not None:
                self.wakeups.capacity_freed()  # the outcome is stored: the lead refills

    async def _run_entry(
        self, session: Session, claim: Claim, answered: Callable[[], None] = lambda: None
    ) -> bool:
        """Hand ``claim`` to its run (``runs.ClaimedRun``), which stores its outcome;
        ``False`` if the session did not run it."""
        claimed = ClaimedRun(claim, self._host, self._timeout)
        id = claim.task.id
        for old in [a for a in self._active if a.claim.task.id == id]:
            # the store handed the task out again, so every older attempt here is fenced out
            old.lose(StaleLease(f"task {id!r} was claimed again as attempt {claim.attempt}"))
        self._active[claimed] = None
        self._run_begun.set()
        try:
            return await claimed.run(self._runner(session, claim), answered)
        finally:
            del self._active[claimed]

    def _runner(self, session: Session, claim: Claim) -> Runner:
        """How ``claim``'s handler is called: in a quarantine child for a suspect (if this
        process quarantines), else in the worker's session."""
        if claim.suspect and self.quarantine is not None:
            return quarantined(self.quarantine, mirror_progress=self.on_progress is not None)

        async def in_session(claimed: ClaimedRun) -> Reply:
            try:
                results = await session.call(TASK_EVENT, claimed.current())
            except NOT_RUN as exc:
                raise NotRun(str(exc)) from exc
            return reply_of(results, claimed.task.id)

        return in_session

    def runs_in_hand(self) -> list[ClaimedRun]:
        """The runs in hand (the progress publisher reads them)."""
        return list(self._active)

    async def _heartbeat(self) -> None:
        while True:
            await trio.sleep(on_grid(self._interval))  # with the process's other beats
            async with trio.open_nursery() as nursery:  # one writer batch
                nursery.start_soon(self._skipped_in_an_outage, self._beat)
                for entry in list(self._active):
                    nursery.start_soon(self._skipped_in_an_outage, self._renew, entry)

    async def _skipped_in_an_outage(
        self, beat: Callable[..., Awaitable[None]], *args: object
    ) -> None:
        """A beat or renewal that met an outage is skipped: the next comes an interval later,
        and the store holds no lease against its holder meanwhile (custody._outage)."""
        try:
            await beat(*args)
        except STORE_UNREACHABLE as exc:
            log.debug("worker %s: a beat missed the store: %s", self.name, exc)

    async def _beat(self) -> None:
        capacity = 0 if self._stopping else self.asked_capacity
        members = await self.store.beat(self.name, "worker", capacity, queues=self.queues)
        leaderless = live_lead(members, self.now(), self.lead_dead_after, self.max_skew) is None
        if leaderless != self.leaderless:
            log.info(
                "worker %s: %s",
                self.name,
                "no live lead; claiming pending tasks directly" if leaderless else "lead is back",
            )
        self.leaderless = leaderless
        if self.wakeups is not None:
            self.wakeups.set_leaderless(self.name, leaderless and not self._stopping)
        if leaderless and not self._stopping:
            await return_dead_assignments(
                self.store, self.name, members, self.now(), self.lead_dead_after, self.max_skew
            )

    async def _renew(self, entry: ClaimedRun) -> None:
        if entry.lost:
            return
        if entry.let_go(self.stop_grace):
            self.let_go += 1
            return
        if entry.finishing:
            return
        try:
            entry.claim = await self.store.renew(entry.claim)
        except StaleLease as exc:
            if not entry.finishing:  # else the run stored its outcome while this was queued
                entry.lose(exc)
