"""Agent sessions: every event handler run is owned by the session and seen by identity.

Worker tasks take each run's name while they execute it, so a run costs less than a spawn and the
registry still shows it as its own task. See docs/guide/design.md, "Sessions".
"""

from __future__ import annotations

import contextvars
import logging
import threading
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import attrs
import trio

from ._core._context import current_runtime
from ._core._owner import start_soon_owned
from ._core._registry import TaskRegistry
from ._core._util import open_nursery_unwrapped
from ._session_runs import (
    CANCELLED,
    DROPPED,
    FAILED,
    FINISHED,
    CallWaiter,
    Handler,
    HandlerRun,
    check_grace,
    is_async,
    summarise,
)
from ._session_types import (
    ON_ERROR_CHOICES,
    POLICIES,
    HandlerCancelled,
    HandlerDropped,
    HandlerFailure,
    OnError,
    Policy,
    QueueFull,
    SessionClosed,
    SessionStats,
)

log = logging.getLogger("tether.session")

F = TypeVar("F", bound=Callable[..., Any])
Task = trio.lowlevel.Task

_FAIRNESS_BATCH = 64  # runs a worker executes back to back before yielding
_MAX_RAMP = 1024

_FOREIGN_THREAD = (
    "Session.{what} on session {name!r} must be called from the Trio thread; from a sync "
    "handler use trio.from_thread.run_sync(session.{what}, ...)"
)


