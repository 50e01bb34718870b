"""One claim's run, from its worker's side: the single owner of what becomes of it.

A worker hands each claim to a ``ClaimedRun`` with a *runner* (how the handler is called: in
the worker's session, or in a quarantine child); the run calls the runner under its timeout
(its conversation is read only when the handler asks: ``_talk``) and stores its outcome:
complete (with the room's state), fail (a retry or dead), park (a long wait, a question),
release (not run, or cancelled), lose (fenced out) or supersede (a newer message of its room).
Every outcome is fenced by the claim; a lost or superseded run stores nothing. See
docs/guide/design.md, "Runs".
"""

from __future__ import annotations

import logging
import math
import time
import traceback
from collections.abc import Awaitable, Callable
from typing import Any, Final

import attrs
import trio

from ..._plumbing._tracing import set_attributes
from ..._plumbing._when import clock_time
from ..custody._conversation import Conversation, StateConflict
from ..custody._rooms import Superseded
from ..custody._rules import Claim, CustodyState, InvalidTask, StaleLease, Task
from ..custody._versions import conversation_of_task
from . import _permits
from ._bounds import TooLarge, check_reply, over_a_bound
from ._current import Current
from ._host import RunHost
from ._journal import Fence, Journal, Park
from ._outage import until_stored
from ._progress import Progress
from ._reply import Reply
from ._retry import Permanent, Retry
from ._run import Run
from ._spans import queue_waited, run_span
from ._talk import Talk
from ._versions import StepMismatch

log = logging.getLogger("tether.bridge.pool.worker")
"""The worker's logger: an operator's filters name it, whichever module writes the line."""

RELEASE_TIMEOUT: Final = 5.0
"""Seconds spent giving claims back when cancelled (shielded): a run its own, a worker
leaving the pool its assignments."""


class RunTimedOut(Exception):
    """A run took longer than its timeout and was cancelled (a failed attempt)."""


class NotRun(Exception):
    """The runner did not run the claim (the session refused it, a quarantine child could not
    start): its claim is released, no attempt spent."""

    def __init__(self, why: str, *, level: int = logging.INFO) -> None:
        super().__init__(why)
        self.level = level


class RunnerDied(Exception):
    """The process running the handler died while it ran it (a quarantine child): the task's
    own doing, counted against it up to ``max_deaths``."""

    def __init__(self, how: str, *, max_deaths: int) -> None:
        super().__init__(how)
        self.max_deaths = max_deaths


def failure_reason(exc: BaseException) -> str:
    """The last line of ``exc``'s traceback (``"ValueError: boom"``): what a dead task shows.

    Lone surrogates are escaped (``\\ud800``) so the store can always record it."""
    line = traceback.format_exception_only(type(exc), exc)[-1].strip() or type(exc).__name__
    return line.encode("utf-8", "backslashreplace").decode("utf-8")


Runner = Callable[["ClaimedRun"], Awaitable[Reply]]
"""Calls the handler of a claimed run (with ``ClaimedRun.current()`` made current, or in a
quarantine child) and returns its reply."""


