"""A pool worker: claims tasks, runs each through its agent session, stores the outcome.

Every lease in hand is renewed or its run cancelled; every run ends stored, failed or released,
never lost. See docs/guide/design.md, "Workers".
"""

from __future__ import annotations

import logging
import math
import random
import time
import traceback
from collections.abc import Awaitable, Callable, Sequence
from typing import Final

import attrs
import trio

from ..._backoff import Backoff
from ..._plumbing._grid import on_grid
from ..._plumbing._tracing import enabled as tracing_enabled
from ..._plumbing._tracing import set_attributes
from ..._plumbing._when import clock_time, duration
from ..._session import Session, open_session
from ..._session_types import HandlerCancelled, HandlerDropped, QueueFull
from ..custody._conversation import (
    DEFAULT_HISTORY_TURNS,
    Conversation,
    StateConflict,
    check_window,
)
from ..custody._limits import Granted, NoPermit
from ..custody._records import StepRecord, WorkerInfo
from ..custody._roles import WorkerStore
from ..custody._rooms import Superseded
from ..custody._rules import Claim, CustodyState, InvalidTask, StaleLease, Task, check_worker
from . import _limits
from ._agent import TASK_EVENT, AgentFactory, Reply, install_agent, reply_of
from ._ask import ParkedAsk
from ._completions import CompletionBatcher
from ._conversation import conversing
from ._idle import IDLE_MAXIMUM, idle_backoff
from ._liveness import DEFAULT_MAX_SKEW, check_seconds, is_alive, live_lead
from ._outage import STORE_UNREACHABLE, until_stored
from ._progress import Progress, ProgressUpdate, reporting
from ._quarantine import ChildSteps, Quarantine, QuarantineDeath, QuarantineStartError
from ._quarantine_limits import ChildLimits
from ._retry import Permanent, Retry, RetryBackoff
from ._run import DEFAULT_PARK_AFTER, Run, check_park_after, running
from ._stall import Notify, StallWatcher
from ._stop import StopSignal
from ._timings import Timings
from ._tracing import queue_waited, run_span, traced_handler
from ._wakeup import PoolWakeups, Wakeup

log = logging.getLogger("tether.bridge.pool.worker")
SHOWN_IDS: Final = 5
"""Task ids a log line names; the rest are counted."""


def _runs(count: int) -> str:
    return "1 run" if count == 1 else f"{count} runs"


def _ids(claims: Sequence[Claim]) -> str:
    shown = ", ".join(c.task.id for c in claims[:SHOWN_IDS])
    more = len(claims) - SHOWN_IDS
    return shown + (f" and {more} more" if more > 0 else "")


RELEASE_TIMEOUT: Final = 5.0
"""Seconds a worker spends giving its claims back when it is cancelled (shielded)."""

PREFETCH_S: Final = 0.1
"""Seconds of work an adaptive worker keeps assigned and waiting (``asked_capacity``)."""

RUN_AVERAGE_WEIGHT: Final = 0.2
"""How much one run moves the average run time (an exponential moving average)."""

PROGRESS_SEND_TIMEOUT: Final = 5.0
"""Seconds one progress update may take to send before it is dropped."""

OnProgress = Callable[[ProgressUpdate], Awaitable[bool]]
"""Sends one progress update; False when the receiver cannot take any (stop sending)."""

NOT_RUN: Final = (QueueFull, HandlerDropped, HandlerCancelled)
"""What ``session.call`` raises when the session refused or cancelled the run: not a failure
of the task, so its claim is released without burning an attempt."""


TRACED_TASKS: Final = 10_000


def failure_reason(exc: BaseException) -> str:
    """The last line of ``exc``'s traceback (``"ValueError: boom"``): what a dead task shows.

    Lone surrogates are escaped (``\\ud800``) so the store can always record it."""
    line = traceback.format_exception_only(type(exc), exc)[-1].strip() or type(exc).__name__
    return line.encode("utf-8", "backslashreplace").decode("utf-8")