@attrs.define(eq=False)
class Session:
    """A live agent session. Get one from ``open_session()``; how it runs handlers: "Sessions"
    in the design notes (``docs/guide/design.md``)."""

    name: str
    on_error: OnError
    grace: float
    keep_idle: int
    _nursery: trio.Nursery
    _registry: TaskRegistry | None
    owner: str = attrs.field(init=False)
    _handlers: dict[str, list[Handler]] = attrs.field(init=False, factory=dict)
    _bounded_events: set[str] = attrs.field(init=False, factory=set)
    _running: dict[Task, HandlerRun] = attrs.field(init=False, factory=dict)
    _workers: set[Task] = attrs.field(init=False, factory=set)
    _worker_count: int = attrs.field(init=False, default=0)
    _woken: int = attrs.field(init=False, default=0)
    _ready: deque[HandlerRun] = attrs.field(init=False, factory=deque)
    _worker_lot: trio.lowlevel.ParkingLot = attrs.field(
        init=False, factory=trio.lowlevel.ParkingLot
    )
    _foreman_lot: trio.lowlevel.ParkingLot = attrs.field(
        init=False, factory=trio.lowlevel.ParkingLot
    )
    _foreman_parked: bool = attrs.field(init=False, default=False)
    _outstanding: int = attrs.field(init=False, default=0)
    _spawn_ctx: contextvars.Context = attrs.field(init=False)
    _trio_thread: int = attrs.field(init=False, default=0)
    _quiet: trio.Event | None = attrs.field(init=False, default=None)
    _gone: trio.Event | None = attrs.field(init=False, default=None)
    _closed: bool = attrs.field(init=False, default=False)
    _stopping: bool = attrs.field(init=False, default=False)
    _left_at_close: int = attrs.field(init=False, default=0)
    _fatal: list[Exception] = attrs.field(init=False, factory=list)
    _failures: deque[HandlerFailure] = attrs.field(init=False)
    _emitted: int = attrs.field(init=False, default=0)
    _unhandled: int = attrs.field(init=False, default=0)
    _started: int = attrs.field(init=False, default=0)
    _finished: int = attrs.field(init=False, default=0)
    _failed: int = attrs.field(init=False, default=0)
    _cancelled: int = attrs.field(init=False, default=0)
    _dropped: int = attrs.field(init=False, default=0)
    max_failures: int = 1000

    def __attrs_post_init__(self) -> None:
        self.owner = f"session:{self.name}"
        self._spawn_ctx = contextvars.copy_context()
        self._trio_thread = threading.get_ident()
        self._failures = deque(maxlen=self.max_failures)
        self._worker_count += 1  # the foreman: close waits for it like for a worker
        self._spawn(self._foreman_task, f"{self.name}::foreman")

    async def _foreman_task(self) -> None:
        try:
            await self._foreman()
        finally:
            self._worker_count -= 1
            if self._worker_count == 0 and self._gone is not None:
                self._gone.set()

    # -- registration ------------------------------------------------------------------------

    def on(
        self, event: str, *, policy: Policy = "concurrent", max_queue: int = 100
    ) -> Callable[[F], F]:
        """Decorator form of ``add_handler``; returns the function unchanged."""

        def register(fn: F) -> F:
            self.add_handler(event, fn, policy=policy, max_queue=max_queue)
            return fn

        return register

    def add_handler(
        self,
        event: str,
        fn: Callable[[Any], Any],
        *,
        policy: Policy = "concurrent",
        max_queue: int = 100,
    ) -> None:
        """Run ``fn(payload)`` for every ``event``; handlers of one event run in registration order.

        ``fn`` may be ``async`` or plain (plain ones run in a worker thread). ``policy`` decides
        what happens when the event arrives while this handler is still running: ``concurrent``
        runs it anyway, ``serial`` queues it (FIFO, at most ``max_queue`` waiting, then
        ``QueueFull``), ``replace`` cancels the running one and runs the newest, ``drop``
        ignores it.
        """
        if self._closed:
            raise SessionClosed(f"session {self.name!r} is closed; cannot add a handler")
        if not isinstance(event, str) or not event:
            raise ValueError(f"event must be a non-empty string, got {event!r}")
        if not callable(fn):
            raise TypeError(f"handler for {event!r} must be callable, got {fn!r}")
        if policy not in POLICIES:
            raise ValueError(
                f"unknown policy {policy!r} for {event!r}; choose one of {sorted(POLICIES)}"
            )
        if isinstance(max_queue, bool) or not isinstance(max_queue, int) or max_queue < 1:
            raise ValueError(f"max_queue must be an int >= 1, got {max_queue!r}")
        fn_name = getattr(fn, "__name__", None) or type(fn).__name__
        handler = Handler(
            event=event,
            fn=fn,
            policy=policy,
            max_queue=max_queue,
            task_name=f"{self.name}::{event}::{fn_name}",
            is_async=is_async(fn),
        )
        self._handlers.setdefault(event, []).append(handler)
        if policy == "serial":
            self._bounded_events.add(event)

    def handler_names(self, event: str) -> list[str]:
        """The task names of ``event``'s handlers, in registration order."""
        return [h.task_name for h in self._handlers.get(event, ())]

    def handler_policies(self, event: str) -> list[Policy]:
        """The policies of ``event``'s handlers, in registration order."""
        return [h.policy for h in self._handlers.get(event, ())]

    def set_policy(self, event: str, policy: Policy) -> None:
        """Change the policy of ``event``'s handlers, before any of them runs.

        For a host that applies a handler's declared policy itself, at a scope the session
        cannot see: the bridge's pool worker runs a ``replace`` agent's task handler
        ``concurrent`` because it enforces ``replace`` per room (``tether.bridge`` rooms), not
        across every room its session serves.
        """
        if policy not in POLICIES:
            raise ValueError(
                f"unknown policy {policy!r} for {event!r}; choose one of {sorted(POLICIES)}"
            )
        handlers = self._handlers.get(event, [])
        if any(h.runs or h.queue for h in handlers):
            raise RuntimeError(f"session {self.name!r}: {event!r} has runs; set its policy first")
        for h in handlers:
            h.policy = policy
        if policy == "serial" and handlers:
            self._bounded_events.add(event)
        else:
            self._bounded_events.discard(event)

    def wrap_handlers(
        self, event: str, wrap: Callable[[Callable[[Any], Any]], Callable[[Any], Any]]
    ) -> None:
        """Replace each of ``event``'s handler functions by ``wrap(fn)``, before any runs.

        For a host that runs each call in a context of its own, which a session cannot give
        (its runs see the opener's context variables): the bridge's pool worker passes each
        run as the call's payload and its wrapper makes it current in the handler's task.
        ``wrap(fn)`` must be async exactly when ``fn`` is.
        """
        handlers = self._handlers.get(event, [])
        if any(h.runs or h.queue for h in handlers):
            raise RuntimeError(f"session {self.name!r}: {event!r} has runs; wrap it first")
        for h in handlers:
            wrapped = wrap(h.fn)
            if is_async(wrapped) != h.is_async:
                raise TypeError(f"wrap({h.fn!r}) changed the handler from async to plain or back")
            h.fn = wrapped

    # -- events ------------------------------------------------------------------------------

    def emit(self, event: str, payload: Any = None) -> None:
        """Start ``event``'s handlers with ``payload`` and return at once.

        Call it from Trio code (a sync handler in its thread uses
        ``trio.from_thread.run_sync(session.emit, ...)``). Raises ``SessionClosed`` once the
        session is closing and ``QueueFull`` if a ``serial`` handler's queue is full (then no
        handler of this event is started).
        """
        if threading.get_ident() != self._trio_thread:
            raise RuntimeError(_FOREIGN_THREAD.format(what="emit", name=self.name))
        if self._closed:
            raise SessionClosed(f"session {self.name!r} is closed; cannot emit {event!r}")
        handlers = self._handlers.get(event)
        if handlers is None:
            self._count_unhandled(event)
            return
        if event in self._bounded_events:
            self._check_capacity(event, handlers)
        self._emitted += 1
        for handler in handlers:
            self._offer(handler, HandlerRun(handler, payload))

    async def call(self, event: str, payload: Any = None) -> list[Any]:
        """Run ``event``'s handlers and return their results in registration order.

        Each run still follows its handler's policy and executes in the session's nursery. If a
        handler fails its exception is raised here (unwrapped when it is the only one, else an
        ``ExceptionGroup``) after all the event's handlers are done; such failures are counted
        and recorded but do not trigger ``on_error="raise"``: the caller has them. A run that
        is cancelled or never started raises ``HandlerCancelled`` / ``HandlerDropped``. If the
        caller is cancelled, its runs are cancelled too. No handler: returns ``[]``.
        """
        if self._closed:
            raise SessionClosed(f"session {self.name!r} is closed; cannot call {event!r}")
        handlers = self._handlers.get(event)
        if handlers is None:
            self._count_unhandled(event)
            return []
        if event in self._bounded_events:
            self._check_capacity(event, handlers)
        self._emitted += 1
        n = len(handlers)
        waiter = CallWaiter(results=[None] * n, errors=[None] * n, remaining=n)
        runs = [HandlerRun(h, payload, waiter, i) for i, h in enumerate(handlers)]
        for run in runs:
            self._offer(run.handler, run)
        try:
            await waiter.done.wait()
        finally:
            if not waiter.done.is_set():
                for run in runs:
                    self._withdraw(run)
        errors = [e for e in waiter.errors if e is not None]
        if len(errors) == 1:
            raise errors[0]
        if errors:
            raise ExceptionGroup(f"session {self.name!r}: {len(errors)} handlers failed", errors)
        return waiter.results

    def interrupt(self, event: str | None = None) -> int:
        """Cancel the running handlers of ``event`` (of every event if None); keep the session.

        Runs still waiting in ``serial``/``replace`` queues are dropped as well: an interrupt
        means "stop what you are doing", not "skip to the next one". Returns how many runs were
        cancelled.
        """
        if threading.get_ident() != self._trio_thread:
            raise RuntimeError(_FOREIGN_THREAD.format(what="interrupt", name=self.name))
        handlers = self._all_handlers() if event is None else self._handlers.get(event, [])
        cancelled = 0
        for handler in handlers:
            self._drop_queue(handler)
            for run in list(handler.runs):
                if not run.cancel_requested:
                    cancelled += 1
                self._cancel(run)
        self._check_quiet()
        return cancelled

    # -- observation -------------------------------------------------------------------------

    def stats(self) -> SessionStats:
        return SessionStats(
            emitted=self._emitted,
            unhandled=self._unhandled,
            started=self._started,
            finished=self._finished,
            failed=self._failed,
            cancelled=self._cancelled,
            dropped=self._dropped,
            running=len(self._running),
            queued=len(self._ready) + sum(len(h.queue) for h in self._all_handlers()),
        )

    @property
    def failures(self) -> tuple[HandlerFailure, ...]:
        """The most recent handler failures (at most ``max_failures``), oldest first."""
        return tuple(self._failures)

    @property
    def closed(self) -> bool:
        """True once the session stopped accepting events."""
        return self._closed

    def running_tasks(self) -> list[Task]:
        """Exactly the live tasks executing a handler run right now, one per run.

        Inside a runtime the answer comes from its registry (tasks owned by this session that
        are executing a run); on its own, from the session's identity-keyed record.
        """
        if self._registry is not None:
            return [t for t in self._registry.owned_by(self.owner) if t in self._running]
        return list(self._running)

    def live_tasks(self) -> list[Task]:
        """Every live task of the session: workers (busy or idle) and, with a registry, the
        tasks that handlers started themselves."""
        if self._registry is not None:
            return self._registry.owned_by(self.owner)
        return list(self._workers)

    # -- closing -----------------------------------------------------------------------------

    async def aclose(self, grace: float | None = None) -> int:
        """Stop accepting events, wait up to ``grace`` seconds for the runs in flight (queued
        ``serial`` runs keep draining meanwhile), then cancel what is left and wait for it.

        Returns the number of runs still executing at the deadline (logged at WARNING).
        Calling it again just waits for the first close to finish.
        """
        grace = self.grace if grace is None else check_grace(grace)
        if self._closed and (self._stopping or self._quiet is not None):
            await self._wait_workers_gone()
            return self._left_at_close
        self._closed = True
        interrupted = True
        try:
            if self._outstanding:
                self._quiet = trio.Event()
                with trio.move_on_after(grace):
                    await self._quiet.wait()
            interrupted = False
        finally:
            self._stop(grace, interrupted=interrupted)
        await self._wait_workers_gone()
        log.debug("session %r closed: %s", self.name, self.stats())
        return self._left_at_close

    def _stop(self, grace: float, *, interrupted: bool) -> None:
        """Cancel everything still in flight. ``interrupted``: a scope around the session was
        cancelled (or on_error="raise" fired) before the grace period ran out."""
        if self._stopping:
            return
        self._stopping = True
        self._closed = True
        running = self.running_tasks()
        left = len(running)
        not_started = len(self._ready) + sum(len(h.queue) for h in self._all_handlers())
        self._left_at_close = left
        for handler in self._all_handlers():
            self._drop_queue(handler)
            for run in list(handler.runs):
                self._cancel(run)
        if interrupted:
            log.info(
                "session %r: closed by cancellation; cancelling %d running handler run(s) (%s), "
                "dropping %d not started",
                self.name,
                left,
                summarise(t.name for t in running),
                not_started,
            )
        elif left or not_started:
            log.warning(
                "session %r: %d handler run(s) still running after %.3gs grace, cancelling: %s"
                "; dropping %d not started",
                self.name,
                left,
                grace,
                summarise(t.name for t in running),
                not_started,
            )
        task = trio.lowlevel.current_task()
        while self._ready:
            self._settle(self._ready.popleft(), DROPPED, None, task)
        self._foreman_lot.unpark_all()
        self._woken += len(self._worker_lot.unpark_all())

    def _all_handlers(self) -> list[Handler]:
        return [h for hs in self._handlers.values() for h in hs]

    async def _wait_workers_gone(self) -> None:
        if self._worker_count:
            if self._gone is None:
                self._gone = trio.Event()
            await self._gone.wait()

    # -- dispatch ----------------------------------------------------------------------------

    def _count_unhandled(self, event: str) -> None:
        self._emitted += 1
        self._unhandled += 1
        log.debug("session %r: no handler for event %r", self.name, event)

    def _check_capacity(self, event: str, handlers: list[Handler]) -> None:
        for h in handlers:
            if h.policy == "serial" and len(h.queue) >= h.max_queue:
                raise QueueFull(
                    f"session {self.name!r}: serial handler {h.task_name!r} already has "
                    f"{len(h.queue)} queued run(s) (max_queue={h.max_queue}); event {event!r} "
                    "refused"
                )

    def _offer(self, handler: Handler, run: HandlerRun) -> None:
        policy = handler.policy
        if policy == "concurrent":
            self._outstanding += 1
            self._dispatch(run)
        elif policy == "serial":
            self._outstanding += 1
            if handler.runs or handler.queue:
                handler.queue.append(run)
            else:
                self._dispatch(run)
        elif policy == "replace":
            self._outstanding += 1
            if handler.runs:
                for old in list(handler.runs):
                    self._cancel(old)
                self._drop_queue(handler)
                handler.queue.append(run)
            else:
                self._dispatch(run)
        elif handler.runs:  # drop
            self._refuse(run)
        else:
            self._outstanding += 1
            self._dispatch(run)

    def _dispatch(self, run: HandlerRun) -> None:
        run.handler.runs.add(run)
        self._ready.append(run)
        if self._woken == 0:  # nobody on the way: wake one now, the foreman fans out later
            self._wake(1)
        if self._foreman_parked:
            self._foreman_parked = False
            self._foreman_lot.unpark()

    def _cancel(self, run: HandlerRun) -> None:
        run.cancel_requested = True
        if run.scope is not None:
            run.scope.cancel()

    def _refuse(self, run: HandlerRun) -> None:
        """A run that will never start: count it and tell its caller, if any."""
        self._dropped += 1
        log.debug(
            "session %r: dropped a run of %s (%s policy or close)",
            self.name,
            run.handler.task_name,
            run.handler.policy,
        )
        if run.waiter is not None:
            run.waiter.settle(
                run.index,
                None,
                HandlerDropped(
                    f"{run.handler.task_name}: run dropped ({run.handler.policy} policy or close)"
                ),
            )

    def _drop_queue(self, handler: Handler) -> None:
        while handler.queue:
            self._outstanding -= 1
            self._refuse(handler.queue.popleft())

    def _withdraw(self, run: HandlerRun) -> None:
        """The caller of ``call`` went away: its runs go too."""
        queue = run.handler.queue
        if run in queue:
            queue.remove(run)
            self._outstanding -= 1
            self._dropped += 1
        elif run in run.handler.runs:
            self._cancel(run)
        self._check_quiet()

    def _check_quiet(self) -> None:
        if self._outstanding == 0 and self._quiet is not None:
            self._quiet.set()

    # -- execution ---------------------------------------------------------------------------

    async def _foreman(self) -> None:
        """Makes sure every ready run gets a worker, without a task step per run.

        When the foreman runs, no worker is mid-step, so a worker that is inside a handler is
        blocked in it. If ready runs wait and no worker is on its way to them, the foreman
        wakes (or spawns) more: 1, then 2, 4, ... per scheduler tick while the backlog lasts,
        so a burst of blocking handlers fans out in a few ticks, and a burst of quick ones is
        drained by one worker without paying a task spawn per event.
        """
        ramp = 1
        while not self._stopping:
            if not self._ready:
                ramp = 1
                self._foreman_parked = True
                await self._foreman_lot.park()
                continue
            if self._woken == 0:
                self._wake(min(ramp, len(self._ready)))
                ramp = min(ramp * 2, _MAX_RAMP)
            await trio.lowlevel.checkpoint()

    def _wake(self, n: int) -> None:
        self._woken += n
        n -= len(self._worker_lot.unpark(count=n))
        for _ in range(n):
            self._worker_count += 1
            self._spawn(self._worker, f"{self.name}::worker")

    def _spawn(self, fn: Callable[[], Awaitable[None]], name: str) -> None:
        # from the opener's context: every run sees the same context variables, whoever
        # emitted the event, and the registry attributes the task to this session
        self._spawn_ctx.run(start_soon_owned, self._nursery, self.owner, fn, name=name)

    async def _worker(self) -> None:
        task = trio.lowlevel.current_task()
        self._workers.add(task)
        idle_name = f"{self.name}::idle"
        ready = self._ready
        try:
            while True:
                self._woken -= 1
                while ready:
                    await self._drain(task, ready, idle_name)
                task.name = idle_name
                if self._stopping or len(self._worker_lot) >= self.keep_idle:
                    return
                await self._worker_lot.park()
        finally:
            self._workers.discard(task)
            self._worker_count -= 1
            if self._worker_count == 0 and self._gone is not None:
                self._gone.set()

    async def _drain(self, task: Task, ready: deque[HandlerRun], idle_name: str) -> None:
        """Execute ready runs back to back in this task, each one visible by identity.

        The runs share one cancel scope: a worker executes one run at a time, so cancelling
        the scope while a run executes (``_cancel``) hits exactly that run. Once a scope has
        been cancelled it is left and a fresh one opened for the next run. One scope per
        segment instead of one per run is what makes a run cheaper than a task spawn.
        """
        running = self._running
        registry = self._registry
        done = 0
        with trio.CancelScope() as scope:
            while ready:
                run = ready.popleft()
                if run.cancel_requested:  # cancelled between dispatch and pick-up
                    self._settle(run, DROPPED, None, task)
                    continue
                self._started += 1
                handler = run.handler
                task.name = handler.task_name
                if registry is not None:
                    registry.mark_started(task)
                running[task] = run
                run.scope = scope
                status = CANCELLED
                value: Any = None
                try:
                    if handler.is_async:
                        value = await handler.fn(run.payload)
                    else:
                        value = await trio.to_thread.run_sync(
                            handler.fn, run.payload, abandon_on_cancel=True
                        )
                    status = FINISHED
                except Exception as exc:
                    status = FAILED
                    value = exc
                finally:
                    del running[task]
                    run.scope = None
                    self._settle(run, status, value, task)
                if scope.cancel_called:  # the run swallowed its Cancelled: fresh scope
                    return
                done += 1
                if done % _FAIRNESS_BATCH == 0 and ready:
                    # let other tasks run; meanwhile this worker counts as on its way
                    task.name = idle_name
                    self._woken += 1
                    try:
                        await trio.lowlevel.checkpoint()
                    finally:
                        self._woken -= 1

    def _settle(self, run: HandlerRun, status: int, value: Any, task: Task) -> None:
        handler = run.handler
        handler.runs.discard(run)
        self._outstanding -= 1
        waiter = run.waiter
        if status == FINISHED:
            self._finished += 1
            if waiter is not None:
                waiter.settle(run.index, value, None)
        elif status == FAILED:
            self._failed += 1
            self._record_failure(run, value, task)
            if waiter is not None:
                waiter.settle(run.index, None, value)
        elif status == CANCELLED:
            self._cancelled += 1
            if waiter is not None:
                waiter.settle(
                    run.index, None, HandlerCancelled(f"{handler.task_name}: run cancelled")
                )
        else:
            self._refuse(run)
        # a cancellation we did not ask for comes from a scope around the whole session: it
        # is being torn down, so the queue must not start its next run (close drops it)
        torn_down = status == CANCELLED and not run.cancel_requested
        if handler.queue and not handler.runs and not self._stopping and not torn_down:
            self._dispatch(handler.queue.popleft())
        if self._outstanding == 0 and self._quiet is not None:
            self._quiet.set()

    def _record_failure(self, run: HandlerRun, error: Exception, task: Task) -> None:
        handler = run.handler
        via_call = run.waiter is not None
        self._failures.append(
            HandlerFailure(
                session=self.name,
                event=handler.event,
                handler=handler.task_name.rsplit("::", 1)[-1],
                task_name=handler.task_name,
                error=error,
                at=trio.current_time(),
                via_call=via_call,
            )
        )
        if via_call:
            log.debug(
                "session %r: handler %s failed (raised to its caller)",
                self.name,
                handler.task_name,
                exc_info=error,
            )
            return
        log.error(
            "session %r: handler %s failed on event %r",
            self.name,
            handler.task_name,
            handler.event,
            exc_info=error,
        )
        if self.on_error == "raise":
            self._fatal.append(error)
            if len(self._fatal) == 1:
                error.add_note(f"raised by handler {handler.task_name} (session on_error='raise')")
                self._closed = True
                self._nursery.cancel_scope.cancel(
                    reason=f"session {self.name!r}: handler {handler.task_name} failed"
                )
                # runs not yet started never will: they settle as cancelled at pick-up
                for other in self._all_handlers():
                    self._drop_queue(other)
                    for pending in list(other.runs):
                        self._cancel(pending)