@attrs.define(eq=False)
class ClaimedRun:
    """The run of ``claim`` (see the module)."""

    claim: Claim
    host: RunHost
    timeout: float | None = None
    """Seconds the run may take (None: no limit)."""
    started: float = attrs.field(init=False, factory=trio.current_time)
    """``trio.current_time()`` when the run began (its progress says how long it has gone)."""
    deadline: float = attrs.field(init=False)
    """When the run times out (Trio clock)."""
    scope: trio.CancelScope = attrs.field(init=False, factory=trio.CancelScope)
    lost: bool = attrs.field(init=False, default=False)
    finishing: bool = attrs.field(init=False, default=False)
    """The run is storing its outcome: a renew racing with it must not count as lost."""
    settled: bool = attrs.field(init=False, default=False)
    outcome: str = attrs.field(init=False, default="cancelled")
    """How the run ended, for its span: completed, failed (``failed: now pending``), timed
    out, parked, released, lost, superseded, a quarantine death, or cancelled."""
    talk: Talk = attrs.field(init=False, factory=Talk)
    """The current call's conversation, read when its handler asks (a rerun after a state
    conflict starts a new one, which reads the current one)."""
    progress: Progress = attrs.field(init=False, factory=Progress)
    """The current call's reporter (a rerun after a state conflict starts a new one)."""
    shown: str = attrs.field(init=False, default="")
    """The partial reply last recorded as shown (``record_shown``)."""
    reruns: int = attrs.field(init=False, default=0)
    """Runs again after a state conflict (``StateConflict``: not failed attempts)."""
    journal: Journal | None = attrs.field(init=False, default=None)
    """The current call's journal: what it recorded, and where it parked."""
    span: Any = attrs.field(init=False, default=None)
    sent: int = attrs.field(init=False, default=-1)
    """The progress version last sent (-1: nothing yet, not even "working")."""
    sending: bool = attrs.field(init=False, default=False)
    _current: Current | None = attrs.field(init=False, default=None)

    def __attrs_post_init__(self) -> None:
        self.deadline = math.inf if self.timeout is None else self.started + self.timeout

    @property
    def task(self) -> Task:
        return self.claim.task

    @property
    def parked(self) -> Park | None:
        """Where the run parked itself, whatever it returned or raised after."""
        return None if self.journal is None else self.journal.parked

    @property
    def mismatch(self) -> StepMismatch | None:
        """The step that did not match its record (issue #53), whatever the run did after."""
        return None if self.journal is None else self.journal.mismatch

    def current(self) -> Current:
        """What the handler of the current call reads of its run (``runs._current``): live
        until the call ends."""
        assert self.journal is not None, "current() is for a runner, inside the call"
        self._current = Current(
            Run(self.claim.task, self.journal),
            self.talk,
            self.progress,
            self.span,
        )
        return self._current

    async def run(self, runner: Runner, answered: Callable[[], None] = lambda: None) -> bool:
        """Run the claim to its stored outcome; ``False`` if the runner did not run it.

        ``answered()`` is called once the agent has answered (or crashed), before the outcome
        is stored: the worker's slot is free for its next claim then, so that claim is queued
        while this outcome commits (the two overlap, or share a group commit)."""
        if self.host.timings is not None:
            self.host.timings.claimed(self.claim.task.id, self.host.now())
        queue_waited(self.claim)
        try:
            with run_span(self.claim) as traced:
                self.span = traced
                try:
                    with self.scope:
                        while not await self._once(runner, answered):
                            pass  # again at once, after a state conflict
                except NotRun as exc:
                    log.log(exc.level, "worker %s: task %s was not run: %s", *self._who(), exc)
                    await self._release()
                    return False
                finally:
                    set_attributes(traced, {"tether.outcome": self.outcome})
        except trio.Cancelled:
            with trio.CancelScope(shield=True), trio.move_on_after(RELEASE_TIMEOUT):
                await self._release()
            raise
        return True

    def _who(self) -> tuple[str, str]:
        return self.host.worker, self.claim.task.id

    async def _once(self, runner: Runner, answered: Callable[[], None]) -> bool:
        """One call of the handler and its outcome stored; False to call it again at once."""
        try:
            reply = await self._call(runner)
        except NotRun:
            raise
        except RunnerDied as death:
            answered()
            await self._runner_died(death)
        except Exception as exc:
            answered()
            if self.mismatch is not None:  # whatever the handler made of it (issue #53)
                await self._fail(self.mismatch)
            elif self.parked is not None:  # a wait, not a run's time
                await self._park(self.parked)
            else:
                if self.host.timings is not None:
                    self.host.timings.ran(trio.current_time() - self.started)
                await self._fail(exc)
        else:
            answered()
            if self.mismatch is not None:
                await self._fail(self.mismatch)
            elif self.parked is not None:
                await self._park(self.parked)
            else:
                self.host.on_answered(trio.current_time() - self.started)
                return await self._complete(reply)
        return True

    async def _call(self, runner: Runner) -> Reply:
        """The handler's reply, with its conversation read; ``RunTimedOut`` once the deadline
        passed (the run is cancelled: a sync handler's thread is abandoned by the session)."""
        host, task = self.host, self.claim.task
        self.journal = Journal(
            task,
            host.store,
            Fence(lambda: self.claim, self.lose),
            park_after=host.park_after,
            max_step_bytes=host.bounds.step,
            clock=host.store.clock,
            version=host.agent_version,
        )
        self.progress = Progress()
        self.talk = Talk(None if task.room is None else self._read_conversation)
        try:
            return await self._call_in_time(runner)
        finally:
            if self._current is not None:
                self._current.live = False  # a task the handler left behind sees no run

    async def _call_in_time(self, runner: Runner) -> Reply:
        with trio.CancelScope(deadline=self.deadline) as timer:
            return await runner(self)
        assert timer.cancelled_caught
        raise RunTimedOut(f"timed out after {self.timeout:g} s")

    async def _read_conversation(self) -> Conversation:
        """The room's conversation, in one store query: the first ``await
        conversation_of(task)`` of a call (``Talk``) reads it."""
        source = conversation_of_task(self.task)  # a fork reads its source's (issue #53)
        return await self.host.store.conversation(source, limit=self.host.history_turns)

    async def _base_version(self) -> int:
        """The version a returned state is based on: the one the call read; a call that never
        read its conversation bases its state on the room's current version (read now)."""
        if self.talk.got is not None:
            return self.talk.got.version
        if self.task.room is None:
            return 0
        return (await self.host.store.conversation(self.task.id, limit=0)).version

    async def record_shown(self, partial: str) -> None:
        """The gateway took ``partial``: record it as the text the person has seen, so a
        barge-in keeps it as the interrupted reply (fenced; best effort like progress)."""
        if partial == self.shown or self.finishing or self.lost:
            return
        if await self.host.store.record_shown(self.claim, partial):
            self.shown = partial

    async def _complete(self, reply: Reply) -> bool:
        """Store the reply (with the room's new state, if any); ``False`` if the state was
        refused as stale (the run runs again at once, with the current state)."""
        self.finishing = True
        host, claim = self.host, self.claim
        what = f"worker {host.worker}: storing the reply to task {claim.task.id}"
        try:  # over a bound: dead at once, before the store is asked (issue #53)
            check_reply(reply.body, reply.state, host.bounds, claim.task)
        except (TooLarge, InvalidTask) as exc:  # InvalidTask: a state that is not an object
            await self._fail(exc)
            return True
        try:
            if reply.state is None:
                await until_stored(
                    lambda: host.completions.complete(claim, reply.body, no_send=reply.no_send),
                    what=what,
                    pause=host.store_retry,
                )
            else:
                state = reply.state

                async def with_state() -> None:
                    base = await self._base_version()
                    await host.store.complete_with_state(
                        claim, reply.body, state, base, no_send=reply.no_send
                    )

                await until_stored(
                    with_state,
                    what=what,
                    pause=host.store_retry,
                )
        except StateConflict as exc:
            self.finishing = False
            self.reruns += 1
            host.counts.state_conflicts += 1
            log.info("worker %s: running task %s again: %s", host.worker, claim.task.id, exc)
            return False
        except StaleLease as exc:
            self.lose(exc)
            return True
        except InvalidTask as exc:  # the store refused the reply (too large, not Unicode)
            await self._fail(exc)
            return True
        self.settled = True
        self.outcome = "completed"
        host.counts.completed += 1
        if host.timings is not None:
            host.timings.result_stored(claim.task.id, host.now())
        if host.after_complete is not None:
            try:
                await host.after_complete(claim.task)
            except Exception:
                log.exception(
                    "worker %s: after_complete failed for task %s", host.worker, claim.task.id
                )
        return True

    async def _fail(self, exc: Exception) -> None:
        host, claim = self.host, self.claim
        exc = over_a_bound(exc) or exc  # over a bound, whatever the handler made of it
        reason = _reason(exc)
        self.finishing = True
        permanent = isinstance(exc, Permanent)
        delay = 0.0 if permanent else host.retry_delay(exc, claim.attempt)
        if isinstance(exc, Retry) and exc.key is not None:
            await _pause_key(host, exc.key, delay)
        try:
            state = await until_stored(
                lambda: host.store.fail(claim, reason, retry_after=delay, permanent=permanent),
                what=f"worker {host.worker}: storing the failure of task {claim.task.id}",
                pause=host.store_retry,
            )
        except StaleLease as stale:
            self.lose(stale)
            return
        self.settled = True
        self.outcome = "timed out" if isinstance(exc, RunTimedOut) else f"failed: now {state.value}"
        host.counts.failed += 1
        if state is CustodyState.DEAD and host.rings is not None:
            host.rings.tasks_dead()
        elif state is CustodyState.PENDING:
            host.retry_due = min(host.retry_due, trio.current_time() + delay)
            if host.rings is not None:
                host.rings.tasks_pending()  # back in the queue (due now or after its backoff)
        self._log_failure(exc, reason, state, delay)

    def _log_failure(self, exc: Exception, reason: str, state: CustodyState, delay: float) -> None:
        """One line per failed attempt; an agent's own failure with its traceback once per
        task, later attempts' at DEBUG."""
        host, claim = self.host, self.claim
        if state is CustodyState.PENDING:
            when = clock_time(time.time() + delay)
            after = f"retry at {when} (in {delay:.1f} s)" if delay else "retry now"
        else:
            after = f"now {state.value}"
        traced = not isinstance(exc, Retry | Permanent | RunTimedOut)
        first = traced and host.first_traceback(claim.task.id)
        log.log(
            logging.ERROR if state is CustodyState.DEAD else logging.WARNING,
            "worker %s: task %s attempt %d of %d failed: %s; %s",
            host.worker,
            claim.task.id,
            claim.attempt,
            host.store.max_attempts,
            reason,
            after,
            exc_info=exc if first else None,
        )
        if traced and not first:
            log.debug(
                "worker %s: task %s attempt %d failed",
                host.worker,
                claim.task.id,
                claim.attempt,
                exc_info=exc,
            )

    async def _park(self, park: Park) -> None:
        """The run parked itself (a long wait, a question): claimed -> waiting, fenced; the
        slot is free and no attempt is spent. The reconciler makes it pending when it is due
        (told of the time through the rings, so on time)."""
        host, claim = self.host, self.claim
        self.finishing = True
        asked, state = park.ask, CustodyState.WAITING
        try:
            if park.join:  # parked unless the children were done meanwhile (issue #51)
                state = await host.store.park_join(claim, park.join, park.until, park.why)
            elif park.event is not None:  # unless its event came meanwhile (issue #52)
                state = await host.store.park_event(
                    claim, park.event, park.taken, park.until, park.why
                )
            elif asked is None:
                await host.store.park(claim, park.until, park.why)
            else:  # the question and the park in one transaction (issue #36)
                await host.store.ask(
                    claim,
                    asked.name,
                    asked.text,
                    asked.until,
                    park.why,
                    answer_from=asked.answer_from,
                )
        except StaleLease as exc:
            self.lose(exc)
            return
        self.settled = True
        self.outcome = "parked"
        if state is not CustodyState.WAITING:  # what it waits for came as it parked
            log.info(
                "worker %s: task %s back in the queue at once: %s came as it parked",
                host.worker,
                claim.task.id,
                "its children" if park.join else "its event",
            )
            return
        host.counts.parked += 1
        if host.rings is not None:
            host.rings.parked(park.until)
        if asked is not None and host.on_asked is not None:
            host.on_asked()
        log.info("worker %s: task %s parked: %s", host.worker, claim.task.id, park.why)

    async def _release(self) -> None:
        if self.lost or self.settled:
            return
        self.finishing = True
        host = self.host
        try:
            await host.store.release(self.claim)
        except StaleLease as exc:
            self.lose(exc)
            return
        self.settled = True
        self.outcome = "released"
        host.counts.released += 1
        if host.rings is not None:
            host.rings.tasks_pending()  # back in the queue: another worker may take it
        log.info("worker %s: released task %s unfinished", host.worker, self.claim.task.id)

    async def _runner_died(self, death: RunnerDied) -> None:
        """Record the runner's death against its task, in this process's transaction."""
        host, claim = self.host, self.claim
        self.finishing = True
        try:
            state = await host.store.quarantine_death(
                claim, str(death), max_deaths=death.max_deaths
            )
        except StaleLease as stale:
            self.lose(stale)
            return
        self.settled = True
        self.outcome = f"quarantine death: now {state.value}"
        host.counts.quarantine_deaths += 1
        if host.rings is not None:
            if state is CustodyState.DEAD:
                host.rings.tasks_dead()
            else:
                host.rings.tasks_pending()
        log.log(
            logging.ERROR if state is CustodyState.DEAD else logging.WARNING,
            "worker %s: task %s attempt %d: %s; now %s",
            host.worker,
            claim.task.id,
            claim.attempt,
            death,
            state.value,
        )

    def let_go(self, grace: float) -> bool:
        """Is the run past its timeout plus ``grace`` and still not stored? Then its lease is
        let go (no longer renewed: the reconciler takes the task back, and the fence refuses
        whatever the run stores late), once."""
        if self.lost or trio.current_time() <= self.deadline + grace:
            return False
        self.lost = True
        log.warning(
            "worker %s: task %s is %.1fs past its run timeout and still not stored; "
            "its lease is no longer renewed (the reconciler takes it back)",
            *self._who(),
            trio.current_time() - self.deadline,
        )
        return True

    def lose(self, exc: StaleLease) -> None:
        """The store fenced the run out: nothing of it is stored; it is cancelled (a
        superseded run still going gets the soft-stop grace first). A run whose outcome is
        stored has nothing left to lose."""
        if self.settled:
            return
        if isinstance(exc, Superseded):
            self._supersede(exc, at_once=self.finishing)
            return
        if not self.lost:
            self.lost = True
            self.outcome = "lost"
            self.host.counts.lost += 1
            log.warning("worker %s: lost task %s: %s", *self._who(), exc)
        self.scope.cancel()

    def _supersede(self, exc: Superseded, *, at_once: bool) -> None:
        """A newer message of the room superseded this run's task (the store recorded its
        no-send result): nothing of the run is stored; a run still going gets the soft-stop
        grace (``supersede_grace``), then is cancelled."""
        host = self.host
        if not self.lost:
            self.lost = True
            self.outcome = "superseded"
            host.counts.superseded += 1
            log.info("worker %s: stopping task %s: %s", *self._who(), exc)
        if at_once:
            self.scope.cancel()
            return
        grace = host.stop_grace if host.supersede_grace is None else host.supersede_grace
        self.scope.deadline = min(self.scope.deadline, trio.current_time() + grace)


def _reason(exc: Exception) -> str:
    """What a failed attempt's record says of ``exc``."""
    if isinstance(exc, Permanent):  # the store says "permanent failure on attempt n: ..."
        return exc.reason
    if isinstance(exc, RunTimedOut):
        return str(exc)
    if isinstance(exc, Retry):
        return f"Retry: {exc.reason}"
    return failure_reason(exc)


async def _pause_key(host: RunHost, key: str, seconds: float) -> None:
    """``Retry(after=, key=)``: the key stops for everyone on the store (best effort: the
    failure is stored whatever becomes of the pause)."""
    try:
        await host.store.pause_limit(key, host.store.clock() + seconds)
    except Exception:
        log.exception("worker %s: pausing limit %s failed", host.worker, key)
    else:
        _permits.METRICS.pauses += 1