class RunTimedOut(Exception):
    """A run took longer than its timeout and was cancelled (a failed attempt)."""


def agent_run_timeout(factory: AgentFactory, default: float | None) -> float | None:
    """The run timeout for ``factory``'s runs: its ``run_timeout`` attribute if it has one
    (seconds > 0, or None for no limit), else ``default``."""
    value = getattr(factory, "run_timeout", default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
        raise ValueError(f"run_timeout must be None or seconds > 0, got {value!r}")
    return float(value)


_JUST_AFTER = 0.001
"""Seconds past a retry's due time to look (the store compares ``not_before <= now``)."""


@attrs.define(eq=False)
class _Active:
    claim: Claim
    deadline: float = math.inf
    """When the run times out (Trio clock); past it plus ``stop_grace`` the lease is let go."""
    scope: trio.CancelScope = attrs.field(factory=trio.CancelScope)
    lost: bool = False
    finishing: bool = False
    """The run is storing its outcome: a renew racing with it must not count as lost."""
    settled: bool = False
    started: float = 0.0
    """``trio.current_time()`` when the run began (its progress says how long it has gone)."""
    progress: Progress | None = None
    sent: int = -1
    """The reporter's version last sent (-1: nothing yet, not even "working")."""
    sending: bool = False
    outcome: str = "cancelled"
    """How the run ended, for its span: completed, failed, released, lost, superseded."""
    conversation: Conversation | None = None
    """What the run read of its room (None: the task has no room)."""
    shown: str = ""
    """The partial reply last recorded as shown (``record_shown``)."""
    reruns: int = 0
    """Runs again after a state conflict (``StateConflict``: not failed attempts)."""
    run: Run | None = None
    """The run's durable handle (``run_of``): its steps, and whether it parked itself."""


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
    (coalesced, rate-bounded, best effort: see ``_progress``)."""
    progress_interval: float = 0.5
    """Seconds between two progress updates of one run (and before its first)."""
    quarantine: Quarantine | None = None
    """Its process's quarantine (shared by its workers): suspects are claimed beside ordinary
    work and run in quarantine children. ``None`` (an agent that cannot start in a child): a
    suspect runs alone in the process (see ``custody._crashes``)."""
    quarantine_deaths: int = attrs.field(init=False, default=0)
    """Deaths of this worker's quarantine children it recorded against their tasks."""
    timings: Timings | None = None
    """If given, the worker records queue waits, run times and stored replies in it."""
    completed: int = attrs.field(init=False, default=0)
    failed: int = attrs.field(init=False, default=0)
    released: int = attrs.field(init=False, default=0)
    lost: int = attrs.field(init=False, default=0)
    """Claims the worker lost to fencing (its lease expired and someone else holds the task)."""
    superseded: int = attrs.field(init=False, default=0)
    """Runs stopped because a newer message of their room superseded the task (``replace``)."""
    supersede_grace: float | None = None
    """Seconds a superseded run may still take before it is cancelled (its reply is discarded
    either way: the store already holds the task's no-send result). Default ``stop_grace``,
    the soft-stop grace; 0 cancels at once."""
    history_turns: int = DEFAULT_HISTORY_TURNS
    """Turns of its room's conversation a run reads at most (``conversation_of``)."""
    state_conflicts: int = attrs.field(init=False, default=0)
    """Runs run again because another run of their room stored a state first."""
    park_after: float = DEFAULT_PARK_AFTER
    """Seconds: a durable sleep (``run.sleep``) at most this long sleeps in place; a longer
    one parks the task in ``waiting`` and frees the slot (``--park-after``)."""
    on_asked: Callable[[], None] | None = None
    """Called after a run's question was recorded with its park (the bridge posts it)."""
    parked: int = attrs.field(init=False, default=0)
    """Runs that parked themselves (their tasks went ``waiting``)."""
    leaderless: bool = attrs.field(init=False, default=False)
    _active: dict[_Active, None] = attrs.field(init=False, factory=dict)
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
    _retry_due: float = attrs.field(init=False, default=math.inf)
    """When (Trio's clock) the earliest task this worker failed falls due again."""
    _run_seconds: float | None = attrs.field(init=False, default=None)
    _timeout: float | None = attrs.field(init=False, default=None)
    _progress_refused: bool = attrs.field(init=False, default=False)
    _progress_warned: bool = attrs.field(init=False, default=False)
    completions: CompletionBatcher = attrs.field(init=False)
    _traced: dict[str, None] = attrs.field(factory=dict, init=False)
    """Tasks whose agent traceback this worker logged (oldest first, ``TRACED_TASKS`` at
    most): a task failing again logs one line, its traceback at DEBUG."""
    """Stores the replies of runs that answer together with one ``complete_many``."""

    def __attrs_post_init__(self) -> None:
        check_worker(self.name)
        check_park_after(self.park_after)
        self.completions = CompletionBatcher(self.store)
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

    @property
    def asked_capacity(self) -> int:
        """What the worker asks the lead for in its beats: ``capacity`` if set, else enough
        waiting assignments to cover ``PREFETCH_S`` of work at the pace its runs have taken
        (an average of recent runs), between 1 and ``3 * concurrency`` of them.

        Quick runs (a thousand a second) keep ``4 * concurrency``: the next tasks are assigned
        before a run ends, and cover the lead's gap between sweeps. Slow runs (an LLM call of
        seconds) ask for ``concurrency + 1``: a task never waits long behind a busy worker
        while another worker idles, and never for so long that the lead takes it back as
        stuck. Before any run, the quick case is assumed."""
        if self.capacity is not None:
            return self.capacity
        c = self.concurrency
        if self._run_seconds is None:
            return 4 * c
        waiting = math.ceil(c * PREFETCH_S / max(self._run_seconds, 1e-6))
        return c + max(1, min(3 * c, waiting))

    def _timed_run(self, seconds: float) -> None:
        """Fold one run's duration (claim to answer) into the average ``asked_capacity`` uses."""
        if self.timings is not None:
            self.timings.ran(seconds)
        if self._run_seconds is None:
            self._run_seconds = seconds
        else:
            self._run_seconds += RUN_AVERAGE_WEIGHT * (seconds - self._run_seconds)

    @property
    def in_hand(self) -> list[Claim]:
        """The claims this worker is working on now."""
        return [a.claim for a in self._active if not a.lost]

    def now(self) -> float:
        return (self.clock or self.store.clock)()

    @property
    def _label(self) -> str:
        return f"pool-worker:{self.name}"

    def request_stop(self) -> None:
        """Soft stop: claim nothing more; finish or give back what is in hand."""
        self._stop.set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        self._stop = StopSignal()  # a new run (a supervisor restart) starts unstopped
        self._stopping = False
        async with open_session(f"worker-{self.name}") as session:
            install_agent(session, self.factory)
            if tracing_enabled():
                session.wrap_handlers(TASK_EVENT, traced_handler)
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
                        nursery.start_soon(
                            self._publish_progress,
                            self.on_progress,
                            name=f"{self._label}::progress",
                        )
                    async with trio.open_nursery() as work:
                        task_status.started()
                        await self._claim_until_stopped(session, work)
                        # tell the lead at once: capacity 0, and the waiting assignments back
                        self._stopping = True
                        await self._beat()
                        await self._give_back_assignments()
                        # the runs in hand get stop_grace; then they are cancelled and released
                        nursery.start_soon(self._cut_runs_after_grace, work.cancel_scope)
                    nursery.cancel_scope.cancel()
            finally:
                with trio.CancelScope(shield=True), trio.move_on_after(RELEASE_TIMEOUT):
                    await self._leave()

    async def _cut_runs_after_grace(self, work: trio.CancelScope) -> None:
        """Say what a soft stop waits for and until when; cancel what still runs after it."""
        runs = self.in_hand
        if runs:
            log.info(
                "worker %s: stopping: waiting up to %s (until %s) for %s in hand (%s) to "
                "finish; then %s cancelled and %s back to the pool",
                self.name,
                duration(self.stop_grace),
                clock_time(self.now() + self.stop_grace),
                _runs(len(runs)),
                _ids(runs),
                "it is" if len(runs) == 1 else "they are",
                "its task goes" if len(runs) == 1 else "their tasks go",
            )
        await trio.sleep(self.stop_grace)
        left = self.in_hand
        if left:
            log.warning(
                "worker %s: cancelled %s still going after the %s stop grace (%s)",
                self.name,
                _runs(len(left)),
                duration(self.stop_grace),
                _ids(left),
            )
        work.cancel()

    async def _recover_claims(self) -> None:
        """Claims under this name now are an earlier process's, which died with them: crash
        expiries (no attempt burnt; the tasks become suspects and run alone)."""
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
                        history=self.history_turns,
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
                    work.start_soon(
                        self._run_claim,
                        session,
                        claim,
                        slots,
                        name=f"{self._label}::task:{claim.task.id}",
                    )
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
        if self._retry_due <= now:
            self._retry_due = math.inf
            return wait
        return min(wait, self._retry_due - now + _JUST_AFTER)

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
        """Run one claim to its stored outcome; ``False`` if the session did not run it.

        ``answered()`` is called once the agent has answered (or crashed), before the outcome
        is stored: the slot is free for the next claim then, so the worker's next
        ``claim_many`` is queued while this outcome commits instead of after it (the two
        overlap, or share a group commit), rather than costing one commit after the other."""
        id = claim.task.id
        started = trio.current_time()
        deadline = math.inf if self._timeout is None else started + self._timeout
        entry = _Active(claim, deadline=deadline, started=started)
        if self.timings is not None:
            self.timings.claimed(id, self.now())
        for old in [a for a in self._active if a.claim.task.id == id]:
            # the store handed the task out again, so every older attempt here is fenced out
            self._lose(old, StaleLease(f"task {id!r} was claimed again as attempt {claim.attempt}"))
        self._active[entry] = None
        self._run_begun.set()
        queue_waited(claim)
        try:
            with run_span(claim) as traced:
                try:
                    with entry.scope:
                        while True:  # once, or again at once after a state conflict
                            try:
                                reply = await self._call(session, entry)
                            except NOT_RUN as exc:
                                log.info("worker %s: task %s was not run: %s", self.name, id, exc)
                                await self._release(entry)
                                return False
                            except QuarantineDeath as death:
                                answered()
                                await self._quarantine_death(entry, death)
                            except QuarantineStartError as exc:
                                log.error(  # noqa: TRY400 - the message says it all
                                    "worker %s: task %s was not run: %s", self.name, id, exc
                                )
                                await self._release(entry)
                                return False
                            except Exception as exc:
                                answered()
                                if _parked(entry):  # a wait, not a run's time
                                    await self._park(entry)
                                else:
                                    if self.timings is not None:
                                        self.timings.ran(trio.current_time() - entry.started)
                                    await self._fail(entry, exc)
                            else:
                                answered()
                                if _parked(entry):
                                    await self._park(entry)
                                else:
                                    self._timed_run(trio.current_time() - entry.started)
                                    if not await self._complete(entry, reply):
                                        continue
                            break
                finally:
                    set_attributes(traced, {"tether.outcome": entry.outcome})
        except trio.Cancelled:
            with trio.CancelScope(shield=True), trio.move_on_after(RELEASE_TIMEOUT):
                await self._release(entry)
            raise
        finally:
            del self._active[entry]
        return True

    async def _call(self, session: Session, entry: _Active) -> Reply:
        """The agent's reply to the claim's task, with a progress reporter if progress is sent;
        ``RunTimedOut`` once its deadline passed (the run is cancelled: a sync handler's thread
        is abandoned by the session)."""
        task = entry.claim.task
        entry.run = Run(
            task,
            self.store,
            lambda: entry.claim,
            lambda exc: self._lose(entry, exc),
            park_after=self.park_after,
            clock=self.store.clock,
            limits=self.store,
        )
        with trio.CancelScope(deadline=entry.deadline) as timer:
            claimed = entry.claim.conversation if entry.reruns == 0 else None
            if claimed is not None:
                entry.conversation = claimed  # read in the claim's own transaction
            elif task.room is not None:  # a rerun after a state conflict reads the current one
                entry.conversation = await self.store.conversation(
                    task.id, limit=self.history_turns
                )
            if entry.claim.suspect and self.quarantine is not None:
                return await self._call_quarantined(self.quarantine, entry)
            with conversing(task, entry.conversation or Conversation()), running(task, entry.run):
                if self.on_progress is None:
                    return reply_of(await session.call(TASK_EVENT, task), task.id)
                entry.progress = Progress()
                with reporting(task, entry.progress):
                    return reply_of(await session.call(TASK_EVENT, task), task.id)
        assert timer.cancelled_caught
        raise RunTimedOut(f"timed out after {self._timeout:g} s")

    async def _call_quarantined(self, quarantine: Quarantine, entry: _Active) -> Reply:
        """A suspect's run in a quarantine child; its progress mirrored into the entry's."""
        steps = await self._child_steps(entry)
        if self.on_progress is None:
            return await quarantine.run(
                entry.claim.task, conversation=entry.conversation, steps=steps
            )
        progress = entry.progress = Progress()

        def shown(status: str | None, partial: str | None) -> None:
            if status is not None:
                progress.status(status)
            progress.clear()
            if partial:
                progress.stream(partial)

        return await quarantine.run(entry.claim.task, shown, entry.conversation, steps)

    async def _child_steps(self, entry: _Active) -> ChildSteps:
        """A quarantined run's steps: replayed from the store, recorded by this process under
        its claim's fence (the child holds nothing of the store), parked here."""
        run = entry.run
        assert run is not None

        async def record(name: str, value: str) -> StepRecord:
            try:
                return await self.store.record_step(entry.claim, name, value)
            except StaleLease as exc:
                self._lose(entry, exc)
                raise

        def parked(until: float, why: str, asked: ParkedAsk | None = None) -> None:
            run.parked_until, run.parked_why = until, why
            run.parked_ask = asked

        async def acquire(key: str, weight: float) -> Granted | NoPermit:
            try:
                return await self.store.acquire_permit(entry.claim, key, weight)
            except StaleLease as exc:
                self._lose(entry, exc)
                raise

        async def pause(key: str, until: float) -> None:
            await self.store.pause_limit(key, until)

        limits = ChildLimits(acquire, self.store.release_permit, pause)
        recorded = await self.store.steps(entry.claim.task.id)
        asks = await self.store.asks(entry.claim.task.id)
        return ChildSteps(recorded, record, parked, self.park_after, asks, limits)

    async def _quarantine_death(self, entry: _Active, death: QuarantineDeath) -> None:
        """Record the child's death against its task, in the parent's transaction."""
        assert self.quarantine is not None
        entry.finishing = True
        try:
            state = await self.store.quarantine_death(
                entry.claim, str(death), max_deaths=self.quarantine.max_deaths
            )
        except StaleLease as stale:
            self._lose(entry, stale)
            return
        entry.settled = True
        self.quarantine_deaths += 1
        if self.wakeups is not None:
            if state is CustodyState.DEAD:
                self.wakeups.tasks_dead()
            else:
                self.wakeups.tasks_pending()
        log.log(
            logging.ERROR if state is CustodyState.DEAD else logging.WARNING,
            "worker %s: task %s attempt %d: %s; now %s",
            self.name,
            entry.claim.task.id,
            entry.claim.attempt,
            death,
            state.value,
        )

    async def _publish_progress(self, send: OnProgress) -> None:
        """Every ``progress_interval``: one update for each run going at least that long whose
        reporter changed since its last update (the first says it is working), unless that
        run's previous update is still on its way. While no run is going it waits for one
        to begin instead (an idle worker does not tick)."""
        async with trio.open_nursery() as sends:
            while True:
                if not self._active:
                    await self._run_begun.wait(math.inf)
                await trio.sleep(self.progress_interval)
                if self._progress_refused:
                    log.info("worker %s: the receiver takes no progress; not sending", self.name)
                    sends.cancel_scope.cancel()
                    return
                now = trio.current_time()
                for entry in list(self._active):
                    progress = entry.progress
                    if (
                        progress is None
                        or entry.sending
                        or entry.lost
                        or entry.finishing
                        or progress.version == entry.sent
                        or now - entry.started < self.progress_interval
                    ):
                        continue
                    version, status, partial = progress.snapshot()
                    update = ProgressUpdate(
                        id=entry.claim.task.id,
                        attempt=entry.claim.attempt,
                        seq=version,
                        running_s=round(now - entry.started, 3),
                        worker=self.name,
                        status=status,
                        partial=partial,
                    )
                    entry.sent, entry.sending = version, True
                    sends.start_soon(self._send_progress, send, entry, update)

    async def _send_progress(
        self, send: OnProgress, entry: _Active, update: ProgressUpdate
    ) -> None:
        try:
            with trio.move_on_after(PROGRESS_SEND_TIMEOUT) as timer:
                if not await send(update):
                    self._progress_refused = True
                elif update.partial and entry.claim.task.room is not None:
                    await self._record_shown(entry, update.partial)
            if timer.cancelled_caught:
                self._progress_trouble(update, "timed out")
        except Exception as exc:
            self._progress_trouble(update, repr(exc))
        finally:
            entry.sending = False

    async def _record_shown(self, entry: _Active, partial: str) -> None:
        """The gateway took ``partial``: record it as the text the person has seen, so a
        barge-in keeps it as the interrupted reply (fenced; best effort like progress)."""
        if partial == entry.shown or entry.finishing or entry.lost:
            return
        if await self.store.record_shown(entry.claim, partial):
            entry.shown = partial

    def _progress_trouble(self, update: ProgressUpdate, problem: str) -> None:
        level = logging.DEBUG if self._progress_warned else logging.WARNING
        self._progress_warned = True
        log.log(level, "worker %s: %s", self.name, update.dropped(problem))

    async def _complete(self, entry: _Active, reply: Reply) -> bool:
        """Store the reply (with the room's new state, if any); ``False`` if the state was
        refused as stale (the run runs again at once, with the current state)."""
        entry.finishing = True
        claim = entry.claim
        try:
            if reply.state is None:
                await until_stored(
                    lambda: self.completions.complete(claim, reply.body, no_send=reply.no_send),
                    what=f"worker {self.name}: storing the reply to task {claim.task.id}",
                    pause=self._interval,
                )
            else:
                base = 0 if entry.conversation is None else entry.conversation.version
                state = reply.state
                await until_stored(
                    lambda: self.store.complete_with_state(
                        claim, reply.body, state, base, no_send=reply.no_send
                    ),
                    what=f"worker {self.name}: storing the reply to task {claim.task.id}",
                    pause=self._interval,
                )
        except StateConflict as exc:
            entry.finishing = False
            entry.reruns += 1
            self.state_conflicts += 1
            log.info("worker %s: running task %s again: %s", self.name, claim.task.id, exc)
            return False
        except StaleLease as exc:
            self._lose(entry, exc)
            return True
        except InvalidTask as exc:  # the store refused the reply (too large, not Unicode)
            await self._fail(entry, exc)
            return True
        entry.settled = True
        entry.outcome = "completed"
        self.completed += 1
        if self.timings is not None:
            self.timings.result_stored(entry.claim.task.id, self.now())
        if self.after_complete is not None:
            try:
                await self.after_complete(entry.claim.task)
            except Exception:
                log.exception(
                    "worker %s: after_complete failed for task %s", self.name, entry.claim.task.id
                )
        return True

    def retry_delay(self, exc: BaseException, attempt: int) -> float:
        """Seconds before the next attempt after ``exc`` failed attempt ``attempt``: the
        agent's ``Retry(after=)``, else the backoff's draw."""
        if isinstance(exc, Retry) and exc.after is not None:
            return exc.after
        return self.retry_backoff.delay(attempt, self.rng)

    async def _fail(self, entry: _Active, exc: Exception) -> None:
        if isinstance(exc, Permanent):  # the store says "permanent failure on attempt n: ..."
            reason = exc.reason
        elif isinstance(exc, RunTimedOut):
            reason = str(exc)
        elif isinstance(exc, Retry):
            reason = f"Retry: {exc.reason}"
        else:
            reason = failure_reason(exc)
        entry.finishing = True
        permanent = isinstance(exc, Permanent)
        delay = 0.0 if permanent else self.retry_delay(exc, entry.claim.attempt)
        if isinstance(exc, Retry) and exc.key is not None:
            await self._pause_key(exc.key, delay)
        try:
            claim = entry.claim
            state = await until_stored(
                lambda: self.store.fail(claim, reason, retry_after=delay, permanent=permanent),
                what=f"worker {self.name}: storing the failure of task {claim.task.id}",
                pause=self._interval,
            )
        except StaleLease as stale:
            self._lose(entry, stale)
            return
        entry.settled = True
        entry.outcome = (
            "timed out" if isinstance(exc, RunTimedOut) else f"failed: now {state.value}"
        )
        self.failed += 1
        if state is CustodyState.DEAD and self.wakeups is not None:
            self.wakeups.tasks_dead()
        elif state is CustodyState.PENDING:
            self._retry_due = min(self._retry_due, trio.current_time() + delay)
            if self.wakeups is not None:
                self.wakeups.tasks_pending()  # back in the queue (due now or after its backoff)
        level = logging.ERROR if state is CustodyState.DEAD else logging.WARNING
        task_id = entry.claim.task.id
        if state is CustodyState.PENDING:
            when = clock_time(time.time() + delay)
            after = f"retry at {when} (in {delay:.1f} s)" if delay else "retry now"
        else:
            after = f"now {state.value}"
        # an agent's own failure: its traceback once per task, later attempts' at DEBUG
        traced = not isinstance(exc, Retry | Permanent | RunTimedOut)
        first = traced and task_id not in self._traced
        if first:
            self._traced[task_id] = None
            while len(self._traced) > TRACED_TASKS:
                del self._traced[next(iter(self._traced))]
        log.log(
            level,
            "worker %s: task %s attempt %d of %d failed: %s; %s",
            self.name,
            task_id,
            entry.claim.attempt,
            self.store.max_attempts,
            reason,
            after,
            exc_info=exc if first else None,
        )
        if traced and not first:
            log.debug(
                "worker %s: task %s attempt %d failed",
                self.name,
                task_id,
                entry.claim.attempt,
                exc_info=exc,
            )

    async def _pause_key(self, key: str, seconds: float) -> None:
        """``Retry(after=, key=)``: the key stops for everyone on the store (best effort: the
        failure is stored whatever becomes of the pause)."""
        try:
            await self.store.pause_limit(key, self.store.clock() + seconds)
        except Exception:
            log.exception("worker %s: pausing limit %s failed", self.name, key)
        else:
            _limits.METRICS.pauses += 1

    async def _park(self, entry: _Active) -> None:
        """The run parked itself (a long durable sleep): claimed -> waiting, fenced; the slot
        is free and no attempt is spent. The reconciler makes it pending when it is due (told
        of the time through the wake-ups, so on time)."""
        assert entry.run is not None
        assert entry.run.parked_until is not None
        entry.finishing = True
        why = entry.run.parked_why or "parked"
        asked = entry.run.parked_ask
        try:
            if asked is None:
                await self.store.park(entry.claim, entry.run.parked_until, why)
            else:  # the question and the park in one transaction (issue #36)
                await asked.record(self.store, entry.claim, why)
        except StaleLease as exc:
            self._lose(entry, exc)
            return
        entry.settled = True
        self.parked += 1
        if self.wakeups is not None:
            self.wakeups.parked(entry.run.parked_until)
        if asked is not None and self.on_asked is not None:
            self.on_asked()
        log.info("worker %s: task %s parked: %s", self.name, entry.claim.task.id, why)

    async def _release(self, entry: _Active) -> None:
        if entry.lost or entry.settled:
            return
        entry.finishing = True
        try:
            await self.store.release(entry.claim)
        except StaleLease as exc:
            self._lose(entry, exc)
            return
        entry.settled = True
        entry.outcome = "released"
        self.released += 1
        if self.wakeups is not None:
            self.wakeups.tasks_pending()  # back in the queue: another worker may take it
        log.info("worker %s: released task %s unfinished", self.name, entry.claim.task.id)

    def _lose(self, entry: _Active, exc: StaleLease) -> None:
        if isinstance(exc, Superseded):
            self._supersede(entry, exc, at_once=entry.finishing)
            return
        if not entry.lost:
            entry.lost = True
            entry.outcome = "lost"
            self.lost += 1
            log.warning("worker %s: lost task %s: %s", self.name, entry.claim.task.id, exc)
        entry.scope.cancel()

    def _supersede(self, entry: _Active, exc: Superseded, *, at_once: bool) -> None:
        """A newer message of the room superseded this run's task (the store recorded its
        no-send result): nothing of the run is stored; a run still going gets the soft-stop
        grace (``supersede_grace``), then is cancelled."""
        if not entry.lost:
            entry.lost = True
            entry.outcome = "superseded"
            self.superseded += 1
            log.info("worker %s: stopping task %s: %s", self.name, entry.claim.task.id, exc)
        if at_once:
            entry.scope.cancel()
            return
        grace = self.stop_grace if self.supersede_grace is None else self.supersede_grace
        entry.scope.deadline = min(entry.scope.deadline, trio.current_time() + grace)

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
        members = await self.store.beat(self.name, "worker", capacity)
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
            await self._return_dead_assignments(members)

    async def _return_dead_assignments(self, members: Sequence[WorkerInfo]) -> None:
        now = self.now()
        alive = {m.name for m in members if is_alive(m, now, self.lead_dead_after, self.max_skew)}
        view = await self.store.pool_view(pending_limit=1)
        for owner in sorted({a.worker for a in view.assigned} - alive - {self.name}):
            returned = await self.store.return_assignments(owner)
            if returned:
                log.warning(
                    "worker %s (no live lead): returned %d assignment(s) of dead worker %s "
                    "to pending",
                    self.name,
                    len(returned),
                    owner,
                )

    async def _renew(self, entry: _Active) -> None:
        if entry.lost:
            return
        if trio.current_time() > entry.deadline + self.stop_grace:
            if not entry.lost:  # the run outlived its timeout and grace: let the lease lapse
                entry.lost = True
                self.let_go += 1
                log.warning(
                    "worker %s: task %s is %.1fs past its run timeout and still not stored; "
                    "its lease is no longer renewed (the reconciler takes it back)",
                    self.name,
                    entry.claim.task.id,
                    trio.current_time() - entry.deadline,
                )
            return
        if entry.finishing:
            return
        try:
            entry.claim = await self.store.renew(entry.claim)
        except StaleLease as exc:
            if not entry.finishing:  # else the run stored its outcome while this was queued
                self._lose(entry, exc)


def _parked(entry: _Active) -> bool:
    """Did the run park itself (``run.sleep``), whatever it returned or raised after?"""
    return entry.run is not None and entry.run.parked_until is not None