@asynccontextmanager
async def open_session(
    name: str,
    *,
    on_error: OnError = "log",
    grace: float = 5.0,
    keep_idle: int = 32,
) -> AsyncIterator[Session]:
    """Open an agent session; leaving the block closes it (see ``Session.aclose``).

    Inside ``open_runtime()`` the session's tasks are owned by ``session:<name>`` in the
    runtime's registry. With ``on_error="raise"`` the first failing handler (outside ``call``)
    cancels the block and the session, and its exception is raised out of the block as itself;
    if several handlers failed before the session stopped they come out as an
    ``ExceptionGroup``. ``keep_idle`` is how many idle worker tasks are kept for reuse.
    """
    if not isinstance(name, str) or not name or "::" in name:
        raise ValueError(f"session name must be a non-empty string without '::', got {name!r}")
    if on_error not in ON_ERROR_CHOICES:
        raise ValueError(f"on_error must be 'log' or 'raise', got {on_error!r}")
    grace = check_grace(grace)
    if isinstance(keep_idle, bool) or not isinstance(keep_idle, int) or keep_idle < 0:
        raise ValueError(f"keep_idle must be an int >= 0, got {keep_idle!r}")
    runtime = current_runtime()
    registry = runtime.registry if runtime is not None else None
    async with open_nursery_unwrapped() as nursery:
        session = Session(
            name=name,
            on_error=on_error,
            grace=grace,
            keep_idle=keep_idle,
            nursery=nursery,
            registry=registry,
        )
        if runtime is not None:
            runtime.directory.add_session(session)
        try:
            yield session
        finally:
            try:
                await session.aclose()
            finally:
                if runtime is not None:
                    runtime.directory.remove_session(session)
    if session._fatal:
        if len(session._fatal) == 1:
            raise session._fatal[0]
        raise ExceptionGroup(
            f"session {name!r}: {len(session._fatal)} handlers failed", session._fatal
        )
